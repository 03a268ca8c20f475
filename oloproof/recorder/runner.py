"""The runner: runs every case of a suite against the system and commits each case's events
in one transaction, with its projection rows, when the case ends.

A crash loses at most the case in flight; ``resume`` finishes an interrupted run, skipping
the cases already committed.
"""

from __future__ import annotations

import copy
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import msgspec

from oloproof.config.cases import SuiteCase, SuiteInfo
from oloproof.errors import RecordError, UsageError
from oloproof.evaluate.engine import Accumulator, Summary
from oloproof.evaluate.projector import case_rows, evaluation_key, run_row
from oloproof.evaluate.view import fold_case
from oloproof.events import (
    CaseFinished,
    CaseStarted,
    EnvironmentStateRecorded,
    Event,
    RunFinished,
    RunResumed,
    RunStarted,
    decode_many,
    encode,
    tag_of,
)
from oloproof.history import PairSources, iter_case_views, load_run
from oloproof.project import LoadedSystem, Project
from oloproof.recorder.case import _CURRENT, CaseRecorder
from oloproof.records import Case
from oloproof.replay.service import ReplayService
from oloproof.store.base import EventStore, StreamAppend

Progress = Callable[[int, int], None]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass
class RunOutcome:
    run_id: str
    system: LoadedSystem
    summary: Summary
    errors: int
    resumed: bool
    error_messages: list[str] = field(default_factory=list)


class _ResetFailed(Exception):
    pass


class _Rows:
    """Projection rows waiting for their batch (they follow the case commits)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {"cases": [], "evaluations": []}

    def add(self, rows: dict[str, list[tuple]]) -> None:
        for table, table_rows in rows.items():
            self.rows[table].extend(table_rows)

    def __len__(self) -> int:
        return len(self.rows["cases"])

    def take(self) -> dict[str, list[tuple]]:
        rows, self.rows = self.rows, {"cases": [], "evaluations": []}
        return rows


def _describe_unencodable(events: list[Event]) -> str:
    from oloproof.events import StepRecorded

    for ev in events:
        try:
            encode(ev)
        except (TypeError, ValueError, OverflowError) as e:
            if isinstance(ev, StepRecorded):
                field = "result" if ev.kind == "tool_result" else "arguments"
                return f"step {ev.index} ({ev.kind} {ev.tool_name or ''}).{field} is not JSON-serialisable: {e}"
            return f"{tag_of(ev)} is not JSON-serialisable: {e}"
    return "an event is not JSON-serialisable"


class Runner:
    def __init__(self, project: Project, system: LoadedSystem, store: EventStore,
                 *, clock: Callable[[], str] = utc_now):
        self.project = project
        self.system = system
        self.store = store
        self.suite = project.suite
        self.clock = clock

    # ---- one case ----------------------------------------------------------------------

    def run_case(self, run_id: str, position: int, sc: SuiteCase) -> tuple[list[bytes], list[str]]:
        """Run one case; return its encoded events and their types (nothing written yet)."""
        start = CaseStarted(run_id, sc.id, position, sc.fingerprint, sc.input, sc.initial_state,
                            sc.expected, sc.metadata, sc.cluster)
        head = encode(start)  # before the system runs: the agent cannot alter what we record
        system = self.system
        instance = system.instance if system.stateful else None
        # sc is encoded above and dropped after this case, so the system may have it as is;
        # the sandbox gets its own deep copy (SPEC §2.3).
        case = Case(sc.id, sc.input, sc.initial_state, sc.metadata)
        recorder = CaseRecorder(case, snapshot=instance.snapshot if instance is not None else None,
                                auto_checkpoints=getattr(instance, "auto_checkpoints", True))
        output: Any = None
        error = error_kind = None
        token = _CURRENT.set(recorder)
        reset_ok = True
        try:
            if instance is not None:
                try:
                    # a fresh deep copy for every case: no case ever sees another's state
                    instance.reset(copy.deepcopy(sc.initial_state if sc.initial_state is not None else {}))
                except Exception as e:
                    reset_ok = False
                    raise _ResetFailed(f"case {sc.id!r}: reset() raised {type(e).__name__}: {e}") from e
            output = system.call(case)
            if not isinstance(output, dict):
                raise RecordError(f"case {sc.id!r}: the system returned {type(output).__name__}, "
                                  "expected its output as a dict")
        except _ResetFailed as e:
            output, error, error_kind = None, str(e), "reset_error"
        except RecordError as e:
            output, error, error_kind = None, str(e), "invalid_record"
        except Exception as e:  # the system under test may raise anything
            output, error, error_kind = None, f"{type(e).__name__}: {e}", "system_error"
        finally:
            _CURRENT.reset(token)
        events: list[Event] = []
        if error_kind != "invalid_record":
            try:
                events.extend(recorder.trajectory_events())
            except RecordError as e:
                events, output, error, error_kind = [], None, str(e), "invalid_record"
        if instance is not None and reset_ok:
            # the state a case left is recorded even when the case raised: it shows what changed
            try:
                state = msgspec.Raw(encode(instance.snapshot()))
                events.append(EnvironmentStateRecorded(state))
            except Exception as e:
                problem = ("returned something that is not JSON-serialisable"
                           if isinstance(e, (TypeError, ValueError, OverflowError)) else "raised")
                if error is None:
                    error = f"case {sc.id!r}: snapshot() {problem}: {type(e).__name__}: {e}"
                    error_kind = "snapshot_error"
        events.append(CaseFinished(output, error, error_kind))
        try:
            payloads = [encode(ev) for ev in events]
        except (TypeError, ValueError, OverflowError):
            message = f"case {sc.id!r}: " + _describe_unencodable(events)
            events = [CaseFinished(None, message, "invalid_record")]
            payloads = [encode(events[0])]
        return [head, *payloads], ["case_started.v1", *(tag_of(e) for e in events)]

    # ---- a whole run -------------------------------------------------------------------

    def start(self, info: SuiteInfo, durability: str = "full") -> str:
        run_id = new_run_id()
        cfg = self.project
        started = RunStarted(
            run_id=run_id,
            system_name=self.system.name,
            system_version=self.system.version,
            records=list(self.system.records),
            config=cfg.stored_config,
            config_digest=cfg.config_digest,
            cases_path=cfg.cases_label,
            suite_digest=info.digest,
            case_count=info.count,
            started_at=self.clock(),
            durability=durability,
        )
        self.store.commit([StreamAppend(run_id, 0, [encode(started)], [tag_of(started)])],
                          {"runs": [run_row(started, None)]})
        return run_id

    def execute(self, info: SuiteInfo, *, resume: str | None = None, durability: str = "full",
                progress: Progress | None = None, keep_cases: bool = True) -> RunOutcome:
        """Run (or finish) a run. Each case's events are one transaction; the projection rows
        (derived, rebuildable) follow in batches, so a case commit costs what its events cost.
        A crash can leave the projections behind the events, never the reverse: resuming, or
        ``oloproof audit rebuild``, brings them level again.

        With ``keep_cases=False`` the outcome's summary has no per-case list and the run's
        memory does not grow with the suite (only the numbers quantiles need are kept)."""
        acc = Accumulator(self.suite, keep_cases=keep_cases,
                          multi=None if self.project.config.metamorphic else set())
        done: set[str] = set()  # the cases committed before a resume
        count = 0
        errors = 0
        messages: list[str] = []
        suite = self.suite
        criteria = suite.criteria
        specs = suite.fault_specs
        key = evaluation_key(self.project.config_digest, self.system.version)
        pending = _Rows()
        replays = ReplayService(self.store, self.system.name, self.system.version, system=self.system)
        if resume is None:
            run_id = self.start(info, durability)
            pairs = PairSources(self.store, run_id)
        else:
            run_id = resume
            pairs = PairSources(self.store, run_id)
            stored = load_run(self.store, run_id)
            self._check_resumable(stored, info)
            views = iter_case_views(self.store, run_id)
            for view in (list(views) if specs else views):
                pairs.attach(view)
                done.add(view.case_id)
                errors += view.error is not None
                if specs:
                    replays.attach(f"{run_id}/{view.case_id}", view, specs)
                result = suite.evaluate_case(view)
                acc.add(result)
                pending.add(case_rows(run_id, view, result, criteria, key))
            ev = RunResumed(run_id, self.clock())
            self.store.commit([StreamAppend(run_id, stored.length, [encode(ev)], [tag_of(ev)])], pending.take())
        total = info.count
        count = len(done)
        if progress:
            progress(count, total)
        flushed = time.monotonic()
        for position, sc in enumerate(self.project.suite_cases):
            if sc.id in done:
                continue
            payloads, types = self.run_case(run_id, position, sc)
            stream = f"{run_id}/{sc.id}"
            view = fold_case(decode_many(payloads), stream)
            if view.error is not None:
                errors += 1
                if len(messages) < 5:
                    messages.append(view.error if view.error.startswith("case ")
                                    else f"case {sc.id!r}: {view.error}")
            self.store.commit([StreamAppend(stream, 0, payloads, types)])
            if specs:  # control and fault replays, each its own stream, after the case commits
                replays.attach(stream, view, specs)
            result = suite.evaluate_case(pairs.attach(view))
            pending.add(case_rows(run_id, view, result, criteria, key))
            if len(pending) >= 1000 or time.monotonic() - flushed > 2.0:
                self.store.commit((), pending.take())
                flushed = time.monotonic()
            acc.add(result)
            count += 1
            if progress:
                progress(count, total)
        self.finish(run_id, pending.take())
        return RunOutcome(run_id, self.system, acc.summary(), errors, resume is not None, messages)

    def finish(self, run_id: str, pending: dict[str, list[tuple]] | None = None) -> None:
        stored = load_run(self.store, run_id)
        committed = self.store.count_streams(run_id + "/")
        ev = RunFinished(run_id, self.clock(), committed)
        self.store.commit([StreamAppend(run_id, stored.length, [encode(ev)], [tag_of(ev)])],
                          {"runs": [run_row(stored.started, ev)], **(pending or {})})

    def _check_resumable(self, stored: Any, info: SuiteInfo) -> None:
        s: RunStarted = stored.started
        if stored.complete:
            raise UsageError(f"run {s.run_id!r} is already complete; nothing to resume")
        problems = []
        if (s.system_name, s.system_version) != (self.system.name, self.system.version):
            problems.append(f"system is {self.system.name} {self.system.version}, the run used "
                            f"{s.system_name} {s.system_version}")
        if s.suite_digest != info.digest:
            problems.append(f"the cases in {self.project.cases_label} changed since the run started")
        if s.config_digest != self.project.config_digest:
            problems.append("oloproof.yaml or release.yaml changed since the run started")
        if problems:
            raise UsageError(f"cannot resume run {s.run_id!r}: " + "; ".join(problems)
                             + ". Start a new run instead.")
