"""The readers of a sealed run against the speed of the log (issue 29, items 3 and 4).

Entry points (for ``bench/perf.py`` and anything else that wants the figures as data):

* ``measure(argv: list[str] | None = None) -> list[Row]``: build the logs, take every figure
  in interleaved rounds and return one :class:`Row` per figure (``Row.as_dict()`` for JSON);
* ``main(argv: list[str] | None = None) -> int``: the same, printed as a table (and written as
  JSON with ``--json FILE``); returns 0.

``argv`` takes the command-line options below (``--cases 5000,50000 --rounds 5 --where both
--baseline-code DIR --json FILE``). Nothing is agreed with the callers beyond these two
functions and the fields of :class:`Row`.

What is measured, on logs of the trivial agent of ``bench_run.py`` (5 @tool calls, three
evaluators: 14 events a case), built once per size with ``oloproof run --durability normal``
and copied to each place (tmpfs: /dev/shm; disk: the system temp folder; reads run from the
page cache either way, so the places differ little for readers):

* the **floor**: a plain read-and-hash of every event — one ``python -c`` process that runs
  ``SELECT stream, seq, payload, digest FROM events ORDER BY stream, seq`` and recomputes the
  SHA-256 chain of every stream in Python (what ``audit verify`` cannot go below);
* ``oloproof audit verify`` (events per second, and its time over the floor's);
* ``oloproof gate latest`` and ``oloproof eval latest``, **cold** (the judgement cache beside
  the log, ``log.db-judged``, removed before each) and **warm** (the cache a previous reader
  left): each's time over the floor's;
* ``oloproof view latest --out DIR``;
* the peak RSS of each reader, and how it grows from the smallest to the largest log.

Every figure is a whole process (interpreter start included), timed with ``os.wait4`` (wall
time and the child's own peak RSS). Rounds are interleaved: each round visits every place,
size and command in turn, so a load that comes and goes (another job on the machine) falls on
all of them alike; figures are the median and the range over the rounds, ratios are taken
per round. ``--baseline-code DIR`` measures a second copy of the package (a folder holding
``oloproof/``, e.g. ``git archive HEAD oloproof | tar -x -C DIR``) in the same rounds, on the
same logs, which are then built by that code (a newer reader must read an older log).

    python bench/bench_readers.py [--cases 5000,50000] [--rounds 5] [--where both]
                                  [--baseline-code DIR] [--json FILE]    (~10 min at the defaults)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_run import ENV, make_suite  # noqa: E402

PLACES = {"tmpfs": "/dev/shm", "disk": None}
#: the judgement cache beside a log (and its rollback journal): removed for a cold reader
CACHE_FILES = ("-judged", "-judged-journal")

FLOOR = r'''
import hashlib, sqlite3, sys
conn = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
sha, join = hashlib.sha256, b"".join
current, previous, tag, n, bad = None, "", b"", 0, 0
for stream, seq, payload, digest in conn.execute(
        "SELECT stream, seq, CAST(payload AS BLOB), digest FROM events ORDER BY stream, seq"):
    if stream != current:
        current, previous, tag = stream, "", b"\x00" + stream.encode() + b"\x00"
    previous = sha(join((previous.encode(), tag, b"%d\x00" % seq, payload))).hexdigest()
    bad += previous != digest
    n += 1
print(n, bad)
'''


@dataclass
class Row:
    """One figure: its median over the rounds with the range, and, where it has one, its
    ratio to the floor measured in the same rounds and the target it is held to."""

    figure: str
    code: str  # "current" or "baseline"
    where: str  # "tmpfs" or "disk"
    cases: int
    unit: str
    median: float
    low: float
    high: float
    ratio: float | None = None  # median of the per-round ratios to the floor (or growth ratio)
    ratio_low: float | None = None
    ratio_high: float | None = None
    target: str = ""
    holds: bool | None = None

    def as_dict(self) -> dict:
        """The row as plain JSON types."""
        return asdict(self)


@dataclass
class Log:
    where: str
    cases: int
    suite: Path
    events: int

    @property
    def db(self) -> Path:
        return self.suite / ".oloproof" / "log.db"


@dataclass
class Samples:
    values: dict[tuple, list[float]] = field(default_factory=dict)

    def add(self, key: tuple, value: float) -> None:
        self.values.setdefault(key, []).append(value)

    def get(self, key: tuple) -> list[float]:
        return self.values.get(key, [])


def run_child(cmd: list[str], cwd: Path, code: Path | None) -> tuple[float, int]:
    """Wall time (s) and peak RSS (KiB) of one whole process; exit 0 or 1 (a blocked gate)."""
    env = dict(ENV)
    if code is not None:
        env["PYTHONPATH"] = str(code) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in (0, 1):
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}) in {cwd}:\n"
                             f"{err.read().decode(errors='replace')[-3000:]}")
    return wall, usage.ru_maxrss


def oloproof(*args: str) -> list[str]:
    return [sys.executable, "-m", "oloproof", *args]


def drop_cache(log: Log) -> None:
    for suffix in CACHE_FILES:
        Path(str(log.db) + suffix).unlink(missing_ok=True)


def build(root: Path, cases: list[int], places: list[str], code: Path | None) -> list[Log]:
    logs = []
    for n in cases:
        first = Path(tempfile.mkdtemp(prefix=f"oloproof-readers-{n}-", dir=PLACES[places[0]]))
        suite = make_suite(first / "suite", n)
        run_child(oloproof("--help"), suite, code)  # bytecode compiled once, outside the rounds
        wall, rss = run_child(oloproof("run", "--durability", "normal", "-q"), suite, code)
        conn = sqlite3.connect(suite / ".oloproof" / "log.db")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            events = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        finally:
            conn.close()
        print(f"built {n} cases: {events} events, oloproof run {wall:.1f} s, {rss / 1024:.0f} MiB", flush=True)
        logs.append(Log(places[0], n, suite, events))
        for where in places[1:]:
            other = Path(tempfile.mkdtemp(prefix=f"oloproof-readers-{n}-", dir=PLACES[where]))
            shutil.copytree(suite, other / "suite")
            logs.append(Log(where, n, other / "suite", events))
    root.mkdir(parents=True, exist_ok=True)
    return logs


def commands(log: Log, out: Path) -> list[tuple[str, list[str], bool | None]]:
    """(figure, argv, cache): cache False removes the judgement cache first, True expects it
    left by the reader before, None leaves it as it is."""
    return [
        ("floor", [sys.executable, "-c", FLOOR, str(log.db)], None),
        ("audit verify", oloproof("audit", "verify"), None),
        ("gate cold", oloproof("gate", "latest"), False),
        ("gate warm", oloproof("gate", "latest"), True),
        ("eval cold", oloproof("eval", "latest"), False),
        ("eval warm", oloproof("eval", "latest"), True),
        ("view --out", oloproof("view", "latest", "--out", str(out)), None),
    ]


def one_round(logs: list[Log], codes: dict[str, Path | None], samples: Samples, scratch: Path) -> None:
    for log in logs:
        for code_name, code in codes.items():
            out = scratch / "report"
            for figure, cmd, cache in commands(log, out):
                if figure == "floor" and code_name != "current":
                    continue  # the floor runs no Oloproof code
                if cache is False:
                    drop_cache(log)
                shutil.rmtree(out, ignore_errors=True)
                wall, rss = run_child(cmd, log.suite, code)
                key = (code_name if figure != "floor" else "current", log.where, log.cases, figure)
                samples.add(key + ("wall",), wall)
                samples.add(key + ("rss",), rss / 1024)
            shutil.rmtree(out, ignore_errors=True)


def _ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b)]


def rows_of(logs: list[Log], codes: dict[str, Path | None], samples: Samples) -> list[Row]:
    out: list[Row] = []
    sizes = sorted({log.cases for log in logs})
    for log in logs:
        floor = samples.get(("current", log.where, log.cases, "floor", "wall"))
        out.append(_row("floor: read and hash every event", "current", log, "s", floor))
        for code_name in codes:
            def wall(figure: str, code_name: str = code_name, log: Log = log) -> list[float]:
                return samples.get((code_name, log.where, log.cases, figure, "wall"))

            verify = wall("audit verify")
            speed = [log.events / t for t in verify]
            out.append(_row("audit verify", code_name, log, "events/s", speed, _ratios(verify, floor),
                            "≥ 400k events/s", statistics.median(speed) >= 400_000))
            for figure in ("gate cold", "gate warm", "eval cold", "eval warm", "view --out"):
                times = wall(figure)
                ratios = _ratios(times, floor)
                target, holds = "", None
                if figure != "view --out" and log.cases == sizes[-1]:
                    target, holds = "≤ 2× the floor", statistics.median(ratios) <= 2.0
                out.append(_row(figure, code_name, log, "s", times, ratios, target, holds))
    # peak memory: the largest log against the smallest, per reader
    if len(sizes) > 1:
        for where in {log.where for log in logs}:
            for code_name in codes:
                for figure in ("audit verify", "gate cold", "gate warm", "eval cold", "eval warm", "view --out"):
                    small = samples.get((code_name, where, sizes[0], figure, "rss"))
                    big = samples.get((code_name, where, sizes[-1], figure, "rss"))
                    if not small or not big:
                        continue
                    growth = _ratios(big, small)
                    row = Row(f"peak RSS {figure}, {sizes[0]} → {sizes[-1]} cases", code_name, where, sizes[-1],
                              "MiB", statistics.median(big), min(big), max(big), statistics.median(growth),
                              min(growth), max(growth), "≤ +15 %", statistics.median(growth) <= 1.15)
                    out.append(row)
    return out


def _row(figure: str, code: str, log: Log, unit: str, values: list[float], ratios: list[float] | None = None,
         target: str = "", holds: bool | None = None) -> Row:
    r = ratios or []
    return Row(figure, code, log.where, log.cases, unit, statistics.median(values), min(values), max(values),
               statistics.median(r) if r else None, min(r) if r else None, max(r) if r else None, target, holds)


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="5000,50000", help="log sizes, comma-separated (smallest first)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--where", choices=["tmpfs", "disk", "both"], default="both")
    ap.add_argument("--baseline-code", type=Path, help="a folder holding another copy of the oloproof package")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    return ap.parse_args(argv)


def measure(argv: list[str] | None = None) -> list[Row]:
    """Build the logs, run the interleaved rounds and return the rows (see the module docstring)."""
    args = _args(argv)
    cases = sorted(int(c) for c in args.cases.split(",") if c)
    places = list(PLACES) if args.where == "both" else [args.where]
    codes: dict[str, Path | None] = {"current": None}
    if args.baseline_code is not None:
        codes["baseline"] = args.baseline_code.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="oloproof-readers-"))
    logs: list[Log] = []
    try:
        logs = build(scratch, cases, places, codes.get("baseline"))
        for log in logs:  # compile each code's bytecode once, outside the rounds
            for code in codes.values():
                run_child(oloproof("--help"), log.suite, code)
        samples = Samples()
        for r in range(args.rounds):
            t0 = time.perf_counter()
            one_round(logs, codes, samples, scratch)
            print(f"round {r + 1}/{args.rounds}: {time.perf_counter() - t0:.0f} s", flush=True)
        return rows_of(logs, codes, samples)
    finally:
        for log in logs:
            shutil.rmtree(log.suite.parent, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def _fmt(value: float, unit: str) -> str:
    if unit == "events/s":
        return f"{value / 1000:.0f}k"
    if unit == "MiB":
        return f"{value:.0f}"
    return f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    """Measure (:func:`measure`) and print every row; ``--json FILE`` writes them too."""
    args = _args(argv)
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    rows = measure(argv)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'figure':<44} {'code':<8} {'where':<5} {'cases':>6}  {'median [range]':<26} {'ratio [range]':<22} target")
    for r in rows:
        value = f"{_fmt(r.median, r.unit)} [{_fmt(r.low, r.unit)}–{_fmt(r.high, r.unit)}] {r.unit}"
        ratio = (f"{r.ratio:.2f}× [{r.ratio_low:.2f}–{r.ratio_high:.2f}]"
                 if r.ratio is not None and r.ratio_low is not None and r.ratio_high is not None else "")
        verdict = "" if r.holds is None else (" (holds)" if r.holds else " (MISSED)")
        print(f"{r.figure:<44} {r.code:<8} {r.where:<5} {r.cases:>6}  {value:<26} {ratio:<22} {r.target}{verdict}")
    if args.json:
        args.json.write_text(json.dumps([r.as_dict() for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
