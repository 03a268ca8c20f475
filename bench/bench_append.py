"""Append throughput: SQLiteStore.commit of cases of 20 events each (hash chain included)
vs raw sqlite3 executemany committing the same pre-encoded rows per case with the same
settings (WAL; synchronous FULL and NORMAL), measured in the same run (issue #2: ≥ 50 %).

    python bench/bench_append.py [--cases 3000] [--events 20]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from oloproof.events import StepRecorded, encode, tag_of
from oloproof.store import SQLiteStore, StreamAppend


def make_cases(n_cases: int, n_events: int):
    cases = []
    for c in range(n_cases):
        events = [StepRecorded(i + 1, "tool_call" if i % 2 == 0 else "tool_result", "lookup_order",
                               {"order_id": f"ord-{c:05d}"} if i % 2 == 0 else None,
                               None if i % 2 == 0 else {"status": "delivered", "amount": c})
                  for i in range(n_events)]
        cases.append((f"run/{c:06d}", [encode(e) for e in events], [tag_of(e) for e in events]))
    return cases


def raw(path: Path, cases, sync: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute("CREATE TABLE events (pos INTEGER PRIMARY KEY, stream TEXT NOT NULL, seq INTEGER NOT NULL,"
                 " type TEXT NOT NULL, payload BLOB NOT NULL, digest TEXT NOT NULL, UNIQUE (stream, seq))")
    rows = [[(s, i, t, p, "0" * 64) for i, (t, p) in enumerate(zip(types, payloads))]
            for s, payloads, types in cases]
    t0 = time.perf_counter()
    for case_rows in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO events (stream, seq, type, payload, digest) VALUES (?, ?, ?, ?, ?)",
                         case_rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


def ours(path: Path, cases, durability: str) -> float:
    store = SQLiteStore(path, durability=durability)
    t0 = time.perf_counter()
    for stream, payloads, types in cases:
        store.commit([StreamAppend(stream, 0, payloads, types)])
    elapsed = time.perf_counter() - t0
    assert store.verify().ok
    store.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--where", choices=["disk", "tmpfs"], default="disk")
    args = ap.parse_args()
    cases = make_cases(args.cases, args.events)
    n = args.cases * args.events
    with tempfile.TemporaryDirectory(dir="/dev/shm" if args.where == "tmpfs" else None) as tmp:
        for sync, durability in (("FULL", "full"), ("NORMAL", "normal")):
            ratios, raws, ourss = [], [], []
            for r in range(args.rounds):  # paired: each round times both sides back to back
                t_raw = raw(Path(tmp) / f"raw-{sync}-{r}.db", cases, sync)
                t_ours = ours(Path(tmp) / f"ours-{sync}-{r}.db", cases, durability)
                raws.append(n / t_raw)
                ourss.append(n / t_ours)
                ratios.append(t_raw / t_ours)
            print(f"[{args.where}] synchronous={sync:6s} raw sqlite3 {statistics.median(raws):9.0f} events/s   "
                  f"oloproof {statistics.median(ourss):9.0f} events/s   throughput ratio per round "
                  f"{statistics.median(ratios):.0%} [{min(ratios):.0%}–{max(ratios):.0%}] (target ≥ 50 %)")


if __name__ == "__main__":
    main()
