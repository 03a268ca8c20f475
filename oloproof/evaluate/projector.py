"""Projection rows derived from events: the ``runs`` and ``cases`` tables (each case row
carries its verdicts).

The runner writes these rows in the same transaction as the case's events; the
:class:`RunProjector` derives the very same rows from the log alone, which is how
``oloproof audit rebuild`` drops and rebuilds them.
"""

from __future__ import annotations

from typing import Any, Callable

from oloproof.errors import CorruptLogError
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation
from oloproof.evaluate.view import CaseView, fold_case
from oloproof.events import RunFinished, RunStarted, canonical_json, decode, decode_many
from oloproof.store.base import StoredEvent


def run_row(started: RunStarted, finished: RunFinished | None) -> tuple:
    return (
        started.run_id,
        started.system_name,
        started.system_version,
        started.started_at,
        started.case_count,
        "complete" if finished else "incomplete",
        finished.finished_at if finished else None,
    )


def case_rows(run_id: str, view: CaseView, result: CaseResult, criteria: list[str]) -> dict[str, list[tuple]]:
    steps = len(view.trajectory.steps) if view.trajectory is not None else None
    verdicts = canonical_json(dict(zip(criteria, result.verdicts))).decode()
    return {
        "cases": [(run_id, view.case_id, view.position, view.fingerprint,
                   "error" if view.error else "ok", steps, view.error, verdicts)],
    }


def decode_stored(events: list[StoredEvent]) -> list[Any]:
    try:
        return decode_many([ev.payload for ev in events])
    except Exception:
        pass
    out = []
    for ev in events:  # find the culprit for the message
        try:
            out.append(decode(ev.payload))
        except Exception as e:
            raise CorruptLogError(f"event {ev.stream!r} #{ev.seq} ({ev.type}) cannot be decoded: {e}") from e
    return out


class RunProjector:
    """Feeds on streams in (stream, seq) order: a run's own stream comes before its cases."""

    def __init__(self, suite_for: Callable[[RunStarted], SuiteEvaluation],
                 replays_for: Callable[[RunStarted], Any] | None = None):
        self._suite_for = suite_for
        self._replays_for = replays_for
        self._suites: dict[str, SuiteEvaluation] = {}
        self._replays: dict[str, Any] = {}

    def __call__(self, stream: str, stored: list[StoredEvent]) -> dict[str, list[tuple]]:
        events = decode_stored(stored)
        run_id, sep, _ = stream.partition("/")
        if not sep:
            started = events[0]
            if not isinstance(started, RunStarted):
                raise CorruptLogError(f"run stream {stream!r} does not begin with run_started")
            finished = next((e for e in events if isinstance(e, RunFinished)), None)
            self._suites[run_id] = self._suite_for(started)
            if self._replays_for is not None:
                self._replays[run_id] = self._replays_for(started)
            return {"runs": [run_row(started, finished)]}
        suite = self._suites.get(run_id)
        if suite is None:
            raise CorruptLogError(f"case stream {stream!r} has no run_started for run {run_id!r}")
        view = fold_case(events, stream)
        if suite.fault_specs and run_id in self._replays:
            self._replays[run_id].attach(stream, view, suite.fault_specs)
        return case_rows(run_id, view, suite.evaluate_case(view), suite.criteria)
