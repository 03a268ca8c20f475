"""Where a fault replay starts: the latest checkpoint before the first call of the tool
(SPEC §7.1). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oloproof.evaluate.view import CaseView
from oloproof.events import CheckpointRecorded, canonical_json


@dataclass(frozen=True)
class FaultSpec:
    """A fault an evaluator asks to replay: the first call of ``tool`` gets a ``fault`` result."""

    tool: str
    fault: str


@dataclass(frozen=True)
class Plan:
    checkpoint: CheckpointRecorded
    call_index: int  # the step index of the first call of the tool: the one that is faulted

    @property
    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(canonical_json([self.checkpoint.step_index, self.checkpoint.id,
                                              self.checkpoint.state])).hexdigest()


def plan_fault(case: CaseView, tool: str) -> Plan | tuple[str, str]:
    """A :class:`Plan`, or the ``(verdict, reason)`` that says why there is none."""
    t = case.trajectory
    if t is None:
        return ("missing", "no_trajectory_recorded")
    call = next((s for s in t.steps if s.kind == "tool_call" and s.tool_name == tool), None)
    if call is None:
        return ("missing", "truncated") if t.truncated else ("excluded", "call_not_made")
    before = [c for c in t.checkpoints if c.step_index <= call.index]
    if not before:
        return ("missing", "no_checkpoint")
    return Plan(max(before, key=lambda c: c.step_index), call.index)


def change_for(plan: Plan, tool: str, fault: str) -> dict[str, Any]:
    from oloproof.replay.faults import fault_result

    return {"step_index": plan.call_index, "tool_name": tool, "fault": fault,
            "result": fault_result(fault, tool)}
