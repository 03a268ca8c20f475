"""Memory is flat in the suite's size under every executor (issue #10), with replays too.

The stateful-agent example (metamorphic pairs, and control + fault replays of every refund)
scaled to N source cases (each copy a distinct case, so every replay runs), run at two sizes
under each executor; the figure is the peak RSS of the largest process of the run (the
driver), and the growth per case between the two sizes.

    python bench/bench_memory.py [--sizes 4000,16000] [--executors serial,concurrent,workers,dask]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suites import scaled_example

EXECUTORS = {"serial": [], "concurrent": ["--concurrency", "4"], "workers": ["--workers", "2"],
             "dask": ["--executor", "dask", "--workers", "2"]}
REPLAYS = "  - {type: fault_recovery, tool: issue_refund, fault: error, escalate_tools: [escalate_to_human]}\n"


def make_suite(folder: Path, n: int, replays: bool) -> Path:
    scaled_example("stateful_agent", folder, n)
    config = (folder / "oloproof.yaml").read_text().replace("validity_labels: labels/injected.jsonl, ", "")
    if not replays:
        config = config.replace(REPLAYS, "")
        release = folder / "release.yaml"
        release.write_text("\n".join(line for line in release.read_text().splitlines()
                                     if "recovers_from" not in line) + "\n")
    (folder / "oloproof.yaml").write_text(config)
    return folder


def peak(cmd: list[str], cwd: Path) -> tuple[float, float]:
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "p = subprocess.run(sys.argv[1:], capture_output=True); "
             "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], cwd=cwd, capture_output=True, text=True)
    dt, rss, code = out.stdout.split()
    if int(code) not in (0, 1):
        raise SystemExit(f"{cmd} failed ({code})")
    return float(dt), int(rss) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4000,16000")
    ap.add_argument("--executors", default=",".join(EXECUTORS))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="oloproof-mem-"))
    try:
        for replays in (False, True):
            for name in args.executors.split(","):
                rows = []
                for n in sizes:
                    folder = make_suite(tmp / f"{name}-{n}-{replays}", n, replays)
                    dt, rss = peak([sys.executable, "-m", "oloproof", "run", "--durability", "normal",
                                    *EXECUTORS[name]], folder)
                    rows.append((n, rss, dt))
                    shutil.rmtree(folder, ignore_errors=True)
                (n0, r0, _), (n1, r1, _) = rows[0], rows[-1]
                cases = "source cases (+ a derived case each)"
                print(f"{'with' if replays else 'no  '} replays  {name:10s} "
                      + "   ".join(f"{n:6d} {cases}: {rss:6.1f} MiB ({dt:5.1f} s)" for n, rss, dt in rows)
                      + f"   growth {(r1 - r0) * 1024 / (n1 - n0) / 2:5.2f} KiB per case")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
