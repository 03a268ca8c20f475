"""I/O-bound runs (issue #10): an async agent that waits on a model. Each case makes CALLS
model calls (``@tool(kind="model")``, recorded) that answer after LATENCY seconds.

Compared in interleaved rounds, each a whole process (start-up included), the log on disk or
on tmpfs:

* ``oloproof run`` (serial) vs ``oloproof run --concurrency N`` — target ≥ 30×;
* ``oloproof run --concurrency N`` vs Inspect AI running the same simulated work with
  ``max_samples=N`` — target: not slower. Inspect runs from its own environment
  (``--inspect-python``; ``python -m venv /tmp/inspect && /tmp/inspect/bin/pip install inspect-ai``).

    python bench/bench_concurrency.py [--cases 1000] [--calls 5] [--latency 0.02]
        [--concurrency 50] [--rounds 3] [--where disk] [--inspect-python /tmp/inspect/bin/python]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from suites import spread, timed  # noqa: E402

APP = '''\
import asyncio

from oloproof import current_case, system, tool

LATENCY = {latency}
CALLS = {calls}


@tool(kind="model")
async def model(prompt):
    await asyncio.sleep(LATENCY)  # the model's latency
    return "done"


@system(name="io-agent", version="1", records=("agent_trajectory/v1",))
async def run(case):
    answer = None
    for i in range(CALLS):
        answer = await model(prompt=f"{{case.id}} turn {{i}}")
    current_case().finish("success")
    return {{"answer": answer}}
'''

CONFIG = '''\
system: {name: io-agent, version: "1", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
'''


def make_suite(folder: Path, n: int, calls: int, latency: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP.format(latency=latency, calls=calls))
    (folder / "oloproof.yaml").write_text(CONFIG)
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"case_{i:06d}", "input": {"n": i}, "expected": {"answer": "done"}}) + "\n")
    return folder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--where", choices=["disk", "tmpfs"], default="disk")
    ap.add_argument("--inspect-python", help="a Python with inspect-ai installed (skipped if not given)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oloproof-io-", dir="/dev/shm" if args.where == "tmpfs" else None))
    oloproof = [sys.executable, "-m", "oloproof", "run"]
    try:
        suite = make_suite(tmp / "suite", args.cases, args.calls, args.latency)
        timed([sys.executable, "-m", "oloproof", "--help"], suite)
        serial, concurrent, inspect = [], [], []
        for r in range(args.rounds):
            shutil.rmtree(suite / ".oloproof", ignore_errors=True)
            serial.append(timed(oloproof, suite))
            shutil.rmtree(suite / ".oloproof", ignore_errors=True)
            concurrent.append(timed(oloproof + ["--concurrency", str(args.concurrency)], suite))
            if args.inspect_python:
                logs = tmp / f"inspect-{r}"
                inspect.append(timed([args.inspect_python, str(HERE / "inspect_io.py"), str(args.cases),
                                      str(args.latency), str(args.calls), str(args.concurrency), str(logs)], suite))
        ideal = args.cases * args.calls * args.latency
        print(f"[{args.where}] {args.cases} cases x {args.calls} model calls of {args.latency * 1000:.0f} ms "
              f"({ideal:.0f} s of waiting), {args.rounds} interleaved rounds, whole processes:")
        print(f"  oloproof run (serial)            {spread(serial)} s")
        print(f"  oloproof run --concurrency {args.concurrency:<5d} {spread(concurrent)} s   "
              f"speed-up per round {spread([s / c for s, c in zip(serial, concurrent)])}× (target ≥ 30×)")
        if inspect:
            print(f"  Inspect AI, max_samples={args.concurrency:<7d} {spread(inspect)} s   "
                  f"oloproof / Inspect per round {spread([c / i for c, i in zip(concurrent, inspect)])}× "
                  "(target ≤ 1×)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
