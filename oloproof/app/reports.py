"""What the reports show, read from the log: a run's summary, a case panel (the case with its
replays and metamorphic pairs), the HTML bundle's data and the JSONL export. Every case is
judged through :class:`~oloproof.app.evidence.RunEvidence`; the report layer only renders."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from oloproof.app.evidence import RunEvidence, evaluate_run
from oloproof.app.project import suite_from_stored
from oloproof.app.runs import (
    StoredRun,
    case_view,
    find_case_view,
    iter_case_views,
    load_run,
)
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary
from oloproof.events import ReplayStarted
from oloproof.replay.cache import replays_of_case
from oloproof.replay.engine import PREFIX
from oloproof.store.base import EventStore
from oloproof.store.log import EventLog
from oloproof.views import CaseView, ReplayView, fold_replay


@dataclass
class Pair:
    """A metamorphic pair as the case panel shows it: the transform, both cases and the
    verdicts of that transform's relation criteria."""

    transform: Any  # TransformConfig
    source: CaseView
    derived: CaseView
    verdicts: dict[str, tuple[str, str | None]]  # the relation criteria, judged on the derived case


@dataclass
class RunReport:
    """A stored run, the suite it ran with (rebuilt from its events) and its summary."""

    run: StoredRun
    suite: SuiteEvaluation
    summary: Summary


def run_report(store: EventStore, run_id: str, *, keep_cases: bool = False) -> RunReport:
    """A stored run judged under the rules it ran with."""
    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    # the rules it ran with, on the evidence its seal covers: the decision it was sealed with
    summary = evaluate_run(store, run_id, suite, keep_cases=keep_cases, sealed_only=True, run=run)
    return RunReport(run, suite, summary)


def pairs_of(view: CaseView, evidence: RunEvidence) -> list[Pair]:
    """The metamorphic pairs ``view`` (judged with its evidence) belongs to."""
    suite = evidence.suite
    out = []
    source: CaseView | None
    derived: CaseView | None
    for t in suite.transforms:
        if view.case_id.endswith("~" + t.name):
            source, derived = view.pair_source, view
        elif not view.is_derived:
            found = find_case_view(evidence.store, evidence.run.run_id, f"{view.case_id}~{t.name}")
            source, derived = view, None if found is None else evidence.with_evidence(found)
        else:
            continue
        if source is None or derived is None:
            continue
        judged = suite.evaluate(derived, replays=derived.replays, pair_source=source)
        verdicts = {c: v for c, v in zip(suite.criteria, judged.verdicts) if suite.relation_transform(c) == t.name}
        out.append(Pair(t, source, derived, verdicts))
    return out


@dataclass
class CasePanel:
    """One case as ``show RUN CASE`` and the HTML view present it: the case with its
    evidence, its result and verdicts, every stored replay of it and its metamorphic pairs."""

    view: CaseView  # with its evidence
    result: CaseResult
    verdicts: dict[str, tuple[str, str | None]]
    replays: list[ReplayView]  # every stored replay of the case, any system version
    pairs: list[Pair]


def case_panel(store: EventStore, run: StoredRun, suite: SuiteEvaluation, case_id: str,
               replays: list[ReplayView] | None = None, evidence: RunEvidence | None = None) -> CasePanel:
    """The panel of stored case ``case_id``, judged with the evidence its run's seal covers.

    Args:
        replays: the case's stored replays when already gathered (:func:`case_panels` does);
            None reads them for this case.
        evidence: a :class:`RunEvidence` to reuse across cases; None makes one (sealed only).
    """
    evidence = evidence or RunEvidence(store, run, suite, sealed_only=True)
    return _panel(store, suite, evidence.with_evidence(case_view(store, run.run_id, case_id)), replays, evidence)


def _panel(store: EventStore, suite: SuiteEvaluation, view: CaseView, replays: list[ReplayView] | None,
           evidence: RunEvidence) -> CasePanel:
    result = suite.evaluate(view, replays=view.replays, pair_source=view.pair_source)
    if replays is None:
        replays = replays_of_case(store, view.fingerprint, view.case_id)
    return CasePanel(view, result, dict(zip(suite.criteria, result.verdicts)), replays, pairs_of(view, evidence))


def replay_streams_by_case(store: EventStore) -> dict[str, list[str]]:
    """The name of every stored replay stream, by case id and fingerprint (their first events
    only: a case's replays are read when its panel is made)."""
    by_case: dict[str, list[str]] = {}
    for stream, head in EventLog(store).heads(PREFIX):
        if isinstance(head, ReplayStarted):
            by_case.setdefault(head.case_id + "\x00" + head.fingerprint, []).append(stream)
    return by_case


def case_panels(store: EventStore, report: RunReport) -> Iterator[CasePanel]:
    """Every committed case's panel, in suite order (the trials of a case in turn: c/2 before
    c/10), one case read at a time: the case streams themselves, not the cases table (which may
    lag behind a run in progress), in the order the backend sorts them by their first event."""
    run, suite = report.run, report.suite
    replays = replay_streams_by_case(store)
    evidence = RunEvidence(store, run, suite, sealed_only=True)
    log = EventLog(store)
    cut = len(run.run_id) + 1
    for stream in store.stream_names_ordered(run.run_id + "/", ("position", "trial")):
        view = evidence.with_evidence(case_view(store, run.run_id, stream[cut:]))
        names = replays.get(view.case_id + "\x00" + view.fingerprint, [])
        yield _panel(store, suite, view, [fold_replay(log.read(name), name) for name in names], evidence)


def judged_cases(store: EventStore, run_id: str) -> Iterator[tuple[CaseView, dict[str, tuple[str, str | None]]]]:
    """Every committed case of a run with its verdicts under the run's own rules, in suite order
    (a run that fails its audit is refused)."""
    from oloproof.app.audit import require_intact

    require_intact(store, run_id)
    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    evidence = RunEvidence(store, run, suite, sealed_only=True)
    for view in sorted(iter_case_views(store, run_id), key=lambda v: v.position):
        yield view, dict(zip(suite.criteria, evidence.judge(view).verdicts))


@dataclass
class CriterionCases:
    """The cases behind one criterion's row: those it failed and those it could not observe
    (``missing``: each could be a failure), in suite order, with their reasons."""

    run: StoredRun
    criterion: str
    failed: list[tuple[str, str | None]]
    missing: list[tuple[str, str | None]]
    row: Any  # the criterion's RateInterval


def criterion_cases(store: EventStore, run_id: str, criterion: str) -> CriterionCases:
    """Which cases failed (and which are missing for) ``criterion`` in a stored run, judged
    under the rules the run ran with. An unknown criterion is a usage error with a
    did-you-mean."""
    from oloproof.config.locate import did_you_mean
    from oloproof.errors import UsageError

    report = run_report(store, run_id, keep_cases=True)
    criteria = report.suite.criteria
    if criterion not in criteria:
        raise UsageError(f"run {run_id!r} has no criterion {criterion!r}{did_you_mean(criterion, criteria)} "
                         f"(criteria: {', '.join(criteria) or 'none'})")
    k = criteria.index(criterion)
    failed: list[tuple[str, str | None]] = []
    missing: list[tuple[str, str | None]] = []
    for result in report.summary.cases:
        verdict, reason = result.verdicts[k]
        if verdict == "fail":
            failed.append((result.case_id, reason))
        elif verdict == "missing":
            missing.append((result.case_id, reason))
    return CriterionCases(report.run, criterion, failed, missing, report.summary.criteria[criterion])
