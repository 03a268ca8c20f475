"""The recorder of the case in progress: ``current_case()`` and what ``@tool`` writes to.

A recorder buffers a case's steps, constraints and checkpoints in memory; the runner turns
them into events and commits them in one transaction when the case ends. The hand-built path
(:meth:`CaseRecorder.agent_trajectory`) and the ``@tool`` path produce the same events: both
fill the same buffers, and events are emitted in one canonical order (steps, constraints,
checkpoints, trajectory end) whatever order the calls came in.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Callable

import msgspec

from oloproof.errors import RecordError
from oloproof.events import (
    CheckpointRecorded,
    ConstraintRecorded,
    Event,
    StepRecorded,
    TrajectoryRecorded,
    encode,
)
from oloproof.records import TERMINAL_STATUSES, AgentTrajectory, Case, validate_trajectory

_CURRENT: ContextVar["CaseRecorder | None"] = ContextVar("oloproof_current_case", default=None)
_Raw = msgspec.Raw


def current_case() -> "CaseRecorder":
    """The recorder of the case in progress. Raises :class:`RecordError` outside a case."""
    rec = _CURRENT.get()
    if rec is None:
        raise RecordError("current_case() called outside a case: no case is running")
    return rec


def _frozen(value: Any) -> Any:
    """Encode now, so a later mutation by the agent cannot rewrite what was recorded."""
    try:
        return _Raw(encode(value))
    except (TypeError, ValueError, OverflowError):
        return value  # reported, naming the step, when the case's events are encoded


class CaseRecorder:
    """Collects what one case records. Obtain it with :func:`current_case`."""

    __slots__ = ("case", "_steps", "_constraints", "_checkpoints", "_status", "_truncated",
                 "_step_limit", "_hand_built", "_snapshot", "_touched", "_auto_checkpoints")

    def __init__(self, case: Case, snapshot: Callable[[], Any] | None = None,
                 auto_checkpoints: bool = False):
        self.case = case
        self._steps: list[StepRecorded] = []
        self._constraints: list[ConstraintRecorded] = []
        self._checkpoints: list[CheckpointRecorded] = []
        self._status = "unknown"
        self._truncated = False
        self._step_limit: int | None = None
        self._hand_built = False
        self._touched = False
        self._snapshot = snapshot
        # a Stateful @tool system gets a checkpoint (with the sandbox's snapshot) before
        # every decorated call: the resume points of the built-in replay
        self._auto_checkpoints = auto_checkpoints and snapshot is not None

    # ---- what the system sees ----------------------------------------------------------

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def input(self) -> Any:
        return self.case.input

    def agent_trajectory(self, trajectory: AgentTrajectory) -> None:
        """Record a hand-built ``agent_trajectory/v1``; validated now (SPEC §2.2)."""
        if self._hand_built:
            raise RecordError(f"case {self.id!r}: agent_trajectory() was already recorded for this case")
        if self._touched:
            raise RecordError(
                f"case {self.id!r}: agent_trajectory() after steps were recorded with @tool or "
                "current_case() helpers; use one way of recording per case"
            )
        validate_trajectory(trajectory, self.id)
        self._steps = [
            StepRecorded(s.index, s.kind, s.tool_name, s.arguments, s.result, s.agent, s.to_agent)
            for s in trajectory.steps
        ]
        self._constraints = [
            ConstraintRecorded(c.name, c.passed, c.step_index) for c in trajectory.constraints
        ]
        self._checkpoints = [
            CheckpointRecorded(c.step_index, c.state, c.id) for c in trajectory.checkpoints
        ]
        self._status = trajectory.terminal_status
        self._truncated = trajectory.truncated
        self._step_limit = trajectory.step_limit
        self._hand_built = True

    def _guard(self) -> None:
        if self._hand_built:
            raise RecordError(
                f"case {self.id!r}: a hand-built trajectory was already recorded; "
                "use one way of recording per case"
            )
        self._touched = True

    def _step(self, kind: str, *, tool_name: str | None = None, arguments: Any = None,
              result: Any = None, agent: str | None = None, to_agent: str | None = None) -> int:
        self._guard()
        index = len(self._steps) + 1
        self._steps.append(
            StepRecorded(index, kind, tool_name, _frozen(arguments), _frozen(result), agent, to_agent)
        )
        return index

    def message(self, text: str, *, agent: str | None = None) -> int:
        """Append a ``message`` step; returns its index."""
        return self._step("message", arguments={"text": text}, agent=agent)

    def final(self, text: Any, *, agent: str | None = None) -> int:
        """Append a ``final`` step (the agent's answer); returns its index."""
        return self._step("final", result=text, agent=agent)

    def handoff(self, to_agent: str, *, agent: str | None = None) -> int:
        """Append a ``handoff`` step passing control to ``to_agent``."""
        if not to_agent:
            raise RecordError(f"case {self.id!r}: handoff() needs a to_agent")
        return self._step("handoff", agent=agent, to_agent=to_agent)

    def constraint(self, name: str, passed: bool, *, step_index: int | None = None) -> None:
        """Record an environment check about a step (default: the latest step)."""
        self._guard()
        index = len(self._steps) if step_index is None else step_index
        if not 1 <= index <= len(self._steps):
            raise RecordError(
                f"case {self.id!r}: constraint {name!r} points at step {index}, which does not exist "
                f"(the trajectory has {len(self._steps)} steps)"
            )
        self._constraints.append(ConstraintRecorded(name, bool(passed), index))

    def checkpoint(self, *, id: str | None = None, state: Any = None) -> int:
        """Mark a resume point before the next step (with the sandbox's snapshot if Stateful)."""
        self._guard()
        if state is None and self._snapshot is not None:
            state = self._snapshot()
        index = len(self._steps) + 1
        self._checkpoints.append(CheckpointRecorded(index, _frozen(state), id))
        return index

    def finish(self, status: str, *, truncated: bool = False, step_limit: int | None = None) -> None:
        """Set the trajectory's terminal status (and whether the agent hit its step limit)."""
        self._guard()
        if status not in TERMINAL_STATUSES:
            raise RecordError(f"case {self.id!r}: finish(): status {status!r} is not one of "
                              "success, failure, unknown")
        self._status = status
        self._truncated = bool(truncated)
        self._step_limit = step_limit

    # ---- what @tool calls ---------------------------------------------------------------

    def call_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                  kind: str = "tool") -> Any:
        """Run one decorated call: a ``tool_call`` and a ``tool_result`` step (a model call,
        ``kind="model"``, is one ``decision`` step with its arguments and result)."""
        if self._hand_built:
            self._guard()
        self._touched = True
        steps = self._steps
        if kind == "model":
            result = fn(*args, **kwargs)
            steps.append(StepRecorded(len(steps) + 1, "decision", name, _frozen(arguments), _frozen(result)))
            return result
        if self._auto_checkpoints:
            self._checkpoints.append(
                CheckpointRecorded(len(steps) + 1, _frozen(self._snapshot()), None))  # type: ignore[misc]
        steps.append(StepRecorded(len(steps) + 1, "tool_call", name, _frozen(arguments)))
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            steps.append(StepRecorded(len(steps) + 1, "tool_result", name, None,
                                      {"error": {"type": type(exc).__name__, "message": str(exc)}},
                                      raised=True))
            raise
        steps.append(StepRecorded(len(steps) + 1, "tool_result", name, None, _frozen(result)))
        return result

    # ---- what the runner reads ----------------------------------------------------------

    @property
    def recorded_trajectory(self) -> bool:
        return self._hand_built or self._touched

    def trajectory_events(self) -> list[Event]:
        """The trajectory's events in canonical order (empty when nothing was recorded)."""
        if not self.recorded_trajectory:
            return []
        if not self._hand_built:
            # Indexes, kinds and call/result pairs are right by construction here; what the
            # helpers cannot guarantee is that every step names its agent or none does.
            _check_agents(self._steps, self.id)
        return [
            *self._steps,
            *self._constraints,
            *self._checkpoints,
            TrajectoryRecorded(self._status, self._truncated, self._step_limit, len(self._steps)),
        ]



def _check_agents(steps: list[StepRecorded], case_id: str) -> None:
    named = [s.agent is not None for s in steps]
    if any(named) and not all(named):
        first = next(s.index for s in steps if s.agent is None)
        raise RecordError(
            f"case {case_id!r}: agent_trajectory/v1 field steps.agent: some steps name an agent and "
            f"others do not (first unnamed: step {first}); name the agent of every step or of none"
        )
