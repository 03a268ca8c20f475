"""The release gate over criteria (SPEC §8). Pure: rules in, decisions out.

Rule kinds:

* ``max_failures`` — the observed count of failures. Missing cases could be failures, so
  when the failures observed are within the limit but failures + missing are not, the rule
  is ``INSUFFICIENT_EVIDENCE`` (``missing_cases``): missing is never counted as passed.
* ``min_lower_bound`` — the interval's low end (missing cases in the denominator).
* ``min_rate`` — the point rate over observed cases.

Before any of that: a rule over a metamorphic relation whose transform the validity labels do
not vouch for is ``INSUFFICIENT_EVIDENCE`` (``transform_not_checked``); a rule on the interval
or the rate of clustered cases needs ``allow_approximate_methods: true``
(``approximate_methods_not_allowed``) and at least 20 source clusters (``too_few_clusters``).

The gate passes only when every rule passes; any FAIL makes it FAIL, otherwise any
INSUFFICIENT_EVIDENCE makes it INSUFFICIENT_EVIDENCE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_CLUSTERS = 20

from oloproof.config.models import ReleaseConfig, Rule
from oloproof.stats.intervals import RateInterval


@dataclass(frozen=True)
class RuleResult:
    name: str
    criterion: str
    kind: str
    threshold: float
    status: str
    reason: str | None


@dataclass(frozen=True)
class GateResult:
    decision: str  # PASS | FAIL | INSUFFICIENT_EVIDENCE
    rules: list[RuleResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.decision == "PASS" else 1


@dataclass(frozen=True)
class GateContext:
    """What a rule needs beyond its row: how many source clusters the suite has, and which
    relation criteria belong to a transform that labels do not (yet) vouch for."""

    source_clusters: int = 0
    unchecked: set[str] = field(default_factory=set)
    allow_approximate_methods: bool = False


def judge_rule(rule: Rule, row: RateInterval, context: GateContext | None = None) -> RuleResult:
    def result(status: str, reason: str | None) -> RuleResult:
        return RuleResult(rule.name, rule.criterion, rule.kind, rule.threshold, status, reason)

    context = context or GateContext()
    kind = rule.kind
    if rule.criterion in context.unchecked:
        return result("INSUFFICIENT_EVIDENCE", "transform_not_checked")
    if row.approximate and kind != "max_failures":  # a count needs no interval
        if not context.allow_approximate_methods:
            return result("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed")
        if context.source_clusters < MIN_CLUSTERS:
            return result("INSUFFICIENT_EVIDENCE", "too_few_clusters")
    if kind == "max_failures":
        if row.observed + row.missing == 0:
            return result("INSUFFICIENT_EVIDENCE", "no_observations")
        failures = row.observed - row.passed
        if failures > rule.max_failures:  # type: ignore[operator]
            return result("FAIL", "observed_failures_exceed_limit")
        if failures + row.missing > rule.max_failures:  # type: ignore[operator]
            return result("INSUFFICIENT_EVIDENCE", "missing_cases")
        return result("PASS", None)
    if kind == "min_lower_bound":
        if row.low is None:
            return result("INSUFFICIENT_EVIDENCE", "no_observations")
        if row.low >= rule.min_lower_bound:  # type: ignore[operator]
            return result("PASS", None)
        return result("FAIL", "lower_bound_below_threshold")
    if row.rate is None:
        return result("INSUFFICIENT_EVIDENCE", "no_observations")
    if row.rate >= rule.min_rate:  # type: ignore[operator]
        return result("PASS", None)
    return result("FAIL", "rate_below_threshold")


def judge_gate(release: ReleaseConfig, criteria: dict[str, RateInterval],
               context: GateContext | None = None) -> GateResult:
    from dataclasses import replace

    context = replace(context or GateContext(), allow_approximate_methods=release.allow_approximate_methods)
    results = [judge_rule(rule, criteria[rule.criterion], context) for rule in release.rules]
    statuses = {r.status for r in results}
    if "FAIL" in statuses:
        decision = "FAIL"
    elif "INSUFFICIENT_EVIDENCE" in statuses:
        decision = "INSUFFICIENT_EVIDENCE"
    else:
        decision = "PASS"
    return GateResult(decision, results)
