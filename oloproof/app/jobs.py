"""A case recorded *and judged* where it ran — for executors whose workers are other
processes (``--workers``, Dask), so that the driver, the log's only writer, is left with
committing and counting.

Only a case that needs no other evidence is judged this way: no fault evaluator (replays),
and no metamorphic relation to judge (a pair source). It is judged by the very same
:meth:`~oloproof.evaluate.engine.SuiteEvaluation.evaluate`, from its own encoded events, with
the configuration the run stored; the driver receives the case's events, its projection row
and its result (the ``evaluations`` row's JSON), and judges nothing again.
"""

from __future__ import annotations

from typing import Any

import msgspec

from oloproof.app.projections import case_rows
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation
from oloproof.evaluate.state import PathCheck
from oloproof.events import CODEC
from oloproof.recorder.jobs import JobKind
from oloproof.recorder.record import (
    CaseArgs,
    CaseRecord,
    arecord_case,
    failed_case,
    record_case,
)
from oloproof.system import SystemSlot
from oloproof.views import NO_REPLAYS, fold_case


class JudgeArgs(msgspec.Struct, frozen=True):
    """What a worker needs to record and judge one case: the case's recording arguments, the
    digest of the run's stored configuration (its suite is built once per digest) and the
    evaluation key its ``evaluations`` row is stored under."""

    case: CaseArgs
    config_digest: str  # of the run's stored configuration, which travels as the factory's context
    eval_key: str


class JudgedCase(msgspec.Struct, frozen=True):
    """A worker's answer: the case's encoded events and, unless its worker died, its
    projection row, encoded result and the result's fields for the driver to aggregate."""

    record: CaseRecord
    #: the ``cases`` projection row, and the encoded result (``evaluations`` row); None when
    #: the case could not be judged where it ran (its worker died): the driver judges it
    case_row: list | None = None
    result: str | None = None
    #: the result itself, as the driver aggregates it
    verdicts: list[tuple[str, str | None]] = []
    values: list[Any] = []
    groups: list[str | None] = []
    paths: list[PathCheck] = []
    cluster: str | None = None
    fingerprint: str = ""
    claimed: bool = False

    def case_result(self, position: int) -> CaseResult:
        """The :class:`~oloproof.evaluate.engine.CaseResult` again, at suite ``position``
        (msgspec brought its tuples back as lists)."""
        return CaseResult(self.record.case_id, position, tuple(self.verdicts),
                          tuple(tuple(v) if isinstance(v, list) else v for v in self.values),
                          tuple(self.groups), tuple(self.paths), self.cluster, self.fingerprint, self.claimed)


_SUITES: dict[str, SuiteEvaluation] = {}


def _suite(slot: SystemSlot, args: JudgeArgs) -> SuiteEvaluation:
    suite = _SUITES.get(args.config_digest)
    if suite is None:
        from oloproof.app.project import suite_from_stored

        if len(_SUITES) > 8:
            _SUITES.clear()
        # the run's own configuration, from its driver: its python checks import as oloproof.yaml's do
        suite = _SUITES[args.config_digest] = suite_from_stored(msgspec.json.decode(slot.factory.context),
                                                                root=slot.factory.root or None, trusted=True)
    return suite


def _judged(slot: SystemSlot, args: JudgeArgs, record: CaseRecord) -> JudgedCase:
    suite = _suite(slot, args)
    stream = f"{args.case.run_id}/{record.case_id}"
    view = fold_case(CODEC.decode_stream(stream, record.payloads), stream)
    result = suite.evaluate(view, replays=NO_REPLAYS, pair_source=None)
    rows = case_rows(args.case.run_id, view, result, suite.criteria, args.eval_key)
    evaluations = rows["evaluations"]
    return JudgedCase(record, list(rows["cases"][0]), evaluations[0][4] if evaluations else None,
                      list(result.verdicts), list(result.values), list(result.groups), list(result.paths),
                      result.cluster, result.fingerprint, result.claimed)


def judge_case(slot: SystemSlot, args: JudgeArgs, timeout: float | None) -> JudgedCase:
    """Record the case on ``slot`` (within ``timeout`` seconds), then judge it from its own
    encoded events with no replays and no pair source."""
    return _judged(slot, args, record_case(slot, args.case, timeout))


async def ajudge_case(slot: SystemSlot, args: JudgeArgs, timeout: float | None) -> JudgedCase:
    """:func:`judge_case` for an async system."""
    return _judged(slot, args, await arecord_case(slot, args.case, timeout))


def failed_judged(args: JudgeArgs, error: str, kind: str) -> JudgedCase:
    """The answer for a case that could not finish where it ran (``worker_died``,
    ``case_timeout``): its start and error, unjudged, so the driver judges it."""
    return JudgedCase(failed_case(args.case, error, kind))


JUDGE_JOB = JobKind("oloproof.app.jobs:JUDGE_JOB", JudgeArgs, JudgedCase, judge_case, ajudge_case, failed_judged)
