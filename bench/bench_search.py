"""The search projection (issue 16): building it, searching it, and what it adds to a run.

Targets: building the index from scratch at ≥ 100,000 steps/s; a search over 1,000,000 indexed
steps in < 50 ms at the median. A run no longer indexes (the first search after it catches the
index up: ``bench/perf.py``'s ``search`` section times both); this script reports what the
catch-up itself costs beside the commits it follows.

A real log (``SQLiteStore``, durability normal) of ``--steps`` step events: cases of 10 steps
(tool calls and results with order ids, messages, a final answer), 1,000 cases a run. Then,
with the log on disk and on tmpfs, interleaved rounds, median and range:

1. ``build``: :meth:`SQLiteStore.rebuild_search` — every step event read, decoded, its text
   made and indexed (content table and FTS5), in one transaction; against ``fts5 floor``: the
   same texts inserted into a bare FTS5 table with ``executemany`` (SQLite's own indexing
   cost, no reading or decoding) in the same round;
2. ``search``: :meth:`SQLiteStore.search_steps` (newest 50 hits, snippets, the query first
   checked on an empty index) for a rare word, a common word, a phrase, a prefix, a filtered
   query and a query matching nothing;
3. ``catch-up``: indexing 1,000 newly committed cases (what the first search after them does)
   against committing those cases.

    python bench/bench_search.py [--steps 1000000] [--rounds 3]      (about 10 minutes at 1M)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oloproof.events import StepRecorded, encode, search_fields, tag_of
from oloproof.store import SQLiteStore, StreamAppend
from oloproof.store.search import SearchFilter

STEPS_PER_CASE = 10
CASES_PER_RUN = 1000
TOOLS = ["lookup_order", "issue_refund", "search", "escalate_to_human", "delete_customer"]


def case_events(n: int) -> list[StepRecorded]:
    order = f"ord-{n:07d}"
    tool = TOOLS[n % len(TOOLS)]
    steps = [StepRecorded(1, "message", arguments={"text": f"customer asks about {order}: refund please"})]
    for k in range(4):
        name = TOOLS[(n + k) % len(TOOLS)] if k else tool
        steps.append(StepRecorded(len(steps) + 1, "tool_call", name, {"order_id": order, "attempt": k}))
        steps.append(StepRecorded(len(steps) + 1, "tool_result", name,
                                  result={"order_id": order, "status": "refunded" if k == 3 else "pending",
                                          "amount": 10 + n % 90}))
    steps.append(StepRecorded(len(steps) + 1, "final", result=f"Order {order} was refunded."))
    return steps


def write_log(path: Path, steps: int) -> None:
    store = SQLiteStore(path, durability="normal")
    cases = steps // STEPS_PER_CASE
    batch: list[StreamAppend] = []
    for n in range(cases):
        events = case_events(n)
        batch.append(StreamAppend(f"run{n // CASES_PER_RUN:05d}/case{n:07d}", 0, [encode(e) for e in events],
                                  [tag_of(e) for e in events]))
        if len(batch) == 2000:
            store.commit(batch)
            batch = []
    if batch:
        store.commit(batch)
    store._dirty = False  # measured below, not on close
    store.close()


def t_build(path: Path) -> tuple[float, int]:
    store = SQLiteStore(path, durability="normal")
    start = time.perf_counter()
    n = store.rebuild_search()
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed, n


def t_floor(path: Path) -> float:
    """The same texts into a bare FTS5 table: SQLite's indexing cost alone."""
    conn = sqlite3.connect(path, isolation_level=None)
    texts = [(pos, search_fields(t, bytes(p))[3]) for pos, t, p in
             conn.execute("SELECT pos, type, payload FROM events WHERE type = 'step.v1'")]
    conn.execute("DROP TABLE IF EXISTS floor")
    conn.execute("CREATE VIRTUAL TABLE floor USING fts5(text, tokenize='unicode61 remove_diacritics 2')")
    start = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO floor (rowid, text) VALUES (?, ?)", texts)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.execute("DROP TABLE floor")
    conn.close()
    return elapsed


QUERIES = {
    "rare word": ("ord0000777", SearchFilter()),  # never matches: tokens of ord-0000777 are ord, 0000777
    "rare phrase": ('"ord-0000777"', SearchFilter()),
    "common word": ("refunded", SearchFilter()),
    "prefix": ("escal*", SearchFilter()),
    "two words": ("delete_customer AND pending", SearchFilter()),
    "filtered": ("refund", SearchFilter(tool="issue_refund", kind="tool_result")),
    "no match": ("zzzzzz", SearchFilter()),
}


def t_search(path: Path, repeat: int) -> dict[str, list[float]]:
    store = SQLiteStore(path, readonly=True)
    out: dict[str, list[float]] = {}
    for _ in range(repeat):
        for name, (q, where) in QUERIES.items():
            start = time.perf_counter()
            store.search_steps(q, where, 50)
            out.setdefault(name, []).append(time.perf_counter() - start)
    store.close()
    return out


def t_catch_up(path: Path, start_case: int) -> tuple[float, float]:
    """Commit 1,000 new cases (in batches of 50, as a run's concurrent cases share commits),
    then index them: (commit seconds, catch-up seconds)."""
    store = SQLiteStore(path, durability="normal")
    events = [(n, case_events(n)) for n in range(start_case, start_case + CASES_PER_RUN)]
    t0 = time.perf_counter()
    for i in range(0, len(events), 50):
        store.commit([StreamAppend(f"new{start_case:07d}/case{n:07d}", 0, [encode(e) for e in ev],
                                   [tag_of(e) for e in ev]) for n, ev in events[i:i + 50]])
    t1 = time.perf_counter()
    store.index_search()
    t2 = time.perf_counter()
    store.close()
    return t1 - t0, t2 - t1


def spread(xs: list[float], scale: float = 1.0, unit: str = "s") -> str:
    return f"{statistics.median(xs) * scale:8.2f} {unit} [{min(xs) * scale:.2f}, {max(xs) * scale:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--searches", type=int, default=21)
    args = ap.parse_args()
    places = {"disk": Path(tempfile.gettempdir())}
    if Path("/dev/shm").is_dir():
        places["tmpfs"] = Path("/dev/shm")
    print(f"{args.steps:,} steps ({args.steps // STEPS_PER_CASE:,} cases); {args.rounds} interleaved rounds; "
          f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs")
    for place, where in places.items():
        with tempfile.TemporaryDirectory(dir=where) as d:
            path = Path(d) / "log.db"
            start = time.perf_counter()
            write_log(path, args.steps)
            print(f"\n[{place}] log written in {time.perf_counter() - start:.1f} s "
                  f"({path.stat().st_size / 1e6:.0f} MB)")
            builds, floors, indexed = [], [], 0
            for _ in range(args.rounds):
                elapsed, indexed = t_build(path)
                builds.append(elapsed)
                floors.append(t_floor(path))
            rate = [indexed / b for b in builds]
            print(f"build      {spread(builds)}  {statistics.median(rate):,.0f} steps/s "
                  f"[{min(rate):,.0f}, {max(rate):,.0f}] ({indexed:,} rows; target ≥ 100,000)")
            print(f"fts5 floor {spread(floors)}  {indexed / statistics.median(floors):,.0f} rows/s "
                  f"(build / floor {statistics.median(b / f for b, f in zip(builds, floors)):.2f}×)")
            times = t_search(path, args.searches)
            for name, xs in times.items():
                print(f"search {name:12s} {spread(xs, 1000, 'ms')}  (target < 50 ms)")
            commits, catches = [], []
            for r in range(args.rounds):
                c, i = t_catch_up(path, 10_000_000 + r * CASES_PER_RUN)
                commits.append(c)
                catches.append(i)
            print(f"catch-up of 1,000 new cases {spread(catches)} after committing them in "
                  f"{spread(commits)} ({statistics.median(i / c for i, c in zip(catches, commits)):.2f}× the commits)")
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
