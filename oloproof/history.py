"""Reading stored runs back from the log: run headers, case views, re-evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from oloproof.errors import CorruptLogError, UsageError
from oloproof.evaluate.engine import SuiteEvaluation, Summary
from oloproof.evaluate.projector import RunProjector, decode_stored
from oloproof.evaluate.view import CaseView, fold_case
from oloproof.events import RunFinished, RunResumed, RunStarted, decode_stream
from oloproof.store.base import EventStore


@dataclass
class StoredRun:
    started: RunStarted
    finished: RunFinished | None
    resumed: list[RunResumed]
    length: int  # events in the run's own stream

    @property
    def run_id(self) -> str:
        return self.started.run_id

    @property
    def complete(self) -> bool:
        return self.finished is not None


def load_run(store: EventStore, run_id: str) -> StoredRun:
    if not run_id or "/" in run_id:
        raise UsageError(f"{run_id!r} is not a run id (see 'oloproof runs')")
    stored = store.read_stream(run_id)
    if not stored:
        known = [r["run_id"] for r in store.projection("runs")]
        hint = f"; known runs: {', '.join(known[-5:])}" if known else "; the log has no runs yet"
        raise UsageError(f"no run {run_id!r} in the log{hint}")
    events = decode_stored(stored)
    if not isinstance(events[0], RunStarted):
        raise CorruptLogError(f"run stream {run_id!r} does not begin with run_started")
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    resumed = [e for e in events if isinstance(e, RunResumed)]
    return StoredRun(events[0], finished, resumed, len(stored))


def latest_run_id(store: EventStore) -> str:
    runs = store.projection("runs")
    if not runs:
        raise UsageError("the log has no runs yet; start one with 'oloproof run'")
    return max(runs, key=lambda r: (r["started"], r["run_id"]))["run_id"]


class PairSources:
    """Attaches to a derived case ``<source>~<transform>`` the view of its source case."""

    def __init__(self, store: EventStore, run_id: str):
        self.store, self.run_id = store, run_id
        self._last: CaseView | None = None

    def attach(self, view: CaseView) -> CaseView:
        if "~" in view.case_id:
            source_id = view.cluster
            if self._last is not None and self._last.case_id == source_id:
                view.pair_source = self._last
            else:
                stored = self.store.read_stream(f"{self.run_id}/{source_id}")
                if stored:
                    view.pair_source = fold_case(decode_stored(stored), f"{self.run_id}/{source_id}")
        else:
            self._last = view
        return view


def iter_case_views(store: EventStore, run_id: str) -> Iterator[CaseView]:
    """Every committed case of a run, folded from its events (in stream order)."""
    for stream, payloads in store.iter_streams(run_id + "/"):
        yield fold_case(decode_stream(stream, payloads), stream)


def find_case_view(store: EventStore, run_id: str, case_id: str) -> CaseView | None:
    """A committed case (with its pair source attached), or ``None``."""
    stored = store.read_stream(f"{run_id}/{case_id}")
    if not stored:
        return None
    return PairSources(store, run_id).attach(fold_case(decode_stored(stored), f"{run_id}/{case_id}"))


def case_view(store: EventStore, run_id: str, case_id: str) -> CaseView:
    view = find_case_view(store, run_id, case_id)
    if view is None:
        raise UsageError(f"run {run_id!r} has no committed case {case_id!r}")
    return view


def replay_service(store: EventStore, run: StoredRun, system: Any = None) -> Any:
    """Replays keyed by the run's system version; read-only unless ``system`` is given."""
    from oloproof.replay.service import ReplayService

    if system is not None:
        return ReplayService(store, system.name, system.version, system=system)
    return ReplayService(store, run.started.system_name, run.started.system_version)


def evaluate_run(store: EventStore, run_id: str, suite: SuiteEvaluation, replays: Any = None,
                 eval_key: str | None = None, keep_cases: bool = True) -> Summary:
    """Evaluate a stored run. Fault evaluators find their replays through ``replays`` (by
    default read from the cache only: nothing runs).

    With ``eval_key`` (see :func:`~oloproof.evaluate.projector.evaluation_key`) the per-case
    results are cached in the ``evaluations`` projection: when every committed case has a row
    for that key, they are read back instead of decoding events and replays again.
    """
    from oloproof.evaluate.engine import Accumulator
    from oloproof.evaluate.projector import cacheable, decode_result, encode_result

    criteria = suite.criteria
    run = load_run(store, run_id)
    # a run recorded with transforms holds clusters, whatever the configuration says now
    acc = Accumulator(suite, keep_cases=keep_cases,
                      multi=None if run.started.config["oloproof"].get("metamorphic") else set())
    if eval_key is not None:
        cached = store.count("evaluations", run_id=run_id, eval_key=eval_key)
        if cached and cached == store.count_streams(run_id + "/"):
            for r in store.iter_projection("evaluations", run_id=run_id, eval_key=eval_key):
                acc.add(decode_result(r["case_id"], r["position"], r["result"], criteria))
            return acc.summary()
    specs = suite.fault_specs
    if specs and replays is None:
        replays = replay_service(store, run)
    pairs = PairSources(store, run_id)
    rows: list[tuple] = []
    for view in iter_case_views(store, run_id):
        if specs:
            replays.attach(f"{run_id}/{view.case_id}", view, specs)
        result = suite.evaluate_case(pairs.attach(view))
        acc.add(result)
        if eval_key is not None and cacheable(result):
            rows.append((run_id, eval_key, result.case_id, result.position, encode_result(result, criteria)))
            if len(rows) >= 2000:
                store.commit((), {"evaluations": rows})
                rows = []
    if rows:
        store.commit((), {"evaluations": rows})
    return acc.summary()


def rebuild_projections(store: EventStore) -> None:
    """Drop every projection row and derive them again from the events alone."""
    from oloproof.project import suite_from_stored
    from oloproof.replay.service import ReplayService

    def replays_for(started: RunStarted) -> Any:
        return ReplayService(store, started.system_name, started.system_version)

    store.rebuild_projections(RunProjector(lambda started: suite_from_stored(started.config), replays_for,
                                           lambda run_id: PairSources(store, run_id)))
    if hasattr(store, "projections_stale"):
        store.projections_stale = False


def list_runs(store: EventStore) -> list[dict]:
    """Runs with the cases committed so far, newest last (``oloproof runs --json``)."""
    out = []
    for r in sorted(store.projection("runs"), key=lambda r: (r["started"], r["run_id"])):
        out.append({
            "run_id": r["run_id"], "system": r["system"], "version": r["version"],
            "started": r["started"], "case_count": r["case_count"],
            "cases_committed": store.count_streams(r["run_id"] + "/"), "status": r["status"],
        })
    return out
