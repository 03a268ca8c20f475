"""What the seal and the readers' audit cost as a run grows (runs of 5,000 and 50,000 cases of
bench_run's trivial agent: 5 @tool calls, three evaluators).

The log is built once per size and place with ``oloproof run`` in a subprocess (its wall
time is one sample, the denominator of the seal's share), then every figure is taken in
interleaved rounds (each round visits every place and size in turn) and reported as the
median and the range:

1. the seal: what :func:`oloproof.app.audit.seal` does before its commit, step by step — the
   ``store.heads(run_id + "/")`` query (``GROUP BY stream`` over the run's events); the run
   stream's head as seal() asks for it, ``store.heads(run_id)`` (a prefix query, so it groups
   the run's case streams too); the streams map, the seal digest and the encoded
   ``run_sealed`` event — as a time and as a share of the run's wall time; and, for
   reference, ``seal()`` in full, commit included (durability full), on a copy of the log;
2. ``oloproof gate RUN`` as a whole process (interpreter start included, peak RSS), beside
   the in-process split of the same work: ``audit_run`` alone, and ``run_report`` (what gate
   calls) with the time spent in its ``require_intact`` taken out — the evaluation alone —
   so the audit's share shows; cases/s for each;
3. ``oloproof audit verify`` as a whole process on the same log;
4. the bytes of the ``run_sealed`` payload (read from the events table);
5. resolving ``latest`` (``run_headers``) on the log holding the run; and ``load_run``
   (which reads and decodes the run stream, seal included; a gate calls it several times).

In-process readers open the log read-only, as the commands do, on a fresh connection per
measure. With the log on disk and on tmpfs (/dev/shm: fsync is free, only software cost
shows); the reads run from the page cache either way, so the two places differ mostly in
the run's and the full seal's commits.

    python bench/bench_seal.py [--cases 5000,50000] [--rounds 5] [--where both]   (about 5 minutes)
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_run import make_suite, oloproof_cmd, timed
from suites import spread

PLACES = {"disk": None, "tmpfs": "/dev/shm"}


@dataclass
class Log:
    where: str
    n: int
    suite: Path
    run_id: str
    run_wall: float  # s, the one build
    run_rss: int  # KiB
    seal_bytes: int
    log_bytes: int
    samples: dict[str, list[float]] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.suite / ".oloproof" / "log.db"

    def add(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)


def build(where: str, root: Path, n: int) -> Log:
    suite = make_suite(root / f"suite{n}", n)
    timed(oloproof_cmd("--help"), suite)  # compile and cache bytecode once
    wall, rss, _ = timed(oloproof_cmd("run"), suite)
    conn = sqlite3.connect(suite / ".oloproof" / "log.db")
    try:
        rows = conn.execute("SELECT stream, length(payload) FROM events WHERE type = 'run_sealed.v1'").fetchall()
    finally:
        conn.close()
    if len(rows) != 1:
        raise SystemExit(f"expected one run_sealed event in the {n}-case log, found {len(rows)}")
    run_id, seal_bytes = rows[0]
    log_bytes = sum(p.stat().st_size for p in (suite / ".oloproof").glob("log.db*"))
    print(f"[{where}] built {n} cases: oloproof run {wall:.2f} s, peak RSS {rss / 1024:.0f} MiB, "
          f"log {log_bytes / 1e6:.1f} MB, seal payload {seal_bytes / 1e6:.2f} MB", flush=True)
    return Log(where, n, suite, run_id, wall, rss, seal_bytes, log_bytes)


def reader(log: Log):
    from oloproof.store import SQLiteStore

    return SQLiteStore(log.db, readonly=True)


def measure_seal(log: Log) -> None:
    """seal()'s work before its commit, step by step as seal() does it (the trivial agent
    uses no replay streams, so heads(run_id + "/") is the only heads query beyond the run's)."""
    from oloproof.app.audit import HEAD
    from oloproof.events import RunSealed, encode, seal_digest
    from oloproof.replay.engine import PREFIX

    store = reader(log)
    try:
        t0 = time.perf_counter()
        heads = store.heads(log.run_id + "/")
        t1 = time.perf_counter()
        run_stream = store.head(log.run_id)  # as seal() asks for the run stream's head
        t2 = time.perf_counter()
        cut = len(log.run_id) + 1
        cases = {s[cut:]: [n, d[:HEAD]] for s, (n, d) in sorted(heads.items()) if not s.startswith(PREFIX)}
        committed = len(cases)
        event = RunSealed(
            run_id=log.run_id, finished_at="2026-01-01T00:00:00Z", case_count=log.n, cases_committed=committed,
            cases=cases, replays={}, scheme=store.scheme,
            digest=seal_digest(log.run_id, run_stream, heads, store.key),
        )
        payload = encode(event)
        t3 = time.perf_counter()
    finally:
        store.close()
    if committed != log.n:
        raise SystemExit(f"{log.n}-case log: heads() found {committed} case streams")
    log.add("seal.heads", t1 - t0)
    log.add("seal.run_head", t2 - t1)
    log.add("seal.encode", t3 - t2)
    log.add("seal.work", t3 - t0)
    log.add("seal.share", (t3 - t0) / log.run_wall)
    log.add("seal.encoded_bytes", len(payload))


def measure_full_seal(log: Log, scratch: Path) -> None:
    """seal() in full, its commit included (durability full, as 'oloproof run' defaults), on a
    copy of the log in the same place (the copy and the store's opening not timed)."""
    from oloproof.app.audit import seal
    from oloproof.store import SQLiteStore

    copy = scratch / "copy.db"
    shutil.copyfile(log.db, copy)
    store = SQLiteStore(copy, durability="full", create=False)
    try:
        t0 = time.perf_counter()
        seal(store, log.run_id, case_count=log.n, replay_streams=set(), clock=lambda: "2026-01-01T00:00:00Z")
        log.add("seal.full", time.perf_counter() - t0)
    finally:
        store.close()
        for p in scratch.glob("copy.db*"):
            p.unlink()


def measure_in_process(log: Log) -> None:
    """audit_run alone; then run_report (gate's work) with require_intact timed inside it."""
    from oloproof.app import audit
    from oloproof.app.reports import run_report
    from oloproof.app.runs import load_run, run_headers

    store = reader(log)
    try:
        t0 = time.perf_counter()
        headers = run_headers(store)
        log.add("latest", time.perf_counter() - t0)
        assert headers[-1].run_id == log.run_id

        t0 = time.perf_counter()
        load_run(store, log.run_id)
        log.add("load_run", time.perf_counter() - t0)
    finally:
        store.close()

    store = reader(log)
    try:
        t0 = time.perf_counter()
        result = audit.audit_run(store, log.run_id)
        dt = time.perf_counter() - t0
    finally:
        store.close()
    if result.problems or result.sealed is None:
        raise SystemExit(f"{log.n}-case run fails its audit: {result.problems[:3]}")
    log.add("audit_run", dt)
    log.add("audit_run.cps", log.n / dt)

    inner: list[float] = []
    original = audit.require_intact

    def require_intact(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            inner.append(time.perf_counter() - t)

    store = reader(log)
    audit.require_intact = require_intact  # evaluate_run imports it from the module at call time
    try:
        t0 = time.perf_counter()
        report = run_report(store, log.run_id)
        total = time.perf_counter() - t0
    finally:
        audit.require_intact = original
        store.close()
    if len(inner) != 1 or report.summary.cases_committed != log.n:
        raise SystemExit(f"{log.n}-case run_report: {len(inner)} audits, {report.summary.cases_committed} cases")
    evaluation = total - inner[0]
    log.add("report", total)
    log.add("report.audit", inner[0])
    log.add("report.eval", evaluation)
    log.add("report.eval.cps", log.n / evaluation)
    log.add("report.audit_share", inner[0] / total)


def measure_processes(log: Log) -> None:
    wall, rss, _ = timed(oloproof_cmd("gate", log.run_id), log.suite)
    log.add("gate", wall)
    log.add("gate.cps", log.n / wall)
    log.add("gate.rss", rss / 1024)
    wall, rss, out = timed(oloproof_cmd("audit", "verify"), log.suite)
    if "BROKEN" in out or "INCOMPLETE" in out:
        raise SystemExit(f"audit verify on the {log.n}-case log:\n{out[-2000:]}")
    log.add("verify", wall)
    log.add("verify.cps", log.n / wall)
    log.add("verify.rss", rss / 1024)


ROWS = [  # (key, label, scale, unit)
    ("seal.heads", "seal: store.heads(run_id + '/')", 1e3, "ms"),
    ("seal.run_head", "seal: heads(run_id) (run's head)", 1e3, "ms"),
    ("seal.encode", "seal: streams + digest + encode", 1e3, "ms"),
    ("seal.work", "seal: work before commit (sum)", 1e3, "ms"),
    ("seal.share", "seal: share of the run's wall time", 100, "%"),
    ("seal.full", "seal() in full, commit incl. (copy)", 1e3, "ms"),
    ("gate", "oloproof gate RUN (process)", 1, "s"),
    ("gate.cps", "  gate process", 1, "cases/s"),
    ("gate.rss", "  gate peak RSS", 1, "MiB"),
    ("report", "in-process run_report (gate's work)", 1, "s"),
    ("report.audit", "  of which require_intact (audit)", 1, "s"),
    ("report.eval", "  of which evaluation (rest)", 1, "s"),
    ("report.audit_share", "  audit's share of run_report", 100, "%"),
    ("report.eval.cps", "  evaluation alone", 1, "cases/s"),
    ("audit_run", "audit_run alone (in-process)", 1, "s"),
    ("audit_run.cps", "  audit_run alone", 1, "cases/s"),
    ("verify", "oloproof audit verify (process)", 1, "s"),
    ("verify.cps", "  audit verify process", 1, "cases/s"),
    ("verify.rss", "  audit verify peak RSS", 1, "MiB"),
    ("latest", "latest: run_headers()", 1e3, "ms"),
    ("load_run", "load_run (decodes the seal)", 1e3, "ms"),
]


def table(logs: list[Log], rounds: int) -> None:
    for where in dict.fromkeys(log.where for log in logs):
        cols = [log for log in logs if log.where == where]
        width = 26
        print(f"\n[{where}] median [min–max] of {rounds} interleaved rounds")
        print(f"{'':42}" + "".join(f"{f'N = {log.n:,}':>{width}}" for log in cols))
        print(f"{'oloproof run (one build)':34}{'s':>8}" + "".join(f"{log.run_wall:>{width}.2f}" for log in cols))
        print(f"{'  run peak RSS':34}{'MiB':>8}" + "".join(f"{log.run_rss / 1024:>{width}.0f}" for log in cols))
        print(f"{'log size':34}{'MB':>8}" + "".join(f"{log.log_bytes / 1e6:>{width}.1f}" for log in cols))
        print(f"{'run_sealed payload (events table)':34}{'bytes':>8}"
              + "".join(f"{log.seal_bytes:>{width},}" for log in cols))
        print(f"{'  per case':34}{'bytes':>8}" + "".join(f"{log.seal_bytes / log.n:>{width}.1f}" for log in cols))
        for key, label, scale, unit in ROWS:
            cells = []
            for log in cols:
                values = [v * scale for v in log.samples[key]]
                if unit in ("cases/s", "MiB"):
                    cells.append(f"{statistics.median(values):,.0f} [{min(values):,.0f}–{max(values):,.0f}]")
                else:
                    cells.append(spread(values))
            print(f"{label:34}{unit:>8}" + "".join(f"{c:>{width}}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="5000,50000", help="run sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--where", choices=["disk", "tmpfs", "both"], default="both",
                    help="the log on disk, on tmpfs (/dev/shm), or both")
    args = ap.parse_args()
    sizes = [int(s) for s in args.cases.split(",") if s]
    wanted = list(PLACES) if args.where == "both" else [args.where]
    roots = {w: Path(tempfile.mkdtemp(prefix="oloproof-bench-seal-", dir=PLACES[w])) for w in wanted}
    started = time.perf_counter()
    try:
        logs = [build(w, roots[w], n) for w in wanted for n in sizes]
        for r in range(args.rounds):
            for log in logs:
                measure_seal(log)
                measure_full_seal(log, roots[log.where])
                measure_in_process(log)
                measure_processes(log)
            print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)", flush=True)
        table(logs, args.rounds)
        print(f"\ntotal {time.perf_counter() - started:.0f} s")
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
