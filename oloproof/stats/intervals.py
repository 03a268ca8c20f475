"""Exact binomial intervals with missing cases kept in the denominator (SPEC §5.1).

Pure functions, no I/O. The beta quantiles come from :mod:`oloproof.stats.beta` (checked
against scipy in the tests), so a run does not pay for importing scipy (see that module for
the figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.05


def _betaincinv(a: float, b: float, y: float) -> float:
    from oloproof.stats.beta import betaincinv

    return betaincinv(a, b, y)


def clopper_pearson(successes: int, trials: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided ``1 - alpha`` interval for ``successes/trials``."""
    if trials <= 0:
        raise ValueError("trials must be positive")
    if not 0 <= successes <= trials:
        raise ValueError("successes must be between 0 and trials")
    low = 0.0 if successes == 0 else _betaincinv(successes, trials - successes + 1, alpha / 2)
    high = 1.0 if successes == trials else _betaincinv(successes + 1, trials - successes, 1 - alpha / 2)
    return low, high


@dataclass(frozen=True)
class RateInterval:
    """``rate`` over observed cases; ``low``/``high`` with missing cases in the denominator."""

    passed: int
    observed: int
    missing: int
    excluded: int
    rate: float | None
    low: float | None
    high: float | None
    method: str = "clopper_pearson"
    clusters: int | None = None  # set when the cases share clusters (an approximate method)

    @property
    def approximate(self) -> bool:
        return self.method != "clopper_pearson"


def rate_interval(passed: int, observed: int, missing: int, excluded: int = 0,
                  alpha: float = ALPHA) -> RateInterval:
    """Rate k/n over observed cases, and the interval that keeps missing cases in.

    The low end is the Clopper–Pearson lower bound of k out of n + m (every missing case
    failed); the high end is the upper bound of k + m out of n + m (every missing case passed).
    With no case in the denominator both ends are ``None``.
    """
    total = observed + missing
    rate = passed / observed if observed else None
    if total == 0:
        return RateInterval(passed, observed, missing, excluded, rate, None, None)
    low = clopper_pearson(passed, total, alpha)[0]
    high = clopper_pearson(passed + missing, total, alpha)[1]
    return RateInterval(passed, observed, missing, excluded, rate, low, high)


def round_outward(low: float, high: float, decimals: int = 1) -> tuple[float, float]:
    """Percent values rounded outward (low down, high up) to ``decimals`` places.

    A tolerance of 1e-9 keeps float noise (0.868 stored as 0.86799999...) from moving a
    value a whole display step.
    """
    scale = 100 * 10**decimals
    lo = math.floor(low * scale + 1e-9) / 10**decimals
    hi = math.ceil(high * scale - 1e-9) / 10**decimals
    return max(lo, 0.0), min(hi, 100.0)
