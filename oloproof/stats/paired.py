"""Paired comparison of two runs on the same cases: McNemar's exact test.

Only the discordant pairs carry information about a difference: ``b`` cases that passed in
the base and fail in the candidate (regressions), ``c`` that failed and now pass (fixes).
Under "no difference" each discordant pair is a regression with probability 1/2, so the
exact test is a two-sided binomial test of ``b`` out of ``b + c`` at p = 1/2:

    p = min(1, 2 · P[X ≤ min(b, c)]),  X ~ Binomial(b + c, 1/2)   (p = 1 when b = c)

which is what ``scipy.stats.binomtest(b, b + c, 0.5).pvalue`` returns. Computed exactly with
integers up to 2,000 discordant pairs, through the regularized incomplete beta beyond.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

from oloproof.stats.beta import binomial_cdf

METHOD = "mcnemar_exact"
_EXACT_UP_TO = 2000


def mcnemar_exact(regressions: int, fixes: int) -> float:
    """Two-sided p-value of McNemar's exact test on the discordant counts."""
    if regressions < 0 or fixes < 0:
        raise ValueError("counts must be non-negative")
    n = regressions + fixes
    k = min(regressions, fixes)
    if n == 0 or regressions == fixes:
        return 1.0
    if n <= _EXACT_UP_TO:
        tail = Fraction(sum(comb(n, i) for i in range(k + 1)), 2 ** n)
        return float(min(Fraction(1), 2 * tail))
    return min(1.0, 2.0 * binomial_cdf(k, n, 0.5))
