"""CPU-bound runs (issue #10): the support-agent example scaled to 20,000 cases, serial vs
``--workers 2`` vs Dask (a LocalCluster of 2 workers), whole processes, interleaved rounds,
the log on disk and on tmpfs. Targets on a 2-core machine: ``--workers 2`` ≥ 1.6× faster than
serial, Dask ≥ 1.4×. Also reports the Dask path's fixed cost (a 1-case run) and its per-case
overhead beyond the process pool's.

    python bench/bench_workers.py [--cases 20000] [--rounds 3] [--where both]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suites import scaled_example, spread, timed


def make_suite(folder: Path, n: int) -> Path:
    """The example, its 40 requests repeated (each copy a distinct case) up to ``n`` cases."""
    return scaled_example("support_agent", folder, n)


MODES = {"serial": [], "workers": ["--workers", "2"], "dask": ["--executor", "dask", "--workers", "2"]}


def measure(where: str, root: Path, n: int, rounds: int) -> None:
    suite = make_suite(root / "suite", n)
    one = make_suite(root / "one", 1)
    run = [sys.executable, "-m", "oloproof", "run"]
    timed([sys.executable, "-m", "oloproof", "--help"], suite)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    fixed: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode, args in MODES.items():
            for folder, out in ((suite, times), (one, fixed)):
                shutil.rmtree(folder / ".oloproof", ignore_errors=True)
                out[mode].append(timed(run + args, folder))
    print(f"[{where}] support-agent x {n} cases, {rounds} interleaved rounds, whole processes:")
    for mode in MODES:
        line = f"  {mode:8s} {spread(times[mode])} s  (a 1-case run: {spread(fixed[mode])} s)"
        if mode != "serial":
            line += (f"   speed-up per round {spread([s / t for s, t in zip(times['serial'], times[mode])])}× "
                     f"(target ≥ {'1.6' if mode == 'workers' else '1.4'}×)")
        print(line)
    per_case = [((d - df) - (w - wf)) / n * 1e6 for d, df, w, wf in
                zip(times["dask"], fixed["dask"], times["workers"], fixed["workers"])]
    serial_case = [(s - sf) / n * 1e6 for s, sf in zip(times["serial"], fixed["serial"])]
    print(f"  Dask path: fixed cost beyond serial {spread([d - s for d, s in zip(fixed['dask'], fixed['serial'])])} s; "
          f"per-case overhead beyond the process pool {spread(per_case)} µs (a serial case costs "
          f"{spread(serial_case)} µs)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--where", choices=["disk", "tmpfs", "both"], default="both")
    args = ap.parse_args()
    places = {"disk": None, "tmpfs": "/dev/shm"}
    for where in (list(places) if args.where == "both" else [args.where]):
        tmp = Path(tempfile.mkdtemp(prefix="oloproof-cpu-", dir=places[where]))
        try:
            measure(where, tmp, args.cases, args.rounds)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
