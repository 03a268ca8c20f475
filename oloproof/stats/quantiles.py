"""Quantiles with distribution-free order-statistic intervals (SPEC §5.2).

The point value is the type-1 sample quantile (the inverse of the empirical CDF: the
``ceil(n*q)``-th smallest observed value). The interval is the equal-tailed order-statistic
interval [X(l), X(u)] over N = n + m values with binomial coverage ≥ 1 - alpha, where

* ``l`` is the largest j with P(K ≤ j-1) ≤ alpha/2 and ``u`` the smallest j with
  P(K ≥ j) ≤ alpha/2, for K ~ Binomial(N, q) (so P(l ≤ K ≤ u-1) ≥ 1 - alpha);
* the m missing cases sit at −∞ when reading X(l) and at +∞ when reading X(u), so they can
  only widen the interval;
* an end with no such order statistic (or one that lands on a missing case) is ``None``:
  shown as ``no bound``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALPHA = 0.05


@dataclass(frozen=True)
class QuantileInterval:
    value: float | None
    low: float | None
    high: float | None
    observed: int
    missing: int
    excluded: int


def _kth(items: list[tuple[float, int]], k: int) -> float:
    """The k-th smallest (1-based) of the values given as sorted (value, count) pairs."""
    seen = 0
    for value, count in items:
        seen += count
        if seen >= k:
            return value
    raise IndexError(k)


def order_statistic_ranks(total: int, q: float, alpha: float = ALPHA) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the order statistics bounding the q-quantile, or None."""
    if total <= 0:
        return None, None
    from oloproof.stats.beta import binomial_cdf, binomial_sf

    # P(K <= j-1) grows with j: the largest j with P(K <= j-1) <= alpha/2
    low = _last(1, total, lambda j: binomial_cdf(j - 1, total, q) <= alpha / 2)
    # P(K >= j) = P(K > j-1) shrinks with j: the smallest j with P(K >= j) <= alpha/2
    high = _first(1, total, lambda j: binomial_sf(j - 1, total, q) <= alpha / 2)
    return low, high


def _last(lo: int, hi: int, ok: Any) -> int | None:
    """The largest j in [lo, hi] with ok(j), for ok true up to some point then false."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first(lo: int, hi: int, ok: Any) -> int | None:
    """The smallest j in [lo, hi] with ok(j), for ok false up to some point then true."""
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def quantile_interval(values: Sequence[float] | Mapping[float, int], missing: int, excluded: int, q: float,
                      alpha: float = ALPHA) -> QuantileInterval:
    """``values``: the observed values, or a mapping value -> how many cases had it (how a run
    keeps them: a run of any size holds one count per distinct number of steps)."""
    counts = values if isinstance(values, Mapping) else Counter(values)
    items = sorted(counts.items())
    n = sum(c for _, c in items)
    value = _kth(items, max(1, math.ceil(n * q - 1e-12))) if n else None
    lo, u = order_statistic_ranks(n + missing, q, alpha)
    low = _kth(items, lo - missing) if lo is not None and lo > missing else None
    high = _kth(items, u) if u is not None and u <= n else None
    return QuantileInterval(value, low, high, n, missing, excluded)
