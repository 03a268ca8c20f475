"""Terminal views of prefix runs and attributions (pure rendering; recorded text is shown
literally, never parsed as markup)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from oloproof.report.terminal import Grid, plural, printable

_SETS = (("retention", "retention"), ("irreversible", "irreversible"))


def _set_of(outcome: Any) -> str:
    return ", ".join(name for name, attr in _SETS if getattr(outcome, attr)) or "regression"


def prefix_rows_table(rows: list[Any]) -> Group:
    """One row per prefix case (per trial): its set, boundary, the next action and what it was."""
    t = Grid(("case", "key"), ("set", "key"), ("boundary", "key"), ("next action", "data"), ("judged", "key"),
             ("matched", "text"))
    for r in rows:
        o = r.outcome
        case = r.case_id
        judged = o.status + (" (critical)" if o.critical else "")
        shown = o.action or (o.detail if o.status in ("diverged", "errored", "no_action") else "")
        if o.status == "errored" and o.detail.startswith("stale"):
            judged, shown = "stale", o.detail
        t.add_row(case, _set_of(o), f"before step {r.before_step}", shown, judged, o.matched)
    counts: dict[str, int] = {}
    for r in rows:
        key = "stale" if r.outcome.status == "errored" and r.outcome.detail.startswith("stale") else r.outcome.status
        counts[key] = counts.get(key, 0) + 1
    critical = sum(1 for r in rows if r.outcome.status == "forbidden" and r.outcome.critical)
    line = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return Group(Text("next action at each boundary", style="bold"), t,
                 Text(f"{plural(len(rows), 'prefix case')}: {line}; critical forbidden actions: {critical} "
                      "(counted apart, never averaged)"))


def attribution_view(result: Any) -> Group:
    """What ``oloproof attribute`` prints."""
    a = result.record
    parts: list[Any] = [Text(f"attribution of case {printable(result.case_id)} · run {result.run_id}", style="bold")]
    failed = ", ".join(a.get("failed_criteria") or []) or "none"
    head = Grid(("field", "key"), ("value", "text"))
    head.add_row("failed criteria", failed)
    head.add_row("status", a.get("status", ""))
    if a.get("first_unacceptable_step") is not None:
        head.add_row("first unacceptable step", str(a["first_unacceptable_step"]))
    for key in ("category", "layer", "confidence", "source"):
        if a.get(key) is not None:
            head.add_row(key, str(a[key]))
    head.add_row("needs review", "yes" if a.get("needs_review") else "no")
    rec = a.get("recoverability") or {}
    head.add_row("recoverability", rec.get("status", "unknown") + (f" — {rec['reason']}" if rec.get("reason") else ""))
    parts.append(head)
    causes = Grid(("role", "key"), ("rule", "key"), ("step", "key"), ("layer", "key"), ("evidence", "text"))
    primary = a.get("primary")
    for role, finding in ([("primary", primary)] if primary else []) + [("consequence", f) for f in a.get("secondary") or []]:
        evidence = "; ".join(f"step {e.get('step')}: {e.get('text', '')}" for e in finding.get("evidence") or [])
        causes.add_row(role, finding.get("rule", ""), str(finding.get("step", "")), finding.get("layer", ""), evidence)
    if causes.rows:
        parts += [Text("causes", style="bold"), causes]
    alternatives = a.get("alternatives") or []
    if alternatives:
        alt = Grid(("layer", "key"), ("hypothesis", "text"))
        for h in alternatives:
            alt.add_row(h.get("layer", ""), h.get("hypothesis", ""))
        parts += [Text("alternative hypotheses (attribution is not proof of cause)", style="bold"), alt]
    if result.probes:
        probes = Grid(("probe", "key"), ("from before step", "key"), ("control finishes correctly", "key"),
                      ("why", "text"))
        for i, p in enumerate(result.probes, start=1):
            probes.add_row(str(i), str(p["before_step"]), "yes" if p["recovers"] else "no", p["why"])
        parts += [Text("bisection probes (each a stored replay)", style="bold"), probes]
    return Group(*parts)
