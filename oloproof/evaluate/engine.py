"""A suite's evaluation: evaluators, metrics and slices built from config, applied to each
case, then aggregated into criteria rows, metric rows, slice rows and the gate.

Pure: no I/O. Every path that judges a case — a run, ``oloproof eval``, the gate, the case
panel, the report, the projection rebuild — goes through :meth:`SuiteEvaluation.evaluate`,
which takes the case's replays and its metamorphic source as required inputs, so a run and a
re-evaluation can never disagree and no caller can forget the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from oloproof.config.limits import split_trial
from oloproof.config.locate import Locator, did_you_mean, validate_model
from oloproof.config.models import ProjectConfig, ReleaseConfig
from oloproof.errors import ConfigError
from oloproof.evaluate.base import NOT_SELECTED_REASON, Evaluator, Verdict, excluded
from oloproof.evaluate.gate import GateResult, judge_gate, kind_rules
from oloproof.evaluate.metrics import QuantileMetric
from oloproof.evaluate.slices import Slice, SliceSpecError
from oloproof.records import AGENT_TRAJECTORY_V1
from oloproof.stats.intervals import ALPHA, RateInterval, rate_interval
from oloproof.stats.quantiles import QuantileInterval, quantile_interval
from oloproof.views import CaseView, Replays

#: a case an evaluator's ``when:`` does not select (SPEC §18.5)
NOT_SELECTED = excluded(NOT_SELECTED_REASON)


@dataclass(frozen=True)
class CaseResult:
    """One case's verdicts (aligned with ``SuiteEvaluation.criteria``), metric values and
    slice groups. Kept compact: a suite of 50,000 cases holds 50,000 of these."""

    case_id: str
    position: int
    verdicts: tuple[Verdict, ...]
    values: tuple[Any, ...]
    groups: tuple[str | None, ...]
    paths: tuple[Any, ...] = ()  # PathCheck of state evaluators, for the case panel
    cluster: str | None = None  # None: the case is its own cluster
    fingerprint: str = ""  # of the case's input, initial state and expected: pairs it across runs
    #: the agent declared success (terminal status); kept only when a release_class criterion
    #: is judged: with a FAIL_* class it is a response-only false pass
    claimed: bool = False
    #: which trial of the case (1…k under ``trials: k``; its id is then ``c/t``, its cluster
    #: the case ``c``); None for a single trial
    trial: int | None = None
    #: for each model judge criterion with labels (``SuiteEvaluation.labelled_judges``): the
    #: prompt digest of the judgement its verdict read ("" none), to tell a label of this
    #: output from a label of another
    judged: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetricRow:
    """One quantile metric's row: its ``quantile`` of the observed values in ``unit``, with the
    order-statistic interval in which missing cases sit at both extremes (SPEC §5.2)."""

    id: str
    quantile: float
    unit: str
    interval: QuantileInterval


@dataclass(frozen=True)
class SliceRow:
    """One criterion's rate within one slice group (``slice`` is e.g. ``first_tool=search``);
    ``low_support`` when fewer than ``min_slice_support`` cases were observed (SPEC §5.4).
    Slices never gate."""

    slice: str
    criterion: str
    interval: RateInterval
    low_support: bool


@dataclass(frozen=True)
class TransformCheck:
    """Whether people's validity labels vouch for a transform (SPEC §7.2)."""

    transform: str
    pairs: int
    labelled: int
    valid: int
    minimum_validity: float

    @property
    def checked(self) -> bool:
        """The labels cover every pair (there is at least one) and the share labelled valid is
        at least ``minimum_validity``; until then rules over the relation are
        INSUFFICIENT_EVIDENCE (``transform_not_checked``)."""
        return self.pairs > 0 and self.labelled == self.pairs and \
            self.valid / self.pairs >= self.minimum_validity


@dataclass
class Summary:
    """A run's evaluated result: a rate interval per criterion (missing cases in the
    denominator, SPEC §5.1), metric and slice rows, the gate's result when a release is
    configured, and the case results when they were kept."""

    criteria: dict[str, RateInterval]
    metrics: list[MetricRow]
    slices: list[SliceRow]
    gate: GateResult | None
    cases: list[CaseResult] = field(default_factory=list)
    source_clusters: int = 0
    transforms: list[TransformCheck] = field(default_factory=list)
    #: with a ``release_class`` criterion: trials per class (``missing`` for the undecided) and
    #: the trials whose agent claimed success while the environment says FAIL_*
    release_classes: dict[str, int] | None = None
    response_only_false_passes: int | None = None
    #: False for a run that is not sealed: its unrecorded cases are in every row as missing
    complete: bool = True
    cases_committed: int = 0
    cases_expected: int = 0
    #: trials per case (``trials: k``); with k > 1, each criterion's pass^k (a
    #: :class:`~oloproof.stats.passk.PassHatK`) by criterion name
    trials: int = 1
    pass_hat_k: dict[str, Any] = field(default_factory=dict)
    #: model judge criteria: criterion -> its :class:`~oloproof.evaluate.judge.JudgeCalibration`
    judges: dict[str, Any] = field(default_factory=dict)
    #: the suite's ``kind`` (``regression``, ``capability``; None: not declared), which the
    #: reports name beside the gate
    kind: str | None = None


class SuiteEvaluation:
    """A suite's evaluators, metrics, slices and release, built once from config
    (:func:`build_suite`): judges cases one by one and knows which evidence (fault replays,
    metamorphic pairs, baseline verdicts) they need."""

    def __init__(self, evaluators: list[Evaluator], metrics: list[QuantileMetric],
                 slices: list[Slice], min_slice_support: int, release: ReleaseConfig | None):
        self.evaluators = evaluators
        self.metrics = metrics
        self.slices = slices
        self.min_slice_support = min_slice_support
        self.release = release
        #: ``oloproof.yaml``'s ``kind`` (set by :func:`build_suite`, with its default rules)
        self.kind: str | None = None
        #: the configuration the suite was built from, as a run stores it (``RunStarted.config``:
        #: its labels and checks included), when the app layer built it from one; None
        #: otherwise. What a cached judgement of the suite is keyed by.
        self.definition: dict[str, Any] | None = None
        self.criteria = [e.criterion for e in evaluators]
        self.transforms: list[Any] = []  # TransformConfig
        self.labels: dict[str, dict[str, bool]] = {}
        self._relations = {e.criterion: e.transform for e in evaluators if e.transform is not None}
        from oloproof.replay.plan import FaultSpec  # pure: no I/O

        #: (tool, fault) of every fault_recovery evaluator: the replays a case needs
        self.fault_specs = [FaultSpec(*e.replay_spec) for e in evaluators if e.replay_spec is not None]
        #: the criterion of the release_class evaluator, if any (its verdict reason is the class)
        self.release_criterion = next((e.criterion for e in evaluators
                                       if getattr(e, "type_name", "") == "release_class"),
                                      None)
        #: (index, evaluator) of every model judge (``model_judge``): judged after the others,
        #: reading their verdicts for ``after:``; the runner asks the judge first
        self.judges: list[tuple[int, Any]] = [(i, e) for i, e in enumerate(evaluators)
                                               if getattr(e, "judge_spec", None) is not None]
        self._after = {i: [(c, self.criteria.index(c)) for c in e.after if c in self.criteria]
                       for i, e in self.judges}
        #: the model judges with labels (calibration): their prompt digests are kept per case
        self.labelled_judges: list[tuple[int, Any]] = []
        #: the criteria of ``no_regression`` rules, compared case by case with a baseline run
        self.regression_criteria = list(dict.fromkeys(
            r.criterion for r in (release.rules if release else []) if r.no_regression is not None))

    def set_metamorphic(self, transforms: list[Any], labels: dict[str, dict[str, bool]]) -> None:
        """Attach the metamorphic transforms and their validity labels (transform name ->
        case id -> valid), handing each relation evaluator its own transform's labels."""
        self.transforms = list(transforms)
        self.labels = labels
        for e in self.evaluators:
            if e.transform is not None:
                e.labels = labels.get(e.transform, {})

    def set_judge_labels(self, labels: dict[str, dict[str, tuple[str, str | None]]]) -> None:
        """Hand each model judge its people's labels (criterion -> case id -> (label, prompt
        digest or None)), for its calibration (:mod:`oloproof.evaluate.judge`)."""
        for _, e in self.judges:
            e.set_labels(labels.get(e.criterion, {}))
        self.labelled_judges = [(i, e) for i, e in self.judges if e.config.calibration is not None]

    def pending_judgements(self, case: CaseView, *, replays: Replays, pair_source: CaseView | None) -> list[Any]:
        """The questions (:class:`~oloproof.evaluate.judge.JudgeRequest`) the suite's model
        judges must be asked about ``case`` before it can be judged: each judge whose case is
        selected, passed its ``after:`` criteria and has no judgement yet."""
        if not self.judges:
            return []
        case = case.with_evidence(replays=replays, pair_source=pair_source)
        prior = self._prior(case)
        out = []
        for i, e in self.judges:
            if e.when is not None and not e.when.selects(split_trial(case.case_id)[0], split_trial(case.cluster)[0],
                                                         case.tags, case.metadata):
                continue
            if e.pending(case, prior.get(i, {})):
                out.append(e.request(case))
        return out

    def _prior(self, case: CaseView) -> dict[int, dict[str, Verdict]]:
        """For each model judge, the verdicts of its ``after:`` criteria on ``case``."""
        needed = {j for pairs in self._after.values() for _, j in pairs}
        verdicts = {j: self._one(self.evaluators[j], case) for j in needed}
        return {i: {c: verdicts[j] for c, j in pairs} for i, pairs in self._after.items()}

    @staticmethod
    def _one(e: Evaluator, case: CaseView) -> Verdict:
        if e.when is not None and not e.when.selects(split_trial(case.case_id)[0], split_trial(case.cluster)[0],
                                                     case.tags, case.metadata):
            return NOT_SELECTED
        return e.evaluate_paths(case)[0] if e.has_paths else e.evaluate(case)  # type: ignore[attr-defined]

    def relation_transform(self, criterion: str) -> str | None:
        """The transform a metamorphic criterion is about, or None."""
        return self._relations.get(criterion)

    @property
    def needs_pairs(self) -> bool:
        """Some evaluator judges metamorphic pairs (a derived case needs its source)."""
        return bool(self._relations)

    def evaluate(self, case: CaseView, *, replays: Replays, pair_source: CaseView | None) -> CaseResult:
        """Judge one case with its evidence: ``replays`` ((tool, fault) -> FaultReplays, as
        :func:`oloproof.replay.plan.collect` gives them; empty when the suite faults nothing)
        and ``pair_source`` (the source case of a derived case, else ``None``)."""
        case = case.with_evidence(replays=replays, pair_source=pair_source)
        paths: list[Any] = []
        verdicts: list[Any] = []
        selection: tuple[str, str] | None = None
        judges = self._after
        for i, e in enumerate(self.evaluators):
            if e.when is not None:
                if selection is None:
                    selection = split_trial(case.case_id)[0], split_trial(case.cluster)[0]
                if not e.when.selects(selection[0], selection[1], case.tags, case.metadata):
                    verdicts.append(NOT_SELECTED)
                    continue
            if i in judges:  # a model judge reads the others' verdicts (after:): judged below
                verdicts.append(None)
                continue
            if e.has_paths:
                verdict, checks = e.evaluate_paths(case)  # type: ignore[attr-defined]
                paths.extend(checks)
            else:
                verdict = e.evaluate(case)
            verdicts.append(verdict)
        for i, e in self.judges:
            if verdicts[i] is None:
                verdicts[i] = e.evaluate_after(case, {c: verdicts[j] for c, j in judges[i]})
        cluster = case.cluster
        trial = case.started.trial if case.started is not None else None
        if trial is not None:  # the trials of a case (and of its derived cases) are one cluster
            cluster = split_trial(cluster)[0]
        metrics, slices, labelled = self.metrics, self.slices, self.labelled_judges
        return CaseResult(
            case.case_id,
            case.position,
            tuple(verdicts),
            tuple([m.value(case) for m in metrics]) if metrics else (),
            tuple([s.group(case) for s in slices]) if slices else (),
            tuple(paths),
            None if cluster == case.case_id else cluster,
            case.fingerprint,
            self.release_criterion is not None and case.trajectory is not None
            and case.trajectory.terminal_status == "success",
            trial=trial,
            judged=tuple([e.prompt_digest_of(case) for _, e in labelled]) if labelled else (),
        )

    def summarize(self, results: Iterable[CaseResult]) -> Summary:
        """Aggregate results held in memory (every case kept for the report)."""
        ordered = sorted(results, key=_order)
        # clusters with more than one case: a source and its derived cases (and the trials of
        # a case). Every other case is its own cluster and only counted.
        multi = {r.cluster for r in ordered if r.cluster is not None}
        acc = Accumulator(self, keep_cases=True, multi=multi, trials=max([r.trial or 1 for r in ordered] + [1]))
        for r in ordered:
            acc.add(r)
        return acc.summary()


_KIND = {"pass": 0, "fail": 1, "missing": 2, "excluded": 3}


def _order(r: CaseResult) -> tuple[int, int]:
    """Suite order: by position, the trials of a case in turn."""
    return r.position, r.trial or 0


class Accumulator:
    """Aggregates case results one at a time into criteria, metric and slice rows and the
    gate, so a run need not hold its cases: with ``keep_cases=False`` memory does not grow
    with the suite beyond the numbers quantiles need.

    ``multi``: the clusters that hold several cases, or ``None`` to track every case's cluster
    (a suite with transforms, where any source may have derived cases, or trials).

    ``trials``: trials per case (``trials: k``). With k > 1 every criterion also gets its
    pass^k (:mod:`oloproof.stats.passk`): a case's trials are counted together until its k-th
    arrives, then only their (passed, observed, missing) counts are kept, as one count per
    distinct triple — memory stays flat.
    """

    def __init__(self, suite: SuiteEvaluation, *, keep_cases: bool = True, multi: set[str] | None = None,
                 cluster_size: int | None = None, trials: int = 1):
        self.suite = suite
        self.trials = trials
        #: pass^k: case id -> [trials seen, [passed, observed, missing] per criterion] until
        #: the case's k trials are in; then, per criterion, (passed, observed, missing) -> cases
        self._units: dict[str, list[Any]] = {}
        self._passk: list[dict[tuple[int, int, int], int]] = [{} for _ in suite.criteria]
        #: with transforms, a source and its derived cases are one cluster: per cluster and
        #: criterion, [cases passing every trial, cases fully observed, cases with a missing
        #: trial], for pass^k's cluster-aware interval (one entry per source cluster)
        self._passk_clusters: dict[str, list[list[int]]] | None = {} if suite.transforms else None
        #: cases in a complete cluster (a source and one derived case per transform), when
        #: known: a complete cluster is folded into sums, so memory stays flat
        self.cluster_size = cluster_size
        self._seen: dict[str, int] = {}
        self._flat: dict[tuple, int] = {}
        n_crit = len(suite.criteria)
        self.multi = multi
        self.crit = [_Tally() for _ in range(n_crit)]
        self.slice_tallies: dict[tuple[int, str], list[_Tally]] = {}
        # one count per distinct value: flat in the number of cases
        self.values: list[dict[float, int]] = [{} for _ in suite.metrics]
        self.value_missing = [[0, 0] for _ in suite.metrics]
        self.sources = 0
        self.cases: list[CaseResult] | None = [] if keep_cases else None
        self.pairs = {t.name: [0, 0, 0] for t in suite.transforms}  # pairs, labelled, valid
        self.count = 0
        #: the criteria ``no_regression`` rules compare with a baseline: each case's verdict on
        #: them is kept (case id -> (fingerprint, verdicts)), a few bytes a case
        self.tracked_criteria = suite.regression_criteria
        self._track = [suite.criteria.index(c) for c in self.tracked_criteria]
        self.tracked: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._release = suite.criteria.index(suite.release_criterion) if suite.release_criterion else None
        self.release_classes: dict[str, int] = {}
        self.false_passes = 0
        from oloproof.evaluate.judge import LabelTally

        #: model judges with labels: (criterion index, evaluator, its verdicts on labelled cases)
        self._label_tallies = [(i, e, LabelTally()) for i, e in suite.labelled_judges]

    def add(self, r: CaseResult) -> None:
        """Fold one case result (one trial) into the tallies: criteria and slice counts (per
        cluster while a multi-case cluster is incomplete), metric values, release classes,
        metamorphic pair labels, baseline-tracked verdicts and pass^k trials."""
        self.count += 1
        if self._track:
            self.tracked[r.case_id] = (r.fingerprint, tuple(r.verdicts[i][0] for i in self._track))
        if self._release is not None:
            kind, reason = r.verdicts[self._release]
            label = reason if kind in ("pass", "fail") and reason else kind
            self.release_classes[label] = self.release_classes.get(label, 0) + 1
            if kind == "fail" and r.claimed:
                self.false_passes += 1
        if r.cluster is None or (r.trial == 1 and split_trial(r.case_id) == (r.cluster, 1)):
            self.sources += 1  # a source case (its first trial)
        cluster = r.cluster or r.case_id
        key = cluster if (self.multi is None or cluster in self.multi) else None
        kinds = tuple([_KIND[v[0]] for v in r.verdicts])
        if key is None:
            # a case that is its own cluster only adds to counts: one count per distinct
            # (slice groups, verdicts), spread over the rows when the summary is made
            flat = (r.groups, kinds)
            self._flat[flat] = self._flat.get(flat, 0) + 1
        else:
            self._tally(key, r.groups, kinds)
        for k, v in enumerate(r.values):
            if isinstance(v, tuple):
                self.value_missing[k][0 if v[0] == "missing" else 1] += 1
            else:
                counts = self.values[k]
                counts[v] = counts.get(v, 0) + 1
        if "~" in r.case_id and (r.trial or 1) == 1:  # a pair is counted once, whatever its trials
            name = r.case_id.rsplit("~", 1)[1]
            if name in self.pairs:
                pair_counts = self.pairs[name]
                pair_counts[0] += 1
                valid = self.suite.labels.get(name, {}).get(split_trial(r.case_id)[0])
                if valid is not None:
                    pair_counts[1] += 1
                    pair_counts[2] += valid
        for k, (i, e, labelled) in enumerate(self._label_tallies):
            label = e.judge_labels.get(r.case_id)
            if label is not None:
                got = r.judged[k] if k < len(r.judged) else ""
                labelled.add(label[0], r.verdicts[i][0], label[1] is None or not got or label[1] == got)
        if self.cases is not None:
            self.cases.append(r)
        if self.trials > 1 and r.trial is not None:
            self._trial(split_trial(r.case_id)[0], kinds)
        if key is not None and self.cluster_size:
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen >= self.cluster_size:
                del self._seen[key]
                for tally in self.crit:
                    tally.close(key)
                for per in self.slice_tallies.values():
                    for tally in per:
                        tally.close(key)

    def _trial(self, unit: str, kinds: tuple) -> None:
        """Count one trial of case ``unit`` for pass^k."""
        entry = self._units.get(unit)
        if entry is None:
            entry = self._units[unit] = [0, [[0, 0, 0] for _ in kinds]]
        entry[0] += 1
        for c, t in zip(entry[1], kinds):
            if t == 0:
                c[0] += 1
                c[1] += 1
            elif t == 1:
                c[1] += 1
            elif t == 2:
                c[2] += 1
        if entry[0] >= self.trials:
            self._fold_unit(self._units.pop(unit)[1], unit=unit)

    def _fold_unit(self, counts: list[list[int]], times: int = 1, unit: str | None = None) -> None:
        for per, c in zip(self._passk, counts):
            triple = (c[0], c[1], c[2])
            per[triple] = per.get(triple, 0) + times
        if self._passk_clusters is not None and unit is not None:
            sums = self._passk_clusters.setdefault(unit.split("~", 1)[0], [[0, 0, 0] for _ in counts])
            for s, (p, o, m) in zip(sums, counts):
                if m:
                    s[2] += 1
                else:
                    s[1] += 1
                    s[0] += p == o and o >= self.trials

    def _pass_hat_k(self, unrecorded: int) -> dict[str, Any]:
        """Each criterion's pass^k. A case whose trials are not all in has the others
        missing; ``unrecorded`` trials not accounted for so are whole cases, all missing."""
        from oloproof.stats.passk import pass_hat_k_summary

        k = self.trials
        open_missing = 0
        for unit, (seen, counts) in self._units.items():
            open_missing += k - seen
            self._fold_unit([[c[0], c[1], c[2] + k - seen] for c in counts], unit=unit)
        self._units = {}
        whole = max(0, unrecorded - open_missing) // k
        if whole:
            self._fold_unit([[0, 0, k] for _ in self.suite.criteria], whole)
        out = {name: pass_hat_k_summary(self._passk[i], k) for i, name in enumerate(self.suite.criteria)}
        if self._passk_clusters:
            # a source and its derived cases are not independent: the interval is the
            # cluster-aware one of the rates (SPEC §5.3), over source clusters
            from dataclasses import replace

            from oloproof.stats.clusters import clustered_rate_interval

            for i, name in enumerate(self.suite.criteria):
                clusters = [(p, o, m) for p, o, m in (sums[i] for sums in self._passk_clusters.values()) if p or o or m]
                if clusters and out[name].low is not None:
                    row = clustered_rate_interval(clusters)
                    out[name] = replace(out[name], low=row.low, high=row.high, method=row.method)
        return out

    def _tally(self, key: str | None, groups: tuple, kinds: tuple, times: int = 1) -> None:
        for tally, t in zip(self.crit, kinds):
            tally.add(key, t, times)
        for j, group in enumerate(groups):
            if group is None:
                continue
            per = self.slice_tallies.get((j, group))
            if per is None:
                per = self.slice_tallies[(j, group)] = [_Tally() for _ in range(len(kinds))]
            for tally, t in zip(per, kinds):
                tally.add(key, t, times)

    def tracked_verdicts(self, criterion: str) -> dict[str, tuple[str, str]]:
        """case id -> (fingerprint, verdict) for a tracked criterion (see ``tracked``)."""
        i = self.tracked_criteria.index(criterion)
        return {case_id: (fp, verdicts[i]) for case_id, (fp, verdicts) in self.tracked.items()}

    def summary(self, *, expected: int | None = None, complete: bool = True,
                regressions: dict[str, Any] | None = None, partial: str | None = None) -> Summary:
        """The rows, the gate and the cases. ``expected``: the cases the suite held; those not
        recorded count as missing in every row (a run that crashed or is still running), and
        a run that is not ``complete`` cannot pass its gate. ``regressions``: for each
        ``no_regression`` rule, its evidence against its baseline (see ``GateContext``)."""
        flat, self._flat = self._flat, {}
        for (groups, kinds), times in flat.items():
            self._tally(None, groups, kinds, times)
        suite = self.suite
        committed = self.count
        unrecorded = max(0, (expected or 0) - committed)
        pass_hat_k = self._pass_hat_k(unrecorded) if self.trials > 1 else {}
        if unrecorded:
            self.count += unrecorded  # once: a second summary adds nothing more
            self._tally(None, (None,) * len(suite.slices), (_KIND["missing"],) * len(suite.criteria), unrecorded)
            for k in range(len(suite.metrics)):
                self.value_missing[k][0] += unrecorded
        criteria = {name: self.crit[i].rate() for i, name in enumerate(suite.criteria)}
        metrics = [
            MetricRow(m.id, m.q, m.unit, quantile_interval(self.values[k], self.value_missing[k][0],
                                                           self.value_missing[k][1], m.q))
            for k, m in enumerate(suite.metrics)
        ]
        slice_rows = []
        for j, spec in enumerate(suite.slices):
            labels = sorted({g for (jj, g) in self.slice_tallies if jj == j}, key=spec.order)
            for label in labels:
                for i, name in enumerate(suite.criteria):
                    row = self.slice_tallies[(j, label)][i].rate()
                    if row.observed + row.missing == 0:
                        continue
                    slice_rows.append(SliceRow(label, name, row, row.observed < suite.min_slice_support))
        checks = []
        for t in suite.transforms:
            pairs, labelled, valid = self.pairs[t.name]
            checks.append(TransformCheck(t.name, pairs, labelled, valid, t.minimum_validity))
        judges = self._calibrations(criteria)
        gate = None
        if suite.release is not None:
            from oloproof.evaluate.gate import GateContext

            unchecked = {t.transform for t in checks if not t.checked}
            context = GateContext(
                source_clusters=self.sources,
                unchecked={c for c in suite.criteria if suite.relation_transform(c) in unchecked},
                paired={c for c in suite.criteria if suite.relation_transform(c) is not None},
                incomplete=None if complete else (committed, max(committed, expected or 0)),
                regressions=dict(regressions or {}),
                pass_hat_k=pass_hat_k,
                partial=partial,
                uncalibrated={name: j.problem for name, j in judges.items() if not j.calibrated},
                corrected={name: j.corrected for name, j in judges.items() if j.corrected is not None},
            )
            gate = judge_gate(suite.release, criteria, context)
        cases = sorted(self.cases, key=_order) if self.cases is not None else []
        release = self._release is not None
        return Summary(criteria, metrics, slice_rows, gate, cases, self.sources, checks,
                       dict(self.release_classes) if release else None, self.false_passes if release else None,
                       complete, committed, max(committed, expected or committed),
                       trials=self.trials, pass_hat_k=pass_hat_k, kind=suite.kind, judges=judges)

    def _calibrations(self, criteria: dict[str, RateInterval]) -> dict[str, Any]:
        """Each model judge criterion's calibration against its labels (with the corrected rate
        when calibrated), from the labelled cases added so far."""
        if not self.suite.judges:
            return {}
        from oloproof.evaluate.judge import LabelTally, calibrate
        from oloproof.stats.correction import PARTS

        tallies = {e.criterion: tally for _, e, tally in self._label_tallies}
        index = {name: i for i, name in enumerate(self.suite.criteria)}
        # the apparent rate's bounds at the level the correction combines, with the cases'
        # clusters as the criterion's own interval has them (the trials of a case are one)
        return {e.criterion: calibrate(e.criterion, tallies.get(e.criterion, LabelTally()), len(e.judge_labels),
                                       criteria[e.criterion], min_labels=e.min_labels,
                                       min_agreement=e.min_agreement,
                                       apparent=self.crit[index[e.criterion]].rate(ALPHA / PARTS))
                for _, e in self.suite.judges}


class _Tally:
    """Verdict counts of one row: singleton cases only counted; the cases of a multi-case
    cluster kept per cluster until the cluster is complete, then folded into sums."""

    __slots__ = ("single", "open", "sums", "excluded", "grouped")

    def __init__(self) -> None:
        self.single = [0, 0, 0]  # passed, observed, missing
        self.open: dict[str, list[int]] = {}
        self.sums: Any = None  # ClusterSums of the clusters closed so far
        self.excluded = 0
        self.grouped = False  # some cluster has more than one counted case

    def add(self, cluster: str | None, t: int, times: int = 1) -> None:
        if t == 3:
            self.excluded += times
            return
        if cluster is None:
            c = self.single
        else:
            found = self.open.get(cluster)
            if found is None:
                found = self.open[cluster] = [0, 0, 0]
            c = found
        if t == 0:
            c[0] += times
            c[1] += times
        elif t == 1:
            c[1] += times
        else:
            c[2] += times

    def close(self, cluster: str) -> None:
        """Every case of ``cluster`` is in: fold it into the sums and forget it."""
        c = self.open.pop(cluster, None)
        if c is None:
            return
        if c[1] + c[2] > 1:
            self.grouped = True
        if self.sums is None:
            from oloproof.stats.clusters import ClusterSums

            self.sums = ClusterSums()
        self.sums.add(*c)

    def rate(self, alpha: float = ALPHA) -> RateInterval:
        """Exact when every cluster holds at most one counted case; cluster-aware otherwise
        (``alpha``: one minus the interval's level)."""
        from oloproof.stats.clusters import ClusterSums, sums_interval

        sums = ClusterSums()
        if self.sums is not None:
            for name in ClusterSums.__slots__:
                value = getattr(self.sums, name)
                setattr(sums, name, list(value) if isinstance(value, list) else value)
        for c in self.open.values():
            sums.add(*c)
        grouped = self.grouped or any(c[1] + c[2] > 1 for c in self.open.values())
        p, o, m = self.single
        if grouped:
            sums.add(1, 1, 0, times=p)
            sums.add(0, 1, 0, times=o - p)
            sums.add(0, 0, 1, times=m)
            return sums_interval(sums, self.excluded, alpha)
        return rate_interval(p + sums.passed, o + sums.observed, m + sums.missing, self.excluded, alpha)


def build_suite(config: ProjectConfig, locator: Locator, release: ReleaseConfig | None = None,
                release_locator: Locator | None = None) -> SuiteEvaluation:
    """Build evaluators, metrics and slices from validated config; errors are located."""
    from oloproof.evaluate.registry import registry

    families = registry()
    records = set(config.system.records)
    evaluators: list[Evaluator] = []
    where_criterion: dict[str, int] = {}
    for i, raw in enumerate(config.evaluators):
        path = ("evaluators", i)
        type_name = cast(str, raw.get("type"))  # a non-empty str: models._evaluator_entry checked it
        cls = families.get(type_name)
        if cls is None:
            from oloproof.evaluate.base import load_entry_points

            load_entry_points()
            cls = families.get(type_name)
        if cls is None:
            raise ConfigError(
                f"{locator.where(path + ('type',))}: evaluators[{i}].type: unknown evaluator "
                f"type {type_name!r}{did_you_mean(type_name, families)} "
                f"(known: {', '.join(sorted(families))})"
            )
        cfg = validate_model(cls.config_model, raw, locator.where, prefix=path)
        ev = cls(cfg)
        missing_records = [r for r in ev.requires if r not in records]
        if missing_records:
            raise ConfigError(
                f"{locator.where(path)}: evaluators[{i}] ({type_name}) needs the system to record "
                f"{', '.join(missing_records)}; add it to system.records (records: "
                f"[{', '.join(sorted(records | set(missing_records)))}]) and to @system(records=...)"
            )
        if ev.criterion in where_criterion:
            raise ConfigError(
                f"{locator.where(path)}: evaluators[{i}]: criterion {ev.criterion!r} is already "
                f"produced by evaluators[{where_criterion[ev.criterion]}]; set a distinct "
                "'criterion:'"
            )
        where_criterion[ev.criterion] = i
        evaluators.append(ev)
    metrics = []
    for k, m in enumerate(config.metrics):
        metric = QuantileMetric(m)
        if metric.needs_trajectory and AGENT_TRAJECTORY_V1 not in records:
            raise ConfigError(
                f"{locator.where(('metrics', k, 'source'))}: metrics[{k}].source {m.source!r} needs "
                f"records: [{AGENT_TRAJECTORY_V1}] in system"
            )
        metrics.append(metric)
    slices = []
    for k, spec in enumerate(config.slices):
        try:
            sl = Slice.parse(spec)
        except SliceSpecError as e:
            raise ConfigError(f"{locator.where(('slices', k))}: slices[{k}]: {e}") from e
        if sl.needs_trajectory and AGENT_TRAJECTORY_V1 not in records:
            raise ConfigError(
                f"{locator.where(('slices', k))}: slice {spec!r} needs records: [{AGENT_TRAJECTORY_V1}]"
            )
        slices.append(sl)
    transforms = {t.name: t for t in (config.metamorphic.transforms if config.metamorphic else [])}
    for i, ev in enumerate(evaluators):
        name = ev.transform
        if name is not None and name not in transforms:
            raise ConfigError(
                f"{locator.where(('evaluators', i, 'transform'))}: evaluators[{i}].transform: no transform "
                f"named {name!r} under metamorphic.transforms{did_you_mean(name, transforms)}"
            )
        check = getattr(ev, "transform_problem", None)  # e.g. same_state over a state-writing transform
        problem = check(transforms[name]) if name is not None and check is not None else None
        if problem is not None:
            raise ConfigError(f"{locator.where(('evaluators', i))}: evaluators[{i}] ({ev.criterion}): {problem}")
    from oloproof.evaluate.judge import check_after

    check_after(evaluators, where_criterion, locator)
    if release is not None:
        rl = release_locator or Locator("release.yaml")
        for k, rule in enumerate(release.rules):
            if rule.criterion not in where_criterion:
                raise ConfigError(
                    f"{rl.where(('rules', k, 'criterion'))}: rules[{k}].criterion: no evaluator "
                    f"produces {rule.criterion!r}{did_you_mean(rule.criterion, where_criterion)} "
                    f"(criteria: {', '.join(where_criterion) or 'none'})"
                )
    # a regression suite's default rules are part of its release (the gate of a stored run
    # derives them again from the kind its configuration stored)
    release = kind_rules(config.kind, list(where_criterion), release)
    suite = SuiteEvaluation(evaluators, metrics, slices, config.min_slice_support, release)
    suite.kind = config.kind
    suite.set_metamorphic(list(transforms.values()), {})
    return suite
