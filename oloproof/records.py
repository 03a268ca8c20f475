"""Records that users build: steps, trajectories, constraint checks, checkpoints, cases.

The structs are plain msgspec structs so that building one costs well under a microsecond
(SPEC §2.2a pins their signatures). They are *not* validated when built: validation happens
when a record is written (:func:`validate_trajectory`), with an error naming the case and field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from oloproof.errors import RecordError

STEP_KINDS = frozenset(
    {"message", "tool_call", "tool_result", "observation", "decision", "final", "handoff"}
)
TERMINAL_STATUSES = frozenset({"success", "failure", "unknown"})

AGENT_TRAJECTORY_V1 = "agent_trajectory/v1"
ENVIRONMENT_STATE_V1 = "environment_state/v1"
KNOWN_RECORDS = (AGENT_TRAJECTORY_V1, ENVIRONMENT_STATE_V1)


class _StepHead(msgspec.Struct, frozen=True):
    index: int
    kind: str


class AgentStep(_StepHead, frozen=True, kw_only=True):
    """One step of an agent trajectory.

    ``AgentStep(index, kind, *, tool_name=None, arguments=None, result=None, agent=None,
    to_agent=None)``. ``index`` is 1-based and contiguous within a trajectory; ``kind`` is one
    of message, tool_call, tool_result, observation, decision, final, handoff.
    """

    tool_name: str | None = None
    arguments: Any = None
    result: Any = None
    agent: str | None = None
    to_agent: str | None = None


class AgentConstraintCheck(msgspec.Struct, frozen=True):
    """A check the environment made (``passed``) about the step ``step_index`` it observed."""

    name: str
    passed: bool
    step_index: int


class _CheckpointHead(msgspec.Struct, frozen=True):
    step_index: int
    state: Any


class AgentCheckpoint(_CheckpointHead, frozen=True, kw_only=True):
    """A resume point *before* step ``step_index``, with the environment state at that point."""

    id: str | None = None


class _TrajectoryHead(msgspec.Struct, frozen=True):
    steps: tuple[AgentStep, ...]
    terminal_status: str


class AgentTrajectory(_TrajectoryHead, frozen=True, kw_only=True):
    """An ``agent_trajectory/v1`` record.

    ``truncated=True`` means the agent hit its step limit and the steps are only a prefix of
    what it would have done: evaluators give a verdict on it only when the prefix decides it.
    """

    truncated: bool = False
    step_limit: int | None = None
    constraints: tuple[AgentConstraintCheck, ...] = ()
    checkpoints: tuple[AgentCheckpoint, ...] = ()


class Case(msgspec.Struct, frozen=True):
    """What the system under test receives. ``expected`` is withheld on purpose."""

    id: str
    input: Any
    initial_state: Any = None
    metadata: dict[str, Any] = {}


def _step_types() -> tuple[type, ...]:
    from oloproof.events import StepRecorded

    return (AgentStep, StepRecorded)


def _fail(case_id: str, field: str, message: str) -> RecordError:
    return RecordError(f"case {case_id!r}: agent_trajectory/v1 field {field}: {message}")


_STEP_TYPES: tuple[type, ...] = ()


def validate_steps(steps: Any, case_id: str) -> None:
    """Check a sequence of steps; raise :class:`RecordError` naming case and field."""
    global _STEP_TYPES
    if not _STEP_TYPES:
        _STEP_TYPES = _step_types()
    open_calls: dict[str, int] = {}
    named = 0
    first_unnamed: int | None = None
    for position, step in enumerate(steps, start=1):
        where = f"steps[{position - 1}]"
        if not isinstance(step, _STEP_TYPES):
            raise _fail(case_id, where, f"expected an AgentStep, got {type(step).__name__}")
        if step.index != position:
            raise _fail(
                case_id,
                f"{where}.index",
                f"indexes must be 1-based and contiguous: expected {position}, got {step.index!r}",
            )
        if step.kind not in STEP_KINDS:
            raise _fail(
                case_id,
                f"{where}.kind",
                f"unknown kind {step.kind!r} (one of {', '.join(sorted(STEP_KINDS))})",
            )
        if step.agent is None:
            if first_unnamed is None:
                first_unnamed = step.index
        else:
            named += 1
        if step.kind == "tool_call":
            if not isinstance(step.tool_name, str) or not step.tool_name:
                raise _fail(case_id, f"{where}.tool_name", "a tool_call step needs a tool_name")
            open_calls[step.tool_name] = open_calls.get(step.tool_name, 0) + 1
        elif step.kind == "tool_result":
            if not open_calls.get(step.tool_name or ""):
                raise _fail(
                    case_id,
                    f"{where}",
                    f"tool_result for {step.tool_name!r} at step {step.index} has no matching "
                    "tool_call before it",
                )
            open_calls[step.tool_name] -= 1
        elif step.kind == "handoff" and not step.to_agent:
            raise _fail(case_id, f"{where}.to_agent", f"handoff step {step.index} has no to_agent")
    if named and first_unnamed is not None:
        raise _fail(
            case_id,
            "steps.agent",
            f"some steps name an agent and others do not (first unnamed: step {first_unnamed}); "
            "name the agent of every step or of none",
        )


def validate_trajectory(trajectory: Any, case_id: str) -> None:
    """Validate an :class:`AgentTrajectory` when it is written (SPEC §2.2)."""
    if not isinstance(trajectory, AgentTrajectory):
        raise RecordError(
            f"case {case_id!r}: agent_trajectory() expects an AgentTrajectory, "
            f"got {type(trajectory).__name__}"
        )
    validate_steps(trajectory.steps, case_id)
    n = len(trajectory.steps)
    if trajectory.terminal_status not in TERMINAL_STATUSES:
        raise _fail(
            case_id,
            "terminal_status",
            f"{trajectory.terminal_status!r} is not one of success, failure, unknown",
        )
    if not isinstance(trajectory.truncated, bool):
        raise _fail(case_id, "truncated", f"must be true or false, got {trajectory.truncated!r}")
    if trajectory.step_limit is not None and (
        not isinstance(trajectory.step_limit, int) or trajectory.step_limit < 0
    ):
        raise _fail(case_id, "step_limit", f"must be a non-negative integer, got {trajectory.step_limit!r}")
    for i, check in enumerate(trajectory.constraints):
        if not isinstance(check, AgentConstraintCheck):
            raise _fail(case_id, f"constraints[{i}]", "expected an AgentConstraintCheck")
        if not isinstance(check.passed, bool):
            raise _fail(case_id, f"constraints[{i}].passed", f"must be a bool, got {check.passed!r}")
        if not (isinstance(check.step_index, int) and 1 <= check.step_index <= n):
            raise _fail(
                case_id,
                f"constraints[{i}].step_index",
                f"constraint {check.name!r} points at step {check.step_index!r}, "
                f"which does not exist (the trajectory has {n} steps)",
            )
    for i, cp in enumerate(trajectory.checkpoints):
        if not isinstance(cp, AgentCheckpoint):
            raise _fail(case_id, f"checkpoints[{i}]", "expected an AgentCheckpoint")
        if not (isinstance(cp.step_index, int) and 1 <= cp.step_index <= n + 1):
            raise _fail(
                case_id,
                f"checkpoints[{i}].step_index",
                f"checkpoint before step {cp.step_index!r} is outside the trajectory (1..{n + 1})",
            )
