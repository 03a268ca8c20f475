"""Replays as events: planning, the cache, running and reading them back.

A replay is stored as one stream ``replay/<cache key>``, tagged control or fault with its
checkpoint and change. The cache key is the SHA-256 of (system name, system version, case
fingerprint, checkpoint, change digest): asking again with the same system version finds the
stream and runs nothing; a new version gets new keys and replays afresh.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from oloproof.errors import CorruptLogError
from oloproof.evaluate.view import NO_STATE, CaseView, TrajectoryView, fold_records
from oloproof.events import (
    ReplayFinished,
    ReplayStarted,
    canonical_json,
    decode_many,
    decode_stream,
    encode,
    tag_of,
)
from oloproof.replay.fidelity import compare
from oloproof.replay.plan import FaultSpec, Plan, change_for, plan_fault
from oloproof.store.base import EventStore, StreamAppend

PREFIX = "replay/"


@dataclass
class ReplayView:
    started: ReplayStarted
    trajectory: TrajectoryView | None = None
    state: Any = NO_STATE
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    diverged: str | None = None
    injected: bool = True

    @property
    def kind(self) -> str:
        return self.started.kind


@dataclass
class FaultReplays:
    plan: Plan
    control: ReplayView | None = None
    fault: ReplayView | None = None


def cache_key(system_name: str, version: str, fingerprint: str, plan: Plan,
              change: dict[str, Any] | None) -> str:
    change_digest = hashlib.sha256(canonical_json(change)).hexdigest()
    return hashlib.sha256(canonical_json(
        [system_name, version, fingerprint, plan.digest, change_digest])).hexdigest()


def fold_replay(events: list[Any], stream: str) -> ReplayView:
    if not events or not isinstance(events[0], ReplayStarted):
        raise CorruptLogError(f"stream {stream!r}: a replay stream must begin with replay_started")
    view = ReplayView(events[0])
    for ev in fold_records(events[1:], view):
        if type(ev) is ReplayFinished:
            view.output, view.error, view.error_kind = ev.output, ev.error, ev.error_kind
            view.diverged, view.injected = ev.diverged, ev.injected
    return view


@dataclass
class ReplayService:
    """Finds (or, when allowed, runs and stores) the replays a case's fault evaluators need.

    ``system`` is the loaded system when replays may run, else ``None`` (read the cache only).
    ``version`` is the system version the replays are keyed by.
    """

    store: EventStore
    system_name: str
    version: str
    system: Any = None
    executed: int = 0
    _cache: dict[str, ReplayView | None] = field(default_factory=dict)
    _pending: list[StreamAppend] = field(default_factory=list)

    def flush(self) -> None:
        """Commit the replays run since the last flush, in one transaction."""
        if self._pending:
            pending, self._pending = self._pending, []
            self.store.commit(pending)

    def read(self, key: str) -> ReplayView | None:
        if key in self._cache:
            return self._cache[key]
        stored = self.store.read_stream(PREFIX + key)
        view = fold_replay(decode_stream(PREFIX + key, [e.payload for e in stored]), PREFIX + key) if stored else None
        self._cache[key] = view
        return view

    def ensure(self, case_stream: str, view: CaseView, plan: Plan, change: dict[str, Any] | None) -> ReplayView | None:
        key = cache_key(self.system_name, self.version, view.fingerprint, plan, change)
        found = self.read(key)
        if found is not None or self.system is None:
            return found
        from oloproof.replay.engine import run_replay, uses_own_replay

        cp = plan.checkpoint
        started = ReplayStarted(
            cache_key=key, kind="control" if change is None else "fault", case_id=view.case_id,
            case_stream=case_stream, fingerprint=view.fingerprint, system_name=self.system_name,
            system_version=self.version, checkpoint_step=cp.step_index, checkpoint_id=cp.id,
            checkpoint_digest=plan.digest, change=change,
            method="replayable" if uses_own_replay(self.system) else "tape",
        )
        events = [started, *run_replay(self.system, view, plan, change)]
        self.executed += 1
        payloads = [encode(e) for e in events]
        # committed by for_case with the case's other replays: one transaction per case
        self._pending.append(StreamAppend(PREFIX + key, 0, payloads, [tag_of(e) for e in events]))
        replay = fold_replay(decode_many(payloads), PREFIX + key)
        self._cache[key] = replay
        return replay

    def for_case(self, case_stream: str, view: CaseView, specs: Iterable[FaultSpec]) -> dict[tuple[str, str], FaultReplays]:
        try:
            return self._for_case(case_stream, view, specs)
        finally:
            self.flush()

    def _for_case(self, case_stream: str, view: CaseView, specs: Iterable[FaultSpec]) -> dict[tuple[str, str], FaultReplays]:
        out: dict[tuple[str, str], FaultReplays] = {}
        if view.error is not None:
            return out
        for spec in specs:
            plan = plan_fault(view, spec.tool)
            if not isinstance(plan, Plan):
                continue
            pair = FaultReplays(plan)
            pair.control = self.ensure(case_stream, view, plan, None)
            # an untrustworthy control replay never yields a verdict: no fault replay after it
            if pair.control is not None and pair.control.error_kind is None and \
                    compare(view, pair.control, plan.checkpoint.step_index).faithful:
                pair.fault = self.ensure(case_stream, view, plan, change_for(plan, spec.tool, spec.fault))
            out[(spec.tool, spec.fault)] = pair
        return out

    def attach(self, case_stream: str, view: CaseView, specs: Iterable[FaultSpec]) -> CaseView:
        view.replays = self.for_case(case_stream, view, specs)
        return view


def replays_of_case(store: EventStore, fingerprint: str, case_id: str) -> list[ReplayView]:
    """Every stored replay of a case (any system version), for the case panel."""
    out = []
    for stream, payload in store.stream_heads(PREFIX):
        head = decode_stream(stream, [payload])[0]
        if isinstance(head, ReplayStarted) and head.fingerprint == fingerprint and head.case_id == case_id:
            out.append(fold_replay(decode_stream(stream, [e.payload for e in store.read_stream(stream)]), stream))
    return out
