"""The release gate over criteria (SPEC §8). Pure: rules in, decisions out.

Rule kinds:

* ``max_failures`` — the observed count of failures. Missing cases could be failures, so
  when the failures observed are within the limit but failures + missing are not, the rule
  is ``INSUFFICIENT_EVIDENCE`` (``missing_cases``): missing is never counted as passed.
* ``min_lower_bound`` — the interval's low end (missing cases in the denominator).
* ``min_rate`` — the point rate over observed cases.
* ``min_pass_hat_k`` — the low end of the criterion's pass^k interval, in a run with
  ``trials: k`` > 1 (:mod:`oloproof.stats.passk`): every case must pass all k of its trials.
  The trials of a case are clustered data, so, like the interval rules on clustered cases, it
  needs ``allow_approximate_methods: true`` and at least 20 source clusters (cases); a run of
  one trial per case has no pass^k (``single_trial``).

A rule on a model judge's criterion (``model_judge``, SPEC §18.6) whose judge people's labels do
not (yet) vouch for — too few labels, or an agreement whose low end is below ``min_agreement`` —
is ``INSUFFICIENT_EVIDENCE`` (``judge_not_calibrated``), whatever its kind; on a calibrated one,
``min_lower_bound`` and ``min_rate`` read the judge-corrected interval and rate
(:mod:`oloproof.stats.correction`), ``max_failures`` and ``no_regression`` the judge's verdicts.

Before any of that: a rule over a metamorphic relation whose transform the validity labels do
not vouch for is ``INSUFFICIENT_EVIDENCE`` (``transform_not_checked``); a rule on the interval
or the rate of clustered cases needs ``allow_approximate_methods: true``
(``approximate_methods_not_allowed``) and at least 20 source clusters (``too_few_clusters``).
A *pair rule* — on the interval or the rate of a metamorphic relation criterion — is held to
the same cluster rule, with the same reasons, even though each pair gives one verdict: the
verdict reads both cases of a cluster (a source and its derived case), and the seeds ask for
``allow_approximate_methods: true`` and at least 20 source cases before a relation gates
(seeds/stateful-agents).

A *partial run* (``oloproof run --case/-k/--limit/--last-failed``: some of the suite's cases,
for iterating on them) never passes either: every rule is ``INSUFFICIENT_EVIDENCE``
(``partial_run``).

A run that is not sealed (crashed, killed, still running) never passes: its unrecorded cases
count as missing, and every rule that did not FAIL ends ``INSUFFICIENT_EVIDENCE``
(``run_incomplete``) — more cases could still fail it.

A suite's ``kind`` (``oloproof.yaml``) adds rules of its own (:func:`kind_rules`): in a
``regression`` suite every criterion that no release rule names gets the default rule
``max_failures: 0`` — named ``regression:<criterion>`` — since a regression suite is the record
of failures the agent may no longer repeat, and every FAIL is a repair request (seeds/
fault-injection-release-gate); a ``capability`` suite gets none (it reports; a gate on it is
labelled a capability gate by the reports).

A release with no rules decides nothing: its gate is ``INSUFFICIENT_EVIDENCE``, never a
vacuous PASS. The gate passes only when every rule passes; any FAIL makes it FAIL, otherwise any
INSUFFICIENT_EVIDENCE makes it INSUFFICIENT_EVIDENCE. Each rule's ``detail`` states the numbers
behind its status ("3 failures > 0 allowed", "lower bound 7.6 % < 90 %").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

from oloproof.config.models import ReleaseConfig, Rule
from oloproof.evaluate.compare import RegressionEvidence
from oloproof.stats.intervals import RateInterval
from oloproof.stats.paired import mcnemar_exact

MIN_CLUSTERS = 20


@dataclass(frozen=True)
class RuleResult:
    """One rule's decision: ``status`` PASS, FAIL or INSUFFICIENT_EVIDENCE, the ``reason``
    code of any status but PASS, and ``detail``, the numbers behind it in words."""

    name: str
    criterion: str
    kind: str
    threshold: float
    status: str
    reason: str | None
    detail: str | None = None  # the numbers behind the status, in words


@dataclass(frozen=True)
class GateResult:
    """The gate's decision over all its rules (module docstring: any FAIL fails it, else any
    INSUFFICIENT_EVIDENCE, and no rules at all is INSUFFICIENT_EVIDENCE) and each rule's result."""

    decision: str  # PASS | FAIL | INSUFFICIENT_EVIDENCE
    rules: list[RuleResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when the gate passes, 1 when it is blocked — FAIL or INSUFFICIENT_EVIDENCE alike
        (SPEC §8; 2, bad input, is the CLI's)."""
        return 0 if self.decision == "PASS" else 1


@dataclass(frozen=True)
class GateContext:
    """What a rule needs beyond its row: how many source clusters the suite has, and which
    relation criteria belong to a transform that labels do not (yet) vouch for."""

    source_clusters: int = 0
    unchecked: set[str] = field(default_factory=set)
    allow_approximate_methods: bool = False
    #: (cases recorded, cases in the suite) of a run that is not sealed; None: a finished run
    incomplete: tuple[int, int] | None = None
    #: rule name -> the flips of its criterion against its baseline (None: no baseline found),
    #: for the ``no_regression`` rules (see oloproof.evaluate.compare)
    regressions: dict[str, RegressionEvidence | None] = field(default_factory=dict)
    #: criterion -> its pass^k (a :class:`~oloproof.stats.passk.PassHatK`), in a run with
    #: trials > 1, for the ``min_pass_hat_k`` rules
    pass_hat_k: dict[str, Any] = field(default_factory=dict)
    #: how a *partial run* (``run --case/-k/--limit/--last-failed``) chose its cases, in
    #: words; None for a run of the whole suite. A partial run never passes its gate.
    partial: str | None = None
    #: the metamorphic relation criteria: their rules on an interval or a rate follow the
    #: cluster rule of clustered rates (module docstring), whatever their row's method
    paired: set[str] = field(default_factory=set)
    #: model judge criteria whose judge is not calibrated -> why, in words
    uncalibrated: dict[str, str | None] = field(default_factory=dict)
    #: calibrated model judge criteria -> the judge-corrected rate and interval (a
    #: :class:`~oloproof.stats.correction.CorrectedRate`), which interval rules read
    corrected: dict[str, Any] = field(default_factory=dict)


_T = TypeVar("_T")


def _limit(rule: Rule, value: _T | None) -> _T:
    """The limit of the rule's own kind: set, since a :class:`Rule` sets exactly one kind."""
    if value is None:
        raise ValueError(f"rule {rule.name!r} ({rule.kind}) sets no limit")
    return value


def _pct(x: float, down: bool) -> str:
    """A percentage to one decimal, rounded away from the threshold's favour (a lower bound
    down, a rate as it is), so the words never claim more than the number."""
    v = math.floor(x * 1000) / 10 if down else round(x * 100, 1)
    return f"{v:g} %"


def judge_rule(rule: Rule, row: RateInterval, context: GateContext | None = None) -> RuleResult:
    """Judge one rule on its criterion's row (rule kinds and reasons: module docstring).

    A partial run makes every rule INSUFFICIENT_EVIDENCE (``partial_run``); in a run that is
    not sealed, any status but FAIL becomes INSUFFICIENT_EVIDENCE (``run_incomplete``), since
    the unrecorded cases could still fail it.

    Args:
        rule: the rule from ``release.yaml``.
        row: the criterion's rate interval (missing cases in the denominator).
        context: what the rule needs beyond the row; None means an empty one (a finished,
            whole-suite run with no clusters, labels, baseline or pass^k).
    """
    context = context or GateContext()
    if context.partial is not None:  # some cases were chosen: the suite was not asked
        return RuleResult(rule.name, rule.criterion, rule.kind, rule.threshold, "INSUFFICIENT_EVIDENCE",
                          "partial_run", f"a partial run ({context.partial}): the gate judges whole suites")
    verdict = _judge_rule(rule, row, context)
    if context.incomplete is not None and verdict.status != "FAIL":
        done, total = context.incomplete
        return RuleResult(rule.name, rule.criterion, rule.kind, rule.threshold, "INSUFFICIENT_EVIDENCE",
                          "run_incomplete", f"run incomplete: {done} of {total} cases recorded; "
                          "the others could still fail it")
    return verdict


def _judge_rule(rule: Rule, row: RateInterval, context: GateContext) -> RuleResult:
    def result(status: str, reason: str | None, detail: str | None = None) -> RuleResult:
        return RuleResult(rule.name, rule.criterion, rule.kind, rule.threshold, status, reason, detail)

    kind = rule.kind
    if rule.criterion in context.unchecked:
        return result("INSUFFICIENT_EVIDENCE", "transform_not_checked",
                      "its transform is not (yet) vouched for by validity labels")
    if rule.criterion in context.uncalibrated:
        problem = context.uncalibrated[rule.criterion]
        return result("INSUFFICIENT_EVIDENCE", "judge_not_calibrated",
                      "its model judge is not calibrated against people's labels" + (f": {problem}" if problem else ""))
    paired = rule.criterion in context.paired
    if (row.approximate or paired) and kind not in ("max_failures", "no_regression"):  # a count needs no interval
        if not context.allow_approximate_methods:
            return result("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed",
                          "a pair's verdict reads a source and its derived case (one cluster): pair rules "
                          "need allow_approximate_methods: true" if paired and not row.approximate else
                          "clustered cases need allow_approximate_methods: true")
        if context.source_clusters < MIN_CLUSTERS:
            return result("INSUFFICIENT_EVIDENCE", "too_few_clusters",
                          f"{context.source_clusters} source clusters < {MIN_CLUSTERS} needed")
    if kind == "no_regression":
        return _no_regression(rule, context, result)
    corrected = context.corrected.get(rule.criterion) if kind in ("min_lower_bound", "min_rate") else None
    if corrected is not None:  # the judge's errors taken out: the judge-corrected rate and interval
        from dataclasses import replace

        row = replace(row, rate=corrected.rate, low=corrected.low, high=corrected.high)
        plain = result

        def result(status: str, reason: str | None, detail: str | None = None) -> RuleResult:
            said = f"judge-corrected {detail} ({corrected.method})" if detail else None
            return plain(status, reason, said)
    if kind == "min_pass_hat_k":
        return _min_pass_hat_k(rule, context, result)
    if kind == "max_failures":
        if row.observed + row.missing == 0:
            return result("INSUFFICIENT_EVIDENCE", "no_observations", "no case observed")
        failures = row.observed - row.passed
        limit = _limit(rule, rule.max_failures)
        said = f"{failures} {'failure' if failures == 1 else 'failures'}"
        if failures > limit:
            return result("FAIL", "observed_failures_exceed_limit", f"{said} > {limit} allowed")
        if failures + row.missing > limit:
            return result("INSUFFICIENT_EVIDENCE", "missing_cases",
                          f"{said} ≤ {limit} allowed, but {row.missing} missing could be failures")
        return result("PASS", None, f"{said} ≤ {limit} allowed")
    if kind == "min_lower_bound":
        if row.low is None:
            return result("INSUFFICIENT_EVIDENCE", "no_observations", "no case observed")
        bound = _limit(rule, rule.min_lower_bound)
        threshold = f"{bound * 100:g} %"
        if row.low >= bound:
            return result("PASS", None, f"lower bound {_pct(row.low, True)} ≥ {threshold}")
        return result("FAIL", "lower_bound_below_threshold", f"lower bound {_pct(row.low, True)} < {threshold}")
    if row.rate is None:
        return result("INSUFFICIENT_EVIDENCE", "no_observations", "no case observed")
    min_rate = _limit(rule, rule.min_rate)
    threshold = f"{min_rate * 100:g} %"
    if row.rate >= min_rate:
        return result("PASS", None, f"rate {_pct(row.rate, True)} ≥ {threshold}")
    return result("FAIL", "rate_below_threshold", f"rate {_pct(row.rate, False)} < {threshold}")


def _min_pass_hat_k(rule: Rule, context: GateContext, result: Any) -> RuleResult:
    """The low end of the pass^k interval: every one of a case's k trials must pass."""
    ph = context.pass_hat_k.get(rule.criterion)
    if ph is None:
        return result("INSUFFICIENT_EVIDENCE", "single_trial",
                      "pass^k needs several trials per case (trials: k > 1); this run ran each case once")
    if not context.allow_approximate_methods:
        return result("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed",
                      f"pass^{ph.k} is over clustered trials: it needs allow_approximate_methods: true")
    if context.source_clusters < MIN_CLUSTERS:
        return result("INSUFFICIENT_EVIDENCE", "too_few_clusters",
                      f"{context.source_clusters} source clusters < {MIN_CLUSTERS} needed")
    if ph.low is None:
        return result("INSUFFICIENT_EVIDENCE", "no_observations", f"no case with {ph.k} trials observed")
    min_pass_hat_k = _limit(rule, rule.min_pass_hat_k)
    threshold = f"{min_pass_hat_k * 100:g} %"
    said = f"pass^{ph.k} low {_pct(ph.low, True)}"
    if ph.low >= min_pass_hat_k:
        return result("PASS", None, f"{said} ≥ {threshold}")
    return result("FAIL", "pass_hat_k_below_threshold", f"{said} < {threshold}")


def _no_regression(rule: Rule, context: GateContext, result: Any) -> RuleResult:
    """The candidate against its baseline: the regressions (pass → fail) and the cases that
    passed in the baseline and are missing now both count against it."""
    nr = rule.no_regression
    assert nr is not None
    evidence = context.regressions.get(rule.name)
    if evidence is None:
        return result("INSUFFICIENT_EVIDENCE", "no_baseline", f"no run of the log matches baseline {nr.baseline}")
    if evidence.problem is not None:
        return result("INSUFFICIENT_EVIDENCE", evidence.reason,
                      f"baseline {evidence.baseline_run}: {evidence.problem}")
    f = evidence.flips
    need = min_paired(nr.min_paired, evidence.candidate_cases)
    if f.observed_pairs < need:
        # a pair counts when both runs observed it (pass or fail): 0 regressions among cases
        # missing on either side is no evidence either
        unobserved = f.paired - f.observed_pairs
        return result("INSUFFICIENT_EVIDENCE", "too_few_pairs",
                      f"{f.observed_pairs} of {evidence.candidate_cases} cases paired with {evidence.baseline_run} "
                      f"and observed in both (same id and fingerprint)"
                      + (f", {unobserved} more paired but missing in one" if unobserved else "")
                      + f" < {need} needed")
    against = len(f.regressions) + len(f.lost)
    said = f"{against} {'regression' if against == 1 else 'regressions'}"
    if f.lost:
        said += f" ({len(f.lost)} of them now missing)"
    said += f" vs {evidence.baseline_run}"
    if nr.max_regressions is not None:
        if against > nr.max_regressions:
            return result("FAIL", "regressions_exceed_limit", f"{said} > {nr.max_regressions} allowed")
        status = ("PASS", None) if evidence.baseline_complete else ("INSUFFICIENT_EVIDENCE", "baseline_incomplete")
        return result(*status, f"{said} ≤ {nr.max_regressions} allowed")
    p = mcnemar_exact(against, len(f.fixes))
    fixes = f"{len(f.fixes)} {'fix' if len(f.fixes) == 1 else 'fixes'}"
    if against > len(f.fixes) and p < _limit(rule, nr.max_p):
        return result("FAIL", "significant_regression", f"{said}, {fixes}: p = {p:.3g} < {nr.max_p:g}")
    status = ("PASS", None) if evidence.baseline_complete else ("INSUFFICIENT_EVIDENCE", "baseline_incomplete")
    return result(*status, f"{said}, {fixes}: p = {p:.3g}")


def min_paired(configured: int | None, candidate_cases: int) -> int:
    """The pairs a ``no_regression`` rule needs: ``min_paired``, else half of the candidate's
    cases rounded up, and at least 1 — a rule never passes on zero pairs (SPEC §18.1)."""
    if configured is not None:
        return configured
    return max(1, math.ceil(candidate_cases / 2))


#: the name of a regression suite's default rule on a criterion: ``regression:<criterion>``
DEFAULT_RULE_PREFIX = "regression:"


def kind_rules(kind: str | None, criteria: list[str], release: ReleaseConfig | None) -> ReleaseConfig | None:
    """The release a suite of ``kind`` is gated with: ``release`` as written, plus — for a
    ``regression`` suite — the default rule ``max_failures: 0`` on every one of ``criteria``
    that no rule of ``release`` names (a regression suite expects every case to pass; a rule of
    your own on a criterion, a ``min_lower_bound`` for a stochastic one, replaces its default).
    A ``capability`` suite, or one that declares no kind, keeps ``release`` (None: no gate).
    Pure: the defaults follow from the configuration a run stores, so ``eval`` and ``gate``
    of a stored run derive them again."""
    if kind != "regression":
        return release
    ruled = {r.criterion for r in release.rules} if release is not None else set()
    names = {r.name for r in release.rules} if release is not None else set()
    defaults = []
    for criterion in criteria:
        if criterion in ruled:
            continue
        name = DEFAULT_RULE_PREFIX + criterion
        while name in names:  # a rule of the user's already holds the name
            name += "'"
        names.add(name)
        # derived, not read: constructed without the length limit a written name has
        defaults.append(Rule.model_construct(name=name, criterion=criterion, max_failures=0))
    if release is None:
        return ReleaseConfig(rules=defaults)
    return release.model_copy(update={"rules": [*release.rules, *defaults]})


def judge_gate(release: ReleaseConfig, criteria: dict[str, RateInterval],
               context: GateContext | None = None) -> GateResult:
    """Judge every rule of ``release`` on ``criteria`` (criterion -> rate interval) and decide
    the gate (SPEC §8): PASS only when every rule passes; a release without rules is
    INSUFFICIENT_EVIDENCE, never a vacuous PASS. The release's ``allow_approximate_methods``
    overrides the context's."""
    from dataclasses import replace

    context = replace(context or GateContext(), allow_approximate_methods=release.allow_approximate_methods)
    results = [judge_rule(rule, criteria[rule.criterion], context) for rule in release.rules]
    statuses = {r.status for r in results}
    if not results:  # a release with no rules decided nothing: never a vacuous PASS
        decision = "INSUFFICIENT_EVIDENCE"
    elif "FAIL" in statuses:
        decision = "FAIL"
    elif "INSUFFICIENT_EVIDENCE" in statuses:
        decision = "INSUFFICIENT_EVIDENCE"
    else:
        decision = "PASS"
    return GateResult(decision, results)
