"""``oloproof history`` and ``oloproof flaky`` on a log of many runs (issue 31), against the floor
of judging every run once, and ``oloproof diff`` (which now also judges the other runs of the two
versions it compares, for their flaky cases) against judging its two runs.

The log: a flaky agent (40 cases, two criteria; four cases flip with the run's parity, so
every pair of runs has flipped cases for ``diff`` to look up) run ``--runs`` times, one version.
In one process, interleaved round by round (median [range]):

* floor: ``judged_run`` of every sealed run (one evaluation per run, audit included: what any
  history derived from the events must at least do);
* ``history(store)``: every run judged once, each compared with the run before;
* ``flaky_cases(store)``;
* ``diff_runs(latest but one, latest)`` and its own floor, ``judged_run`` of those two runs.

    python bench/bench_history.py [--runs 30] [--rounds 5] [--support]

Measured (2 shared cores, Python 3.11; 30 runs, 5 interleaved rounds):

    flaky agent:   floor 56 [55–80] ms, history 66 [62–74] ms (1.11 [0.82–1.34]× the floor),
                   flaky 62 [60–66] ms; diff 45 [44–46] ms against 4 [4–4] ms for judging its two
                   runs (12× — it judges the version's other runs, at most 20, for their flaky cases)
    --support:     floor 472 [456–587] ms, history 489 [476–510] ms (1.03 [0.87–1.07]×), flaky
                   488 [476–509] ms; diff 33 [32–33] ms against 32 [31–33] ms (nothing flipped:
                   no other run judged)
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

ROOT = Path(__file__).resolve().parents[1]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} [{min(values) * 1000:.0f}–{max(values) * 1000:.0f}] ms"


APP = '''\
from pathlib import Path

from oloproof import current_case, system

HERE = Path(__file__).parent


@system(name="bench-flaky", version="1", records=("agent_trajectory/v1",))
def run(case):
    n = int((HERE / "counter").read_text())
    i = case.input["i"]
    ok = i % 10 != 3 and (i % 10 != 7 or n % 2 == 0)
    current_case().step("tool_call", tool_name="lookup", arguments={"i": i})
    current_case().finish("success")
    return {"answer": "ok" if ok else "no", "polite": "yes"}
'''

CONFIG = """\
system: {name: bench-flaky, version: "1", callable: app:run, records: [agent_trajectory/v1]}
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: contains, criterion: polite, field: polite, expected_field: polite}
  - {type: agent_max_steps, max_steps: 5}
"""


def make_project(p: Path) -> Path:
    import json

    p.mkdir(parents=True)
    (p / "app.py").write_text(APP)
    (p / "oloproof.yaml").write_text(CONFIG)
    (p / "cases.jsonl").write_text("".join(json.dumps({"id": f"c{i:02d}", "input": {"i": i},
                                                        "expected": {"answer": "ok", "polite": "yes"}}) + "\n"
                                           for i in range(40)))
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--support", action="store_true",
                    help="the support-agent example (40 cases, six criteria, deterministic) instead")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oloproof-bench-history-"))
    try:
        if args.support:
            project = tmp / "support"
            shutil.copytree(ROOT / "examples" / "support_agent", project,
                            ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
        else:
            project = make_project(tmp / "agent")
        t0 = time.perf_counter()
        for n in range(args.runs):
            (project / "counter").write_text(str(n))
            subprocess.run([sys.executable, "-m", "oloproof", "run", "-q", "--durability", "normal"], cwd=project,
                           capture_output=True, check=False)
        print(f"{args.runs} runs of 40 cases recorded in {time.perf_counter() - t0:.1f} s")

        sys.path.insert(0, str(ROOT))
        from oloproof.app.diff import diff_runs
        from oloproof.app.evidence import judged_run
        from oloproof.app.history import flaky_cases, history
        from oloproof.app.runs import run_headers
        from oloproof.cli.common import open_log

        store = open_log(str(project / ".oloproof" / "log.db"))
        ids = [r.run_id for r in run_headers(store)]

        def floor() -> None:
            for run_id in ids:
                judged_run(store, run_id)

        def pair_floor() -> None:
            judged_run(store, ids[-2])
            judged_run(store, ids[-1])

        timed = {"floor (judge every run)": floor, "history": lambda: history(store),
                 "flaky": lambda: flaky_cases(store), "diff of two runs": lambda: diff_runs(store, ids[-2], ids[-1]),
                 "judge those two runs": pair_floor}
        times: dict[str, list[float]] = {name: [] for name in timed}
        for _ in range(args.rounds):
            for name, fn in timed.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        store.close()
        for name, values in times.items():
            print(f"{name:26s} {spread(values)}")
        ratio = [h / f for h, f in zip(times["history"], times["floor (judge every run)"])]
        print(f"history / floor per round: {statistics.median(ratio):.2f} [{min(ratio):.2f}–{max(ratio):.2f}]×")
        ratio = [d / f for d, f in zip(times["diff of two runs"], times["judge those two runs"])]
        print(f"diff / its two runs per round: {statistics.median(ratio):.2f} [{min(ratio):.2f}–{max(ratio):.2f}]×")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
