"""Terminal views of prefix runs and attributions (pure rendering; recorded text is shown
literally, never parsed as markup)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from oloproof.report.terminal import Grid, command_text, plural, printable

_SETS = (("retention", "retention"), ("irreversible", "irreversible"))


def _set_of(outcome: Any) -> str:
    return ", ".join(name for name, attr in _SETS if getattr(outcome, attr)) or "regression"


def _judged(o: Any) -> str:
    if o.status == "errored" and o.detail.startswith("stale"):
        return "stale"
    return o.status + (" (critical)" if o.critical else "")


def prefix_rows_table(rows: list[Any]) -> Group:
    """One row per prefix case (its trials together): its set, boundary, the next action and
    how it was judged in each trial; a stale, diverged or errored case's reason below."""
    t = Grid(("case", "key"), ("set", "key"), ("boundary", "key"), ("next action", "data"), ("judged", "key"),
             ("matched", "text"))
    cases: dict[str, list[Any]] = {}
    for r in rows:
        cases.setdefault(r.case_id.rsplit("/", 1)[0] if r.trial is not None else r.case_id, []).append(r)
    notes: list[str] = []
    counts: dict[str, int] = {}
    for case_id, trials in cases.items():
        first = trials[0].outcome
        judged: dict[str, int] = {}
        for r in trials:
            j = _judged(r.outcome)
            judged[j] = judged.get(j, 0) + 1
            counts[j.split(" ")[0]] = counts.get(j.split(" ")[0], 0) + 1
        n = len(trials)
        shown = ", ".join(f"{j} {k}/{n}" if n > 1 else j for j, k in judged.items())
        actions = {r.outcome.action for r in trials if r.outcome.action}
        action = first.action if len(actions) <= 1 else f"{len(actions)} different actions over {n} trials"
        t.add_row(case_id, _set_of(first), f"before step {trials[0].before_step}", action or "–", shown,
                  first.matched)
        if first.detail and first.status in ("diverged", "errored", "no_action"):
            notes.append(f"{case_id}: {first.detail}")
    critical = sum(1 for r in rows if r.outcome.status == "forbidden" and r.outcome.critical)
    line = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    trials_word = "trials" if any(len(v) > 1 for v in cases.values()) else "cases"
    parts: list[Any] = [Text("next action at each boundary", style="bold"), t]
    parts += [Text(printable(note)) for note in notes]
    parts.append(Text(f"{plural(len(cases), 'prefix case')} ({len(rows)} {trials_word}): {line}; critical forbidden "
                      f"actions: {critical} (counted apart, never averaged)"))
    short = short_run_line(rows)
    if short:
        parts.append(Text(short))
    return Group(*parts)


def short_run_line(rows: list[Any]) -> str | None:
    """The short run's cost and latency, median per trial over the trials that ran: what the
    recording driver observed (wall time, model and tool calls) beside what the agent reported
    (cost, latency); None when no trial was observed."""
    from statistics import median

    ran = [r for r in rows if r.observed is not None]
    if not ran:
        return None
    o = [r.observed for r in ran]
    line = (f"short run, median of {plural(len(ran), 'trial')}: observed wall {median(x.wall_ms for x in o):g} ms, "
            f"model calls {median(x.model_calls for x in o):g}, tool calls {median(x.tool_calls for x in o):g}")
    reported = [r.usage for r in ran if r.usage]
    if reported:
        cost = median(sum(u.cost for u in us) for us in reported)
        latencies = [sum(u.latency_ms for u in us if u.latency_ms is not None) for us in reported
                     if any(u.latency_ms is not None for u in us)]
        line += f"; reported by the agent: cost {cost:g}" + (f", latency {median(latencies):g} ms" if latencies else "")
    return line


def attribution_view(result: Any) -> Group:
    """What ``oloproof attribute`` prints."""
    a = result.record
    parts: list[Any] = [Text(f"attribution of case {printable(result.case_id)} · run {result.run_id}", style="bold")]
    failed = ", ".join(a.get("failed_criteria") or []) or "none (the case passed every criterion: what the rules " \
        "find did not make it fail)"
    head = Grid(("field", "key"), ("value", "text"))
    head.add_row("failed criteria", failed)
    head.add_row("status", a.get("status", ""))
    if a.get("first_unacceptable_step") is not None:
        head.add_row("first unacceptable step", str(a["first_unacceptable_step"]))
    if a.get("before_step") is not None:
        head.add_row("boundary", f"before step {a['before_step']}")
    for key in ("category", "layer", "confidence", "confidence_basis", "source"):
        if a.get(key) is not None:
            head.add_row(key.replace("_", " "), str(a[key]))
    head.add_row("needs review", "yes" if a.get("needs_review") else "no")
    rec = a.get("recoverability") or {}
    head.add_row("recoverability", rec.get("status", "unknown") + (f" — {rec['reason']}" if rec.get("reason") else ""))
    parts.append(head)
    causes = Grid(("role", "key"), ("rule", "key"), ("step", "key"), ("layer", "key"), ("evidence", "text"))
    primary = a.get("primary")
    for finding in ([{**primary, "role": "primary"}] if primary else []) + list(a.get("secondary") or []):
        evidence = "; ".join(f"step {e.get('step')}: {e.get('text', '')}" for e in finding.get("evidence") or [])
        if finding.get("via"):
            evidence += f"; follows from the primary: {finding['via']}" + (
                " (by assumption)" if finding.get("traced") == "assumed" else "")
        if finding.get("explains"):
            evidence += "; explains " + ", ".join(finding["explains"])
        causes.add_row(finding.get("role", "consequence"), finding.get("rule", ""), str(finding.get("step", "")),
                       finding.get("layer", ""), evidence)
    if causes.rows:
        parts += [Text("causes", style="bold"), causes]
    symptoms = a.get("symptoms") or []
    if symptoms:
        sym = Grid(("criterion", "key"), ("where", "data"), ("shows at step", "key"), ("how the trace knows", "text"),
                   ("explained by steps", "key"))
        for x in symptoms:
            where = x.get("path") or (f"step {x['step']}" if x.get("step") is not None else "outcome")
            sym.add_row(x.get("criterion", ""), where + (f" ({x['note']})" if x.get("note") else ""),
                        ", ".join(str(i) for i in x.get("at") or []), x.get("how", ""),
                        ", ".join(str(i) for i in x.get("explained_by") or []) or "none")
        parts += [Text("failures and what explains them", style="bold"), sym]
    alternatives = a.get("alternatives") or []
    if alternatives:
        alt = Grid(("layer", "key"), ("hypothesis", "text"))
        for h in alternatives:
            said = h.get("hypothesis", "")
            if h.get("evidence"):
                said += " — " + "; ".join(f"step {e.get('step')}: {e.get('text', '')}" for e in h["evidence"])
            alt.add_row(h.get("layer", ""), said)
        parts += [Text("alternative hypotheses (attribution is not proof of cause)", style="bold"), alt]
    if result.probes:
        probes = Grid(("probe", "key"), ("from before step", "key"), ("control finishes correctly", "key"),
                      ("why", "text"))
        for i, p in enumerate(result.probes, start=1):
            probes.add_row(str(i), str(p["before_step"]), "yes" if p["recovers"] else "no", p["why"])
        parts += [Text("bisection probes (each a stored replay)", style="bold"), probes]
    return Group(*parts)


def attribution_line(a: dict[str, Any], run_id: str, case_id: str) -> Text:
    """One line for ``oloproof show RUN CASE``: the stored attribution, and where the rest is."""
    if a.get("first_unacceptable_step") is None:
        said = a.get("status", "unattributed")
    else:
        said = (f"first unacceptable step {a['first_unacceptable_step']} ({a.get('category')}, layer "
                f"{a.get('layer')}, confidence {a.get('confidence')}"
                + (", needs review" if a.get("needs_review") else "") + ")")
    return command_text(f"attribution: {printable(said)} — "
                        f"oloproof attribute {run_id} {printable(case_id)} for the causes")
