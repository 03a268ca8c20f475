"""What a case panel shows beyond the case itself — its replays and its metamorphic pairs —
as plain rows, rendered by the terminal (``oloproof show``) and the HTML report alike."""

from __future__ import annotations

from typing import Any

import msgspec

from oloproof.events import canonical_json
from oloproof.views import NO_STATE, CaseView


def calls_text(view: CaseView) -> str:
    """The case's tool calls on one line, ``tool({canonical args}); …``; ``(none)`` or
    ``(no trajectory)`` when there is nothing to list."""
    if view.trajectory is None:
        return "(no trajectory)"
    return "; ".join(f"{s.tool_name}({canonical_json(s.arguments).decode()})"
                     for s in view.trajectory.calls) or "(none)"


def pair_rows(pair: Any) -> list[list[Any]]:
    """[label, source value, derived value] rows: the rewritten value (``input.message``,
    ``initial_state.inbox[0].body``), the output, the tool calls, the final state, then each
    relation's verdict."""
    s, d, t = pair.source, pair.derived, pair.transform

    def state(v: CaseView) -> Any:
        return None if v.state is NO_STATE else v.state

    def rewritten(v: CaseView) -> Any:
        value = t.original(v.input, v.initial_state)
        return None if value is msgspec.UNSET else value

    rows: list[list[Any]] = [
        [t.label, rewritten(s), rewritten(d)],
        ["output", f"error: {s.error}" if s.error else s.output, f"error: {d.error}" if d.error else d.output],
        ["tool calls", calls_text(s), calls_text(d)],
        ["final state", state(s), state(d)],
    ]
    rows += [[name, "", v[0] + (f" ({v[1]})" if v[1] else "")] for name, v in pair.verdicts.items()]
    return rows


def replay_rows(view: CaseView, replays: list[Any]) -> list[dict[str, Any]]:
    """One row per stored replay: its kind, version, checkpoint, change, and either the
    control replay's fidelity or what the agent did after the fault."""
    from oloproof.replay.fidelity import after_fault, compare

    rows = []
    order = {"control": 0, "fault": 1, "probe": 2}
    for r in sorted(replays, key=lambda r: (r.started.system_version, order.get(r.kind, 3), r.started.checkpoint_step)):
        st = r.started
        if r.kind == "probe":
            # a bisection probe replays ANOTHER system (the control) from a checkpoint: it is
            # not meant to reproduce the recording, so no fidelity is claimed for it
            change = None
            if r.diverged:
                detail = [f"bisection probe: the control left the recorded tape ({r.diverged})"]
            elif r.error_kind is not None:
                detail = [f"bisection probe: raised: {r.error}"]
            else:
                detail = ["bisection probe: the control ran to its end (its verdict: 'oloproof attribute … --bisect')"]
        elif st.change is None:
            change = None
            if r.error_kind is not None:
                detail = [f"raised: {r.error}"]
            elif view.trajectory is not None:
                f = compare(view, r, st.checkpoint_step)
                d = f.first_difference or {}
                detail = ["faithful" if f.faithful else "NOT faithful: " + (
                    d.get("message") or f"step {d.get('step')}: recorded {d.get('recorded')}, "
                                        f"replayed {d.get('replayed')}")]
            else:
                detail = []
        else:
            change = f"{st.change['tool_name']} at step {st.change['step_index']}: {st.change['fault']}"
            detail = after_fault(r, st.change["step_index"])
        rows.append({"kind": r.kind, "version": st.system_version, "checkpoint": st.checkpoint_step,
                     "checkpoint_id": st.checkpoint_id, "change": change, "detail": detail})
    return rows


def release_panel(view: Any, verdict: Any = None) -> dict[str, Any]:
    """The case's effects and release evidence, side by side with its transcript: the effect
    ledger (every attempt; attempts and applied effects per operation), the evidence in the
    order it was recorded, and — when judged — the release class with its repair hint."""
    from oloproof.evaluate.release import CLASSES, REPAIR_HINTS, effect_counts

    out: dict[str, Any] = {
        "effects": {"attempts": [{"operation": e.operation, "idempotency_key": e.idempotency_key,
                                  "applied": e.applied, "after_step": e.step_index} for e in view.effects],
                    "per_operation": effect_counts(view)},
        "evidence": [{"kind": e.kind, **e.data, "after_step": e.step_index} for e in view.evidence],
    }
    if verdict is not None and verdict[1] in CLASSES:
        out["class"] = verdict[1]
        out["repair_hint"] = REPAIR_HINTS.get(verdict[1])
    return out


def fault_line(view: Any) -> str | None:
    """The case's declared fault and where it was applied (or that its call never came)."""
    started = view.started
    fault = started.fault if started is not None else None
    if not fault:
        return None
    said = f"{fault['tool']} {fault['kind']} (call {fault.get('call', 1)})"
    steps = view.trajectory.steps if view.trajectory is not None else ()
    at = next((s.index for s in steps if getattr(s, "fault", None)), None)
    return f"{said} · applied at step {at}" if at is not None else f"{said} · never applied: the call never came"


def cost_of(view: CaseView) -> dict[str, Any]:
    """A case's cost and latency, kept apart by where they come from: ``reported`` (summed
    over the agent's ``current_case().usage`` calls: ``cost``, ``tokens``, ``latency_ms`` —
    None when it reported no latency — and ``reports``) and ``observed`` (what the recording
    driver measured: ``wall_ms``, ``model_calls``, ``tool_calls``). A key is absent when there
    is nothing of its kind."""
    out: dict[str, Any] = {}
    if view.usage:
        latencies = [u.latency_ms for u in view.usage if u.latency_ms is not None]
        out["reported"] = {"cost": sum(u.cost for u in view.usage),
                           "tokens": sum(u.input_tokens + u.output_tokens for u in view.usage),
                           "latency_ms": sum(latencies) if latencies else None, "reports": len(view.usage)}
    if view.observed is not None:
        o = view.observed
        out["observed"] = {"wall_ms": o.wall_ms, "model_calls": o.model_calls, "tool_calls": o.tool_calls}
    return out
