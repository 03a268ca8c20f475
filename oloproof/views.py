"""Immutable read models folded from events: a case, a replay, and a case's evidence.

Evaluators see only these. A :class:`CaseView` is folded from one case stream; the replays
and the metamorphic source a case is judged with are *inputs* of its evaluation
(:meth:`CaseView.with_evidence` returns a new view), never attached to a shared object
afterwards — so no code path can forget them and silently turn a case into ``missing``.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import msgspec

from oloproof.errors import CorruptLogError
from oloproof.events import (
    CaseFinished,
    CaseObserved,
    CaseRetried,
    CaseStarted,
    CheckpointRecorded,
    ConstraintRecorded,
    EffectRecorded,
    EnvironmentStateRecorded,
    Event,
    EvidenceRecorded,
    JudgementRecorded,
    ReplayFinished,
    ReplayStarted,
    StepRecorded,
    TrajectoryRecorded,
    UsageRecorded,
)

#: the state of a case whose system recorded no ``environment_state/v1``
NO_STATE: Any = type("NoState", (), {"__repr__": lambda self: "NO_STATE"})()


class TrajectoryView(msgspec.Struct, frozen=True):
    """An ``agent_trajectory/v1`` record as stored: steps, constraints, checkpoints."""

    steps: Sequence[StepRecorded]
    terminal_status: str
    truncated: bool
    step_limit: int | None
    constraints: Sequence[ConstraintRecorded]
    checkpoints: Sequence[CheckpointRecorded]

    @property
    def calls(self) -> list[StepRecorded]:
        """The ``tool_call`` steps, in order (results and other kinds left out)."""
        return [s for s in self.steps if s.kind == "tool_call"]

    @property
    def tool_names(self) -> list[str]:
        """The tool name of every ``tool_call`` step, in call order, repeats kept."""
        return [s.tool_name for s in self.steps if s.kind == "tool_call"]  # type: ignore[misc]


class ReplayView(msgspec.Struct, frozen=True):
    """One stored replay (control or fault) of a case."""

    started: ReplayStarted
    trajectory: TrajectoryView | None = None
    state: Any = NO_STATE
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    diverged: str | None = None
    injected: bool = True
    #: ``effect_ledger/v1`` attempts the replayed sandbox recorded (after the checkpoint)
    effects: tuple[EffectRecorded, ...] = ()
    #: ``release_evidence/v1`` recorded during the replay (the harness's denial included)
    evidence: tuple[EvidenceRecorded, ...] = ()

    @property
    def kind(self) -> str:
        """``control``, ``fault`` or ``probe``, as its ``replay_started`` recorded."""
        return self.started.kind


class FaultReplays(msgspec.Struct, frozen=True):
    """What a fault evaluator judges: the plan, the control replay and (when the control was
    trustworthy) the fault replay. ``plan`` is a :class:`oloproof.replay.plan.Plan`."""

    plan: Any
    control: ReplayView | None = None
    fault: ReplayView | None = None


#: (tool, fault kind) -> FaultReplays
Replays = Mapping[tuple[str, str], FaultReplays]
NO_REPLAYS: Replays = MappingProxyType({})


class CaseView(msgspec.Struct, frozen=True):
    """One case as recorded, with the evidence it is judged with (replays, pair source)."""

    case_id: str
    position: int
    fingerprint: str
    input: Any
    initial_state: Any
    expected: Mapping[str, Any]
    metadata: Mapping[str, Any]
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    #: where the system raised (the user's frames), when it did and the log recorded it
    traceback: str | None = None
    finished: bool = False
    trajectory: TrajectoryView | None = None
    state: Any = NO_STATE
    started: CaseStarted | None = None
    #: (tool, fault) -> FaultReplays: evidence, given by :meth:`with_evidence`
    replays: Replays = NO_REPLAYS
    #: for a derived case ``<source>~<transform>``: the source case (evidence)
    pair_source: CaseView | None = None
    #: the earlier attempts of a case run again after an infrastructure error (``retries:``,
    #: SPEC §18.8), each folded as a case of its own, oldest first; every other field is the
    #: last attempt's, which alone is judged
    attempts: tuple[CaseView, ...] = ()
    #: ``effect_ledger/v1``: every attempt at an external effect, in order
    effects: tuple[EffectRecorded, ...] = ()
    #: ``release_evidence/v1``: access, wait, continuity, deadline, deliverable, in order
    evidence: tuple[EvidenceRecorded, ...] = ()
    #: model usage the agent reported (``current_case().usage``), in order
    usage: tuple[UsageRecorded, ...] = ()
    #: what the recording driver measured (wall time, model and tool calls); None in older logs
    observed: CaseObserved | None = None
    #: model judges' judgements of the case (``judgement.v1``), in the order they were recorded
    judgements: tuple[JudgementRecorded, ...] = ()

    @property
    def cluster(self) -> str:
        """The cluster: a derived case shares its source's."""
        if self.started is not None and self.started.cluster:
            return self.started.cluster
        return self.case_id.split("~", 1)[0]

    @property
    def tags(self) -> tuple[str, ...]:
        """The case's ``tags`` (SPEC §18.5), as its ``case_started`` recorded them."""
        started = self.started
        return tuple(started.tags) if started is not None and started.tags else ()

    @property
    def is_derived(self) -> bool:
        """Whether this is a metamorphic case derived from another (``<source>~<transform>``,
        SPEC §7.2): its cluster is its source's id, not its own."""
        return self.cluster != self.case_id

    @property
    def fault_fired(self) -> bool | None:
        """Whether the case's declared fault was applied (its call happened: a result step
        carries the fault's kind); None when the case declares no fault. A fault whose call
        never came is no error of the run — it is False here."""
        if self.started is None or self.started.fault is None:
            return None
        t = self.trajectory
        return t is not None and any(s.fault is not None for s in t.steps)

    def with_evidence(self, *, replays: Replays, pair_source: CaseView | None) -> CaseView:
        """This case as evaluators judge it: a new view carrying its replays and pair source."""
        if replays is self.replays and pair_source is self.pair_source:
            return self
        return msgspec.structs.replace(self, replays=replays, pair_source=pair_source)


def fold_records(events: Sequence[Event], into: dict[str, Any]) -> Iterator[Event]:
    """Fold the ``agent_trajectory/v1`` and ``environment_state/v1`` records of a stream into
    ``into["trajectory"]`` / ``into["state"]``; yield every other event for the caller."""
    steps: list[StepRecorded] = []
    constraints: list[ConstraintRecorded] = []
    checkpoints: list[CheckpointRecorded] = []
    for ev in events:
        t = type(ev)
        if t is StepRecorded:
            steps.append(cast(StepRecorded, ev))
        elif t is ConstraintRecorded:
            constraints.append(cast(ConstraintRecorded, ev))
        elif t is CheckpointRecorded:
            checkpoints.append(cast(CheckpointRecorded, ev))
        elif t is TrajectoryRecorded:
            end = cast(TrajectoryRecorded, ev)
            into["trajectory"] = TrajectoryView(
                tuple(steps), end.terminal_status, end.truncated, end.step_limit,
                tuple(constraints), tuple(checkpoints),
            )
            steps, constraints, checkpoints = [], [], []
        elif t is EnvironmentStateRecorded:
            into["state"] = cast(EnvironmentStateRecorded, ev).state
        else:
            yield ev


#: the environment's events a view keeps in order, by field
_ENVIRONMENT = {EffectRecorded: "effects", EvidenceRecorded: "evidence", UsageRecorded: "usage"}


def _fold_environment(events: Sequence[Event], into: dict[str, Any], kept: tuple[str, ...]) -> Iterator[Event]:
    """:func:`fold_records`, then the effects, evidence and usage (those ``kept``) gathered in
    order into ``into`` as tuples; every other event is yielded for the caller."""
    gathered: dict[str, list[Event]] = {}
    for ev in fold_records(events, into):
        name = _ENVIRONMENT.get(type(ev))
        if name is None:
            yield ev
        elif name in kept:
            gathered.setdefault(name, []).append(ev)
    for name, found in gathered.items():
        into[name] = tuple(found)


def fold_case(events: Sequence[Event], stream: str = "?") -> CaseView:
    """Fold one case stream's events into a :class:`CaseView` (without evidence)."""
    if not events or not isinstance(events[0], CaseStarted):
        raise CorruptLogError(f"stream {stream!r}: a case stream must begin with case_started")
    if CaseRetried in map(type, events):  # (types compare by identity)
        return _fold_attempts(events, stream)
    start: CaseStarted = events[0]
    fields: dict[str, Any] = {}
    judgements: list[JudgementRecorded] = []
    for ev in _fold_environment(events[1:], fields, ("effects", "evidence", "usage")):
        if type(ev) is JudgementRecorded:
            judgements.append(ev)
        elif type(ev) is CaseObserved:
            fields["observed"] = ev
        elif type(ev) is CaseFinished:
            fields["output"] = ev.output
            fields["error"] = ev.error
            fields["error_kind"] = ev.error_kind
            if ev.traceback is not None:
                fields["traceback"] = ev.traceback
            fields["finished"] = True
    if judgements:
        fields["judgements"] = tuple(judgements)
    return CaseView(
        case_id=start.case_id,
        position=start.position,
        fingerprint=start.fingerprint,
        input=start.input,
        initial_state=start.initial_state,
        expected=start.expected if isinstance(start.expected, dict) else {},
        metadata=start.metadata,
        started=start,
        **fields,
    )


def _fold_attempts(events: Sequence[Event], stream: str) -> CaseView:
    """A retried case's stream: its ``case_started``, then each attempt's events, the attempts
    separated by ``case_retried``. The view is the last attempt's (the verdict's), with the
    earlier attempts folded the same way in :attr:`CaseView.attempts`."""
    start = events[0]
    marks = [i for i, ev in enumerate(events) if type(ev) is CaseRetried]
    bounds = [0, *marks]
    earlier = tuple(fold_case([start, *events[a + 1:b]], stream) for a, b in zip(bounds, marks))
    last = fold_case([start, *events[marks[-1] + 1:]], stream)
    return msgspec.structs.replace(last, attempts=earlier)


def fold_replay(events: Sequence[Event], stream: str = "?") -> ReplayView:
    """Fold one replay stream (``replay/<key>``) into a :class:`ReplayView`."""
    if not events or not isinstance(events[0], ReplayStarted):
        raise CorruptLogError(f"stream {stream!r}: a replay stream must begin with replay_started")
    fields: dict[str, Any] = {}
    for ev in _fold_environment(events[1:], fields, ("effects", "evidence")):
        if type(ev) is ReplayFinished:
            fields.update(output=ev.output, error=ev.error, error_kind=ev.error_kind,
                          diverged=ev.diverged, injected=ev.injected)
    return ReplayView(events[0], **fields)
