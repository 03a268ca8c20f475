"""Running replays: the built-in replay (the tape) or the system's own ``replay(...)``.

A replay is recorded by the same :func:`oloproof.recorder.record.record` as a case — reset
(to the checkpoint's state), run, snapshot, encode — with the tape as the recorder.
:data:`REPLAY_JOB` runs, on an executor's slot, the replays one recorded case needs and the
driver does not have yet (control first, then the fault replay only if the control was
faithful), and returns them as new streams for the driver to commit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import msgspec

from oloproof.config.limits import split_trial
from oloproof.events import CODEC, ReplayFinished, ReplayStarted
from oloproof.recorder.case import CaseRecorder
from oloproof.recorder.jobs import JobKind
from oloproof.recorder.record import Recording, arecord, record
from oloproof.records import (
    AgentCheckpoint,
    AgentConstraintCheck,
    AgentStep,
    AgentTrajectory,
    Case,
)
from oloproof.replay.plan import FaultSpec, Needed, Plan, keyed_version, replay_plan
from oloproof.replay.tape import TapeRecorder, calls_before
from oloproof.system import SystemSlot
from oloproof.views import CaseView, ReplayView, fold_case, fold_replay

PREFIX = "replay/"


@dataclass(frozen=True)
class Change:
    """What a hand-written ``replay`` receives as ``change`` (``None`` for a control replay).
    ``fault`` is the kind: under ``timeout_after_effect`` the replay should run the call, then
    hand its caller ``result`` (the timeout shape) instead of what it returned."""

    step_index: int
    tool_name: str
    result: Any
    fault: str | None = None


def as_trajectory(view: CaseView) -> AgentTrajectory:
    """The recorded trajectory of ``view`` in the public record types, as a
    :class:`~oloproof.system.Replayable` system's ``replay`` receives it (SPEC §2.4)."""
    t = view.trajectory
    assert t is not None
    return AgentTrajectory(
        tuple(AgentStep(s.index, s.kind, tool_name=s.tool_name, arguments=s.arguments, result=s.result,
                        agent=s.agent, to_agent=s.to_agent) for s in t.steps),
        t.terminal_status, truncated=t.truncated, step_limit=t.step_limit,
        constraints=tuple(AgentConstraintCheck(c.name, c.passed, c.step_index) for c in t.constraints),
        checkpoints=tuple(AgentCheckpoint(c.step_index, c.state, id=c.id) for c in t.checkpoints),
    )


def replay_started(slot: SystemSlot, view: CaseView, case_stream: str, needed: Needed) -> ReplayStarted:
    """The event that opens the replay stream of ``needed``: a control when it carries no
    change, else a fault replay; ``replayable`` when the system replays itself, else ``tape``."""
    cp = needed.plan.checkpoint
    return ReplayStarted(
        cache_key=needed.key, kind="control" if needed.change is None else "fault", case_id=view.case_id,
        case_stream=case_stream, fingerprint=view.fingerprint, system_name=slot.name,
        system_version=slot.version, checkpoint_step=cp.step_index, checkpoint_id=cp.id,
        checkpoint_digest=needed.plan.digest, change=needed.change,
        method="replayable" if slot.replayable else "tape",
    )


def _setup(slot: SystemSlot, view: CaseView, plan: Plan, change: dict[str, Any] | None) -> tuple[Any, Any]:
    # the system meets the case as the recording did: its own id (not the trial's stream id),
    # and current_case().trial the trial it replays
    trial = view.started.trial if view.started is not None else None
    case_id = split_trial(view.case_id)[0] if trial is not None else view.case_id
    case = Case(case_id, copy.deepcopy(view.input), copy.deepcopy(view.initial_state), dict(view.metadata))
    snapshot = slot.instance.snapshot if slot.instance is not None else None
    # the case's declared fault is part of its world: a replay meets it again, at the same call
    fault = view.started.fault if view.started is not None else None
    if view.trajectory is None:
        raise ValueError(f"case {view.case_id!r} recorded no trajectory: there is nothing to replay")
    if slot.replayable:
        cp = plan.checkpoint
        # the system replays from the checkpoint: the calls recorded before it are not made again
        recorder: CaseRecorder = CaseRecorder(
            case, snapshot=snapshot, fault=fault,
            fault_calls=calls_before(view.trajectory.steps, cp.step_index, fault), trial=trial)

        def invoke() -> Any:
            return slot.target.replay(
                as_trajectory(view),
                checkpoint=AgentCheckpoint(cp.step_index, copy.deepcopy(cp.state), id=cp.id),
                change=None if change is None else Change(change["step_index"], change["tool_name"],
                                                          copy.deepcopy(change["result"]), change.get("fault")))
    else:
        recorder = TapeRecorder(case, view.trajectory.steps, plan.checkpoint.step_index,
                                change, snapshot=snapshot, fault=fault, trial=trial)

        def invoke() -> Any:
            return slot.call(case)
    return recorder, invoke


def _finished(recorder: Any, rec: Recording, change: dict[str, Any] | None) -> tuple[list[bytes], list[str]]:
    error, kind = rec.error, rec.error_kind
    if kind in ("reset_error", "invalid_record", "snapshot_error", "case_timeout"):
        # the replay machinery (or the sandbox) failed, not the agent: no verdict from it
        if kind == "reset_error" and error:
            error = error.replace("reset()", "reset() to the checkpoint's state", 1)
        kind = "replay_error"
    diverged = getattr(recorder, "diverged", None)
    injected = getattr(recorder, "injected", True)
    if change is not None and not injected and kind is None:
        error, kind = ("the fault could not be injected: the faulted call never went through "
                       "@tool (record the tools with @tool, or implement Replayable)"), "replay_error"
    payloads, types = CODEC.pack([ReplayFinished(rec.output, error, kind, diverged, injected)])
    return [*rec.payloads, *payloads], [*rec.types, *types]


def run_replay(slot: SystemSlot, view: CaseView, plan: Plan, change: dict[str, Any] | None,
               timeout: float | None = None) -> tuple[list[bytes], list[str]]:
    """Replay ``view`` from ``plan.checkpoint`` with ``change`` (None: control); the replay's
    events after its ``replay_started``, encoded."""
    recorder, invoke = _setup(slot, view, plan, change)
    rec = record(slot, recorder, invoke, reset_to=plan.checkpoint.state, timeout=timeout, what="the replay")
    return _finished(recorder, rec, change)


async def arun_replay(slot: SystemSlot, view: CaseView, plan: Plan, change: dict[str, Any] | None,
                      timeout: float | None = None) -> tuple[list[bytes], list[str]]:
    """:func:`run_replay` for an ``async def`` system, awaited on the caller's event loop."""
    recorder, invoke = _setup(slot, view, plan, change)
    rec = await arecord(slot, recorder, invoke, reset_to=plan.checkpoint.state, timeout=timeout,
                        what="the replay")
    return _finished(recorder, rec, change)


# ---- the replay job ----------------------------------------------------------------------

class NewStream(msgspec.Struct, frozen=True):
    """One replay stream a worker recorded (``replay/<key>``, its ``replay_started`` first),
    encoded, for the driver to commit."""

    stream: str
    payloads: list[bytes]
    types: list[str]


class ReplayArgs(msgspec.Struct, frozen=True):
    """A recorded case whose replays are needed, with the ones the driver already has."""

    case_stream: str
    case_payloads: list[bytes]
    specs: list[tuple[str, str]]
    cached: dict[str, list[bytes]] = {}
    code_digest: str = ""  # of the system's code: part of every replay key


class ReplayStreams(msgspec.Struct, frozen=True):
    """What :data:`REPLAY_JOB` returns for one case: the replay streams it recorded (none when
    every one was cached or the worker died)."""

    case_stream: str
    streams: list[NewStream]


def _start(slot: SystemSlot, args: ReplayArgs) -> tuple[CaseView, dict[str, ReplayView], Any]:
    view = fold_case(CODEC.decode_stream(args.case_stream, args.case_payloads), args.case_stream)
    known = {key: fold_replay(CODEC.decode_stream(PREFIX + key, payloads), PREFIX + key)
             for key, payloads in args.cached.items()}
    specs = [FaultSpec(t, f) for t, f in args.specs]
    return view, known, replay_plan(view, specs, slot.name, keyed_version(slot.version, args.code_digest),
                                    known.get)


def _new(slot: SystemSlot, view: CaseView, args: ReplayArgs, needed: Needed,
         events: tuple[list[bytes], list[str]]) -> tuple[NewStream, ReplayView]:
    started = msgspec.structs.replace(replay_started(slot, view, args.case_stream, needed),
                                      code_digest=args.code_digest)
    head, head_type = CODEC.pack([started])
    payloads, types = [*head, *events[0]], [*head_type, *events[1]]
    stream = PREFIX + needed.key
    return NewStream(stream, payloads, types), fold_replay(CODEC.decode_stream(stream, payloads), stream)


def replay_case(slot: SystemSlot, args: ReplayArgs, timeout: float | None) -> ReplayStreams:
    """Run, on ``slot``, every replay the case's plan still needs, in the plan's order: the
    control first, and a fault replay only after a trustworthy control (SPEC §7.1); a
    replay recorded here answers the later specs that need it without running again.

    Args:
        slot: the executor's system slot the replays run on.
        args: the recorded case, the (tool, fault) specs, and the replays the driver has.
        timeout: seconds a replay may run, or None.

    Returns:
        The new replay streams, encoded, for the driver to commit.
    """
    view, known, steps = _start(slot, args)
    out: list[NewStream] = []
    try:
        needed = next(steps)
        while True:
            new, folded = _new(slot, view, args, needed,
                               run_replay(slot, view, needed.plan, needed.change, timeout))
            out.append(new)
            known[needed.key] = folded  # another fault on the same call shares this control
            needed = steps.send(folded)
    except StopIteration:
        return ReplayStreams(args.case_stream, out)


async def areplay_case(slot: SystemSlot, args: ReplayArgs, timeout: float | None) -> ReplayStreams:
    """:func:`replay_case` for an ``async def`` system, each replay awaited in turn."""
    view, known, steps = _start(slot, args)
    out: list[NewStream] = []
    try:
        needed = next(steps)
        while True:
            new, folded = _new(slot, view, args, needed,
                               await arun_replay(slot, view, needed.plan, needed.change, timeout))
            out.append(new)
            known[needed.key] = folded
            needed = steps.send(folded)
    except StopIteration:
        return ReplayStreams(args.case_stream, out)


def failed_replays(args: ReplayArgs, error: str, kind: str) -> ReplayStreams:
    """Replays whose worker died: none stored; the case's fault verdict stays missing
    (``replay_not_run``) and a later run replays it again."""
    return ReplayStreams(args.case_stream, [])


REPLAY_JOB = JobKind("oloproof.replay.engine:REPLAY_JOB", ReplayArgs, ReplayStreams, replay_case,
                     areplay_case, failed_replays)
