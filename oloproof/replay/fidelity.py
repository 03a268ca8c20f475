"""Control-replay fidelity: does a replay with no change reproduce the recording? Pure.

Compared from the checkpoint on: every step (kind, tool, arguments, result, agent), then the
terminal status, then the final environment state. The first difference is reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oloproof.events import StepRecorded, canonical_json
from oloproof.views import NO_STATE, CaseView, TrajectoryView


@dataclass(frozen=True)
class Fidelity:
    """Whether a control replay reproduced the recording from the checkpoint on (steps,
    terminal status, final state), and where it first did not; only a faithful control lets
    a fault replay yield a verdict (SPEC §2.4, §7.1)."""

    faithful: bool
    first_difference: dict[str, Any] | None = None


def describe(step: StepRecorded | None) -> str:
    """One step as a difference report shows it (``tool_call lookup({...})``, ``tool_result
    lookup → ...``); ``(no step)`` where one side has none."""
    if step is None:
        return "(no step)"
    if step.kind == "tool_call":
        return f"tool_call {step.tool_name}({canonical_json(step.arguments).decode()})"
    if step.kind == "tool_result":
        return f"tool_result {step.tool_name} → {canonical_json(step.result).decode()}"
    return f"{step.kind} {canonical_json([step.arguments, step.result]).decode()}"


def _key(step: StepRecorded) -> bytes:
    return canonical_json([step.kind, step.tool_name, step.arguments, step.result, step.agent,
                           step.to_agent])


def compare(recording: CaseView, replay: Any, from_step: int) -> Fidelity:
    """``replay`` is a :class:`~oloproof.views.ReplayView`."""
    if replay.diverged:
        return Fidelity(False, {"field": "steps", "message": replay.diverged})
    rec_t = recording.trajectory
    if rec_t is None:
        raise ValueError(f"case {recording.case_id!r} recorded no trajectory: a replay has nothing to match")
    rep_t: TrajectoryView | None = replay.trajectory
    if rep_t is None:
        return Fidelity(False, {"field": "trajectory", "message": "the replay recorded no trajectory"})
    ours = [s for s in rec_t.steps if s.index >= from_step]
    theirs = [s for s in rep_t.steps if s.index >= from_step]
    for i in range(max(len(ours), len(theirs))):
        a = ours[i] if i < len(ours) else None
        b = theirs[i] if i < len(theirs) else None
        if a is None or b is None or _key(a) != _key(b):
            return Fidelity(False, {"field": "steps", "step": next(s.index for s in (a, b) if s is not None),
                                    "recorded": describe(a), "replayed": describe(b)})
    if rec_t.terminal_status != rep_t.terminal_status or rec_t.truncated != rep_t.truncated:
        return Fidelity(False, {"field": "terminal_status", "recorded": rec_t.terminal_status,
                                "replayed": rep_t.terminal_status})
    if recording.state is not NO_STATE or replay.state is not NO_STATE:
        a_state = canonical_json(recording.state) if recording.state is not NO_STATE else None
        b_state = canonical_json(replay.state) if replay.state is not NO_STATE else None
        if a_state != b_state:
            return Fidelity(False, {"field": "state", "message": "the final environment state differs"})
    return Fidelity(True)


def after_fault(replay: Any, call_index: int) -> list[str]:
    """What the agent did after the faulted call, step by step, then how it ended."""
    t = replay.trajectory
    lines = []
    if t is not None:
        for s in t.steps:
            if s.index < call_index:
                continue
            if s.kind == "tool_call":
                lines.append(f"{s.tool_name}({canonical_json(s.arguments).decode()})")
            elif s.kind == "tool_result" and s.index == call_index + 1:
                lines.append(f"→ {canonical_json(s.result).decode()} (injected)")
            elif s.kind in ("message", "final", "handoff", "decision"):
                lines.append(f"{s.kind}")
        lines.append(f"status {t.terminal_status}")
    if replay.error:
        lines.append(f"raised {replay.error}")
    lines.append(f"output {canonical_json(replay.output).decode()}")
    return lines
