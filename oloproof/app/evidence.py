"""The one evaluation pipeline for stored cases: a case's events, its stored replays and its
metamorphic source, judged by :meth:`~oloproof.evaluate.engine.SuiteEvaluation.evaluate`.

``oloproof eval``, ``gate``, ``show``, ``view``, ``export`` and ``audit rebuild`` all judge
cases through :class:`RunEvidence`; a run judges them through the same ``evaluate`` with the
evidence it has just produced (:mod:`oloproof.app.run`). Nothing runs here: a replay that is
not stored leaves its case ``missing`` (``replay_not_run``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from oloproof.app.refs import resolve_ref, trials_of
from oloproof.app.runs import StoredRun, find_case_view, load_run
from oloproof.errors import CorruptLogError
from oloproof.evaluate.compare import Flips, RegressionEvidence, flips
from oloproof.evaluate.engine import Accumulator, CaseResult, SuiteEvaluation, Summary
from oloproof.events import CODEC
from oloproof.replay.cache import ReplayCache
from oloproof.store.base import CheckedStream, EventStore
from oloproof.views import NO_REPLAYS, CaseView, Replays, fold_case

if TYPE_CHECKING:
    from oloproof.app.audit import RunAudit
    from oloproof.app.judged import Keeper


class PairSources:
    """The source case of each derived case ``<source>~<transform>``, read from the log. The
    last source seen is kept: in suite order a source comes right before its derived cases."""

    def __init__(self, store: EventStore, run_id: str):
        self.store, self.run_id = store, run_id
        self._last: CaseView | None = None

    def seen(self, view: CaseView) -> None:
        """Note a case read in suite order; a source case is kept for the derived cases that
        follow it."""
        if not view.is_derived:
            self._last = view

    def source_of(self, view: CaseView) -> CaseView | None:
        """The source case of a derived case (the last one seen, else looked up in the log;
        None when it was not recorded), or None for a case that is not derived."""
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

    def __init__(self, store: EventStore, run: StoredRun, suite: SuiteEvaluation, sealed_only: bool = False,
                 *, warn: bool = True):
        self.store, self.run, self.suite = store, run, suite
        s = run.started
        only = None
        if sealed_only and run.sealed is not None:
            only = {"replay/" + key for key in run.sealed.replays}
        self.replays = ReplayCache(store, s.system_name, s.system_version, s.code_digest, only)
        self.pairs = PairSources(store, run.run_id)
        if warn:  # else the caller says it (evaluate_run: once the run's audit holds)
            say_check_changes(suite, run)

    def evidence(self, view: CaseView) -> tuple[Replays, CaseView | None]:
        """A case's stored fault replays (only when the suite judges faults) and its
        metamorphic source (only when the suite judges pairs). Cases must come in suite order."""
        self.pairs.seen(view)
        replays = self.replays.collect(view, self.suite.fault_specs) if self.suite.fault_specs else NO_REPLAYS
        source = self.pairs.source_of(view) if self.suite.needs_pairs else None
        return replays, source

    def judge(self, view: CaseView) -> CaseResult:
        """Judge one stored case with its evidence (:meth:`evidence`)."""
        replays, source = self.evidence(view)
        return self.suite.evaluate(view, replays=replays, pair_source=source)

    def with_evidence(self, view: CaseView) -> CaseView:
        """The case view with its evidence attached, for callers that judge or show it
        themselves (the case panel, ``attribute``)."""
        replays, source = self.evidence(view)
        return view.with_evidence(replays=replays, pair_source=source)


def say_check_changes(suite: SuiteEvaluation, run: StoredRun) -> None:
    """Say (a :class:`~oloproof.evaluate.python.CheckWarning`, one ``warning: …`` line in the
    CLI) which python checks of ``suite`` judge ``run`` with code that changed since it was
    recorded, or could not be imported (their cases are missing): once per run and check."""
    if not any(getattr(e, "type_name", "") == "python" for e in suite.evaluators):
        return
    import warnings

    from oloproof.evaluate.python import CheckWarning, changes

    for message in changes(suite.evaluators, run.run_id, run.started.config):
        # no registry: the check remembers what it said, and a second command in this
        # process (a test, a notebook) says it again
        warnings.warn_explicit(message, CheckWarning, __file__, 0, registry=None)


def accumulator(run: StoredRun, suite: SuiteEvaluation, keep_cases: bool) -> Accumulator:
    """An :class:`~oloproof.evaluate.engine.Accumulator` shaped by how the run was recorded:
    every case its own cluster, or, with transforms or trials, clusters of ``trials ×
    (1 + transforms)`` cases (and, with trials > 1, pass^k)."""
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
                 sealed_only: bool = False, regressions: bool = True, *, run: StoredRun | None = None) -> Summary:
    """Evaluate a stored run from its events and replay streams alone (nothing runs, and no
    derived table is read: a decision never rests on a cache it has not checked).

    The run is audited in the same read (:func:`~oloproof.app.audit.require_intact`): each
    case stream is judged as its chain is checked, and a run whose chains or seal do not hold
    is refused before anything is reported. A run that is not sealed has its unrecorded
    cases counted as missing, and its gate cannot pass (``run_incomplete``). ``no_regression``
    rules are judged against their baseline run (``regressions=False``: not at all, as when
    the run is itself read as a baseline). ``run``: the run's stream as the caller read it
    (:func:`~oloproof.app.runs.load_run`), else read here."""
    from oloproof.app.audit import require_intact

    if run is None:
        try:
            run = load_run(store, run_id)
        except CorruptLogError:
            require_intact(store, run_id)  # a run stream that does not read: refused as its audit says
            raise
    from oloproof.app.judged import cached_results, is_changed, judgement_key

    key = judgement_key(run, suite, sealed_only)
    cached = cached_results(store, run, key)
    audit = None
    if cached is not None:
        # the cache decides nothing on its own: the run is audited (chains and seal) first,
        # and the entry is the one made for the seal digest the audit holds the log to
        audit = require_intact(store, run_id)
        acc = accumulator(run, suite, keep_cases)
        try:
            for result in cached:
                acc.add(result)
        except Exception as e:
            if not is_changed(e):
                raise
            audit = None  # the cache changed under us: judge from the events
    if audit is None:
        audit, acc = _judge_in_one_read(store, run, suite, keep_cases, sealed_only, key)
    say_check_changes(suite, run)
    evidence_for_rules = {}
    if regressions and suite.regression_criteria:
        evidence_for_rules = regression_evidence(store, run, suite, acc.tracked_verdicts)
    from oloproof.app.runs import selection_text

    return acc.summary(expected=run.started.case_count, complete=audit.complete, regressions=evidence_for_rules,
                       partial=selection_text(run.started.selection))


def _judge_in_one_read(store: EventStore, run: StoredRun, suite: SuiteEvaluation, keep_cases: bool,
                       sealed_only: bool, key: str | None) -> tuple[RunAudit, Accumulator]:
    """Audit ``run`` and judge each of its case streams as the audit reads it: the audit and
    the accumulated results (also kept in the judgement cache under ``key`` once the audit
    holds). A large run is judged in a forked process while this one reads and audits
    (:mod:`oloproof.app.forked`)."""
    from oloproof.app import forked
    from oloproof.app.judged import Keeper

    if forked.usable(store, run, suite):
        try:
            return _judge_forked(store, run, suite, keep_cases, sealed_only, Keeper.start(store, run, key))
        except (forked.Unencodable, forked.Lost):
            pass  # a result the child could not send, or the child killed: judged here instead
    return _judge_here(store, run, suite, keep_cases, sealed_only, Keeper.start(store, run, key))


def _judge_here(store: EventStore, run: StoredRun, suite: SuiteEvaluation, keep_cases: bool, sealed_only: bool,
                keeper: Keeper | None) -> tuple[RunAudit, Accumulator]:
    from oloproof.app.audit import require_intact

    acc = accumulator(run, suite, keep_cases)
    evidence = RunEvidence(store, run, suite, sealed_only, warn=False)
    failed: list[Exception] = []

    def judge(stream: CheckedStream) -> None:
        if failed:
            return
        try:
            result = evidence.judge(fold_case(CODEC.decode_stream(stream.stream, stream.payloads), stream.stream))
            acc.add(result)
        except Exception as e:  # noqa: BLE001 - raised once the audit holds (a broken run is refused first)
            failed.append(e)
            return
        if keeper is not None:
            keeper.add(result)

    with _kept(keeper):
        audit = require_intact(store, run.run_id, visit=judge)
        if failed:
            raise failed[0]
    return audit, acc


def _judge_forked(store: EventStore, run: StoredRun, suite: SuiteEvaluation, keep_cases: bool, sealed_only: bool,
                  keeper: Keeper | None) -> tuple[RunAudit, Accumulator]:
    from oloproof.app.audit import require_intact
    from oloproof.app.forked import ForkedJudge

    acc = accumulator(run, suite, keep_cases)

    def take(body: bytes, results: list[CaseResult]) -> None:  # in the thread that reads the child's results
        for result in results:
            acc.add(result)
        if keeper is not None:
            keeper.add_part(body, len(results))

    def judge_with(child_store: EventStore) -> Callable[[CaseView], CaseResult]:  # in the forked child
        return RunEvidence(child_store, run, suite, sealed_only, warn=False).judge

    with _kept(keeper):
        judge = ForkedJudge(store, judge_with, take)
        try:
            audit = require_intact(store, run.run_id, visit=judge.send)
        except BaseException:
            judge.abort()
            raise
        judge.finish()
    return audit, acc


@contextlib.contextmanager
def _kept(keeper: Keeper | None) -> Iterator[None]:
    """The results ``keeper`` took are kept once the block ends, dropped if it raises."""
    try:
        yield
    except BaseException:
        if keeper is not None:
            keeper.abort()
        raise
    if keeper is not None:
        keeper.keep()


# ---- the gate's evidence: a no_regression rule against its baseline ------------------------

def regression_evidence(store: EventStore, run: StoredRun, suite: SuiteEvaluation,
                        tracked: Callable[[str], dict[str, tuple[str, str]]]) -> dict[str, RegressionEvidence | None]:
    """For each ``no_regression`` rule of ``suite``: its criterion's flips between ``run`` and
    its baseline (None: no baseline). ``tracked(criterion)`` gives the run's own verdicts."""
    out: dict[str, RegressionEvidence | None] = {}
    if suite.release is None:
        return out
    s = run.started
    judged: dict[str, tuple[StoredRun, dict[str, CaseResult], SuiteEvaluation]] = {}
    for rule in suite.release.rules:
        if rule.no_regression is None:
            continue
        base_id = resolve_ref(store, rule.no_regression.baseline, system=s.system_name,
                              before=(s.started_at, s.run_id), not_run=s.run_id)
        if base_id is None:
            # a version of another system is no baseline either: say so rather than "none"
            other = resolve_ref(store, rule.no_regression.baseline, before=(s.started_at, s.run_id),
                                not_run=s.run_id)
            if other is not None and other != s.run_id:
                base_id = other
        if base_id is None or base_id == s.run_id:
            out[rule.name] = None
            continue
        base_started = load_run(store, base_id).started
        if base_started.selection:
            out[rule.name] = RegressionEvidence(
                base_id, Flips(), False, "it is a partial run (some of the suite's cases, chosen with "
                "--case/-k/--limit/--last-failed): no baseline", "baseline_partial")
            continue
        if base_started.system_name != s.system_name:
            out[rule.name] = RegressionEvidence(
                base_id, Flips(), False, f"it is a run of system {base_started.system_name!r}, this run of "
                f"{s.system_name!r}: another system's cases are other questions", "other_system")
            continue
        if base_id not in judged:
            try:
                base_run, base_suite, summary = judged_run(store, base_id)
            except CorruptLogError as e:  # a baseline that fails its audit decides nothing
                out[rule.name] = RegressionEvidence(base_id, Flips(), False, str(e))
                continue
            judged[base_id] = (base_run, {c.case_id: c for c in summary.cases}, base_suite)
        base_run, base_cases, base_suite = judged[base_id]
        if trials_of(base_run) != trials_of(run):
            out[rule.name] = RegressionEvidence(
                base_id, Flips(), False, f"it ran {trials_of(base_run)} trial(s) a case, this run "
                f"{trials_of(run)}: its cases cannot be paired trial by trial", "baseline_not_comparable")
            continue
        if rule.criterion not in base_suite.criteria:
            out[rule.name] = None  # the baseline never judged this criterion
            continue
        i = base_suite.criteria.index(rule.criterion)
        base = {c.case_id: (c.fingerprint, c.verdicts[i][0]) for c in base_cases.values()}
        candidate = tracked(rule.criterion)
        # the cases the criterion asks about: excluded ones (the question does not apply) are
        # no part of it; cases the run has not recorded (yet) are
        applicable = sum(1 for _, verdict in candidate.values() if verdict != "excluded")
        out[rule.name] = RegressionEvidence(base_id, flips(base, candidate), base_run.sealed is not None,
                                            candidate_cases=applicable + max(0, s.case_count - len(candidate)))
    return out


def judged_run(store: EventStore, run_id: str) -> tuple[StoredRun, SuiteEvaluation, Summary]:
    """A run judged under the rules it ran with, every case kept (its own audit first)."""
    from oloproof.app.project import suite_from_stored

    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    # a baseline's own no_regression rules are not judged here: only its verdicts are read
    return run, suite, evaluate_run(store, run_id, suite, keep_cases=True, sealed_only=True, regressions=False,
                                    run=run)
