"""``oloproof gate RUN --format markdown``: the gate of a stored run as a pull-request comment
(GitHub-flavoured Markdown).

It says the decision and what the exit code means, every rule with its status, reason and the
numbers that decided it, the criteria it judged, for each ``no_regression`` rule the cases that
went from pass to fail against its baseline — each with the ``oloproof show`` command that opens
it, and marked when it is known to be flaky — and the run's log digest, to check it later.

Whatever a case id, a rule name or an error holds, it stays text: every recorded or configured
string is written inside a code span (a fence longer than any run of backticks in it), on one
line (controls, newlines and tabs escaped as ``\\xNN``, ``\\n``, ``\\t``), and in a table cell
with ``|`` written as ``\\x7c`` — so it can open no link, mention nobody, add no markup, image or
HTML, and split no table. Lists of cases are cut at :data:`MOST_CASES` a rule (a comment has a
size limit); the command to see them all is given.
"""

from __future__ import annotations

import re
from typing import Any

from oloproof.report.terminal import case_argument, exit_line, one_line, plural

#: the cases listed per rule; the rest are counted, with the command that lists them
MOST_CASES = 25
_TICKS = re.compile("`+")


def code(value: Any, *, cell: bool = False) -> str:
    """Recorded text as an inline code span: literal, one line; ``cell``: a table cell's (no
    ``|``, which would end the cell even inside a code span). Empty text is ``(empty)``."""
    text = one_line(value)
    if cell:
        text = text.replace("|", "\\x7c")
    if not text:
        return "*(empty)*"
    longest = max((len(m) for m in _TICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    # a space inside the fence when the text begins or ends with a backtick (CommonMark strips
    # one space each side), or when it is all spaces
    pad = " " if text[0] == "`" or text[-1] == "`" or not text.strip(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def gate_markdown(run: Any, suite: Any, summary: Any, evidence: dict[str, Any], known: dict[str, Any],
                  *, where: str = "") -> str:
    """The comment of a stored run (a :class:`~oloproof.app.runs.StoredRun`) judged as
    ``summary`` under ``suite``; ``evidence``: each ``no_regression`` rule's
    :class:`~oloproof.evaluate.compare.RegressionEvidence` (None: no baseline); ``known``: the
    known-flaky cases (:func:`oloproof.app.history.known_flaky`); ``where``: what the commands
    shown need to find the log (`` --db PATH``, :func:`oloproof.cli.common.log_args`)."""
    s = run.started
    gate = summary.gate
    decision = gate.decision if gate is not None else "no gate"
    lines = [f"### Oloproof release gate: {decision}", ""]
    state = "sealed" if run.sealed is not None else "not sealed (incomplete: the gate cannot pass)"
    lines.append(f"Run {code(s.run_id)} of {code(s.system_name)} {code(s.system_version)} · "
                 f"{plural(summary.cases_committed, 'case')} recorded · {state}")
    if s.selection:
        from oloproof.app.runs import selection_text

        lines.append("")
        lines.append(f"A partial run ({code(selection_text(s.selection))}): its gate cannot pass, and it is "
                     "no baseline.")
    lines.append("")
    lines.append(_exit_text(gate))
    lines.append("")
    if gate is not None and gate.rules:
        lines += ["| rule | criterion | status | reason | decided by |", "| --- | --- | --- | --- | --- |"]
        for r in gate.rules:
            status = f"**{r.status}**" if r.status != "PASS" else r.status
            lines.append(f"| {code(r.name, cell=True)} | {code(r.criterion, cell=True)} | {status} | "
                         f"{code(r.reason, cell=True) if r.reason else ''} | "
                         f"{code(r.detail, cell=True) if r.detail else ''} |")
        lines.append("")
    if summary.criteria:
        lines += ["| criterion | rate | interval | evidence |", "| --- | --- | --- | --- |"]
        from oloproof.report.terminal import counts_text, interval_text, pct

        for name, r in summary.criteria.items():
            lines.append(f"| {code(name, cell=True)} | {pct(r.rate)} | {interval_text(r)} | {counts_text(r)} |")
        lines.append("")
    lines += _regressions(run, suite, evidence, known, where)
    if run.sealed is not None:
        lines.append(f"Log digest {code(run.sealed.digest)} — check the run later with "
                     f"{code('oloproof audit verify --expect ' + run.sealed.digest + where)}.")
    else:
        lines.append("The run is not sealed: no log digest.")
    return "\n".join(lines).rstrip("\n") + "\n"


def _exit_text(gate: Any) -> str:
    """What the exit code means (:func:`oloproof.report.terminal.exit_line`), with the rule
    names in code spans."""
    return exit_line(gate, name=code, bold=True, hint=False)


def _regressions(run: Any, suite: Any, evidence: dict[str, Any], known: dict[str, Any], where: str) -> list[str]:
    rules = [r for r in (suite.release.rules if suite.release is not None else []) if r.no_regression is not None]
    lines = ["#### Regressions against the baseline", ""]
    if not rules:
        return [*lines, "No `no_regression` rule: this run was compared with no baseline.", ""]
    run_id = run.started.run_id
    from oloproof.config.limits import split_trial

    for rule in rules:
        ev = evidence.get(rule.name)
        head = f"Rule {code(rule.name)} on {code(rule.criterion)} against {code(rule.no_regression.baseline)}"
        if ev is None:
            lines += [f"{head}: no baseline run to compare with.", ""]
            continue
        if ev.problem:
            lines += [f"{head} (run {code(ev.baseline_run)}): not compared — {code(ev.problem)}.", ""]
            continue
        f = ev.flips
        lines.append(f"{head} (run {code(ev.baseline_run)}): {len(f.regressions)} pass → fail, {len(f.fixes)} "
                     f"fail → pass, McNemar's exact p = {f.p_value:.3g}, {plural(f.paired, 'case')} paired.")
        lines.append("")
        flaky = known.get(rule.criterion, {})
        for case_id in f.regressions[:MOST_CASES]:
            mark = ""
            for key, fc in flaky.items():
                if key[0] == split_trial(case_id)[0]:
                    mark = f" · known flaky ({fc.passed} pass, {fc.failed} fail in runs of {code(fc.version)})"
                    break
            show = f"oloproof show {run_id} {case_argument(case_id)}{where}"
            lines.append(f"- {code(case_id)}: pass → fail{mark} · {code(show)}")
        if len(f.regressions) > MOST_CASES:
            more = f"oloproof diff {ev.baseline_run} {run_id}{where}"
            lines.append(f"- … and {len(f.regressions) - MOST_CASES} more: {code(more)}")
        if f.regressions:
            lines.append("")
    return lines


def build_gate_markdown(store: Any, run_id: str, *, where: str = "") -> tuple[str, Any]:
    """The comment for stored run ``run_id`` and its summary (whose gate decides the exit
    code): judged from its events, each ``no_regression`` rule's flips against its baseline,
    and the flaky cases known among the runs of its version and code and of each baseline's."""
    from oloproof.app.evidence import regression_evidence
    from oloproof.app.history import Judged, known_flaky
    from oloproof.app.reports import run_report
    from oloproof.app.runs import load_run

    report = run_report(store, run_id, keep_cases=True)
    evidence: dict[str, Any] = {}
    known: dict[str, Any] = {}
    if report.suite.regression_criteria:
        suite = report.suite
        index = {c: suite.criteria.index(c) for c in suite.regression_criteria}

        def tracked(criterion: str) -> dict[str, tuple[str, str]]:
            i = index[criterion]
            return {c.case_id: (c.fingerprint, c.verdicts[i][0]) for c in report.summary.cases}

        evidence = regression_evidence(store, report.run, suite, tracked)
        bases = {e.baseline_run for e in evidence.values() if e is not None and not e.problem}
        also = [load_run(store, b) for b in sorted(bases)]
        known = known_flaky(store, [Judged(report.run, report.suite, report.summary)], also=also)
    text = gate_markdown(report.run, report.suite, report.summary, evidence, known, where=where)
    return text, report.summary
