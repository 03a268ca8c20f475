"""Stateful systems (issue #3): snapshot storage and state comparison.

* A 1 MB environment state per case: encoding the snapshot event and committing the case
  through SQLiteStore (hash chain included) vs storing the same bytes with raw sqlite3, one
  transaction per case, same settings (WAL, synchronous=FULL). Target: within 2×.
* state_matches (subset) and state_unchanged over 10,000 paths. Target: under 50 ms.

    python bench/bench_state.py [--cases 60]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import msgspec

from oloproof.events import CaseFinished, EnvironmentStateRecorded, encode, tag_of
from oloproof.store import SQLiteStore, StreamAppend


def big_state(case: int, target_bytes: int = 1_000_000) -> dict:
    orders = {}
    i = 0
    while True:
        orders[f"ord-{i:06d}"] = {"status": "delivered", "amount": i % 997, "case": case,
                                 "note": "x" * 40}
        i += 1
        if i % 1000 == 0 and len(encode(orders)) >= target_bytes:
            return {"orders": orders}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    states = [big_state(c) for c in range(args.cases)]
    size = len(encode(states[0]))
    fast = msgspec.json.Encoder()  # the floor encodes with msgspec as well, without sorting keys
    raws, ours, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # paired rounds: the floor, then ours, on fresh files
            # the floor: encode the snapshot and store the bytes, one FULL transaction per case
            conn = sqlite3.connect(Path(tmp) / f"raw{r}.db", isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("CREATE TABLE events (pos INTEGER PRIMARY KEY, stream TEXT, seq INTEGER, type TEXT,"
                         " payload BLOB, digest TEXT, UNIQUE (stream, seq))")
            t0 = time.perf_counter()
            for c, s in enumerate(states):
                p = fast.encode({"type": "environment_state.v1", "state": s})
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO events (stream, seq, type, payload, digest) VALUES (?, 0, ?, ?, ?)",
                             (f"run/{c}", "environment_state.v1", p, "0" * 64))
                conn.execute("COMMIT")
            t_raw = time.perf_counter() - t0
            conn.close()
            # ours, as every run does it: snapshot encoded (canonical, Raw), events, chain, commit
            store = SQLiteStore(Path(tmp) / f"ours{r}.db")
            t0 = time.perf_counter()
            for c, s in enumerate(states):
                events = [EnvironmentStateRecorded(msgspec.Raw(encode(s))), CaseFinished({"answer": "ok"})]
                store.commit([StreamAppend(f"run/{c}", 0, [encode(e) for e in events],
                                           [tag_of(e) for e in events])])
            t_ours = time.perf_counter() - t0
            store.close()
            raws.append(t_raw)
            ours.append(t_ours)
            ratios.append(t_ours / t_raw)
    mb = size * args.cases / 1e6
    print(f"1 MB state per case ({size:,} bytes), {args.cases} cases, {args.rounds} paired rounds, "
          "snapshot encoding included on both sides")
    print(f"  floor: msgspec encode + raw sqlite3    {mb / statistics.median(raws):7.1f} MB/s")
    print(f"  oloproof (canonical encode, chain)     {mb / statistics.median(ours):7.1f} MB/s   "
          f"ratio per round {statistics.median(ratios):.2f}× [{min(ratios):.2f}–{max(ratios):.2f}] (target ≤ 2×)")

    from oloproof.evaluate.registry import registry
    from oloproof.views import CaseView

    recorded = {"items": {f"k{i:05d}": {"v": i, "tag": "a"} for i in range(5000)}}
    expected = {"state": recorded}
    initial = {"items": {f"k{i:05d}": {"v": i, "tag": "a"} for i in range(5000)}}
    view = CaseView("c", 0, "f", {}, initial, expected, {}, {}, state=recorded)
    cls = registry()["state_matches"]
    ev = cls(cls.config_model.model_validate({"type": "state_matches", "mode": "subset"}))
    un = registry()["state_unchanged"]
    paths = [f"items.k{i:05d}.v" for i in range(5000)] + [f"items.k{i:05d}.tag" for i in range(5000)]
    ev2 = un(un.config_model.model_validate({"type": "state_unchanged", "paths": paths}))
    for name, e in (("state_matches subset", ev), ("state_unchanged", ev2)):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            verdict, checks = e.evaluate_paths(view)
            times.append(time.perf_counter() - t0)
        assert len(checks) == 10_000 and verdict[0] == "pass"
        print(f"  {name:22s} over 10,000 paths: {statistics.median(times) * 1000:6.1f} ms (target < 50 ms)")


if __name__ == "__main__":
    main()
