"""Whole-process `oloproof run` vs the hand-written baseline, `oloproof eval` speed, and peak
memory as the suite grows (issue #2).

Targets: run ≤ 2× the baseline's wall time (5,000 cases of a trivial agent: 5 @tool calls,
three evaluators, interpreter start included), with the log on disk and on tmpfs (where fsync
is free and only software cost shows) — reported as the fixed start-up and the per-case cost
too; eval from the events ≥ 5,000 cases/s; peak memory flat.

    python bench/bench_run.py [--cases 5000] [--rounds 5] [--where both] [--memory 10000,50000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Children run as on a user's machine: bytecode caching on (some sandboxes set
# PYTHONDONTWRITEBYTECODE, which makes every process recompile every module it imports).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

APP = '''\
from oloproof import current_case, system, tool


@tool
def fetch(key):
    return {"key": key, "value": len(key)}


@tool
def transform(value):
    return {"value": value * 2}


@tool
def store(key, value):
    return {"stored": key, "value": value}


@tool
def notify(key):
    return {"notified": key}


@system(name="bench-agent", version="1", records=("agent_trajectory/v1",))
def run(case):
    key = case.input["key"]
    a = fetch(key=key)
    b = transform(value=a["value"])
    fetch(key=key + "x")
    store(key=key, value=b["value"])
    notify(key=key)
    current_case().finish("success")
    return {"answer": f"done {key}"}
'''

CONFIG = '''\
system: {name: bench-agent, version: "1", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: agent_tool_called, tool_name: fetch}
  - {type: agent_max_steps, max_steps: 10}
'''


def make_suite(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP)
    (folder / "oloproof.yaml").write_text(CONFIG)
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(n):
            key = f"k{i:06d}"
            fh.write(json.dumps({"id": f"case_{i:06d}", "input": {"key": key},
                                 "expected": {"answer": f"done {key}"}}) + "\n")
    return folder


def timed(cmd: list[str], cwd: Path) -> tuple[float, int, str]:
    """Wall time, peak RSS (KiB) of the child, and stdout."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "dt = time.perf_counter() - t; "
             "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode); "
             "sys.stderr.write(p.stdout + p.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], cwd=cwd, capture_output=True, text=True,
                         env=ENV)
    dt, rss, code = out.stdout.split()
    if int(code) not in (0, 1):
        raise SystemExit(f"{cmd} failed ({code}):\n{out.stderr}")
    return float(dt), int(rss), out.stderr


def oloproof_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "oloproof", *args]


def paired(rounds: int, suite: Path, n: int) -> tuple[list[float], list[float]]:
    """Interleaved rounds: the baseline, then ``oloproof run``, on fresh logs each time."""
    bases, runs = [], []
    for r in range(rounds):
        for db in suite.glob("*.db*"):
            db.unlink()
        base, _, _ = timed([sys.executable, str(HERE / "baseline_recorder.py"), str(suite),
                            str(suite / f"base{r}.db")], suite)
        shutil.rmtree(suite / ".oloproof", ignore_errors=True)
        ours, _, _ = timed(oloproof_cmd("run"), suite)
        bases.append(base)
        runs.append(ours)
    return bases, runs


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"


def measure_run(where: str, root: Path, n: int, rounds: int) -> None:
    suite = make_suite(root / "suite", n)
    tiny = make_suite(root / "tiny", 1)
    timed(oloproof_cmd("--help"), suite)  # compile and cache bytecode once
    bases, runs = paired(rounds, suite, n)
    tiny_bases, tiny_runs = paired(rounds, tiny, 1)
    ratios = [r / b for r, b in zip(runs, bases)]
    print(f"[{where}] {n} cases, {rounds} interleaved rounds: baseline {spread(bases)} s, "
          f"oloproof run {spread(runs)} s; ratio per round {spread(ratios)}× (target ≤ 2×)")
    start = [r - b for r, b in zip(tiny_runs, tiny_bases)]
    per_case = [(r - tr) / (b - tb) for r, b, tr, tb in zip(runs, bases, tiny_runs, tiny_bases)]
    print(f"[{where}]   fixed start-up beyond the baseline's (1-case runs): {spread(start)} s; "
          f"per-case cost relative to the baseline: {spread(per_case)}×")
    return suite


def measure_eval(suite: Path, n: int) -> None:
    """Re-evaluation from the events: the evaluation cache is emptied first, so neither figure
    is a read of cached results."""
    import sqlite3

    def drop_cache() -> None:
        conn = sqlite3.connect(suite / ".oloproof" / "log.db")
        conn.execute("DELETE FROM evaluations")
        conn.commit()
        conn.close()

    drop_cache()
    t_eval, _, _ = timed(oloproof_cmd("eval", "latest"), suite)
    sys.path.insert(0, str(suite))
    from oloproof.app.evidence import evaluate_run
    from oloproof.app.project import load_project
    from oloproof.app.runs import latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(suite / ".oloproof" / "log.db")
    project = load_project(suite)
    run_id = latest_run_id(store)

    t0 = time.perf_counter()
    evaluate_run(store, run_id, project.suite)  # no eval_key: from the events
    loop = time.perf_counter() - t0
    store.close()
    print(f"oloproof eval from the events: {n / loop:.0f} cases/s in the evaluation loop, "
          f"{t_eval:.2f} s whole process ({n / t_eval:.0f} cases/s incl. start-up) (target ≥ 5,000)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--memory", default="10000,50000")
    ap.add_argument("--where", choices=["disk", "tmpfs", "both"], default="both",
                    help="the log on disk, on tmpfs (/dev/shm: fsync is free, only software cost shows), or both")
    args = ap.parse_args()
    places = {"disk": None, "tmpfs": "/dev/shm"}
    wanted = list(places) if args.where == "both" else [args.where]
    for where in wanted:
        tmp = Path(tempfile.mkdtemp(prefix="oloproof-bench-", dir=places[where]))
        try:
            suite = measure_run(where, tmp, args.cases, args.rounds)
            if where == wanted[0]:
                measure_eval(suite, args.cases)
                for size in [int(s) for s in args.memory.split(",") if s]:
                    big = make_suite(tmp / f"mem{size}", size)
                    dt, rss, _ = timed(oloproof_cmd("run", "--durability", "normal"), big)
                    dt_e, rss_e, _ = timed(oloproof_cmd("eval", "latest"), big)
                    print(f"{size:6d} cases  run peak RSS {rss / 1024:6.1f} MiB ({dt:.1f} s)   "
                          f"eval peak RSS {rss_e / 1024:6.1f} MiB ({dt_e:.1f} s)")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
