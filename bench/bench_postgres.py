"""A 5,000-case run on a local PostgreSQL log vs the same run on SQLite, and ``oloproof push``
of a 5,000-case run (issue 30).

Targets: the PostgreSQL run costs at most 2× the SQLite run, with durability equal (SQLite
``synchronous=FULL``, PostgreSQL ``synchronous_commit=on`` and ``fsync=on``: every committed
case is on disk); ``push`` of a 5,000-case run into an empty PostgreSQL log takes under 10 s.

Whole processes (``oloproof run``, interpreter start included), the suite of
``bench/bench_run.py`` (a trivial agent: 5 @tool calls a case, three evaluators), each round on
a fresh log (a new SQLite file; a new database), the two backends interleaved round by round.
The server is a throwaway cluster of the machine's PostgreSQL (``tests/postgres_server.py``,
with the durable settings), on 127.0.0.1 over TCP, its data on the same disk as the SQLite log.

    python bench/bench_postgres.py [--cases 5000] [--rounds 5]

Measured (2 shared cores, PostgreSQL 15.18 of Debian 12 on 127.0.0.1, both logs on the
container's disk, fsync on; 5,000 cases, 5 interleaved rounds):

    SQLite 3.09 [3.02–3.26] s, PostgreSQL 5.22 [4.93–5.75] s; ratio per round 1.62 [1.56–1.86]× (≤ 2×)
    push of the 5,000-case run, SQLite → an empty PostgreSQL log: 3.75 [3.62–4.01] s (< 10 s);
    pull back, PostgreSQL → a new SQLite log: 2.83 [2.65–3.10] s

Where PostgreSQL's extra second goes: a round trip and a server-side insert per case (about
0.4 ms against SQLite's 0.34 ms), the search index (≈0.9 s for 50,000 steps, written in one
go at the end against SQLite's 0.4 s FTS5 catch-up), the connection and, for a new log, the
schema (≈0.1 s). Earlier designs measured on the way: the search rows written in every
case's transaction, 1.96×; a separate BEGIN/INSERT/COMMIT per case, 2.3× (at 1,000 cases).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from bench_run import ENV, make_suite  # noqa: E402 - the bench folder is put on the path above
from postgres_server import DURABLE, cluster  # noqa: E402 - so is the tests' server helper


def oloproof(*args: str, cwd: Path) -> tuple[float, str]:
    """Wall time of one ``oloproof`` process, and what it printed."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "oloproof", *args], cwd=cwd, capture_output=True, text=True, env=ENV)
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1):
        raise SystemExit(f"oloproof {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return dt, p.stdout + p.stderr


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="oloproof-bench-pg-"))
    try:
        suite = make_suite(root / "suite", args.cases)
        oloproof("--help", cwd=suite)  # compile and cache bytecode once
        with cluster(DURABLE) as server:
            print(f"PostgreSQL {server.sql('SHOW server_version')[0][0]} on 127.0.0.1:{server.port}; "
                  f"fsync {server.sql('SHOW fsync')[0][0]}, synchronous_commit "
                  f"{server.sql('SHOW synchronous_commit')[0][0]}")
            lite_times, pg_times = [], []
            for r in range(args.rounds):
                db = root / f"log{r}.db"
                lite, _ = oloproof("run", "-q", "--db", str(db), cwd=suite)
                url = server.new_database("bench")
                pg, _ = oloproof("run", "-q", "--db", url, cwd=suite)
                lite_times.append(lite)
                pg_times.append(pg)
                print(f"round {r + 1}: SQLite {lite:.2f} s, PostgreSQL {pg:.2f} s ({pg / lite:.2f}×)", flush=True)
            ratios = [p / s for p, s in zip(pg_times, lite_times)]
            print(f"{args.cases} cases, {args.rounds} interleaved rounds: SQLite {spread(lite_times)} s, "
                  f"PostgreSQL {spread(pg_times)} s; ratio per round {spread(ratios)}× (target ≤ 2×)")
            pushes, pulls = [], []
            for r in range(args.rounds):
                url = server.new_database("push")
                dt, out = oloproof("push", "latest", "--to", url, "--db", str(root / "log0.db"), cwd=suite)
                assert "seal verified on arrival" in out, out
                pushes.append(dt)
                back = root / f"back{r}.db"
                dt, out = oloproof("push", "latest", "--from", url, "--db", str(back), cwd=suite)
                assert "seal verified on arrival" in out, out
                pulls.append(dt)
            print(f"push of the {args.cases}-case run, SQLite → an empty PostgreSQL log: {spread(pushes)} s "
                  f"(target < 10 s); pull back, PostgreSQL → a new SQLite log: {spread(pulls)} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
