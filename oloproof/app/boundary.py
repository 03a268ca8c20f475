"""Where a frozen prefix case begins (SPEC §14a): the boundary before a step, and the
environment state the record holds there. Read by ``oloproof attribute`` (which proposes a
boundary) and ``oloproof prefix create`` (which freezes one). Pure: views in, values out."""

from __future__ import annotations

from typing import Any

from oloproof.views import NO_STATE, CaseView


def state_at(view: CaseView, before: int) -> Any:
    """The environment state just before step ``before``, from the record. Only tool calls
    change the sandbox, so any checkpoint with no tool call between it and the boundary holds
    that state (an automatic one is taken before each call: the next call's checkpoint does);
    and when no tool call happens from the boundary on, so does the state the case left.
    ``NO_STATE`` when the record cannot tell."""
    t = view.trajectory
    assert t is not None
    calls = [s.index for s in t.steps if s.kind == "tool_call"]
    for cp in sorted(t.checkpoints, key=lambda c: abs(c.step_index - before)):
        low, high = sorted((cp.step_index, before))
        if not any(low <= i < high for i in calls):
            return cp.state
    if not any(i >= before for i in calls) and view.state is not NO_STATE:
        return view.state
    return NO_STATE


def default_boundary(view: CaseView, step: int) -> int:
    """The boundary for a first unacceptable step: before it, and before the model decisions
    that chose it (a frozen model decision would hand the candidate the old answer)."""
    if view.trajectory is None:
        raise ValueError(f"case {view.case_id!r} recorded no trajectory: it has no boundary")
    steps = view.trajectory.steps
    before = step
    while before > 1 and steps[before - 2].kind == "decision":
        before -= 1
    return before
