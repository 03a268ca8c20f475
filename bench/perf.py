"""Every figure of issue 29's table, each against its baseline measured in the same run.

    python bench/perf.py [--quick] [--only run,cpu,memory,readers,import,workers,search]
                         [--where tmpfs|disk|both] [--rounds N] [--against DIR] [--json FILE]

Rounds are interleaved: each round takes every measure of a section in turn, so a load that
comes and goes (another job on the machine) falls on all of them alike; a figure is the median
over the rounds with its range, and a ratio is taken per round (then its median and range).
Every measure is a whole process started here (``PYTHONDONTWRITEBYTECODE`` stripped, as on a
user's machine), timed with ``os.wait4``: wall time, CPU time and peak RSS of that process.

The sections and their baselines:

* ``run`` — ``oloproof run`` over 5,000 cases of ``bench_run.py``'s trivial agent (5 ``@tool``
  calls, three evaluators, interpreter start included) against ``baseline_recorder.py``, a careful
  hand-written recorder doing the same work, on fresh logs each round; tmpfs (/dev/shm: fsync is
  free, only software cost shows) and disk (fsync per case on both sides). Targets ≤ 2.0× and
  ≤ 1.5×. Also the fixed start-up beyond the baseline's (1-case runs).
* ``cpu`` — CPU time per case (user + system), the slope from 5,000 to 20,000 cases, for
  ``oloproof run`` and the hand-written recorder (tmpfs). Target ≤ 110 µs.
* ``memory`` — peak RSS of ``oloproof run --durability normal`` at 5,000 and 50,000 cases.
  Target: ≤ +15 %.
* ``readers`` — ``gate``/``eval`` over the floor (a plain read-and-hash of every event), ``audit
  verify`` in events/s, ``view --out``'s peak RSS: ``bench_readers.measure`` (its own rows).
* ``import`` — ``oloproof.app.otel.import_traces`` of 10,000 generated traces × 20 spans
  (``bench_import.py``'s file) into a fresh log, against ``json.loads`` of every line (each
  timed inside its process: no interpreter start). Target ≥ 2,000 traces/s.
* ``workers`` — ``oloproof run --workers 2`` against ``oloproof run`` (serial) on a CPU-bound
  agent (5 ms of CPU a case, 1,000 cases). Target ≥ 1.6× on an idle machine: the load average
  is printed before and after, and CPU held by other processes during the rounds lowers it.
* ``search`` — the search index is off the run's path: the first ``oloproof search`` after a
  5,000-case run (it catches the index up), then a second one, beside the run itself.

``--against DIR`` measures a second copy of the package in the same rounds (a folder holding
``oloproof/``, e.g. ``git archive <rev> | tar -x -C DIR``): its figures are printed beside the
current ones (column "against"). ``--quick`` takes smaller sizes and fewer rounds (a few
minutes): a smoke run, not the figures to quote. ``--only`` runs some sections.
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_run import ENV, make_suite  # noqa: E402

PLACES = {"tmpfs": "/dev/shm", "disk": None}
SECTIONS = ("run", "cpu", "memory", "readers", "import", "workers", "search")


@dataclass
class Row:
    """One printed figure: the current code's median and range, its baseline's (measured in
    the same rounds), their per-round ratio, the target and whether it holds; ``against``: the
    same figure for the code of ``--against``."""

    section: str
    figure: str
    where: str
    unit: str
    current: list[float]
    baseline: list[float] = field(default_factory=list)
    baseline_name: str = ""
    ratio: list[float] = field(default_factory=list)  # per round
    against: list[float] = field(default_factory=list)
    against_ratio: list[float] = field(default_factory=list)
    target: str = ""
    holds: bool | None = None
    note: str = ""

    def as_dict(self) -> dict:
        """The row as plain JSON types, each list with its median."""
        out = asdict(self)
        for key in ("current", "baseline", "ratio", "against", "against_ratio"):
            out[key + "_median"] = statistics.median(out[key]) if out[key] else None
        return out


# ---- whole processes ------------------------------------------------------------------------

@dataclass
class Ran:
    wall: float  # s
    cpu: float  # s, user + system of the process (and any it waited for)
    rss: float  # MiB, its peak resident size
    out: str


def child(cmd: list[str], cwd: Path, code: Path | None = None, ok: tuple[int, ...] = (0, 1)) -> Ran:
    """One whole process (``code``: the folder holding the ``oloproof`` package it imports)."""
    env = dict(ENV)
    env["PYTHONPATH"] = str(code or REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        code_ = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
        if code_ not in ok:
            err.seek(0)
            raise SystemExit(f"{' '.join(map(str, cmd))} failed ({code_}) in {cwd}:\n"
                             f"{err.read().decode(errors='replace')[-3000:]}")
    return Ran(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text)


def oloproof(*args: str) -> list[str]:
    return [sys.executable, "-m", "oloproof", *args]


def fresh(suite: Path) -> None:
    shutil.rmtree(suite / ".oloproof", ignore_errors=True)
    for db in suite.glob("base*.db*"):
        db.unlink()


def baseline_run(suite: Path) -> Ran:
    return child([sys.executable, str(HERE / "baseline_recorder.py"), str(suite), str(suite / "base.db")], suite)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "—"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


@dataclass
class Context:
    rounds: int
    places: list[str]
    against: Path | None
    quick: bool
    root: Path
    rows: list[Row] = field(default_factory=list)

    def codes(self) -> dict[str, Path | None]:
        out: dict[str, Path | None] = {"current": None}
        if self.against is not None:
            out["against"] = self.against
        return out

    def folder(self, where: str, name: str) -> Path:
        base = Path(tempfile.mkdtemp(prefix=f"oloproof-perf-{name}-", dir=PLACES[where]))
        return base

    def warm(self, suite: Path) -> None:
        """Compile each code's bytecode once, outside the rounds."""
        for code in self.codes().values():
            child(oloproof("--help"), suite, code)


def _per_round(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b)]


# ---- sections ---------------------------------------------------------------------------------

def section_run(ctx: Context) -> None:
    n = 1000 if ctx.quick else 5000
    targets = {"tmpfs": 2.0, "disk": 1.5}
    for where in ctx.places:
        base = ctx.folder(where, "run")
        suite, tiny = make_suite(base / "suite", n), make_suite(base / "tiny", 1)
        ctx.warm(suite)
        samples: dict[str, list[float]] = {}
        for _ in range(ctx.rounds):
            for folder, label in ((suite, ""), (tiny, "tiny ")):
                fresh(folder)
                samples.setdefault(label + "baseline", []).append(baseline_run(folder).wall)
                for name, code in ctx.codes().items():
                    fresh(folder)
                    samples.setdefault(label + name, []).append(child(oloproof("run"), folder, code).wall)
        ratio = _per_round(samples["current"], samples["baseline"])
        row = Row("run", f"`run` / hand-written recorder, {n:,} cases", where, "s", samples["current"],
                  samples["baseline"], "hand-written", ratio, target=f"≤ {targets[where]}×",
                  holds=statistics.median(ratio) <= targets[where])
        startup = {name: [a - b for a, b in zip(samples["tiny " + name], samples["tiny baseline"])]
                   for name in ctx.codes()}
        if ctx.against is not None:
            row.against = samples["against"]
            row.against_ratio = _per_round(samples["against"], samples["baseline"])
        ctx.rows.append(row)
        ctx.rows.append(Row("run", "  fixed start-up beyond the baseline's (1-case runs)", where, "s",
                            startup["current"], against=startup.get("against", [])))
        shutil.rmtree(base, ignore_errors=True)


def section_cpu(ctx: Context) -> None:
    small, big = (1000, 4000) if ctx.quick else (5000, 20000)
    base = ctx.folder("tmpfs", "cpu")
    suites = {size: make_suite(base / f"s{size}", size) for size in (small, big)}
    ctx.warm(suites[small])
    cpu: dict[tuple[str, int], list[float]] = {}
    for _ in range(ctx.rounds):
        for size, suite in suites.items():
            fresh(suite)
            cpu.setdefault(("baseline", size), []).append(baseline_run(suite).cpu)
            for name, code in ctx.codes().items():
                fresh(suite)
                cpu.setdefault((name, size), []).append(child(oloproof("run"), suite, code).cpu)

    def slope(name: str) -> list[float]:
        return [(b - a) / (big - small) * 1e6 for a, b in zip(cpu[(name, small)], cpu[(name, big)])]

    current = slope("current")
    row = Row("cpu", f"CPU per case (slope {small:,} → {big:,})", "tmpfs", "µs", current, slope("baseline"),
              "hand-written", _per_round(current, slope("baseline")), target="≤ 110 µs",
              holds=statistics.median(current) <= 110)
    if ctx.against is not None:
        row.against = slope("against")
        row.against_ratio = _per_round(row.against, row.baseline)
    ctx.rows.append(row)
    shutil.rmtree(base, ignore_errors=True)


def section_memory(ctx: Context) -> None:
    small, big = (2000, 20000) if ctx.quick else (5000, 50000)
    base = ctx.folder("tmpfs", "memory")
    suites = {size: make_suite(base / f"s{size}", size) for size in (small, big)}
    ctx.warm(suites[small])
    rss: dict[tuple[str, int], list[float]] = {}
    for _ in range(min(ctx.rounds, 2)):  # peak RSS barely moves from round to round; a 50k run is long
        for size, suite in suites.items():
            for name, code in ctx.codes().items():
                fresh(suite)
                rss.setdefault((name, size), []).append(child(oloproof("run", "--durability", "normal"), suite,
                                                              code).rss)
    growth = _per_round(rss[("current", big)], rss[("current", small)])
    row = Row("memory", f"peak RSS of `run`, {small:,} → {big:,} cases", "tmpfs", "MiB", rss[("current", big)],
              rss[("current", small)], f"{small:,} cases", growth, target="≤ +15 %",
              holds=statistics.median(growth) <= 1.15)
    if ctx.against is not None:
        row.against = rss[("against", big)]
        row.against_ratio = _per_round(rss[("against", big)], rss[("against", small)])
    ctx.rows.append(row)
    shutil.rmtree(base, ignore_errors=True)


def section_readers(ctx: Context) -> None:
    try:
        import bench_readers
    except ImportError:
        # HOOK: the readers' figures (gate/eval over the floor, audit verify events/s, view --out
        # peak RSS) come from bench/bench_readers.py's measure(argv) -> rows; without it, none.
        ctx.rows.append(Row("readers", "gate / eval / audit verify / view --out", "—", "", [],
                            note="bench/bench_readers.py not found: these rows are not measured"))
        return
    argv = ["--rounds", str(ctx.rounds), "--where", "both" if len(ctx.places) == 2 else ctx.places[0],
            "--cases", "2000,10000" if ctx.quick else "5000,50000"]
    if ctx.against is not None:
        argv += ["--baseline-code", str(ctx.against)]
    measured = bench_readers.measure(argv)
    triple = lambda a, b, c: [x for x in (a, b, c) if x is not None]  # noqa: E731 - median, low, high
    mine: dict[tuple, Row] = {}
    for r in measured:
        if r.code != "current":
            continue
        rss = "RSS" in r.figure
        mine[(r.figure, r.where, r.cases)] = row = Row(
            "readers", f"{r.figure} ({r.cases:,} cases)", r.where, r.unit, triple(r.median, r.low, r.high),
            baseline_name=("the smallest log" if rss else "the floor") if r.ratio is not None else "",
            ratio=triple(r.ratio, r.ratio_low, r.ratio_high), target=r.target, holds=r.holds)
        ctx.rows.append(row)
    for r in measured:  # --against: bench_readers' "baseline" code, beside the current figure
        row_ = mine.get((r.figure, r.where, r.cases))
        if r.code != "current" and row_ is not None:
            row_.against = triple(r.median, r.low, r.high)
            row_.against_ratio = triple(r.ratio, r.ratio_low, r.ratio_high)
    if ctx.rows and ctx.rows[-1].section == "readers":
        ctx.rows[-1].note = "readers: bench_readers' figures (median [low–high] over its rounds)"


_IMPORT = r'''
import sys, tempfile, time
from pathlib import Path
from oloproof.app.otel import import_traces
from oloproof.store import SQLiteStore
with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:
    store = SQLiteStore(Path(d) / "log.db")
    t = time.perf_counter()
    out = import_traces(store, [Path(sys.argv[1])], clock=lambda: "2026-12-01T00:00:00Z")
    elapsed = time.perf_counter() - t
    store.close()
print(elapsed, out.cases, out.spans)
'''
_JSON = r'''
import json, sys, time
t = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    for line in f:
        json.loads(line)
print(time.perf_counter() - t)
'''


def section_import(ctx: Context) -> None:
    import bench_import

    traces = 2000 if ctx.quick else 10000
    folder = Path(tempfile.mkdtemp(prefix="oloproof-perf-import-"))
    path = folder / "traces.jsonl"
    bench_import.make_file(path, traces)
    samples: dict[str, list[float]] = {}
    for _ in range(ctx.rounds):
        samples.setdefault("json", []).append(float(child([sys.executable, "-c", _JSON, str(path)], folder).out))
        for where in ctx.places:
            place = PLACES[where] or tempfile.gettempdir()
            for name, code in ctx.codes().items():
                ran = child([sys.executable, "-c", _IMPORT, str(path), place], folder, code, ok=(0,))
                seconds, cases, spans = ran.out.split()
                if int(cases) != traces or int(spans) != 20 * traces:
                    raise SystemExit(f"import: {cases} cases, {spans} spans from {traces} traces")
                samples.setdefault(f"{name} {where}", []).append(float(seconds))
    for where in ctx.places:
        speed = [traces / t for t in samples[f"current {where}"]]
        row = Row("import", f"`import otel`, {traces:,} traces × 20 spans", where, "traces/s", speed,
                  [traces / t for t in samples["json"]], "json.loads",
                  _per_round(samples[f"current {where}"], samples["json"]), target="≥ 2,000 traces/s",
                  holds=statistics.median(speed) >= 2000, note="ratio: time over json.loads'")
        if ctx.against is not None:
            row.against = [traces / t for t in samples[f"against {where}"]]
            row.against_ratio = _per_round(samples[f"against {where}"], samples["json"])
        ctx.rows.append(row)
    shutil.rmtree(folder, ignore_errors=True)


CPU_APP = '''\
import time

from oloproof import current_case, system, tool


@tool
def lookup(key):
    return {"key": key, "value": len(key)}


def burn(ms):
    """CPU, not sleep: the agent's own work (a model in process, a parser, a planner)."""
    end = time.process_time() + ms / 1000
    x = 0
    while time.process_time() < end:
        for i in range(200):
            x += i * i
    return x


@system(name="cpu-agent", version="1", records=("agent_trajectory/v1",))
def run(case):
    key = case.input["key"]
    burn(5)
    found = lookup(key=key)
    current_case().finish("success")
    return {"answer": f"done {key} {found['value']}"}
'''
CPU_CONFIG = '''\
system: {name: cpu-agent, version: "1", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: agent_tool_called, tool_name: lookup}
'''


def cpu_suite(folder: Path, n: int) -> Path:
    """``n`` cases of an agent that spends 5 ms of CPU on each."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(CPU_APP)
    (folder / "oloproof.yaml").write_text(CPU_CONFIG)
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(n):
            key = f"k{i:06d}"
            fh.write(json.dumps({"id": f"case_{i:06d}", "input": {"key": key},
                                 "expected": {"answer": f"done {key}"}}) + "\n")
    return folder


def section_workers(ctx: Context) -> None:
    n = 300 if ctx.quick else 1000
    before = os.getloadavg()
    for where in ctx.places:
        base = ctx.folder(where, "workers")
        suite = cpu_suite(base / "suite", n)
        ctx.warm(suite)
        samples: dict[str, list[float]] = {}
        for _ in range(ctx.rounds):
            for name, code in ctx.codes().items():
                for mode, args in (("serial", ()), ("workers", ("--workers", "2"))):
                    fresh(suite)
                    samples.setdefault(f"{name} {mode}", []).append(child(oloproof("run", *args), suite, code).wall)
        speedup = _per_round(samples["current serial"], samples["current workers"])
        row = Row("workers", f"`--workers 2` on a CPU-bound agent (5 ms/case), {n:,} cases", where, "×", speedup,
                  target="≥ 1.6× (idle machine)", holds=statistics.median(speedup) >= 1.6,
                  note=f"serial {spread(samples['current serial'])} s, --workers 2 "
                       f"{spread(samples['current workers'])} s")
        if ctx.against is not None:
            row.against = _per_round(samples["against serial"], samples["against workers"])
        ctx.rows.append(row)
        shutil.rmtree(base, ignore_errors=True)
    after = os.getloadavg()
    ctx.rows.append(Row("workers", "  load average before / after the rounds (1 min)", "—", "", [before[0], after[0]],
                        note=f"{os.cpu_count()} CPUs; another process's CPU lowers the speed-up"))


def section_search(ctx: Context) -> None:
    n = 1000 if ctx.quick else 5000
    where = ctx.places[0]
    base = ctx.folder(where, "search")
    suite = make_suite(base / "suite", n)
    ctx.warm(suite)
    samples: dict[str, list[float]] = {}
    for _ in range(ctx.rounds):
        for name, code in ctx.codes().items():
            fresh(suite)
            samples.setdefault(f"{name} run", []).append(child(oloproof("run"), suite, code).wall)
            first = child(oloproof("search", "fetch", "--limit", "5"), suite, code, ok=(0,))
            second = child(oloproof("search", "notified", "--limit", "5"), suite, code, ok=(0,))
            if "fetch" not in first.out or "notified" not in second.out:
                raise SystemExit(f"search found nothing after the run:\n{first.out[-500:]}")
            samples.setdefault(f"{name} first", []).append(first.wall)
            samples.setdefault(f"{name} second", []).append(second.wall)
            samples.setdefault(f"{name} total", []).append(samples[f"{name} run"][-1] + first.wall)
    for key, figure in (("run", f"`run`, {n:,} cases (the index left behind)"),
                        ("first", "  the first `search` after it (catches the index up)"),
                        ("second", "  a second `search`"), ("total", "  `run` + the first `search`")):
        row = Row("search", figure, where, "s", samples[f"current {key}"])
        if ctx.against is not None:
            row.against = samples[f"against {key}"]
            row.against_ratio = _per_round(samples[f"current {key}"], samples[f"against {key}"])
            row.note = "its ratio: current / against" if key == "total" else ""
        ctx.rows.append(row)
    shutil.rmtree(base, ignore_errors=True)


RUNNERS: dict[str, Callable[[Context], None]] = {
    "run": section_run, "cpu": section_cpu, "memory": section_memory, "readers": section_readers,
    "import": section_import, "workers": section_workers, "search": section_search,
}


# ---- the table --------------------------------------------------------------------------------

def _fmt(unit: str) -> str:
    return {"traces/s": "{:,.0f}", "events/s": "{:,.0f}", "MiB": "{:.1f}", "µs": "{:.0f}", "×": "{:.2f}"}.get(unit,
                                                                                                         "{:.2f}")


def print_table(rows: list[Row], against: Path | None) -> None:
    print()
    head = f"{'figure':62} {'where':6} {'current':>26} {'baseline':>26} {'ratio':>22} {'target':>22}"
    if against is not None:
        head += f" {'against':>26} {'its ratio':>20}"
    print(head)
    print("-" * len(head))
    for r in rows:
        f = _fmt(r.unit)
        holds = "" if r.holds is None else ("  holds" if r.holds else "  MISSES")
        unit = f" {r.unit}" if r.unit else ""
        line = (f"{r.figure[:62]:62} {r.where:6} {spread(r.current, f) + unit:>26} "
                f"{(spread(r.baseline, f) + unit) if r.baseline else r.baseline_name:>26} "
                f"{(spread(r.ratio) + '×') if r.ratio else '':>22} {r.target + holds:>22}")
        if against is not None:
            line += (f" {(spread(r.against, f) + unit) if r.against else '':>26} "
                     f"{(spread(r.against_ratio) + '×') if r.against_ratio else '':>20}")
        print(line)
        if r.note:
            print(f"{'':8}{r.note}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, 2 rounds: a smoke run (minutes)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"sections, comma-separated: {', '.join(SECTIONS)}")
    ap.add_argument("--where", choices=["tmpfs", "disk", "both"], default="both")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 5; 2 with --quick)")
    ap.add_argument("--against", type=Path, help="a folder holding another copy of the oloproof package")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in sections if s not in RUNNERS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    if args.against is not None and not (args.against / "oloproof").is_dir():
        ap.error(f"--against {args.against}: no oloproof/ package in it")
    ctx = Context(rounds=args.rounds or (2 if args.quick else 5),
                  places=list(PLACES) if args.where == "both" else [args.where],
                  against=args.against.resolve() if args.against else None, quick=args.quick,
                  root=Path(tempfile.mkdtemp(prefix="oloproof-perf-")))
    started = time.perf_counter()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"{ctx.rounds} interleaved rounds; sections: {', '.join(sections)}", flush=True)
    try:
        for name in sections:
            t0 = time.perf_counter()
            RUNNERS[name](ctx)
            print(f"{name}: {time.perf_counter() - t0:.0f} s (load average {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        shutil.rmtree(ctx.root, ignore_errors=True)
    print_table(ctx.rows, ctx.against)
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps([r.as_dict() for r in ctx.rows], indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
