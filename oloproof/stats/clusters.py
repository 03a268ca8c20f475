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

from typing import Sequence

from oloproof.stats.intervals import ALPHA, RateInterval

METHOD = "design_effect_clopper_pearson"


def _betaincinv(a: float, b: float, y: float) -> float:
    from scipy.special import betaincinv

    return float(betaincinv(a, b, y))


def design_effect(successes: Sequence[float], sizes: Sequence[float]) -> float:
    n = float(sum(sizes))
    c = len(sizes)
    if n == 0 or c < 2:
        return 1.0
    p = sum(successes) / n
    if p <= 0 or p >= 1:
        return 1.0
    v = c / (c - 1) * sum((y - p * m) ** 2 for y, m in zip(successes, sizes)) / n**2
    return max(1.0, v / (p * (1 - p) / n))


def _bounds(successes: Sequence[float], sizes: Sequence[float], alpha: float) -> tuple[float, float]:
    n = float(sum(sizes))
    p = sum(successes) / n
    d = design_effect(successes, sizes)
    n_eff = n / d
    k_eff = p * n_eff
    low = 0.0 if k_eff <= 0 else _betaincinv(k_eff, n_eff - k_eff + 1, alpha / 2)
    high = 1.0 if k_eff >= n_eff else _betaincinv(k_eff + 1, n_eff - k_eff, 1 - alpha / 2)
    return low, high


def clustered_rate_interval(clusters: Sequence[tuple[int, int, int]], excluded: int = 0,
                            alpha: float = ALPHA) -> RateInterval:
    """``clusters``: (passed, observed, missing) per cluster."""
    passed = sum(c[0] for c in clusters)
    observed = sum(c[1] for c in clusters)
    missing = sum(c[2] for c in clusters)
    rate = passed / observed if observed else None
    if observed + missing == 0:
        return RateInterval(passed, observed, missing, excluded, rate, None, None, METHOD, len(clusters))
    sizes = [o + m for _, o, m in clusters]
    low = _bounds([p for p, _, _ in clusters], sizes, alpha)[0]
    high = _bounds([p + m for p, _, m in clusters], sizes, alpha)[1]
    return RateInterval(passed, observed, missing, excluded, rate, low, high, METHOD, len(clusters))
