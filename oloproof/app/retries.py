"""Retrying infrastructure errors (``retries:`` in ``oloproof.yaml``, SPEC §18.8).

A case whose attempt ended with an error the configuration lists (``worker_died``,
``case_timeout``, ``system_error``) is run again — at most ``max`` more times — unless the
attempt failed a criterion: a case that failed is never run again to get a pass (a
``release_class`` judges a raised case on the environment's evidence, and may fail it). The
attempt is judged on its own events before it is retried, with no replays and no pair
source, as a worker judges a case.

Every attempt stays in the log, in the case's one stream ``<run_id>/<case_id>`` (``c/2`` for a
trial): the first attempt's events from its ``case_started``, then for each later attempt a
``case_retried`` event (:class:`~oloproof.events.CaseRetried`: the attempt's number and the
error kind that ended the one before) and that attempt's events without its own
``case_started``. The stream is committed whole, in one transaction, once its last attempt is
in: the seal, ``audit``, ``push`` and ``--resume`` see one case stream like any other (a run
interrupted between two attempts loses them, as it loses any case in flight, and records the
case afresh on resume). :func:`oloproof.views.fold_case` folds the last attempt — the verdict's
— and keeps the earlier ones in :attr:`~oloproof.views.CaseView.attempts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from oloproof.app.jobs import JUDGE_JOB
from oloproof.evaluate.engine import SuiteEvaluation
from oloproof.events import CODEC, CaseFinished, CaseRetried
from oloproof.recorder.jobs import Done, JobKind
from oloproof.recorder.record import CaseRecord
from oloproof.replay.engine import REPLAY_JOB
from oloproof.store.log import EventLog
from oloproof.views import NO_REPLAYS, CaseView, fold_case


@dataclass
class Retried:
    """A case that was run again: the error kind of each attempt but the last, and how the
    last one ended (its error kind, None when it finished without an error)."""

    case_id: str
    errors: list[str] = field(default_factory=list)
    last: str | None = None

    @property
    def attempts(self) -> int:
        """How many times the case ran."""
        return len(self.errors) + 1

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``oloproof run --json``: ``retried``)."""
        return {"case_id": self.case_id, "attempts": self.attempts, "errors": list(self.errors), "last": self.last}


def retried_of(view: CaseView) -> Retried | None:
    """What a committed case's earlier attempts were (None: it ran once)."""
    if not view.attempts:
        return None
    return Retried(view.case_id, [a.error_kind or "system_error" for a in view.attempts], view.error_kind)


class Retries:
    """The driver's retry policy: :meth:`take` is given every finished job before anything is
    committed, and either lets it through — a case recorded once, or its last attempt with
    the earlier ones put before it in its stream — or submits the case again.

    Args:
        max_retries: ``retries.max``.
        on: ``retries.on``.
        suite: the run's evaluation, to tell whether an attempt failed a criterion.
        resubmit: ``(kind, arg)`` submits the same job again (the driver's own submission).
    """

    def __init__(self, max_retries: int, on: list[str], suite: SuiteEvaluation, log: EventLog,
                 resubmit: Callable[[JobKind, Any], None], run_id: Callable[[], str]):
        self.max, self.on, self.suite, self.log = max_retries, frozenset(on), suite, log
        self.resubmit, self.run_id = resubmit, run_id
        #: case stream id -> the earlier attempts' records, oldest first
        self.earlier: dict[str, list[CaseRecord]] = {}
        #: every case run more than once, by case id (live, or read back on resume)
        self.retried: dict[str, Retried] = {}

    def take(self, done: Done) -> bool:
        """False when the job's case was submitted again (nothing of it is committed yet);
        True otherwise, with ``done.result`` then holding the case's whole stream."""
        kind = done.job.kind
        if done.error is not None or kind is REPLAY_JOB:
            return True
        judged = done.result if kind is JUDGE_JOB else None
        rec: CaseRecord = judged.record if judged is not None else done.result
        earlier = self.earlier.get(rec.case_id, [])
        end = CODEC.decode(rec.payloads[-1])
        error_kind = end.error_kind if isinstance(end, CaseFinished) else None
        if error_kind in self.on and len(earlier) < self.max and not self._failed(rec, judged):
            self.earlier.setdefault(rec.case_id, []).append(rec)
            self.resubmit(kind, done.job.arg)
            return False
        if not earlier:
            return True
        del self.earlier[rec.case_id]
        merged = self._merge([*earlier, rec])
        done.result = msgspec.structs.replace(judged, record=merged) if judged is not None else merged
        self.retried[rec.case_id] = Retried(rec.case_id, [self._kind(r) for r in earlier], error_kind)
        return True

    def saw(self, view: CaseView) -> None:
        """A case read back from the log (``--resume``): note it when it was run again."""
        retried = retried_of(view)
        if retried is not None:
            self.retried[view.case_id] = retried

    def _failed(self, rec: CaseRecord, judged: Any) -> bool:
        """Whether the attempt failed a criterion, judged on its own events (a worker that
        judged it gave its verdicts)."""
        if judged is not None and judged.verdicts:
            return any(v[0] == "fail" for v in judged.verdicts)
        stream = f"{self.run_id()}/{rec.case_id}"
        view = fold_case(self.log.unpack(stream, rec.payloads), stream)
        result = self.suite.evaluate(view, replays=NO_REPLAYS, pair_source=None)
        return any(v[0] == "fail" for v in result.verdicts)

    @staticmethod
    def _kind(rec: CaseRecord) -> str:
        end = CODEC.decode(rec.payloads[-1])
        return (end.error_kind if isinstance(end, CaseFinished) else None) or "system_error"

    def _merge(self, attempts: list[CaseRecord]) -> CaseRecord:
        """One stream of every attempt: the first whole, each later one after its
        ``case_retried`` and without its own ``case_started``."""
        payloads, types = list(attempts[0].payloads), list(attempts[0].types)
        for n, (before, rec) in enumerate(zip(attempts, attempts[1:]), start=2):
            (mark,), (mark_type,) = CODEC.pack([CaseRetried(n, self._kind(before))])
            payloads += [mark, *rec.payloads[1:]]
            types += [mark_type, *rec.types[1:]]
        return CaseRecord(attempts[0].case_id, payloads, types)
