"""Terminal tables (rich) for runs, results and the case panel. Only the CLI prints them."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from oloproof.evaluate.engine import Summary
from oloproof.stats.intervals import RateInterval, round_outward
from oloproof.views import NO_STATE, CaseView


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def interval_text(r: RateInterval) -> str:
    if r.low is None or r.high is None:
        return "no observations"
    lo, hi = round_outward(r.low, r.high)
    return f"[{lo:.1f}%, {hi:.1f}%]"


def counts_text(r: RateInterval) -> str:
    text = f"{r.passed} / {r.observed} observed · {r.missing} missing · {r.excluded} excluded"
    if r.approximate:
        text += f" · ≈ {r.clusters} clusters"
    return text


def _num(x: Any) -> str:
    if x is None:
        return "no bound"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _table(*columns: str) -> Table:
    t = Table(box=box.SQUARE, show_edge=True, pad_edge=True)
    for c in columns:
        t.add_column(c)
    return t


def criteria_table(summary: Summary) -> Table:
    t = _table("criterion", "rate", "interval", "evidence")
    for name, r in summary.criteria.items():
        t.add_row(name, pct(r.rate), interval_text(r), counts_text(r))
    for m in summary.metrics:
        q = m.interval
        unit = f" {m.unit}" if m.unit else ""
        value = "–" if q.value is None else f"{_num(q.value)}{unit}"
        label = f"p{round(m.quantile * 100):d}" if (m.quantile * 100).is_integer() else f"q{m.quantile:g}"
        t.add_row(
            m.id,
            value,
            f"[{_num(q.low)}, {_num(q.high)}]{unit}",
            f"{label} of {q.observed} observed · {q.missing} missing · {q.excluded} excluded",
        )
    return t


def slices_table(summary: Summary, min_support: int) -> Table:
    t = _table("slice", "criterion", "rate", "interval", "evidence")
    for s in summary.slices:
        r = s.interval
        support = f"low support (< {min_support})" if s.low_support else f"support {r.observed}"
        t.add_row(s.slice, s.criterion, pct(r.rate), interval_text(r), f"{counts_text(r)} · {support}")
    return t


def gate_table(summary: Summary) -> Table:
    t = _table("rule", "criterion", "status", "reason")
    for r in summary.gate.rules if summary.gate else []:
        t.add_row(r.name, r.criterion, r.status, r.reason or "")
    return t


def summary_view(summary: Summary, *, run_id: str, system: str, min_support: int) -> Group:
    """A run's results as one renderable: criteria and metrics, slices, the gate."""
    parts: list[Any] = [Text(f"run {run_id} · {system}", style="bold"), criteria_table(summary)]
    if summary.slices:
        parts += [Text("slices (descriptive; slices never gate)", style="bold"), slices_table(summary, min_support)]
    if summary.gate is not None:
        parts += [Text(f"gate: {summary.gate.decision}", style="bold"), gate_table(summary)]
    else:
        parts.append(Text("gate: none (no release: in oloproof.yaml)"))
    return Group(*parts)


def runs_table(rows: list[dict]) -> Table:
    t = _table("run_id", "system", "version", "started", "cases", "status")
    for r in rows:
        t.add_row(r["run_id"], r["system"], r["version"], r["started"],
                  f"{r['cases_committed']} / {r['case_count']}", r["status"])
    return t


def _short(value: Any, width: int = 70) -> str:
    from oloproof.events import canonical_json

    if value is None:
        return ""
    text = canonical_json(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def _value(v: Any, width: int = 40) -> str:
    import msgspec

    return "(absent)" if v is msgspec.UNSET else _short(v, width) if v is not None else "null"


def paths_table(paths: Any) -> Table:
    t = _table("criterion", "path", "initial", "expected", "recorded", "verdict")
    for p in paths:
        verdict = p.verdict + (f" ({p.note})" if p.note else "")
        t.add_row(p.criterion, p.path, _value(p.initial), _value(p.expected), _value(p.recorded), verdict)
    return t


def case_panel(view: CaseView, verdicts: dict[str, tuple[str, str | None]], paths: Any = ()) -> Group:
    parts: list[Any] = []
    head = Text(f"case {view.case_id}", style="bold")
    parts.append(head)
    parts.append(Text(f"input: {_short(view.input, 200)}"))
    if view.expected:
        parts.append(Text(f"expected: {_short(view.expected, 200)}"))
    if view.error:
        parts.append(Text(f"error: {view.error}", style="red"))
    else:
        parts.append(Text(f"output: {_short(view.output, 200)}"))
    vt = _table("criterion", "verdict", "reason")
    for name, (verdict, reason) in verdicts.items():
        vt.add_row(name, verdict, reason or "")
    parts.append(vt)
    if paths:
        parts.append(Text("compared state paths", style="bold"))
        parts.append(paths_table(paths))
    t = view.trajectory
    if t is None:
        parts.append(Text("no trajectory recorded"))
    else:
        status = f"trajectory: {len(t.steps)} steps · terminal_status {t.terminal_status}"
        if t.truncated:
            status += f" · truncated at step limit {t.step_limit}"
        parts.append(Text(status))
        from oloproof.evaluate.multiagent import route

        r = route(t)
        if r is not None:
            parts.append(Text(f"route: {' > '.join(r)} · {len(r) - 1} handoff(s)"
                              + (" so far (truncated)" if t.truncated else "")))
        st = _table("#", "kind", "agent", "tool", "arguments", "result")
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
            ct = _table("constraint", "passed", "step")
            for c in t.constraints:
                ct.add_row(c.name, "yes" if c.passed else "NO", str(c.step_index))
            parts.append(ct)
    if view.state is not NO_STATE:
        parts.append(Text(f"final state: {_short(view.state, 200)}"))
    return Group(*parts)


def replays_table(rows: list[dict[str, Any]]) -> Table:
    """A case's stored replays (rows from :func:`oloproof.report.panel.replay_rows`)."""
    t = _table("replay", "version", "checkpoint", "change", "fidelity / after the change")
    for r in rows:
        cp = f"before step {r['checkpoint']}" + (f" ({r['checkpoint_id']})" if r["checkpoint_id"] else "")
        t.add_row(r["kind"], r["version"], cp, r["change"] or "none (control)", "; ".join(r["detail"]))
    return t


def pair_table(pair: Any) -> Table:
    """A metamorphic pair side by side (a :class:`oloproof.report.panel.Pair`)."""
    from oloproof.report.panel import pair_rows

    t = _table("", pair.source.case_id, pair.derived.case_id)
    for label, a, b in pair_rows(pair):
        width = 160 if label == "final state" else 80
        t.add_row(label, _value(a, width) if a != "" else "", _value(b, width) if b != "" else "")
    return t
