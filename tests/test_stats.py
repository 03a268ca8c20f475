"""Intervals and quantiles against values computed independently with scipy.stats."""

import math

import numpy as np
import pytest
from scipy import stats

from oloproof.stats import (
    clopper_pearson,
    quantile_interval,
    rate_interval,
    round_outward,
)


def reference_cp(k, n, alpha=0.05):
    low = 0.0 if k == 0 else stats.beta.ppf(alpha / 2, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(1 - alpha / 2, k + 1, n - k)
    return low, high


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 7), (3, 10), (33, 40), (39, 40), (500, 1000)])
def test_clopper_pearson_matches_scipy(k, n):
    assert clopper_pearson(k, n) == pytest.approx(reference_cp(k, n), abs=1e-12)


def test_clopper_pearson_matches_scipy_binomtest():
    for k, n in [(5, 20), (17, 30), (0, 12)]:
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-10)


# Every row printed in seeds/agents-and-tools.es.txt: (passed, observed, missing) -> shown.
SEED_ROWS = [
    ((33, 40, 0), "82.5%", "[67.2%, 92.7%]"),
    ((39, 39, 1), "100.0%", "[86.8%, 100.0%]"),
    ((29, 39, 1), "74.4%", "[56.1%, 87.4%]"),
    ((24, 40, 0), "60.0%", "[43.3%, 75.2%]"),
    ((37, 40, 0), "92.5%", "[79.6%, 98.5%]"),
    ((39, 40, 0), "97.5%", "[86.8%, 100.0%]"),
    ((0, 6, 1), "0.0%", "[0.0%, 57.9%]"),
    ((0, 7, 0), "0.0%", "[0.0%, 41.0%]"),
    ((27, 29, 0), "93.1%", "[77.2%, 99.2%]"),
    ((6, 10, 0), "60.0%", "[26.2%, 87.9%]"),
    ((29, 30, 0), "96.7%", "[82.7%, 100.0%]"),
    ((26, 30, 0), "86.7%", "[69.2%, 96.3%]"),
    ((27, 29, 1), "93.1%", "[73.4%, 99.2%]"),
]


@pytest.mark.parametrize("counts,rate,shown", SEED_ROWS)
def test_seed_rows(counts, rate, shown):
    from oloproof.report.terminal import interval_text, pct

    k, n, m = counts
    r = rate_interval(k, n, m)
    assert pct(r.rate) == rate
    assert interval_text(r) == shown
    # independently: low end = k of n+m, high end = k+m of n+m
    assert r.low == pytest.approx(reference_cp(k, n + m)[0], abs=1e-12)
    assert r.high == pytest.approx(reference_cp(k + m, n + m)[1], abs=1e-12)


def test_missing_widen_the_interval():
    without = rate_interval(39, 39, 0)
    with_missing = rate_interval(39, 39, 1)
    assert with_missing.low < without.low


def test_no_observation():
    r = rate_interval(0, 0, 0, 3)
    assert (r.rate, r.low, r.high, r.excluded) == (None, None, None, 3)
    r = rate_interval(0, 0, 2)
    assert r.rate is None and r.low == 0.0 and r.high == 1.0


def test_round_outward():
    assert round_outward(0.67229, 0.92661) == (67.2, 92.7)
    assert round_outward(0.8684, 0.99937) == (86.8, 100.0)
    assert round_outward(0.0, 1.0) == (0.0, 100.0)
    assert round_outward(0.5, 0.5) == (50.0, 50.0)


def reference_quantile_interval(values, missing, q, alpha=0.05):
    """Independent: search ranks with scipy.stats.binom, then read the padded sample."""
    n = len(values)
    N = n + missing
    low_rank = None
    for j in range(1, N + 1):
        if stats.binom.cdf(j - 1, N, q) <= alpha / 2:
            low_rank = j
    high_rank = next((j for j in range(1, N + 1) if stats.binom.sf(j - 1, N, q) <= alpha / 2), None)
    low_pad = [-math.inf] * missing + sorted(values)
    high_pad = sorted(values) + [math.inf] * missing
    low = low_pad[low_rank - 1] if low_rank else -math.inf
    high = high_pad[high_rank - 1] if high_rank else math.inf
    point = float(np.quantile(values, q, method="inverted_cdf"))
    return point, (None if low == -math.inf else low), (None if high == math.inf else high)


def test_seed_quantiles():
    steps = [2] * 6 + [4] * 20 + [6] * 3 + [8] * 4 + [10] * 6
    calls = [1] * 6 + [2] * 20 + [3] * 3 + [4] * 4 + [5] * 6
    q95 = quantile_interval(steps, 1, 0, 0.95)
    assert (q95.value, q95.low, q95.high) == (10, 10, None)
    q50 = quantile_interval(calls, 1, 0, 0.5)
    assert (q50.value, q50.low, q50.high) == (2, 2, 3)


@pytest.mark.parametrize("seed", range(12))
def test_quantiles_match_independent_computation(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    values = rng.integers(0, 30, size=n).tolist()
    missing = int(rng.integers(0, 4))
    q = float(rng.choice([0.1, 0.5, 0.9, 0.95]))
    got = quantile_interval(values, missing, 0, q)
    assert (got.value, got.low, got.high) == reference_quantile_interval(values, missing, q)


def test_quantile_coverage_by_simulation():
    rng = np.random.default_rng(7)
    hits = 0
    trials = 400
    for _ in range(trials):
        sample = rng.exponential(size=60)
        qi = quantile_interval(sample.tolist(), 0, 0, 0.5)
        if (qi.low is None or qi.low <= math.log(2)) and (qi.high is None or math.log(2) <= qi.high):
            hits += 1
    assert hits / trials >= 0.93  # nominal ≥ 0.95; allow simulation noise


def test_no_bound_for_tiny_samples():
    qi = quantile_interval([5], 0, 0, 0.5)
    assert (qi.value, qi.low, qi.high) == (5, None, None)
    assert quantile_interval([], 2, 0, 0.5).value is None


@pytest.mark.parametrize("seed", range(4))
def test_incomplete_beta_and_its_inverse_match_scipy(seed):
    """The plain-Python beta functions every interval rests on, against scipy.special, from
    tiny to million-case suites and with the real-valued counts of cluster intervals."""
    import random

    from scipy import special

    from oloproof.stats.beta import betainc, betaincinv, binomial_cdf, binomial_sf

    rng = random.Random(seed)
    for _ in range(300):
        n = rng.choice([1, 2, 3, 10, 40, 250, 1000, 20000, 1000000])
        k = rng.randint(0, n)
        if k > 0:
            assert betaincinv(k, n - k + 1, 0.025) == pytest.approx(special.betaincinv(k, n - k + 1, 0.025), abs=2e-12)
        if k < n:
            assert betaincinv(k + 1, n - k, 0.975) == pytest.approx(special.betaincinv(k + 1, n - k, 0.975), abs=2e-12)
        ne = rng.uniform(1.5, 3000)
        ke = rng.uniform(0.01, ne - 0.5)
        assert betaincinv(ke, ne - ke + 1, 0.025) == pytest.approx(special.betaincinv(ke, ne - ke + 1, 0.025),
                                                                    abs=1e-12)
        a, b, x = rng.uniform(0.05, 2000), rng.uniform(0.05, 2000), rng.random()
        assert betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), abs=1e-11)
        m = rng.randint(1, 3000)
        j, p = rng.randint(-1, m + 1), rng.random()
        assert binomial_cdf(j, m, p) == pytest.approx(stats.binom.cdf(j, m, p), abs=1e-11)
        assert binomial_sf(j, m, p) == pytest.approx(stats.binom.sf(j, m, p), abs=1e-11)
    assert betaincinv(3, 4, 0.0) == 0.0 and betaincinv(3, 4, 1.0) == 1.0
    with pytest.raises(ValueError):
        betainc(0, 1, 0.5)


def test_a_run_imports_neither_scipy_nor_numpy():
    import subprocess
    import sys

    code = ("import sys; from oloproof.stats import rate_interval, quantile_interval; "
            "from oloproof.stats.clusters import clustered_rate_interval; "
            "rate_interval(3, 10, 1); quantile_interval([1, 2, 3], 1, 0, 0.5); "
            "clustered_rate_interval([(2, 2, 0), (0, 2, 0), (1, 2, 0)]); "
            "import oloproof.cli.main, oloproof.app.run; "
            "print(sorted(m for m in ('scipy', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the seeded bootstrap (numpy.random.Generator) and what imports numpy or scipy ------------

def test_bootstrap_is_a_function_of_the_seed_and_never_of_global_state():
    from fractions import Fraction

    from oloproof.stats.passk import SEED, bootstrap_percentile

    values = {Fraction(0): 3, Fraction(1, 10): 2, Fraction(2, 5): 5, Fraction(1): 30}
    first = bootstrap_percentile(values)
    np.random.seed(1)  # numpy's global state: not read
    state = np.random.get_state()[1].copy()
    assert bootstrap_percentile(values) == first  # same seed, the same interval, to the bit
    assert (np.random.get_state()[1] == state).all()  # nor advanced
    assert bootstrap_percentile(dict(reversed(list(values.items())))) == first  # nor the order
    assert bootstrap_percentile(values, seed=SEED) == first
    # a Generator passed in is used as it is: one built from the same seed gives the same
    # interval, and it is advanced (a second draw from it is a new bootstrap)
    rng = np.random.default_rng(SEED)
    assert bootstrap_percentile(values, seed=rng) == first
    again = [bootstrap_percentile(values, seed=rng) for _ in range(5)]
    assert any(a != first for a in again)
    # other seeds may give other ends (their Monte Carlo error), never a different kind of answer
    others = {bootstrap_percentile(values, seed=s) for s in range(10)}
    assert len(others) > 1
    assert all(0 <= lo <= hi <= 1 for lo, hi in others)


def test_bootstrap_of_two_values_against_the_exact_binomial_percentiles():
    """Resampling n cases of which a share p passed, the bootstrap mean is Binomial(n, p)/n
    exactly: the percentile ends must be its quantiles (scipy.stats.binom), give or take the
    Monte Carlo error of the resamples (a lattice step)."""
    from oloproof.stats.passk import bootstrap_percentile

    for passed, n in [(30, 40), (2, 40), (7000, 10000), (1, 3)]:
        resamples = 20_000
        low, high = bootstrap_percentile({0.0: n - passed, 1.0: passed}, resamples=resamples)
        ref_low = stats.binom.ppf(0.025, n, passed / n) / n
        ref_high = stats.binom.ppf(0.975, n, passed / n) / n
        assert abs(low - ref_low) <= 1 / n + 1e-12 and abs(high - ref_high) <= 1 / n + 1e-12, (passed, n)
    assert bootstrap_percentile({1.0: 0}) is None


def test_import_and_help_load_neither_numpy_nor_scipy():
    """numpy and scipy are dependencies, loaded only where a statistic needs one: never by
    ``import oloproof`` or ``oloproof --help`` (a fresh process each)."""
    import subprocess
    import sys

    probe = "import sys; print(sorted(m for m in ('scipy', 'numpy') if m in sys.modules))"
    for setup in ("import oloproof",
                  "import oloproof.stats, oloproof.stats.passk, oloproof.stats.clusters, oloproof.stats.paired",
                  # the CLI's own group, as the console script runs it (main() ends with os._exit)
                  "from oloproof.cli.main import cli\ntry:\n    cli(['--help'], prog_name='oloproof')\n"
                  "except SystemExit:\n    pass",
                  "from oloproof.cli.main import cli\ntry:\n    cli(['run', '--help'], prog_name='oloproof')\n"
                  "except SystemExit:\n    pass"):
        out = subprocess.run([sys.executable, "-c", f"{setup}\n{probe}"], capture_output=True, text=True,
                             check=True).stdout
        assert out.strip().splitlines()[-1] == "[]", setup
    # the real entry point, through -X importtime (every module imported, as it happens)
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "oloproof", "--help"], capture_output=True,
                         text=True, check=True)
    assert "Usage" in out.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "click" in imported and not imported & {"numpy", "scipy"}
