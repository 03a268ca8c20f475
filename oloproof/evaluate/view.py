"""A case as the evaluators see it, folded from its stored events (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from oloproof.errors import CorruptLogError
from oloproof.events import (
    CaseFinished,
    CaseStarted,
    CheckpointRecorded,
    ConstraintRecorded,
    EnvironmentStateRecorded,
    Event,
    StepRecorded,
    TrajectoryRecorded,
)

NO_STATE = object()


@dataclass
class TrajectoryView:
    steps: list[StepRecorded]
    terminal_status: str
    truncated: bool
    step_limit: int | None
    constraints: list[ConstraintRecorded]
    checkpoints: list[CheckpointRecorded]

    @property
    def calls(self) -> list[StepRecorded]:
        return [s for s in self.steps if s.kind == "tool_call"]

    @property
    def tool_names(self) -> list[str]:
        return [s.tool_name for s in self.steps if s.kind == "tool_call"]  # type: ignore[misc]


@dataclass
class CaseView:
    case_id: str
    position: int
    fingerprint: str
    input: Any
    initial_state: Any
    expected: dict[str, Any]
    metadata: dict[str, Any]
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    finished: bool = False
    trajectory: TrajectoryView | None = None
    state: Any = NO_STATE
    started: CaseStarted | None = field(default=None, repr=False)
    #: (tool, fault) -> FaultReplays, attached by the replay service before evaluation
    replays: dict = field(default_factory=dict, repr=False)
    #: for a derived case ``<source>~<transform>``: the source case, attached before evaluation
    pair_source: "CaseView | None" = field(default=None, repr=False)

    @property
    def cluster(self) -> str:
        """The cluster: a derived case shares its source's."""
        if self.started is not None and self.started.cluster:
            return self.started.cluster
        return self.case_id.split("~", 1)[0]


def fold_records(events: Sequence[Event], into: Any) -> Iterator[Event]:
    """Fold the ``agent_trajectory/v1`` and ``environment_state/v1`` records of a stream into
    ``into.trajectory`` / ``into.state``; yield every other event for the caller."""
    steps: list[StepRecorded] = []
    constraints: list[ConstraintRecorded] = []
    checkpoints: list[CheckpointRecorded] = []
    for ev in events:
        t = type(ev)
        if t is StepRecorded:
            steps.append(ev)  # type: ignore[arg-type]
        elif t is ConstraintRecorded:
            constraints.append(ev)  # type: ignore[arg-type]
        elif t is CheckpointRecorded:
            checkpoints.append(ev)  # type: ignore[arg-type]
        elif t is TrajectoryRecorded:
            into.trajectory = TrajectoryView(
                steps, ev.terminal_status, ev.truncated, ev.step_limit, constraints, checkpoints  # type: ignore[attr-defined]
            )
            steps, constraints, checkpoints = [], [], []
        elif t is EnvironmentStateRecorded:
            into.state = ev.state  # type: ignore[attr-defined]
        else:
            yield ev


def fold_case(events: Sequence[Event], stream: str = "?") -> CaseView:
    """Fold one case stream's events into a :class:`CaseView`."""
    if not events or not isinstance(events[0], CaseStarted):
        raise CorruptLogError(f"stream {stream!r}: a case stream must begin with case_started")
    start: CaseStarted = events[0]  # type: ignore[assignment]
    view = CaseView(
        case_id=start.case_id,
        position=start.position,
        fingerprint=start.fingerprint,
        input=start.input,
        initial_state=start.initial_state,
        expected=start.expected if isinstance(start.expected, dict) else {},
        metadata=start.metadata,
        started=start,
    )
    for ev in fold_records(events[1:], view):
        if type(ev) is CaseFinished:
            view.output = ev.output  # type: ignore[attr-defined]
            view.error = ev.error  # type: ignore[attr-defined]
            view.error_kind = ev.error_kind  # type: ignore[attr-defined]
            view.finished = True
    return view
