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
from dataclasses import dataclass
from collections import Counter
from typing import Mapping, Sequence

ALPHA = 0.05


@dataclass(frozen=True)
class QuantileInterval:
    value: float | None
    low: float | None
    high: float | None
    observed: int
    missing: int
    excluded: int


def sample_quantile(sorted_values: Sequence[float], q: float) -> float:
    n = len(sorted_values)
    rank = max(1, math.ceil(n * q - 1e-12))
    return sorted_values[rank - 1]


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
    import numpy as np
    from scipy.special import bdtr, bdtrc

    j = np.arange(1, total + 1)
    below = bdtr(j - 1, total, q)  # P(K <= j-1)
    above = bdtrc(j - 1, total, q)  # P(K >= j)
    ok_low = np.nonzero(below <= alpha / 2)[0]
    ok_high = np.nonzero(above <= alpha / 2)[0]
    low = int(j[ok_low[-1]]) if ok_low.size else None
    high = int(j[ok_high[0]]) if ok_high.size else None
    return low, high


def quantile_interval(values: Sequence[float] | Mapping[float, int], missing: int, excluded: int, q: float,
                      alpha: float = ALPHA) -> QuantileInterval:
    """``values``: the observed values, or a mapping value -> how many cases had it (how a run
    keeps them: a run of any size holds one count per distinct number of steps)."""
    counts = values if isinstance(values, Mapping) else Counter(values)
    items = sorted(counts.items())
    n = sum(c for _, c in items)
    value = _kth(items, max(1, math.ceil(n * q - 1e-12))) if n else None
    l, u = order_statistic_ranks(n + missing, q, alpha)
    low = _kth(items, l - missing) if l is not None and l > missing else None
    high = _kth(items, u) if u is not None and u <= n else None
    return QuantileInterval(value, low, high, n, missing, excluded)
