"""Projection rows derived from events: the ``runs`` and ``cases`` tables (each case row
carries its verdicts).

A run writes these rows in batches after its cases commit; the :class:`RunProjector` derives
the very same rows from the log alone, which is how ``oloproof audit rebuild`` drops and
rebuilds them. They serve browsing and SQL (the ``verdicts`` view); no decision reads them.
"""

from __future__ import annotations

import hashlib
from typing import Any

from oloproof.errors import CorruptLogError
from oloproof.evaluate.engine import CaseResult
from oloproof.events import RunFinished, RunSealed, RunStarted, canonical_json
from oloproof.store.base import EventStore, StoredEvent
from oloproof.store.log import EventLog
from oloproof.views import CaseView, fold_case


def evaluation_key(config_digest: str, system_version: str) -> str:
    """What a case's evaluation depends on besides its own events: the configuration, and the
    system version its replays are keyed by."""
    return hashlib.sha256(f"{config_digest}\x00{system_version}".encode()).hexdigest()[:32]


def run_eval_key(started: RunStarted) -> str:
    """The :func:`evaluation_key` of a run, from its ``run_started`` event."""
    return evaluation_key(started.config_digest, started.system_version)


def run_row(started: RunStarted, finished: RunSealed | RunFinished | None) -> tuple:
    """The ``runs`` table row of a run: id, system, version, start, case count, ``complete``
    once sealed (or finished before seals) else ``incomplete``, finish time, evaluation key."""
    return (
        started.run_id,
        started.system_name,
        started.system_version,
        started.started_at,
        started.case_count,
        "complete" if finished else "incomplete",
        finished.finished_at if finished else None,
        run_eval_key(started),
    )


def encode_result(result: CaseResult, criteria: list[str]) -> str:
    """A case result as the canonical JSON an ``evaluations`` row stores: verdicts by
    criterion, metric values, slice groups, compared paths and cluster."""
    return canonical_json({
        "verdicts": dict(zip(criteria, result.verdicts)),
        "values": list(result.values),
        "groups": list(result.groups),
        "paths": list(result.paths),
        "cluster": result.cluster,
    }).decode()


def cacheable(result: CaseResult) -> bool:
    """A result that waits on replays not run yet is not cached: it would go stale."""
    return not any(v[1] == "replay_not_run" for v in result.verdicts)


def case_rows(run_id: str, view: CaseView, result: CaseResult, criteria: list[str],
              eval_key: str) -> dict[str, list[tuple]]:
    """The projection rows of one judged case: its ``cases`` row and, unless the result waits
    on replays not run yet (:func:`cacheable`), its ``evaluations`` row under ``eval_key``."""
    steps = len(view.trajectory.steps) if view.trajectory is not None else None
    rows: dict[str, list[tuple]] = {
        "cases": [(run_id, view.case_id, view.position, view.fingerprint,
                   "error" if view.error else "ok", steps, view.error)],
        "evaluations": [],
    }
    if cacheable(result):
        rows["evaluations"].append((run_id, eval_key, view.case_id, view.position,
                                    encode_result(result, criteria)))
    return rows


#: streams that are neither a run nor a case of one (oloproof.events): no projection rows
NO_ROWS = ("replay/", "pin/", "attribution/", "push/", "judgement/")


class RunProjector:
    """Derives the projection rows of every stream, fed in (stream, seq) order: a run's own
    stream comes before its cases. Cases are judged through the one evaluation pipeline
    (:class:`~oloproof.app.evidence.RunEvidence`) with the configuration each run stored."""

    def __init__(self, store: EventStore):
        self.store = store
        self.log = EventLog(store)
        self._runs: dict[str, tuple[Any, str]] = {}

    def __call__(self, stream: str, stored: list[StoredEvent]) -> dict[str, list[tuple]]:
        from oloproof.app.evidence import RunEvidence
        from oloproof.app.project import suite_from_stored
        from oloproof.app.runs import StoredRun

        if stream.startswith(NO_ROWS):
            # replays are read through the replay cache, pins and attributions where they are
            # used: they project no rows
            return {}
        events = self.log.decoded(stored)
        run_id, sep, _ = stream.partition("/")
        if not sep:
            started = events[0]
            if not isinstance(started, RunStarted):
                raise CorruptLogError(f"run stream {stream!r} does not begin with run_started")
            finished = next((e for e in events if isinstance(e, (RunSealed, RunFinished))), None)
            run = StoredRun(started, finished, [], len(events))
            evidence = RunEvidence(self.store, run, suite_from_stored(started.config), sealed_only=True)
            self._runs = {run_id: (evidence, run_eval_key(started))}
            return {"runs": [run_row(started, finished)]}
        if run_id not in self._runs:
            raise CorruptLogError(f"case stream {stream!r} has no run_started for run {run_id!r}")
        evidence, key = self._runs[run_id]
        view = fold_case(events, stream)
        return case_rows(run_id, view, evidence.judge(view), evidence.suite.criteria, key)


def rebuild_projections(store: EventStore) -> None:
    """Drop every projection row and derive them again from the events alone; the judgement
    cache beside the log goes too (the next reader of each run makes its entry again)."""
    from oloproof.app.judged import drop

    store.rebuild_projections(RunProjector(store))
    store.rebuild_search()
    drop(store)
    if hasattr(store, "projections_stale"):
        store.projections_stale = False
