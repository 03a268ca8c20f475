"""Terminal tables (rich) for runs, results and the case panel. Only the CLI prints them.

Everything recorded or configured — case ids, criterion, slice and rule names, tool names,
arguments, results, outputs, metadata, error messages — is shown as literal text: every cell
is a :class:`rich.text.Text`, never a string rich would parse as markup (a tool result holding
``[/]`` or ``[bold]`` prints as those characters).

Tables fit the console: a :class:`Grid` is a boxed table when it fits (wrapping long text
between words), and otherwise stacks each row — its names on one line, the rest indented
below — so that no name is cut and no word is broken mid-letter at 80 columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from oloproof.stats.intervals import RateInterval, round_outward
from oloproof.views import NO_STATE, CaseView

if TYPE_CHECKING:  # in annotations only: a command that judges nothing (audit verify) loads no evaluator
    from oloproof.evaluate.engine import Summary

#: the narrowest a wrapped column is made before a table is stacked instead
MIN_WRAP = 16


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 call``, ``2 calls``, ``0 calls`` (``many`` for irregular plurals)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def pct(x: float | None) -> str:
    """A share as a percentage to one decimal (``92.5%``); ``–`` when there is none."""
    return "–" if x is None else f"{x * 100:.1f}%"


def interval_text(r: RateInterval) -> str:
    """A rate's interval as ``[67.2%, 92.7%]``, rounded outward (low down, high up, SPEC
    §5.1) so the text never claims more than the interval; ``no observations`` without one."""
    if r.low is None or r.high is None:
        return "no observations"
    lo, hi = round_outward(r.low, r.high)
    return f"[{lo:.1f}%, {hi:.1f}%]"


def counts_text(r: RateInterval) -> str:
    """The evidence behind a rate: ``k / n observed · m missing · e excluded`` (SPEC §5.1),
    plus the cluster count when the interval is cluster-aware (approximate)."""
    text = f"{r.passed} / {r.observed} observed · {r.missing} missing · {r.excluded} excluded"
    if r.approximate:
        text += f" · ≈ {plural(r.clusters or 0, 'cluster')}"
    return text


def _num(x: Any) -> str:
    if x is None:
        return "no bound"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


#: characters a terminal would act on rather than show: C0 and C1 controls (escape sequences,
#: clear screen, hyperlinks) except newline and tab, the bidirectional overrides that
#: reorder what is shown, the Unicode line and paragraph separators, and the invisible
#: zero-width space and byte-order mark
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def traceback_text(tb: str) -> Text:
    """A recorded traceback as lines of plain text, indented under the ``error:`` line:
    control characters escaped line by line (a recorded message cannot move the cursor), and
    a newline in the exception's message stays inside the indented block (it cannot fake a
    line of Oloproof's own); never read as markup."""
    return Text(indented_traceback(tb), style="dim")


def indented_traceback(tb: str) -> str:
    """A recorded traceback as plain lines, each indented and escaped (:func:`traceback_text`)."""
    return "\n".join("  " + printable(line) for line in tb.rstrip("\n").split("\n"))


def case_argument(case_id: str) -> str:
    """A case id as a command-line argument that pastes as it reads: shell-quoted, and after
    ``--`` when it starts with ``-`` (``oloproof show RUN -- -rf``, not an option)."""
    import shlex

    quoted = shlex.quote(case_id)
    return f"-- {quoted}" if case_id.startswith("-") else quoted


def command_text(text: str, style: str = "") -> Text:
    """A line holding a command to copy; print it with :func:`print_command`."""
    return Text(text, style=style)


def print_command(console: Any, line: Text) -> None:
    """Print a line holding a command to copy unwrapped (soft wrap: the terminal folds it, the
    text stays one line — a command broken over two lines does not paste)."""
    console.print(line, soft_wrap=True)


def printable(value: Any) -> str:
    """Recorded text as it may reach a terminal: controls shown as escapes (``\\x1b``), never
    obeyed, so a recorded value cannot clear the screen, fake a line or plant a link."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}" if ord(m.group()) > 0xff
                        else f"\\x{ord(m.group()):02x}", text)


def one_line(value: Any) -> str:
    """Recorded text that must stay on one line (an error line, a name in a summary): as
    :func:`printable`, with newlines and tabs escaped too — a newline in a recorded message
    cannot fake a line of Oloproof's own."""
    return printable(value).replace("\n", "\\n").replace("\t", "\\t")


def _text(value: Any) -> Text:
    """A cell as literal text (never parsed as markup, controls shown as escapes)."""
    if isinstance(value, Text):
        return value
    return Text(printable(value))


def _width(text: Text) -> int:
    return max((cell_len(line) for line in text.plain.split("\n")), default=0)


def _longest_word(text: Text) -> int:
    return max((cell_len(word) for word in text.plain.split()), default=0)


class Grid:
    """Rows under headers that stay readable at any console width.

    Each column has a kind: ``key`` (a name, a number, a status: never wrapped, never cut),
    ``text`` (wrapped between words, never narrower than its longest word) or ``data`` (JSON
    and other long values: folded where it must). The grid renders as a boxed table when it
    fits the console; when it does not, each row is stacked: as many of its leading key cells
    as fit on one aligned line, then every other cell on its own indented ``header: value``
    line.
    """

    def __init__(self, *columns: tuple[str, str]):
        self.columns = [(header, kind) for header, kind in columns]
        self.rows: list[list[Text]] = []

    def add_row(self, *cells: Any) -> None:
        """Append a row, one cell per column; each cell becomes literal text (never markup)."""
        self.rows.append([_text(c) for c in cells])

    # -- layout -----------------------------------------------------------------------------
    def _natural(self) -> list[int]:
        return [max([cell_len(h)] + [_width(r[i]) for r in self.rows]) for i, (h, _) in enumerate(self.columns)]

    def _minimum(self, natural: list[int]) -> list[int]:
        out = []
        for i, (header, kind) in enumerate(self.columns):
            if kind == "key":
                out.append(natural[i])
            elif kind == "text":
                words = max([_longest_word(Text(header))] + [_longest_word(r[i]) for r in self.rows])
                out.append(max(words, min(natural[i], MIN_WRAP)))
            else:
                out.append(min(natural[i], MIN_WRAP))
        return out

    def table(self, widths: list[int] | None = None) -> Table:
        """The grid as a boxed rich table; ``widths`` (from :meth:`layout`) fixes the widths
        of the columns that wrap, key columns keeping their natural width."""
        t = Table(box=box.SQUARE, show_edge=True, pad_edge=True)
        for i, (header, kind) in enumerate(self.columns):
            fixed = widths[i] if widths is not None and kind != "key" else None
            t.add_column(Text(header), no_wrap=kind == "key", width=fixed,
                         overflow="fold" if kind == "data" else "ellipsis")
        for row in self.rows:
            t.add_row(*row)
        return t

    def layout(self, width: int) -> tuple[str, list[int] | None]:
        """``("table", None)``, ``("table", widths)`` (wrapped columns fixed) or ``("stacked", None)``."""
        natural = self._natural()
        overhead = 3 * len(self.columns) + 1  # padding and borders
        if sum(natural) + overhead <= width:
            return "table", None
        minimum = self._minimum(natural)
        spare = width - overhead - sum(minimum)
        if spare < 0:
            return "stacked", None
        # share the spare width fairly: a column that needs little more (a short sentence)
        # gets all it needs before a long one (JSON) takes the rest
        widths = list(minimum)
        wanting = sorted((i for i in range(len(widths)) if natural[i] > minimum[i]),
                         key=lambda i: natural[i] - minimum[i])
        for n, i in enumerate(wanting):
            give = min(natural[i] - minimum[i], spare // (len(wanting) - n))
            widths[i] += give
            spare -= give
        return "table", widths

    def stacked(self, width: int) -> Iterator[Any]:
        """The grid for a console too narrow for a table: per row, the leading key cells that
        fit ``width`` on one aligned line, then each other non-empty cell as an indented
        ``header: value`` line."""
        natural = self._natural()
        lead = 0  # leading key columns that fit on one aligned line
        used = -2
        for (_header, kind), w in zip(self.columns, natural):
            if kind != "key" or used + 2 + w > width:
                break
            used += 2 + w
            lead += 1
        lead = max(lead, 1)
        widths = natural[:lead]

        def line(cells: list[Text], style: str = "") -> Text:
            out = Text(style=style)
            for j, cell in enumerate(cells):
                if j:
                    out.append("  ")
                out.append_text(cell)
                if j < len(cells) - 1:
                    out.append(" " * (widths[j] - _width(cell)))
            return out

        yield line([Text(h) for h, _ in self.columns[:lead]], "bold")
        for row in self.rows:
            yield line(row[:lead])
            for (header, _), cell in zip(self.columns[lead:], row[lead:]):
                if cell.plain:
                    yield Padding(Text.assemble(Text(f"{header}: ", style="dim"), cell), (0, 0, 0, 4), expand=False)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Any]:
        mode, widths = self.layout(options.max_width)
        if mode == "table":
            yield self.table(widths)
        else:
            yield from self.stacked(options.max_width)


def criteria_table(summary: Summary) -> Grid:
    """One row per criterion (rate, interval, evidence: missing cases shown beside the
    observed ones, never folded into the rate), then one per quantile metric."""
    t = Grid(("criterion", "key"), ("rate", "key"), ("interval", "key"), ("evidence", "text"))
    for name, r in summary.criteria.items():
        t.add_row(name, pct(r.rate), interval_text(r), counts_text(r))
        if name in summary.judges:  # a model judge: its calibration, and the corrected rate
            from oloproof.report.judge import judge_row

            t.add_row(*judge_row(summary.judges[name]))
    for m in summary.metrics:
        q = m.interval
        value = "–" if q.value is None else _with_unit(q.value, m.unit)
        label = f"p{round(m.quantile * 100):d}" if (m.quantile * 100).is_integer() else f"q{m.quantile:g}"
        unit = f" {m.unit}" if m.unit else ""
        t.add_row(
            m.id,
            value,
            f"[{_num(q.low)}, {_num(q.high)}]{unit}",
            f"{label} of {q.observed} observed · {q.missing} missing · {q.excluded} excluded",
        )
    return t


def pass_hat_k_parts(summary: Summary) -> list[Any]:
    """With ``trials: k`` > 1: each criterion's pass^k — the chance that all k trials of a case
    pass — with its interval and the cases by number of passing trials."""
    k = summary.trials
    t = Grid(("criterion", "key"), (f"pass^{k}", "key"), ("interval", "key"), ("trials passed: cases", "text"))
    for name, ph in summary.pass_hat_k.items():
        interval = "no observations" if ph.low is None or ph.high is None else \
            "[{:.1f}%, {:.1f}%]".format(*round_outward(ph.low, ph.high))
        spread = " ".join(f"{j}:{n}" for j, n in enumerate(ph.passing_trials))
        evidence = f"{spread} · {plural(ph.cases, 'case')} with {k} observed trials"
        if ph.missing:
            evidence += f" · {ph.missing} with missing trials"
        if ph.short:
            evidence += f" · {ph.short} with fewer than {k} that apply"
        if ph.excluded:
            evidence += f" · {ph.excluded} excluded"
        if ph.method != "clopper_pearson_cases":
            evidence += f" · {ph.method}"
        t.add_row(name, pct(ph.value), interval, evidence)
    return [Text(f"pass^{k} (all {k} trials of a case pass; the rates above count trials)", style="bold"), t]


_SINGULAR = {"steps": "step", "calls": "call"}


def _with_unit(value: Any, unit: str) -> str:
    """``1 call``, ``2 calls``, ``2.5 calls``: a metric's value with its unit."""
    if not unit:
        return _num(value)
    return f"{_num(value)} {_SINGULAR.get(unit, unit) if value == 1 else unit}"


def slices_table(summary: Summary, min_support: int) -> Grid:
    """One row per slice group and criterion, with its support; a group with fewer than
    ``min_support`` observed cases is marked low support (SPEC §5.4)."""
    t = Grid(("slice", "key"), ("criterion", "key"), ("rate", "key"), ("interval", "key"), ("evidence", "text"))
    for s in summary.slices:
        r = s.interval
        support = f"low support (< {min_support})" if s.low_support else f"support {r.observed}"
        t.add_row(s.slice, s.criterion, pct(r.rate), interval_text(r), f"{counts_text(r)} · {support}")
    return t


def rule_detail(rule: Any) -> str:
    """The numbers behind a rule's status (``3 failures > 0 allowed``); the reason code when
    the gate gave none."""
    return getattr(rule, "detail", None) or rule.reason or ""


#: a status's colour on a terminal (none elsewhere, nor under NO_COLOR: rich reads it)
STATUS_STYLES = {"PASS": "bold green", "FAIL": "bold red", "INSUFFICIENT_EVIDENCE": "bold yellow",
                 "pass": "green", "fail": "red", "missing": "yellow", "excluded": "dim"}


def status_text(status: str, prefix: str = "") -> Text:
    """A gate decision, a rule's status or a verdict as coloured text (the words carry the
    meaning; the colour only helps the eye)."""
    text = Text(prefix)
    text.append(status, style=STATUS_STYLES.get(status, ""))
    return text


def gate_table(summary: Summary) -> Grid:
    """One row per gate rule: its criterion, status, reason code and the numbers that decided
    it; empty when the run has no gate."""
    t = Grid(("rule", "key"), ("criterion", "key"), ("status", "key"), ("reason", "key"), ("decided by", "text"))
    for r in summary.gate.rules if summary.gate else []:
        t.add_row(r.name, r.criterion, status_text(r.status), r.reason or "", rule_detail(r))
    return t


def exit_line(gate: Any, *, name: Callable[[str], str] = str, bold: bool = False, hint: bool = True) -> str:
    """One line saying what the command's exit code means for this gate (a
    :class:`~oloproof.evaluate.gate.GateResult`, or ``None`` when there are no release rules).
    ``name`` writes a rule's name, ``bold`` makes "exit N" Markdown bold, ``hint`` says what to
    do about a release without rules (the Markdown comment: ``name=code, bold=True, hint=False``)."""
    code = gate.exit_code if gate is not None else 0
    head = f"**exit {code}**" if bold else f"exit {code}"
    if gate is None:
        return f"{head}: nothing to gate (no release rules)"
    if not gate.rules:
        return (f"{head}: the gate is blocked (INSUFFICIENT_EVIDENCE: the release has no rules, so nothing was "
                "decided" + ("; add rules to release.yaml, or remove release: to run without a gate)" if hint
                             else ")"))
    if gate.decision == "PASS":
        return f"{head}: the gate passed (every rule passed)"
    if gate.decision == "FAIL":
        failed = [name(r.name) for r in gate.rules if r.status == "FAIL"]
        return f"{head}: the gate is blocked (FAIL: {plural(len(failed), 'rule')} failed: {', '.join(failed)})"
    short = [name(r.name) for r in gate.rules if r.status != "PASS"]
    return (f"{head}: the gate is blocked (INSUFFICIENT_EVIDENCE: "
            f"{plural(len(short), 'rule')} could not be decided: {', '.join(short)})")


def summary_view(summary: Summary, *, run_id: str, system: str, min_support: int, quiet: bool = False,
                 slices: bool = True) -> Group:
    """A run's results as one renderable: criteria and metrics, slices, the gate (``quiet``:
    the criteria and the gate only; ``slices=False``: no slices)."""
    parts: list[Any] = [Text(f"run {run_id} · {system}", style="bold")]
    if summary.kind is not None:
        parts.append(Text(KIND_LINES[summary.kind]))
    parts.append(criteria_table(summary))
    if summary.pass_hat_k and not quiet:
        parts += pass_hat_k_parts(summary)
    if summary.release_classes is not None and not quiet:
        parts += release_summary(summary)
    if summary.slices and slices and not quiet:
        parts += [Text("slices (descriptive; slices never gate)", style="bold"), slices_table(summary, min_support)]
    if summary.gate is not None:
        parts += [status_text(summary.gate.decision, gate_label(summary.kind) + ": "), gate_table(summary)]
    elif summary.kind == "capability":
        parts.append(Text("gate: none (a capability suite reports; add release: to gate it)"))
    else:
        parts.append(Text("gate: none (the run's configuration has no release:)"))
    return Group(*parts)


#: what each suite ``kind`` (oloproof.yaml) means, as the results say it under the run's name
KIND_LINES = {
    "regression": "regression suite: a high expected pass rate — a criterion no release rule names is gated "
                  "by its default rule, max_failures: 0 (regression:<criterion>)",
    "capability": "capability suite: a hard suite that may start low — its rates report progress; it has no "
                  "default rules",
}


def gate_label(kind: str | None) -> str:
    """How a gate is introduced: a gate on a capability suite says what it is — a bar set for
    a hard suite, not the regression gate of a release."""
    if kind == "capability":
        return "gate on a capability suite (a bar for a hard suite, not a regression gate)"
    if kind == "regression":
        return "gate (regression suite)"
    return "gate"


def runs_table(rows: list[dict]) -> Grid:
    """``oloproof runs``: one row per run of :func:`oloproof.app.runs.list_runs` (cases as
    committed / expected, partial runs marked), with a pins column when any run is pinned."""
    pinned = any(r.get("pins") for r in rows)
    columns = [("run_id", "key"), ("system", "key"), ("version", "key"), ("started", "key"), ("cases", "key"),
               ("status", "key")] + ([("pins", "text")] if pinned else [])
    t = Grid(*columns)
    for r in rows:
        cells = [r["run_id"], r["system"], r["version"], r["started"],
                 f"{r['cases_committed']} / {r['case_count']}",
                 r["status"] + (" · partial" if r.get("partial") else "")]
        t.add_row(*cells, *([", ".join(r.get("pins", []))] if pinned else []))
    return t


def cases_table(rows: Iterable[tuple[str, str | None]]) -> Grid:
    """Case ids with the reason of their verdict (``oloproof show RUN --failed C``)."""
    t = Grid(("case", "key"), ("reason", "text"))
    for case_id, reason in rows:
        t.add_row(case_id, reason or "")
    return t


def _short(value: Any, width: int = 70) -> str:
    from oloproof.events import canonical_json

    if value is None:
        return ""
    text = printable(canonical_json(value).decode() if not isinstance(value, str) else value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _value(v: Any, width: int = 40) -> str:
    import msgspec

    return "(absent)" if v is msgspec.UNSET else _short(v, width) if v is not None else "null"


def paths_table(paths: Any) -> Grid:
    """The state paths an evaluator compared (:class:`~oloproof.evaluate.state.PathCheck`):
    initial, expected (after its ``state_delta`` op, if any) and recorded value, and the
    verdict with its note; an absent value shows as ``(absent)``."""
    t = Grid(("criterion", "key"), ("path", "data"), ("initial", "data"), ("expected", "data"),
             ("recorded", "data"), ("verdict", "text"))
    for p in paths:
        verdict = p.verdict + (f" ({p.note})" if p.note else "")
        expected = (f"{p.op} " if p.op else "") + _value(p.expected)  # a state_delta op: "appended [...]"
        t.add_row(p.criterion, p.path, _value(p.initial), expected, _value(p.recorded), verdict)
    return t


def calls_table(checks: Any) -> Grid:
    """The tool calls an ``agent_tool_calls`` evaluator compared (its
    :class:`~oloproof.evaluate.state.PathCheck` rows): each expected call (``tool_calls[i]``)
    beside the recorded call it was aligned with (the note names the step), then each of its
    arguments — expected value or matcher, recorded value, verdict and why — and the extra
    calls; an absent value shows as ``(absent)``."""
    t = Grid(("criterion", "key"), ("expected call / argument", "data"), ("expected", "data"),
             ("recorded", "data"), ("verdict", "text"))
    for p in checks:
        t.add_row(p.criterion, p.path, _value(p.expected), _value(p.recorded),
                  p.verdict + (f" ({p.note})" if p.note else ""))
    return t


def cost_line(view: CaseView) -> str | None:
    """The case's cost and latency: what the agent reported (``current_case().usage``) beside
    what the recording driver observed (wall time, model and tool calls that ran); None when
    there is neither."""
    from oloproof.report.panel import cost_of

    cost = cost_of(view)
    said = []
    if "reported" in cost:
        r = cost["reported"]
        said.append(f"reported by the agent: cost {r['cost']:g}, {r['tokens']} tokens"
                    + (f", latency {r['latency_ms']:g} ms" if r.get("latency_ms") is not None else ""))
    if "observed" in cost:
        o = cost["observed"]
        said.append(f"observed: wall {o['wall_ms']:g} ms, {plural(o['model_calls'], 'model call')}, "
                    f"{plural(o['tool_calls'], 'tool call')}")
    return "cost and latency: " + "; ".join(said) if said else None


def case_panel(view: CaseView, verdicts: dict[str, tuple[str, str | None]], paths: Any = (),
               call_criteria: Iterable[str] = ()) -> Group:
    """``oloproof show RUN CASE``: the case's input, expected, metadata, fault, error or
    output, its verdicts, the compared state paths, the expected tool calls beside the
    recorded ones (the checks of ``call_criteria``, :func:`calls_table`) and its trajectory
    step by step. Recorded text is shown literally (an error on one line, so it cannot fake a
    line of the report)."""
    call_criteria = frozenset(call_criteria)
    calls = [p for p in paths if p.criterion in call_criteria]
    paths = [p for p in paths if p.criterion not in call_criteria]
    parts: list[Any] = []
    head = Text(f"case {printable(view.case_id)}", style="bold")
    parts.append(head)
    parts.append(Text(f"input: {_short(view.input, 200)}"))
    if view.expected:
        parts.append(Text(f"expected: {_short(view.expected, 200)}"))
    if view.metadata:
        parts.append(Text(f"metadata: {_short(view.metadata, 200)}"))
    from oloproof.report.panel import fault_line

    fault = fault_line(view)
    if fault:
        parts.append(Text(f"fault: {printable(fault)}"))
    if view.error:
        # one line: a newline in the exception's message cannot fake a line of the report
        parts.append(Text("error: " + one_line(view.error), style="red"))
        if view.traceback:
            parts.append(traceback_text(view.traceback))
    else:
        parts.append(Text(f"output: {_short(view.output, 200)}"))
    cost = cost_line(view)
    if cost is not None:
        parts.append(Text(cost))
    if view.attempts:
        parts.append(attempts_text(view))
    vt = Grid(("criterion", "key"), ("verdict", "key"), ("reason", "text"))
    for name, (verdict, reason) in verdicts.items():
        vt.add_row(name, status_text(verdict), reason or "")
    parts.append(vt)
    if view.judgements:
        from oloproof.report.judge import judgement_lines

        parts.append(Text("model judges' judgements", style="bold"))
        parts.extend(Text(line) for line in judgement_lines(view))
    if paths:
        parts.append(Text("compared state paths", style="bold"))
        parts.append(paths_table(paths))
    if calls:
        parts.append(Text("expected tool calls beside the recorded ones", style="bold"))
        parts.append(calls_table(calls))
    t = view.trajectory
    if t is None:
        parts.append(Text("no trajectory recorded"))
    else:
        status = f"trajectory: {plural(len(t.steps), 'step')} · terminal_status {t.terminal_status}"
        if t.truncated:
            status += f" · truncated at step limit {t.step_limit}"
        parts.append(Text(status))
        from oloproof.evaluate.multiagent import route

        r = route(t)
        if r is not None:
            parts.append(Text(f"route: {one_line(' > '.join(r))} · {plural(len(r) - 1, 'handoff')}"
                              + (" so far (truncated)" if t.truncated else "")))
        st = Grid(("#", "key"), ("kind", "key"), ("agent", "key"), ("tool", "key"), ("arguments", "data"),
                  ("result", "data"))
        checkpoints = {c.step_index: c for c in t.checkpoints}
        for s in t.steps:
            if s.index in checkpoints:
                cp = checkpoints[s.index]
                st.add_row("", "checkpoint", "", cp.id or "", _short(cp.state), "")
            kind = s.kind if s.kind != "handoff" else f"handoff → {s.to_agent}"
            st.add_row(str(s.index), kind, s.agent or "", s.tool_name or "",
                       _short(s.arguments), _short(s.result))
        parts.append(st)
        if t.constraints:
            ct = Grid(("constraint", "key"), ("passed", "key"), ("step", "key"))
            for c in t.constraints:
                ct.add_row(c.name, "yes" if c.passed else "NO", str(c.step_index))
            parts.append(ct)
    if view.effects or view.evidence:
        parts.extend(release_parts(view, verdicts.get("release_class")))
    if view.state is not NO_STATE:
        parts.append(Text(f"final state: {_short(view.state, 200)}"))
    return Group(*parts)


def release_summary(summary: Summary) -> list[Any]:
    """The release classes of a run's trials, the response-only false passes, and the repair
    each failing class asks for."""
    from oloproof.evaluate.release import CLASSES, REPAIR_HINTS

    classes = summary.release_classes or {}
    trials = sum(classes.values())
    failing = sum(n for c, n in classes.items() if c.startswith("FAIL_"))
    order = [c for c in CLASSES if c in classes] + sorted(c for c in classes if c not in CLASSES)
    t = Grid(("release class", "key"), ("trials", "key"), ("repair", "text"))
    for c in order:
        t.add_row(c, str(classes[c]), REPAIR_HINTS.get(c, ""))
    line = (f"{plural(trials, 'trial')}: " + ", ".join(f"{c} {classes[c]}" for c in order if not c.startswith("FAIL_"))
            + (", " if order and any(not c.startswith("FAIL_") for c in order) else "") + f"FAIL {failing}"
            + f" · response_only_false_passes {summary.response_only_false_passes}"
            + " (the agent claimed success; the environment says FAIL)")
    return [Text("release classes (the environment's evidence, not the transcript)", style="bold"), t, Text(line)]


def release_parts(view: CaseView, verdict: Any) -> list[Any]:
    """The environment's evidence beside the transcript: the effect ledger and the release
    evidence, then the release class with its repair hint."""
    from oloproof.report.panel import release_panel

    panel = release_panel(view, verdict)
    parts: list[Any] = []
    effects = panel["effects"]
    if effects["attempts"]:
        parts.append(Text("effects (effect_ledger/v1)", style="bold"))
        et = Grid(("operation", "key"), ("idempotency key", "key"), ("applied", "key"), ("after step", "key"))
        for a in effects["attempts"]:
            et.add_row(a["operation"], a["idempotency_key"], "yes" if a["applied"] else "no", str(a["after_step"]))
        parts.append(et)
        parts.append(Text(" · ".join(f"{printable(op)}: {plural(c['effect_attempts'], 'attempt')}, "
                                     f"{plural(c['effect_count'], 'effect')}"
                                     for op, c in effects["per_operation"].items())))
    if panel["evidence"]:
        parts.append(Text("release evidence (release_evidence/v1)", style="bold"))
        rt = Grid(("kind", "key"), ("evidence", "data"), ("after step", "key"))
        for e in panel["evidence"]:
            fields = {k: v for k, v in e.items() if k not in ("kind", "after_step")}
            rt.add_row(e["kind"], _short(fields, 200), str(e["after_step"]))
        parts.append(rt)
    if "class" in panel:
        parts.append(Text(f"release class: {panel['class']}", style="bold"))
        if panel.get("repair_hint"):
            parts.append(Text(f"repair: {panel['repair_hint']}"))
    return parts


def replays_table(rows: list[dict[str, Any]]) -> Grid:
    """A case's stored replays (rows from :func:`oloproof.report.panel.replay_rows`)."""
    t = Grid(("replay", "key"), ("version", "key"), ("checkpoint", "text"), ("change", "text"),
             ("fidelity / after the change", "data"))
    for r in rows:
        cp = f"before step {r['checkpoint']}" + (f" ({r['checkpoint_id']})" if r["checkpoint_id"] else "")
        t.add_row(r["kind"], r["version"], cp, r["change"] or "none (control)", "; ".join(r["detail"]))
    return t


def pair_table(pair: Any) -> Grid:
    """A metamorphic pair side by side (a :class:`oloproof.report.panel.Pair`)."""
    from oloproof.report.panel import pair_rows

    t = Grid(("", "key"), (pair.source.case_id, "data"), (pair.derived.case_id, "data"))
    for label, a, b in pair_rows(pair):
        width = 160 if label == "final state" else 80
        t.add_row(label, _value(a, width) if a != "" else "", _value(b, width) if b != "" else "")
    return t


def replay_table(cases: list[dict[str, Any]]) -> Grid:
    """``oloproof replay``: per case, the checkpoint, the control replay's fidelity, what the
    agent did after the fault and the verdict."""
    t = Grid(("case", "key"), ("checkpoint", "text"), ("control replay", "text"), ("after the fault", "data"),
             ("verdict", "text"))
    for c in cases:
        cp = c.get("checkpoint")
        cp_text = "–" if not cp else f"before step {cp['step_index']}" + (f" ({cp['id']})" if cp.get("id") else "")
        control = c.get("control")
        if control is None:
            control_text = "–"
        elif control["faithful"]:
            control_text = "faithful"
        else:
            d = control.get("first_difference") or {}
            control_text = "NOT faithful: " + (d.get("message") or
                                               f"step {d.get('step')}: recorded {d.get('recorded')}, "
                                               f"replayed {d.get('replayed')}")
        after = c.get("after_fault")
        after_text = "–" if after is None else "; ".join(after) or "(no steps)"
        if c.get("effects"):
            after_text += "; effects: " + "; ".join(
                f"{printable(op)} {plural(e['effect_attempts'], 'attempt')}, {e['effect_count']} applied"
                + (f" ({plural(len(e['keys']), 'key')})" if len(e["keys"]) > 1 else "")
                for op, e in c["effects"].items())
        verdict = c["verdict"] + (f" ({c['reason']})" if c.get("reason") else "")
        t.add_row(c["case_id"], cp_text, control_text, after_text, verdict)
    return t


def attempts_text(view: CaseView) -> Text:
    """A retried case's attempts (``retries:``): how each earlier one ended, one line each
    (the error escaped onto its line), and that the verdict is the last attempt's."""
    n = len(view.attempts) + 1
    lines = [f"attempts: {n} (retries:) · the verdict is attempt {n}'s, "
             f"which {'ended with ' + view.error_kind if view.error_kind else 'finished'}"]
    for i, a in enumerate(view.attempts, start=1):
        lines.append(f"  attempt {i}: {a.error_kind or 'system_error'}: {one_line(a.error or '')}")
    return Text("\n".join(lines), style="yellow")


def retried_table(retried: list[Any]) -> Grid:
    """The cases a run ran again after an infrastructure error (``retries:``, a
    :class:`~oloproof.app.retries.Retried` each): how many attempts, how each earlier one
    ended and how the last one did."""
    t = Grid(("case", "key"), ("attempts", "key"), ("earlier attempts ended with", "text"), ("last attempt", "key"))
    for r in retried:
        t.add_row(r.case_id, str(r.attempts), ", ".join(r.errors), r.last or "finished")
    return t
