"""pass^k: the chance that an agent passes a case in *every one* of k trials (SPEC §13).

A stochastic agent runs each case k times (``trials: k``). τ-bench's estimator of the chance
that k fresh trials of a case all pass, from n ≥ k observed trials of which c passed, is the
unbiased

    pass^k(case) = C(c, k) / C(n, k)

and the suite's pass^k is its mean over cases. It is never above the plain rate c/n (a case
that sometimes fails weighs more), and a case that failed any of exactly k trials counts 0:
one severe failure is not averaged away.

**Missing and excluded trials.** Per case and criterion a trial is passed, failed, missing
(not observed: the case errored, the run was cut short) or excluded (the criterion does not
apply). As with rates (SPEC §5.1):

* the **point value** averages over the cases with no missing trial and at least k observed
  ones (``cases``);
* the **interval** keeps every case with at least k trials not excluded: its low end counts
  the missing trials as failures, its high end as passes (``missing``: cases in the interval
  only);
* a case with fewer than k trials not excluded (some, not all, excluded) and no failing trial
  cannot be estimated and is left out (``short``); one with a failing trial counts 0 (it cannot
  pass every trial: skipping the question on the other trials hides nothing); a case whose
  every trial is excluded is ``excluded``.

**The interval** (95 %), named by ``method``:

* ``clopper_pearson_cases`` — when every case's value is 0 or 1, which is always so when each
  case has exactly k trials (as in a run): pass^k is then the share of cases that passed all k
  trials, each case one independent outcome, and the exact Clopper–Pearson interval over
  cases applies. (A percentile bootstrap would claim [100 %, 100 %] for a suite that passed
  every trial, whatever its size.)
* ``case_bootstrap_percentile`` — otherwise (some case observed in more than k trials): a
  case-level bootstrap, :data:`RESAMPLES` resamples drawn by a ``numpy.random.Generator``
  seeded with the fixed :data:`SEED` (so the same cases give the same interval, on any
  executor), percentile interval.

No I/O; the inputs are counts, so the result does not depend on the order the cases came in.
numpy is imported only when a bootstrap is drawn: a run whose cases each have exactly k trials
(every run) never loads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from oloproof.stats.intervals import ALPHA, clopper_pearson

if TYPE_CHECKING:
    from numpy.random import Generator

EXACT = "clopper_pearson_cases"
BOOTSTRAP = "case_bootstrap_percentile"
RESAMPLES = 2000
SEED = 20130  # fixed: the interval is a function of the cases alone


def case_pass_hat_k(passed: int, trials: int, k: int) -> Fraction:
    """τ-bench's unbiased pass^k of one case: C(passed, k) / C(trials, k), for trials ≥ k ≥ 1."""
    if k < 1:
        raise ValueError("k must be at least 1")
    if trials < k:
        raise ValueError(f"pass^{k} needs at least {k} trials, got {trials}")
    if not 0 <= passed <= trials:
        raise ValueError("passed must be between 0 and trials")
    return Fraction(math.comb(passed, k), math.comb(trials, k))


def pass_hat_k(cases: Iterable[tuple[int, int]], k: int) -> float | None:
    """The suite's pass^k: the mean over ``cases`` — (passed, trials) each, trials ≥ k — of
    :func:`case_pass_hat_k`; None for no case."""
    values = [case_pass_hat_k(c, n, k) for c, n in cases]
    return float(sum(values, Fraction(0)) / len(values)) if values else None


def bootstrap_percentile(values: Mapping[Fraction, int] | Mapping[float, int], *, resamples: int = RESAMPLES,
                         seed: int | Generator = SEED, alpha: float = ALPHA) -> tuple[float, float] | None:
    """The percentile interval of the mean of ``values`` (value -> how many cases have it) by
    a case-level bootstrap: ``resamples`` samples of as many cases, drawn with replacement.
    Of the sorted resampled means, the ends leave ``floor(resamples·alpha/2)`` means outside
    on either side. None for no case.

    ``seed``: an int, from which ``numpy.random.default_rng`` builds a fresh generator (the
    same int, the same interval), or a ``numpy.random.Generator`` used as it is (and advanced);
    never numpy's global state. A resample is drawn as the number of cases of each distinct
    value — ``Generator.multinomial(cases, shares)``, the same distribution as drawing cases
    one by one — so the cost grows with the distinct values, not with the cases.
    """
    items = sorted((float(v), n) for v, n in values.items() if n)
    size = sum(n for _, n in items)
    if size == 0:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    points = np.array([v for v, _ in items])
    shares = np.array([n for _, n in items], dtype=float) / size
    counts = rng.multinomial(size, shares, size=resamples)
    # an elementwise product and a row sum, not a BLAS matrix product (whose summation order
    # may depend on the machine and its threads): the same cases and the same numpy give the
    # same bits on any executor (numpy does not promise a Generator's stream across releases)
    means = np.sort((counts * points).sum(axis=1) / size)
    cut = math.floor(resamples * alpha / 2)
    return float(means[cut]), float(means[resamples - 1 - cut])


@dataclass(frozen=True)
class PassHatK:
    """A criterion's pass^k over a run's cases (see the module's text for each count)."""

    k: int
    value: float | None  # over the cases with every trial observed
    low: float | None  # missing trials as failures
    high: float | None  # missing trials as passes
    method: str
    cases: int  # cases in the point value
    missing: int  # cases with a missing trial: in the interval only
    short: int  # cases with fewer than k trials not excluded: left out
    excluded: int  # cases whose every trial was excluded
    #: cases by how many of their trials passed (0…k; missing and excluded trials do not
    #: pass), over the cases with at least one observed trial
    passing_trials: tuple[int, ...]


def pass_hat_k_summary(counts: Mapping[tuple[int, int, int], int], k: int,
                       alpha: float = ALPHA) -> PassHatK:
    """pass^k of the cases counted in ``counts``: (passed, observed, missing) trials of a case
    -> how many cases have them (excluded trials are in none of the three)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    point: dict[Fraction, int] = {}
    low: dict[Fraction, int] = {}
    high: dict[Fraction, int] = {}
    cases = missing = short = excluded = 0
    longest = max([k] + [o + m for (_, o, m) in counts])
    passing = [0] * (longest + 1)
    for (p, o, m), n in sorted(counts.items()):
        if not (0 <= p <= o and m >= 0 and n >= 0):
            raise ValueError(f"bad trial counts {(p, o, m)!r}")
        if n == 0:
            continue
        total = o + m
        if total == 0:
            excluded += n
            continue
        if o:  # cases by trials passed: over the cases with a trial observed (not unrecorded ones)
            passing[p] += n
        if total >= k:
            lo, hi = case_pass_hat_k(p, total, k), case_pass_hat_k(p + m, total, k)
        elif o > p:  # a trial failed: this case cannot pass every trial — 0, not left out
            lo = hi = Fraction(0)
        else:
            short += n
            continue
        low[lo] = low.get(lo, 0) + n
        high[hi] = high.get(hi, 0) + n
        if m == 0:
            point[lo] = point.get(lo, 0) + n
            cases += n
        else:
            missing += n
    value = float(sum((v * n for v, n in point.items()), Fraction(0)) / cases) if cases else None
    in_interval = cases + missing
    if in_interval == 0:
        return PassHatK(k, value, None, None, EXACT, cases, missing, short, excluded, tuple(passing))
    if set(low) | set(high) <= {0, 1}:
        lo_end = clopper_pearson(low.get(Fraction(1), 0), in_interval, alpha)[0]
        hi_end = clopper_pearson(high.get(Fraction(1), 0), in_interval, alpha)[1]
        method = EXACT
    else:
        lo_end = bootstrap_percentile(low, alpha=alpha)[0]  # type: ignore[index]
        hi_end = bootstrap_percentile(high, alpha=alpha)[1]  # type: ignore[index]
        method = BOOTSTRAP
    return PassHatK(k, value, lo_end, hi_end, method, cases, missing, short, excluded, tuple(passing))


__all__ = ["BOOTSTRAP", "EXACT", "PassHatK", "bootstrap_percentile", "case_pass_hat_k", "pass_hat_k",
           "pass_hat_k_summary"]
