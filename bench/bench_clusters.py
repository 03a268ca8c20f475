"""Metamorphic pairs (issue #5): the cluster-aware interval over 10,000 clusters (target:
under a second, fixed seed), and the per-case cost of derived cases vs source cases.

    python bench/bench_clusters.py
"""

from __future__ import annotations

import time

import numpy as np

from oloproof.stats.clusters import clustered_rate_interval


def main() -> None:
    rng = np.random.default_rng(20261129)
    rows = [(int(y), 2, int(m)) for y, m in zip(rng.binomial(2, 0.9, 10_000), rng.binomial(1, 0.01, 10_000))]
    rows = [(min(y, 2 - m), 2 - m, m) for y, _, m in rows]


    t0 = time.perf_counter()
    r = clustered_rate_interval(rows)
    dt = time.perf_counter() - t0
    print(f"cluster-aware interval over {len(rows):,} clusters: {dt * 1000:.1f} ms (target < 1 s) "
          f"→ {r.rate:.4f} [{r.low:.4f}, {r.high:.4f}]")


def derived_cost(sources: int = 2000) -> None:
    """Same work, 2N cases: N sources + N derived (one transform) vs 2N sources."""
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_run import ENV, make_suite, oloproof_cmd

    tmp = Path(tempfile.mkdtemp())
    try:
        plain = make_suite(tmp / "plain", 2 * sources)
        derived = make_suite(tmp / "derived", sources)
        cfg = derived / "oloproof.yaml"
        cfg.write_text(cfg.read_text() + "metamorphic:\n  transforms:\n"
                       "    - {name: again, field: key, template: '{value}'}\n")
        best = {}
        for name, folder in (("2N sources", plain), ("N sources + N derived", derived)):
            times = []
            for _ in range(3):
                shutil.rmtree(folder / ".oloproof", ignore_errors=True)
                t0 = time.perf_counter()
                subprocess.run(oloproof_cmd("run", "--durability", "normal"), cwd=folder, env=ENV,
                               capture_output=True, check=False)
                times.append(time.perf_counter() - t0)
            best[name] = min(times)
            print(f"{name:24s} {2 * sources} cases: {best[name]:.2f} s "
                  f"({best[name] / (2 * sources) * 1e6:.0f} µs/case)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
    derived_cost()
