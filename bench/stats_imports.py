"""What statistics cost a process (issue 24, item 7): numpy and scipy against the hand-written
incomplete beta (``oloproof.stats.beta``), so that the choice of where each is used rests on
figures measured in one run.

Interleaved rounds (each round times every measure once, in turn; fresh processes, bytecode
cached); median and range of each:

1. **start-up** — ``python -c pass`` (the baseline of the ratios), ``python -m oloproof
   --help``, a whole ``oloproof run`` of a 40-case suite (``bench_run``'s trivial agent, three
   evaluators), and for scale ``import numpy`` and ``import scipy.special``; and which of numpy
   and scipy ``import oloproof``, ``--help`` and the run load (``python -X importtime``);
2. **a run's intervals in a fresh process**, timed inside the child (oloproof already imported,
   as in a run) from before the statistics' first import to the last interval: the seed
   report's 13 rate rows and 2 quantile rows (40 cases) with the hand-written routines (the
   baseline) and with ``scipy.special`` (``betaincinv``, ``bdtr``/``bdtrc``) import included —
   the two are checked to agree to 1e-12; and a pass^k bootstrap (2,000 resamples, the path
   only cases with more than k trials take) with numpy import included
   (``oloproof.stats.passk``) against the ``random.Random`` bootstrap it replaced, over 40 and
   10,000 cases;
3. **per call**, imports paid: each routine against its scipy/stdlib counterpart, and the
   break-even — how many calls in one process before scipy's import is paid back.

    python bench/stats_imports.py [--rounds 7]     (about half a minute)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_run import ENV, make_suite  # noqa: E402

# (passed, observed, missing) of every rate row of the seed report (tests/test_stats.py's
# SEED_ROWS), and its two quantile rows: steps (p95) and tool calls (p50) of 39 cases, 1 missing
RATE_ROWS = [(33, 40, 0), (39, 39, 1), (29, 39, 1), (24, 40, 0), (37, 40, 0), (39, 40, 0), (0, 6, 1),
             (0, 7, 0), (27, 29, 0), (6, 10, 0), (29, 30, 0), (26, 30, 0), (27, 29, 1)]
STEPS = [2] * 6 + [4] * 20 + [6] * 3 + [8] * 4 + [10] * 6
CALLS = [1] * 6 + [2] * 20 + [3] * 3 + [4] * 4 + [5] * 6

# the package is loaded before the clock starts, as in a run: what is timed is what the
# statistics add (their modules, numpy or scipy, the computation)
_PRELUDE = f"import sys, time\nsys.path.insert(0, {str(ROOT)!r})\nimport oloproof\nt0 = time.perf_counter()\n"
_REPORT = "print(repr(time.perf_counter() - t0))\nprint(repr(out))\n"

HAND = _PRELUDE + f"""
from oloproof.stats import quantile_interval, rate_interval
out = [(r.low, r.high) for r in (rate_interval(*c) for c in {RATE_ROWS!r})]
for values, q in (({STEPS!r}, 0.95), ({CALLS!r}, 0.5)):
    qi = quantile_interval(values, 1, 0, q)
    out.append((qi.low, qi.high))
""" + _REPORT

SCIPY = _PRELUDE + f"""
import math
from scipy import special

def cp(k, n):
    return (0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, 0.025)),
            1.0 if k == n else float(special.betaincinv(k + 1, n - k, 0.975)))

def ranks(total, q):
    low = max((j for j in range(1, total + 1) if special.bdtr(j - 1, total, q) <= 0.025), default=None)
    high = next((j for j in range(1, total + 1) if special.bdtrc(j - 1, total, q) <= 0.025), None)
    return low, high

out = [(cp(p, o + m)[0], cp(p + m, o + m)[1]) for p, o, m in {RATE_ROWS!r}]
for values, q in (({STEPS!r}, 0.95), ({CALLS!r}, 0.5)):
    s, missing = sorted(values), 1
    low, high = ranks(len(s) + missing, q)
    out.append((s[low - missing - 1] if low is not None and low > missing else None,
                s[high - 1] if high is not None and high <= len(s) else None))
""" + _REPORT


def population(cases: int) -> dict:
    """pass^3 of cases observed in 5 trials: C(c, 3)/C(5, 3) for c passed, in fixed shares."""
    from fractions import Fraction

    shares = {5: 0.6, 4: 0.2, 3: 0.1, 2: 0.05, 0: 0.05}
    values: dict = {}
    for c, share in shares.items():
        v = Fraction([0, 0, 0, 1, 4, 10][c], 10)
        values[v] = values.get(v, 0) + round(cases * share)
    return values


# the bootstrap ``oloproof.stats.passk`` drew before numpy: random.Random, case by case
OLD_BOOTSTRAP = """
import math, random
from fractions import Fraction

def old_bootstrap(values, resamples=2000, seed=20130):
    pop = [float(v) for v, n in sorted(values.items()) for _ in range(n)]
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(pop, k=len(pop))) / len(pop) for _ in range(resamples))
    return means[50], means[resamples - 51]
"""


def boot_numpy(cases: int) -> str:
    return _PRELUDE + f"""
from fractions import Fraction
from oloproof.stats.passk import bootstrap_percentile
out = bootstrap_percentile({population(cases)!r})
""" + _REPORT


def boot_stdlib(cases: int) -> str:
    return _PRELUDE + OLD_BOOTSTRAP + f"out = old_bootstrap({population(cases)!r})\n" + _REPORT


def child(code: str) -> tuple[float, str]:
    """(seconds measured inside a fresh process, what it printed after)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=True)
    lines = out.stdout.splitlines()
    return float(lines[0]), "\n".join(lines[1:])


def wall(cmd: list[str], cwd: Path | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=ENV, cwd=cwd, check=True)
    return time.perf_counter() - t


def loaded(cmd: list[str], cwd: Path | None = None) -> list[str]:
    """numpy and scipy modules a command imports (``-X importtime`` lists every import)."""
    out = subprocess.run([sys.executable, "-X", "importtime", *cmd], capture_output=True, text=True, env=ENV,
                         cwd=cwd, check=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    return sorted(n for n in names if n.split(".")[0] in ("numpy", "scipy") and "." not in n)


def spread(xs: list[float], unit: float = 1e3) -> str:
    return f"{statistics.median(xs) * unit:8.1f} [{min(xs) * unit:.1f}, {max(xs) * unit:.1f}]"


def per_call(stmt, number: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import numpy
    import scipy

    print(f"{args.rounds} interleaved rounds; python {sys.version.split()[0]}, numpy {numpy.__version__}, "
          f"scipy {scipy.__version__}, {os.cpu_count()} CPUs; times in ms: median [min, max]")
    with tempfile.TemporaryDirectory() as d:
        suite = make_suite(Path(d) / "suite", 40)
        run = [sys.executable, "-m", "oloproof", "run", "--durability", "normal"]
        starts = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "oloproof --help": [sys.executable, "-m", "oloproof", "--help"],
            "oloproof run (40 cases)": run,
            "import numpy": [sys.executable, "-c", "import numpy"],
            "import scipy.special": [sys.executable, "-c", "import scipy.special"],
        }
        fresh = {"hand-written (baseline)": HAND, "scipy.special + import": SCIPY,
                 "bootstrap 40: random (old)": boot_stdlib(40), "bootstrap 40: numpy + import": boot_numpy(40),
                 "bootstrap 10k: random (old)": boot_stdlib(10_000),
                 "bootstrap 10k: numpy + import": boot_numpy(10_000)}
        for cmd in starts.values():  # compile and cache bytecode once
            wall(cmd, suite)
        _, hand = child(HAND)
        _, ref = child(SCIPY)
        pairs = [(a, b) for x, y in zip(eval(hand), eval(ref)) for a, b in zip(x, y)]
        if any((a is None) != (b is None) for a, b in pairs):
            raise SystemExit(f"the two disagree on a bound's existence:\n{hand}\n{ref}")
        agree = max(abs(a - b) for a, b in pairs if a is not None)
        assert agree < 1e-12, agree
        samples: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, cmd in starts.items():
                samples.setdefault(name, []).append(wall(cmd, suite))
            for name, code in fresh.items():
                samples.setdefault(name, []).append(child(code)[0])

        print("\n1. start-up, whole process (wall)")
        base = statistics.median(samples["python -c pass"])
        for name in starts:
            m = statistics.median(samples[name])
            print(f"  {name:26s} {spread(samples[name])}  {m / base:5.2f}× python, +{(m - base) * 1e3:.0f} ms")
        for label, cmd in (("import oloproof", ["-c", "import oloproof"]),
                           ("oloproof --help", ["-m", "oloproof", "--help"]),
                           ("oloproof run (40 cases)", ["-m", "oloproof", "run", "--durability", "normal"])):
            print(f"  {label} imports: {loaded(cmd, suite) or 'neither numpy nor scipy'}")

        print(f"\n2. a run's intervals in a fresh process (13 rate rows, 2 quantile rows; "
              f"the two agree to {agree:.1e})")
        base = statistics.median(samples["hand-written (baseline)"])
        for name in fresh:
            m = statistics.median(samples[name])
            print(f"  {name:30s} {spread(samples[name])}  {m / base:6.1f}× hand-written")

        print("\n3. per call, imports paid (µs)")
        from scipy import special

        from oloproof.stats.beta import betaincinv, binomial_cdf
        from oloproof.stats.passk import bootstrap_percentile

        calls = [("betaincinv(33, 8, 0.025)", lambda: betaincinv(33, 8, 0.025),
                  lambda: special.betaincinv(33, 8, 0.025)),
                 ("betaincinv(3.3, 40.2, .025)", lambda: betaincinv(3.3, 40.2, 0.025),
                  lambda: special.betaincinv(3.3, 40.2, 0.025)),
                 ("betaincinv(999000, 1001, .025)", lambda: betaincinv(999000, 1001, 0.025),
                  lambda: special.betaincinv(999000, 1001, 0.025)),
                 ("binomial_cdf(20, 41, 0.5)", lambda: binomial_cdf(20, 41, 0.5), lambda: special.bdtr(20, 41, 0.5))]
        # what scipy's import adds to a run (oloproof loaded: some of scipy's own imports are too)
        import_cost = statistics.median(samples["scipy.special + import"])
        print(f"  (scipy.special's import in a run: {import_cost * 1e3:.0f} ms)")
        for name, ours, theirs in calls:
            a, b = per_call(ours, 2000), per_call(theirs, 2000)
            print(f"  {name:32s} hand-written {a * 1e6:6.1f}   scipy {b * 1e6:5.1f}   "
                  f"scipy's import paid back after {import_cost / (a - b):,.0f} calls")
        ns: dict = {}
        exec(OLD_BOOTSTRAP, ns)
        for cases in (40, 10_000):
            values = population(cases)
            before, now = ns["old_bootstrap"](values), bootstrap_percentile(values)
            a = per_call(lambda values=values: ns["old_bootstrap"](values), 1)
            b = per_call(lambda values=values: bootstrap_percentile(values), 5)
            print(f"  bootstrap, {cases:6,} cases        random (old) {a * 1e6:9,.0f}   numpy {b * 1e6:6,.0f}   "
                  f"{a / b:6.1f}× faster; interval {before[0]:.4f}–{before[1]:.4f} then, "
                  f"{now[0]:.4f}–{now[1]:.4f} now")

if __name__ == "__main__":
    main()
