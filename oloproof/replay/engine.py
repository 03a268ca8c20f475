"""Running one replay of a recorded case: built-in (the tape) or the system's own
``replay(trajectory, *, checkpoint, change)``. Returns the replay's events; the service
stores them."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import msgspec

from oloproof.errors import RecordError
from oloproof.evaluate.view import CaseView
from oloproof.events import (
    EnvironmentStateRecorded,
    Event,
    ReplayFinished,
    encode,
)
from oloproof.recorder.case import _CURRENT, CaseRecorder
from oloproof.recorder.declare import Replayable
from oloproof.records import AgentCheckpoint, AgentConstraintCheck, AgentStep, AgentTrajectory, Case
from oloproof.replay.plan import Plan
from oloproof.replay.tape import ReplayDivergence, TapeRecorder


@dataclass(frozen=True)
class Change:
    """What a hand-written ``replay`` receives as ``change`` (``None`` for a control replay)."""

    step_index: int
    tool_name: str
    result: Any


def uses_own_replay(system: Any) -> bool:
    return system.target is not None and isinstance(system.target, Replayable)


def as_trajectory(view: CaseView) -> AgentTrajectory:
    t = view.trajectory
    assert t is not None
    return AgentTrajectory(
        tuple(AgentStep(s.index, s.kind, tool_name=s.tool_name, arguments=s.arguments, result=s.result,
                        agent=s.agent, to_agent=s.to_agent) for s in t.steps),
        t.terminal_status, truncated=t.truncated, step_limit=t.step_limit,
        constraints=tuple(AgentConstraintCheck(c.name, c.passed, c.step_index) for c in t.constraints),
        checkpoints=tuple(AgentCheckpoint(c.step_index, c.state, id=c.id) for c in t.checkpoints),
    )


def run_replay(system: Any, view: CaseView, plan: Plan, change: dict[str, Any] | None) -> list[Event]:
    """Replay ``view`` from ``plan.checkpoint`` with ``change`` (None: control)."""
    instance = system.instance if system.stateful else None
    case = Case(view.case_id, copy.deepcopy(view.input), copy.deepcopy(view.initial_state), view.metadata)
    snapshot = instance.snapshot if instance is not None else None
    own = uses_own_replay(system)
    if own:
        recorder: CaseRecorder = CaseRecorder(case, snapshot=snapshot)
    else:
        recorder = TapeRecorder(case, view.trajectory.steps, plan.checkpoint.step_index,  # type: ignore[union-attr]
                                change, snapshot=snapshot)
    output: Any = None
    error = error_kind = None
    token = _CURRENT.set(recorder)
    try:
        if instance is not None:
            try:
                instance.reset(copy.deepcopy(plan.checkpoint.state if plan.checkpoint.state is not None else {}))
            except Exception as e:
                raise _ReplayMachinery(f"reset() to the checkpoint's state raised {type(e).__name__}: {e}") from e
        if own:
            cp = plan.checkpoint
            output = system.target.replay(
                as_trajectory(view),
                checkpoint=AgentCheckpoint(cp.step_index, copy.deepcopy(cp.state), id=cp.id),
                change=None if change is None else Change(change["step_index"], change["tool_name"],
                                                          copy.deepcopy(change["result"])),
            )
        else:
            output = system.call(case)
        if not isinstance(output, dict):
            raise RecordError(f"the replay returned {type(output).__name__}, expected its output as a dict")
    except _ReplayMachinery as e:
        error, error_kind = str(e), "replay_error"
    except ReplayDivergence as e:
        error, error_kind = str(e), "system_error"
    except RecordError as e:
        error, error_kind = str(e), "replay_error"
    except Exception as e:  # the agent under test raised
        error, error_kind = f"{type(e).__name__}: {e}", "system_error"
    finally:
        _CURRENT.reset(token)
    events: list[Event] = []
    try:
        events.extend(recorder.trajectory_events())
    except RecordError as e:
        events, error, error_kind = [], str(e), "replay_error"
    if instance is not None and error_kind != "replay_error":
        try:
            events.append(EnvironmentStateRecorded(msgspec.Raw(encode(instance.snapshot()))))
        except Exception as e:
            error, error_kind = f"snapshot() after the replay failed: {type(e).__name__}: {e}", "replay_error"
    diverged = getattr(recorder, "diverged", None)
    injected = getattr(recorder, "injected", True)
    if change is not None and not injected and error_kind is None:
        error, error_kind = ("the fault could not be injected: the faulted call never went through "
                             "@tool (record the tools with @tool, or implement Replayable)"), "replay_error"
    try:
        encode(output)
    except (TypeError, ValueError, OverflowError) as e:
        output, error, error_kind = None, f"the replay's output is not JSON-serialisable: {e}", "replay_error"
    events.append(ReplayFinished(output, error, error_kind, diverged, injected))
    return events


class _ReplayMachinery(Exception):
    pass
