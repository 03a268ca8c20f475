"""Coverage of the judge-corrected interval (issue 27; docs/model-judges.md), by simulation.

A suite of ``n`` cases whose true pass rate is θ is graded by a judge with sensitivity Se and
specificity Sp; a person labels ``m`` of the judged cases chosen at random. For each scenario
and each of ``--reps`` seeded repetitions, the corrected interval
(:func:`oloproof.stats.correction.corrected_rate`, ``rogan_gladen_bonferroni``) is computed from
the judge's verdicts and the labels, and we count how often it holds θ. Beside it, the plain
Clopper–Pearson interval of the judge's own pass rate — what a report that trusts the judge
would show — and how often *it* holds θ.

    python bench/judge_coverage.py [--reps 2000] [--seed 20261203]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from oloproof.stats.correction import corrected_rate
from oloproof.stats.intervals import clopper_pearson

# (θ, Se, Sp, cases, labels)
SCENARIOS = [
    (0.70, 0.95, 0.90, 500, 100),
    (0.70, 0.90, 0.95, 500, 100),
    (0.50, 0.95, 0.75, 500, 100),
    (0.90, 0.98, 0.80, 1000, 200),
    (0.80, 0.90, 0.95, 1000, 200),
    (0.80, 0.90, 0.95, 2000, 1000),
    (0.30, 0.90, 0.97, 400, 80),
    (0.70, 0.95, 0.90, 120, 20),
]


def simulate(theta: float, se: float, sp: float, n: int, m: int, reps: int, rng: np.random.Generator) -> dict:
    covered = naive_covered = 0
    widths = []
    for _ in range(reps):
        truth = rng.random(n) < theta
        judged = np.where(truth, rng.random(n) < se, rng.random(n) >= sp)
        labelled = rng.choice(n, size=m, replace=False)
        t, j = truth[labelled], judged[labelled]
        tp, ff = int(np.sum(t & j)), int(np.sum(t & ~j))
        tf, fp = int(np.sum(~t & ~j)), int(np.sum(~t & j))
        passed = int(judged.sum())
        c = corrected_rate(passed, n, 0, true_pass=tp, false_fail=ff, true_fail=tf, false_pass=fp)
        assert c.low is not None and c.high is not None
        covered += c.low <= theta <= c.high
        widths.append(c.high - c.low)
        lo, hi = clopper_pearson(passed, n)
        naive_covered += lo <= theta <= hi
    return {"coverage": covered / reps, "width": float(np.median(widths)), "naive": naive_covered / reps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{args.reps} repetitions per scenario, seed {args.seed}; nominal level 95 %")
    print("| θ | Se | Sp | cases | labels | corrected interval holds θ | median width "
          "| the judge's own interval holds θ |")
    print("|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for theta, se, sp, n, m in SCENARIOS:
        r = simulate(theta, se, sp, n, m, args.reps, rng)
        print(f"| {theta:.2f} | {se:.2f} | {sp:.2f} | {n} | {m} | {r['coverage'] * 100:.1f} % | "
              f"{r['width'] * 100:.1f} pts | {r['naive'] * 100:.1f} % |")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
