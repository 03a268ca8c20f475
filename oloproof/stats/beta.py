"""The regularized incomplete beta function and its inverse, in plain Python.

Every interval Oloproof reports comes down to these two: Clopper–Pearson bounds are beta
quantiles, a binomial tail is an incomplete beta. They stay hand-written because a benchmark
says they pay (``bench/stats_imports.py``; docs/architecture.md, "Statistics: numpy and scipy,
and where hand-written code stays"): a run computes a few dozen of them, some 4 ms here,
while importing ``scipy.special`` alone costs a run about 140 ms — scipy is 8–50× faster per
call, but its import is paid back only after 1,000 to 24,000 calls in one process. scipy
stays the oracle: the tests check these against ``scipy.special`` to 1e-12.

* :func:`betainc` — ``I_x(a, b)`` by the continued fraction of Numerical Recipes (§6.4),
  evaluated with the modified Lentz method on whichever side converges fast;
* :func:`betaincinv` — the ``x`` with ``I_x(a, b) = y``: Newton steps inside a bracket that
  shrinks every step, so it cannot diverge, refined until the bracket is as small as floats
  allow.
"""

from __future__ import annotations

import math

_TINY = 1e-300
_EPS = 2.220446049250313e-16
_MAX_TERMS = 100_000


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _continued_fraction(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _TINY:
        d = _TINY
    d = 1.0 / d
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = _TINY if abs(d) < _TINY else d
        c = 1.0 + aa / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = _TINY if abs(d) < _TINY else d
        c = 1.0 + aa / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) <= _EPS:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` (a, b > 0, 0 ≤ x ≤ 1)."""
    if not (a > 0 and b > 0):
        raise ValueError("betainc needs a > 0 and b > 0")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def _tail(a: float, b: float, x: float, upper: bool) -> float:
    """``I_x(a, b)`` or, with ``upper``, ``1 − I_x(a, b)`` — each computed on its own side, so
    a small upper tail keeps its precision."""
    if x <= 0.0:
        return 1.0 if upper else 0.0
    if x >= 1.0:
        return 0.0 if upper else 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        lower = math.exp(log_front) * _continued_fraction(a, b, x) / a
        return 1.0 - lower if upper else lower
    upper_tail = math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b
    return upper_tail if upper else 1.0 - upper_tail


def betaincinv(a: float, b: float, y: float) -> float:
    """The ``x`` in [0, 1] with ``I_x(a, b) = y``."""
    if not (a > 0 and b > 0):
        raise ValueError("betaincinv needs a > 0 and b > 0")
    if y <= 0.0:
        return 0.0
    if y >= 1.0:
        return 1.0
    if y > 0.5:  # solve on the side where the target is small: 1 − I_x(a, b) = 1 − y
        return 1.0 - betaincinv(b, a, 1.0 - y)
    log_beta = _log_beta(a, b)
    lo, hi = 0.0, 1.0
    # a start near the answer: the normal approximation to the beta distribution
    mean = a / (a + b)
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0)))
    z = _normal_quantile(y)
    x = min(max(mean + z * sd, 1e-300), 1.0 - 1e-16)
    for _ in range(200):
        f = _tail(a, b, x, upper=False) - y
        if f == 0.0:
            return x
        if f < 0.0:
            lo = x
        else:
            hi = x
        log_pdf = (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_beta
        pdf = math.exp(log_pdf) if log_pdf < 700 else math.inf
        step = f / pdf if pdf > 0.0 else math.inf
        candidate = x - step
        if not (lo < candidate < hi):  # Newton left the bracket: bisect instead
            candidate = 0.5 * (lo + hi) if hi - lo > 0.0 else x
            if lo == 0.0 and hi < 1.0:  # a geometric step toward 0, where the answer may be tiny
                candidate = hi * 0.5 if x > hi * 0.5 else x * 0.5
        if abs(candidate - x) <= 4 * _EPS * max(abs(x), _TINY) or hi - lo <= 4 * _EPS * max(hi, _TINY):
            return candidate
        x = candidate
    return x


def _normal_quantile(p: float) -> float:
    """The standard normal quantile (Acklam's rational approximation, ~1e-9): a start only."""
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p < 0.02425:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - 0.02425:
        return -_normal_quantile(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(K ≤ k) for K ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _tail(n - k, k + 1, 1.0 - p, upper=False)


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(K > k) for K ~ Binomial(n, p)."""
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    return _tail(k + 1, n - k, p, upper=False)
