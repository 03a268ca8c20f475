"""The judge-corrected rate of a model-judged criterion and its interval (SPEC §18.6).

A judge that passes a truly passing output with probability *Se* (sensitivity) and fails a
truly failing one with probability *Sp* (specificity) reports passes at the *apparent* rate
``π = θ·Se + (1 − θ)(1 − Sp)``, where θ is the true pass rate. Rogan and Gladen (1978,
"Estimating prevalence from the results of a screening test", *American Journal of
Epidemiology* 107(1):71–76) invert it:

    θ = (π + Sp − 1) / (Se + Sp − 1),   defined when Se + Sp > 1 (a judge better than chance).

The point value uses the observed apparent rate and the sensitivity and specificity measured
against people's labels, clipped to [0, 1].

**The interval: Bonferroni-combined exact bounds** (``rogan_gladen_bonferroni``). Three
Clopper–Pearson intervals, each at level ``1 − α/3``: the apparent rate (with missing cases in
the denominator, as every rate here: the low end counts them as judge failures, the high end as
judge passes), the sensitivity (the labelled passes) and the specificity (the labelled
failures). The corrected rate is monotone in each of the three on that box, so its smallest and
largest values over the box are at corners: the interval is the smallest and the largest
corner value, clipped to [0, 1]. When all three intervals hold the truth — probability at least
``1 − α`` by the Bonferroni inequality, whatever the dependence between them (the labelled
cases are also among the judged ones) — the true rate is inside. When the low ends of
sensitivity and specificity together do not exceed 1, the labels cannot rule out a judge no
better than chance: the interval is [0, 1].

Cases that are not independent (a source case and its derived ones, the trials of a case) get
the criterion's cluster-aware interval of the apparent rate (:mod:`oloproof.stats.clusters`, at
the same level) in place of the exact one, which would be too narrow for them (``apparent``).

It is conservative by construction (simulated coverage: ``bench/judge_coverage.py``,
docs/model-judges.md), deterministic (no resampling, no seed) and costs a dozen beta quantiles.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from oloproof.stats.intervals import ALPHA, clopper_pearson

METHOD = "rogan_gladen_bonferroni"
#: the intervals the Bonferroni bound combines (apparent rate, sensitivity, specificity): each
#: is taken at level 1 − α/PARTS
PARTS = 3


@dataclass(frozen=True)
class CorrectedRate:
    """A judge-corrected rate: the Rogan–Gladen point value (None when it is undefined: no
    case observed, no label of a class, or a judge no better than chance) and its interval
    (None: no case in the denominator)."""

    rate: float | None
    low: float | None
    high: float | None
    method: str = METHOD


def rogan_gladen(apparent: float, sensitivity: float, specificity: float) -> float | None:
    """The true rate a judge with this sensitivity and specificity implies from its apparent
    pass rate, clipped to [0, 1]; None when ``sensitivity + specificity <= 1``."""
    d = sensitivity + specificity - 1.0
    if d <= 0:
        return None
    return min(1.0, max(0.0, (apparent + specificity - 1.0) / d))


def _bounds(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    return (0.0, 1.0) if trials == 0 else clopper_pearson(successes, trials, alpha)


def corrected_rate(passed: int, observed: int, missing: int, *, true_pass: int, false_fail: int,
                   true_fail: int, false_pass: int, alpha: float = ALPHA,
                   apparent: tuple[float | None, float | None] | None = None,
                   method: str | None = None) -> CorrectedRate:
    """The corrected rate of a criterion whose judge passed ``passed`` of ``observed`` cases
    (``missing`` more unobserved), calibrated on labels: ``true_pass`` and ``false_fail`` (the
    judge's pass and fail on cases people labelled pass), ``true_fail`` and ``false_pass`` (its
    fail and pass on cases labelled fail). See the module docstring for the method.

    ``apparent``: the apparent rate's (low, high) at level ``1 − alpha/PARTS`` when its cases are
    not independent — the trials of a case, a source case and its derived ones: the
    cluster-aware interval (:mod:`oloproof.stats.clusters`) instead of the exact one, which
    would be too narrow for them; ``method`` then names it."""
    total = observed + missing
    se_n, sp_n = true_pass + false_fail, true_fail + false_pass
    rate = None
    if observed and se_n and sp_n:
        rate = rogan_gladen(passed / observed, true_pass / se_n, true_fail / sp_n)
    if total == 0:
        return CorrectedRate(rate, None, None)
    a = alpha / PARTS
    p_low: float
    p_high: float
    if apparent is not None and apparent[0] is not None and apparent[1] is not None:
        p_low, p_high = apparent[0], apparent[1]
    else:
        p_low = clopper_pearson(passed, total, a)[0]
        p_high = clopper_pearson(passed + missing, total, a)[1]
    named = method or METHOD
    se_low, se_high = _bounds(true_pass, se_n, a)
    sp_low, sp_high = _bounds(true_fail, sp_n, a)
    if se_low + sp_low <= 1.0:  # a judge no better than chance is not ruled out
        return CorrectedRate(rate, 0.0, 1.0, named)
    corners = [(se, sp) for se in (se_low, se_high) for sp in (sp_low, sp_high)]
    low = min(_raw(p_low, se, sp) for se, sp in corners)
    high = max(_raw(p_high, se, sp) for se, sp in corners)
    return CorrectedRate(rate, min(1.0, max(0.0, low)), min(1.0, max(0.0, high)), named)


def _raw(p: float, se: float, sp: float) -> float:
    return (p + sp - 1.0) / (se + sp - 1.0)


__all__ = ["METHOD", "PARTS", "CorrectedRate", "corrected_rate", "rogan_gladen"]
