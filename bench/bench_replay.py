"""Replay costs (issue #4).

* A control + fault replay pair of a 20-step case vs a fresh run of the same case (both
  committed to the log, FULL sync). Target: the pair costs at most 3× the fresh run.
* Evaluating 1,000 replayed cases: the first evaluation runs and stores the replays; a second
  one finds them in the cache. Target: the cached one is at least 50× faster.

    python bench/bench_replay.py [--cases 1000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

APP = '''\
from oloproof import Stateful, current_case, system, tool


@system(name="bench-desk", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id, page):
        return {"order_id": order_id, "page": page, "status": self.state["orders"][order_id]}

    @tool
    def refund(self, order_id):
        self.state["orders"][order_id] = "refunded"
        return {"status": "refunded"}

    def __call__(self, case):
        oid = case.input["order_id"]
        for page in range(5):                      # 5 calls = 10 steps before the refund
            self.lookup(oid, page)
        result = self.refund(oid)                  # the faulted call: steps 11-12
        for page in range(4):                      # 4 calls = 8 steps after it
            self.lookup(oid, page + 10)
        current_case().finish("success" if "error" not in result else "failure")
        return {"answer": "refunded"}
'''

CONFIG = '''\
system: {name: bench-desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: fault_recovery, tool: refund, fault: error}
'''


def make(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP)
    (folder / "oloproof.yaml").write_text(CONFIG)
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(n):
            oid = f"o{i}"
            fh.write(json.dumps({"id": f"c{i:05d}", "input": {"order_id": oid},
                                 "initial_state": {"orders": {oid: "delivered", "other": "delivered"}},
                                 "expected": {"state": {"orders": {oid: "refunded"}}}}) + "\n")
    return folder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oloproof-bench-replay-"))
    try:
        suite = make(tmp / "suite", args.cases)
        sys.path.insert(0, str(suite))
        from oloproof.app.runs import evaluate_run, iter_case_views
        from oloproof.app.project import load_project, load_system
        from oloproof.recorder.runner import Runner
        from oloproof.replay.plan import change_for, plan_fault
        from oloproof.replay.service import ReplayService
        from oloproof.store import SQLiteStore
        from oloproof.store.base import StreamAppend

        project = load_project(suite)
        system = load_system(project)
        info = project.cases.validate()
        store = SQLiteStore(suite / ".oloproof" / "log.db")
        # record the run without replays (evaluators off), so both passes below start cold
        plain = load_project(suite)
        plain.suite.evaluators.clear()
        plain.suite.criteria.clear()
        runner = Runner(plain, system, store)
        run_id = runner.start(info)
        fresh, pairs = [], []
        service = ReplayService(store, system.name, system.version, system=system)
        for position, sc in enumerate(project.cases):
            t0 = time.perf_counter()
            payloads, types = runner.run_case(run_id, position, sc)
            store.commit([StreamAppend(f"{run_id}/{sc.id}", 0, payloads, types)])
            fresh.append(time.perf_counter() - t0)
            if position < 200:  # the pair, timed on its own for 200 cases
                from oloproof.views import fold_case
                from oloproof.events import decode_many

                view = fold_case(decode_many(payloads), f"{run_id}/{sc.id}")
                plan = plan_fault(view, "refund")
                t0 = time.perf_counter()
                service.ensure(f"{run_id}/{sc.id}", view, plan, None)
                service.ensure(f"{run_id}/{sc.id}", view, plan, change_for(plan, "refund", "error"))
                service.flush()
                pairs.append(time.perf_counter() - t0)
        runner.finish(run_id)
        steps = len(next(iter_case_views(store, run_id)).trajectory.steps)
        f, p = statistics.median(fresh), statistics.median(pairs)
        print(f"{steps}-step case: fresh run {f * 1000:.2f} ms, control + fault replay pair {p * 1000:.2f} ms "
              f"(median): {p / f:.2f}× (target ≤ 3×)")

        # first evaluation: runs (and stores) the replays not yet in the log
        from oloproof.evaluate.projector import evaluation_key

        key = evaluation_key(project.config_digest, system.version)
        import scipy.special  # noqa: F401  (import time is not evaluation time)

        t0 = time.perf_counter()
        first = evaluate_run(store, run_id, project.suite,
                             ReplayService(store, system.name, system.version, system=system), eval_key=key)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        cached = evaluate_run(store, run_id, project.suite, eval_key=key)  # same version: the cache
        t_cached = time.perf_counter() - t0
        t0 = time.perf_counter()
        evaluate_run(store, run_id, project.suite)  # no evaluation cache: events + cached replays
        t_replays = time.perf_counter() - t0
        assert first.criteria == cached.criteria
        row = cached.criteria["recovers_from_error_at_refund"]
        print(f"{args.cases} cases ({row.observed} observed): first evaluation {t_first:.2f} s, "
              f"cached {t_cached:.3f} s: {t_first / t_cached:.0f}× faster (target ≥ 50×); "
              f"re-judging from the events and the cached replays {t_replays:.3f} s "
              f"({t_first / t_replays:.0f}×)")
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
