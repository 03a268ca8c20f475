"""An approximate cluster-aware interval for rates over clustered cases (SPEC §5.3).

Cases in one cluster (a source case and its metamorphic derivatives) are not independent, so
the exact binomial interval would be too narrow. The method is the **design-effect adjusted
Clopper–Pearson interval** of Korn & Graubard (1998, "Confidence intervals for proportions
with small expected number of positive counts estimated from survey data", *Survey
Methodology* 24(2):193–201):

* p̂ = Σ yᶜ / Σ nᶜ over clusters c (yᶜ passes out of nᶜ cases);
* the cluster (ratio-estimator) variance  v = C/(C−1) · Σ (yᶜ − p̂ nᶜ)² / (Σ nᶜ)²;
* the design effect  d = max(1, v / (p̂(1−p̂)/n))  (never narrower than independent cases);
* the effective sample  n* = n / d,  k* = p̂ n*;  and the Clopper–Pearson bounds with those
  (real-valued) counts, through the incomplete beta function.

Missing cases stay in the denominator as in the exact method: the low end counts them as
failures, the high end as passes, each with its own design effect. It is deterministic (no
resampling, so no seed) and O(clusters). Coverage is checked by simulation in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence

from oloproof.stats.intervals import ALPHA, RateInterval

METHOD = "design_effect_clopper_pearson"


def _betaincinv(a: float, b: float, y: float) -> float:
    from oloproof.stats.beta import betaincinv

    return betaincinv(a, b, y)


class ClusterSums:
    """Sufficient statistics of clusters (exact integer sums), so that a cluster can be folded
    in as soon as its last case is judged and forgotten: memory does not grow with the
    number of clusters, and the sums — hence the interval — do not depend on the order in
    which clusters arrive. ``low`` counts missing cases as failures, ``high`` as passes."""

    __slots__ = ("clusters", "passed", "observed", "missing", "n", "n2", "low", "high")

    def __init__(self) -> None:
        self.clusters = self.passed = self.observed = self.missing = self.n = self.n2 = 0
        self.low = [0, 0, 0]  # Σy, Σy², Σy·n
        self.high = [0, 0, 0]

    def add(self, passed: int, observed: int, missing: int, times: int = 1) -> None:
        """Fold in ``times`` clusters of (passed, observed, missing) cases."""
        size = observed + missing
        self.clusters += times
        self.passed += passed * times
        self.observed += observed * times
        self.missing += missing * times
        self.n += size * times
        self.n2 += size * size * times
        for sums, y in ((self.low, passed), (self.high, passed + missing)):
            sums[0] += y * times
            sums[1] += y * y * times
            sums[2] += y * size * times


def _design_effect(c: int, n: float, y: float, y2: float, yn: float, n2: float) -> float:
    if n == 0 or c < 2:
        return 1.0
    p = y / n
    if p <= 0 or p >= 1:
        return 1.0
    # Σ(yᶜ − p nᶜ)² = Σy² − 2pΣyn + p²Σn²
    v = c / (c - 1) * (y2 - 2 * p * yn + p * p * n2) / n**2
    return max(1.0, v / (p * (1 - p) / n))


def design_effect(successes: Sequence[float], sizes: Sequence[float]) -> float:
    """Kish's design effect of clustered binary outcomes: ``successes[c]`` of ``sizes[c]`` cases
    passed in cluster ``c``; at least 1 (clusters never make an interval narrower)."""
    return _design_effect(len(sizes), sum(sizes, 0.0), sum(successes, 0.0), sum((y * y for y in successes), 0.0),
                          sum((y * m for y, m in zip(successes, sizes)), 0.0), sum((m * m for m in sizes), 0.0))


def _bound(c: int, n: int, sums: list[int], n2: int, alpha: float, upper: bool) -> float:
    y, y2, yn = sums
    p = y / n
    n_eff = n / _design_effect(c, n, y, y2, yn, n2)
    k_eff = p * n_eff
    if upper:
        return 1.0 if k_eff >= n_eff else _betaincinv(k_eff + 1, n_eff - k_eff, 1 - alpha / 2)
    return 0.0 if k_eff <= 0 else _betaincinv(k_eff, n_eff - k_eff + 1, alpha / 2)


def sums_interval(sums: ClusterSums, excluded: int = 0, alpha: float = ALPHA) -> RateInterval:
    """The design-effect adjusted interval of the clusters folded into ``sums``."""
    passed, observed, missing = sums.passed, sums.observed, sums.missing
    rate = passed / observed if observed else None
    if observed + missing == 0:
        return RateInterval(passed, observed, missing, excluded, rate, None, None, METHOD, sums.clusters)
    low = _bound(sums.clusters, sums.n, sums.low, sums.n2, alpha, upper=False)
    high = _bound(sums.clusters, sums.n, sums.high, sums.n2, alpha, upper=True)
    return RateInterval(passed, observed, missing, excluded, rate, low, high, METHOD, sums.clusters)


def clustered_rate_interval(clusters: Sequence[tuple[int, int, int]], excluded: int = 0,
                            alpha: float = ALPHA) -> RateInterval:
    """``clusters``: (passed, observed, missing) per cluster."""
    sums = ClusterSums()
    for c in clusters:
        sums.add(*c)
    return sums_interval(sums, excluded, alpha)
