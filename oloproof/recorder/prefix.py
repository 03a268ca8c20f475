"""Recording a frozen prefix case (SPEC §14): the candidate acts from the frozen world, and its
first action past the boundary is recorded — not executed — and ends the case.

Two ways into the frozen world:

* a :class:`~oloproof.system.Resumable` system gets ``resume(snapshot)`` (the goal, the
  instructions, the frozen steps, the state at the boundary); the frozen steps are the
  first steps of the recording, so its first action is step ``before_step``;
* any other system is run again from the start, as in a run, and every call it makes before
  the boundary is answered from the frozen tape without executing (model calls included: the
  tape holds the model's decisions too). A call that does not match the tape — another
  tool, other arguments — is recorded as it was made and ends the case: the candidate left
  the frozen trajectory before reaching the boundary, and its evaluation says so
  (``diverged``) rather than judge it at a boundary it never met.

Past the boundary, model calls run live (the candidate decides); the first tool call, message,
handoff or final answer is recorded and the case ends there (:class:`BoundaryReached`, a
``BaseException`` so that an agent's ``except Exception`` cannot swallow it). The sandbox is
reset to the state at the boundary, so a tool the candidate would run next could not have
done anything to it anyway — and it never runs.

A prefix case is *stale* when its frozen tool schemas, instructions or external data version
no longer match the system (:func:`~oloproof.config.prefixes.versions_stale`): the system is
not run, and the case errors with ``error_kind`` ``stale`` (missing for every criterion).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from oloproof.config.prefixes import first_action_step, versions_stale
from oloproof.events import StepKind, StepRecorded, canonical_json
from oloproof.recorder.case import CaseRecorder, _frozen
from oloproof.records import AgentStep, Case, PrefixSnapshot
from oloproof.system import ToolCodec


class BoundaryReached(BaseException):
    """The candidate made its first action past the boundary: the case ends here."""


class FrozenToolError(Exception):
    """A tool that raised in the frozen trajectory raises this when the tape answers it."""


def frozen_steps(prefix: dict[str, Any]) -> list[StepRecorded]:
    """The frozen steps of a prefix case (its ``prefix["steps"]``) as step events: the tape a
    re-run is answered from, and a Resumable system's first recorded steps."""
    return [StepRecorded(s["index"], s["kind"], s.get("tool_name"), s.get("arguments"), s.get("result"),
                         s.get("agent"), s.get("to_agent"), raised=bool(s.get("raised")), fault=s.get("fault"))
            for s in prefix["steps"]]


class PrefixRecorder(CaseRecorder):
    """``current_case()`` of a prefix case (see the module docstring)."""

    __slots__ = ("_tape", "_before")

    def __init__(self, case: Case, prefix: dict[str, Any], resumed: bool):
        super().__init__(case, snapshot=None, auto_checkpoints=False)
        self._tape = {s.index: s for s in frozen_steps(prefix)}
        self._before = first_action_step(prefix)  # before_step, or 1 for a snapshot-only record
        if resumed:  # the frozen steps are the recording's first steps
            self._steps = [self._tape[i] for i in sorted(self._tape)]
            self._touched = True

    def _step(self, kind: StepKind, **fields: Any) -> int:
        index = super()._step(kind, **fields)
        if index >= self._before or self._off_tape(index, kind):
            raise BoundaryReached  # an action past the boundary, or one the frozen path lacks
        return index

    def _off_tape(self, index: int, kind: str) -> bool:
        recorded = self._tape.get(index)
        return recorded is None or recorded.kind != kind

    def _from_tape(self, name: str, arguments: Any, kind: str, codec: ToolCodec | None = None) -> tuple[Any] | None:
        """``(result,)`` when the frozen tape answers the call; None past the boundary. A call
        the tape does not hold is recorded as made and ends the case."""
        self._touched = True
        index = len(self._steps) + 1
        if index >= self._before:
            return None
        step_kind: StepKind = "decision" if kind == "model" else "tool_call"
        recorded = self._tape.get(index)
        if recorded is None or recorded.kind != step_kind or recorded.tool_name != name or \
                canonical_json(recorded.arguments) != canonical_json(arguments):
            self._steps.append(StepRecorded(index, step_kind, name, _frozen(arguments), agent=self._agent()))
            raise BoundaryReached  # off the frozen path: the evaluation reports where
        if step_kind == "decision":
            self._steps.append(recorded)
            result = copy.deepcopy(recorded.result)
            return (result if codec is None else codec.rebuilt(name, result),)
        depth, i = 0, index
        while True:  # the call, what the tool itself called, its result
            step = self._tape.get(i)
            if step is None:
                raise BoundaryReached
            self._steps.append(step)
            if step.kind == "tool_call":
                depth += 1
            elif step.kind == "tool_result":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        if step.raised:
            err = step.result.get("error", {}) if isinstance(step.result, dict) else {}
            raise FrozenToolError(f"{err.get('type', 'Error')}: {err.get('message', '')}")
        result = copy.deepcopy(step.result)
        return (result if codec is None or step.fault is not None else codec.rebuilt(name, result),)

    def _stop(self, name: str, arguments: Any) -> BoundaryReached:
        self._steps.append(StepRecorded(len(self._steps) + 1, "tool_call", name, _frozen(arguments),
                                        agent=self._agent()))
        return BoundaryReached()

    def call_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                  kind: str = "tool", codec: ToolCodec | None = None) -> Any:
        answered = self._from_tape(name, arguments, kind, codec)
        if answered is not None:
            return answered[0]
        if kind == "model":  # past the boundary the candidate's model decides, live
            return super().call_tool(name, fn, args, kwargs, arguments, kind, codec)
        raise self._stop(name, arguments)

    async def acall_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                         kind: str = "tool", codec: ToolCodec | None = None) -> Any:
        answered = self._from_tape(name, arguments, kind, codec)
        if answered is not None:
            return answered[0]
        if kind == "model":
            return await super().acall_tool(name, fn, args, kwargs, arguments, kind, codec)
        raise self._stop(name, arguments)

    def fork(self) -> Any:
        return None  # one line of action: the tasks a prefix case creates are not branches

    def live_calls(self) -> tuple[int, int]:
        """The model and tool calls that ran: past the frozen steps, a decision is a live
        model call and a tool result a call that ran (the boundary action has none: it was
        recorded, never executed); frozen calls were answered from the tape."""
        live = [s for s in self._steps if s.index >= self._before]
        return (sum(1 for s in live if s.kind == "decision"), sum(1 for s in live if s.kind == "tool_result"))


def snapshot_of(case: Case, prefix: dict[str, Any], state: Any) -> PrefixSnapshot:
    """What ``resume(snapshot)`` receives."""
    snap = prefix.get("snapshot") or {}
    steps = tuple(AgentStep(s.index, s.kind, tool_name=s.tool_name, arguments=copy.deepcopy(s.arguments),
                            result=copy.deepcopy(s.result), agent=s.agent, to_agent=s.to_agent)
                  for s in frozen_steps(prefix))
    metadata = {**case.metadata, "case_id": case.id, "before_step": prefix["boundary"]["before_step"]}
    if snap.get("remaining_acceptance_checks"):  # the snapshot's open checks: part of what the agent knew
        metadata["remaining_acceptance_checks"] = copy.deepcopy(snap["remaining_acceptance_checks"])
    return PrefixSnapshot(copy.deepcopy(snap.get("goal")), snap.get("instructions"), steps,
                          copy.deepcopy(state), metadata)


def stale_reason(prefix: dict[str, Any], surface: Any) -> str | None:
    """Why a prefix case is stale for a system with this ``surface`` (its frozen tool schemas,
    instructions or external data version no longer match, SPEC §14), or None when it is not.
    A stale case is not run: it errors with ``error_kind`` ``stale``."""
    problems = versions_stale(prefix.get("versions") or {}, surface)
    if not problems:
        return None
    return "stale: " + "; ".join(problems) + " since the prefix was frozen (create it again from a new run)"
