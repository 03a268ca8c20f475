"""The one evaluation pipeline for stored cases: a case's events, its stored replays and its
metamorphic source, judged by :meth:`~oloproof.evaluate.engine.SuiteEvaluation.evaluate`.

``oloproof eval``, ``gate``, ``show``, ``view``, ``export`` and ``audit rebuild`` all judge
cases through :class:`RunEvidence`; a run judges them through the same ``evaluate`` with the
evidence it has just produced (:mod:`oloproof.app.run`). Nothing runs here: a replay that is
not stored leaves its case ``missing`` (``replay_not_run``).
"""

from __future__ import annotations

from oloproof.app.runs import StoredRun, find_case_view, iter_case_views, load_run
from oloproof.evaluate.engine import Accumulator, CaseResult, SuiteEvaluation, Summary
from oloproof.replay.cache import ReplayCache
from oloproof.store.base import EventStore
from oloproof.views import NO_REPLAYS, CaseView, Replays


class PairSources:
    """The source case of each derived case ``<source>~<transform>``, read from the log. The
    last source seen is kept: in suite order a source comes right before its derived cases."""

    def __init__(self, store: EventStore, run_id: str):
        self.store, self.run_id = store, run_id
        self._last: CaseView | None = None

    def seen(self, view: CaseView) -> None:
        if not view.is_derived:
            self._last = view

    def source_of(self, view: CaseView) -> CaseView | None:
        if not view.is_derived:
            return None
        source_id = view.cluster
        if self._last is not None and self._last.case_id == source_id:
            return self._last
        return find_case_view(self.store, self.run_id, source_id)


class RunEvidence:
    """Judges the stored cases of one run: each with its stored replays (keyed by the system
    version and code that recorded the run) and, for a derived case, its source case.

    ``sealed_only``: a sealed run is judged with the replays its seal covers and no others
    (a replay stored later cannot change a sealed decision); re-evaluating with another
    configuration (``oloproof eval``) may use any stored replay."""

    def __init__(self, store: EventStore, run: StoredRun, suite: SuiteEvaluation, sealed_only: bool = False):
        self.store, self.run, self.suite = store, run, suite
        s = run.started
        only = None
        if sealed_only and run.sealed is not None:
            only = {"replay/" + key for key in run.sealed.replays}
        self.replays = ReplayCache(store, s.system_name, s.system_version, s.code_digest, only)
        self.pairs = PairSources(store, run.run_id)

    def evidence(self, view: CaseView) -> tuple[Replays, CaseView | None]:
        self.pairs.seen(view)
        replays = self.replays.collect(view, self.suite.fault_specs) if self.suite.fault_specs else NO_REPLAYS
        source = self.pairs.source_of(view) if self.suite.needs_pairs else None
        return replays, source

    def judge(self, view: CaseView) -> CaseResult:
        replays, source = self.evidence(view)
        return self.suite.evaluate(view, replays=replays, pair_source=source)

    def with_evidence(self, view: CaseView) -> CaseView:
        replays, source = self.evidence(view)
        return view.with_evidence(replays=replays, pair_source=source)


def accumulator(run: StoredRun, suite: SuiteEvaluation, keep_cases: bool) -> Accumulator:
    # a run recorded with transforms (or trials) holds clusters, whatever the configuration
    # says now: the trials of a case, with its derived cases' trials, are one cluster
    metamorphic = run.started.config["oloproof"].get("metamorphic")
    trials = int(run.started.config["oloproof"].get("trials", 1))
    if not metamorphic and trials == 1:
        return Accumulator(suite, keep_cases=keep_cases, multi=set())
    transforms = len(metamorphic.get("transforms", [])) if metamorphic else 0
    return Accumulator(suite, keep_cases=keep_cases, multi=None, cluster_size=trials * (1 + transforms),
                       trials=trials)


def evaluate_run(store: EventStore, run_id: str, suite: SuiteEvaluation, keep_cases: bool = True,
                 sealed_only: bool = False, regressions: bool = True) -> Summary:
    """Evaluate a stored run from its events and replay streams alone (nothing runs, and no
    derived table is read: a decision never rests on a cache).

    The run is audited first (:func:`~oloproof.app.audit.require_intact`): a run whose
    chains or seal do not hold is refused. A run that is not sealed has its unrecorded cases
    counted as missing, and its gate cannot pass (``run_incomplete``). ``no_regression`` rules
    are judged against their baseline run (``regressions=False``: not at all, as when the run
    is itself read as a baseline)."""
    from oloproof.app.audit import require_intact

    audit = require_intact(store, run_id)
    run = load_run(store, run_id)
    acc = accumulator(run, suite, keep_cases)
    judge = RunEvidence(store, run, suite, sealed_only).judge
    for view in iter_case_views(store, run_id):
        acc.add(judge(view))
    evidence = {}
    if regressions and suite.regression_criteria:
        from oloproof.app.diff import regression_evidence

        evidence = regression_evidence(store, run, suite, acc.tracked_verdicts)
    from oloproof.app.runs import selection_text

    return acc.summary(expected=run.started.case_count, complete=audit.complete, regressions=evidence,
                       partial=selection_text(run.started.selection))


def rebuild_projections(store: EventStore) -> None:
    """Drop every projection row and derive them again from the events alone."""
    from oloproof.app.projections import RunProjector

    store.rebuild_projections(RunProjector(store))
    store.rebuild_search()
    if hasattr(store, "projections_stale"):
        store.projections_stale = False
