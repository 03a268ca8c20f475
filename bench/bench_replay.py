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
        from oloproof.app.evidence import evaluate_run
        from oloproof.app.project import load_project, load_system
        from oloproof.app.replay import replay_run
        from oloproof.app.runs import iter_case_views
        from oloproof.events import RunStarted, decode_many, encode, tag_of
        from oloproof.recorder.record import CaseArgs, record_case
        from oloproof.replay.engine import PREFIX, replay_started, run_replay
        from oloproof.replay.plan import Needed, cache_key, change_for, plan_fault
        from oloproof.store import SQLiteStore
        from oloproof.store.base import StreamAppend
        from oloproof.views import fold_case

        project = load_project(suite)
        info = project.prepare()
        system = load_system(project)
        slot = system.slot
        store = SQLiteStore(suite / ".oloproof" / "log.db")
        pair_store = SQLiteStore(tmp / "pairs.db")  # the pairs timed below: not in the main log
        run_id = "bench-run"
        started = RunStarted(run_id, system.name, system.version, ["agent_trajectory/v1", "environment_state/v1"],
                             project.stored_config, project.config_digest, "cases.jsonl", info.digest, info.count,
                             "2026-01-01T00:00:00+00:00")
        store.commit([StreamAppend(run_id, 0, [encode(started)], [tag_of(started)])])
        fresh, pairs = [], []
        for position, sc in enumerate(project.suite_cases):
            # a fresh case: recorded and committed (FULL sync), as a run does
            t0 = time.perf_counter()
            rec = record_case(slot, CaseArgs(run_id, position, sc), None)
            stream = f"{run_id}/{sc.id}"
            store.commit([StreamAppend(stream, 0, rec.payloads, rec.types)])
            fresh.append(time.perf_counter() - t0)
            if position < 200:  # the pair, timed on its own for 200 cases (their replays are then cached)
                view = fold_case(decode_many(rec.payloads), stream)
                plan = plan_fault(view, "refund")
                t0 = time.perf_counter()
                appends = []
                for change in (None, change_for(plan, "refund", "error")):
                    needed = Needed(cache_key(system.name, system.version, view.fingerprint, plan, change),
                                    plan, change)
                    head = replay_started(slot, view, stream, needed)
                    payloads, types = run_replay(slot, view, plan, change)
                    appends.append(StreamAppend(PREFIX + needed.key, 0, [encode(head), *payloads],
                                                [tag_of(head), *types]))
                pair_store.commit(appends)  # a case's replays: one transaction
                pairs.append(time.perf_counter() - t0)
        steps = len(next(iter_case_views(store, run_id)).trajectory.steps)
        f, p = statistics.median(fresh), statistics.median(pairs)
        print(f"{steps}-step case: fresh run {f * 1000:.2f} ms, control + fault replay pair {p * 1000:.2f} ms "
              f"(median): {p / f:.2f}× (target ≤ 3×)")

        pair_store.close()
        # The replay cache, without the evaluation cache (neither pass reads `evaluations`):
        # the first pass runs (and stores) the replays not yet in the log, the second finds
        # every one of them by its key.
        t0 = time.perf_counter()
        first = replay_run(store, str(suite), run_id, "refund:error")
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        second = replay_run(store, str(suite), run_id, "refund:error")
        t_cached = time.perf_counter() - t0
        assert second["executed"] == 0 and first["summary"] == second["summary"]
        t0 = time.perf_counter()
        summary = evaluate_run(store, run_id, project.suite)  # from the events and the stored replays
        t_judge = time.perf_counter() - t0
        row = summary.criteria["recovers_from_error_at_refund"]
        assert row.observed + row.missing == args.cases
        print(f"{args.cases} cases: first pass {t_first:.2f} s ({first['executed']} replays run), "
              f"second {t_cached:.3f} s (all {second['cached']} from the replay cache): "
              f"{t_first / t_cached:.0f}× faster (target ≥ 50×); `eval` from the events and the stored "
              f"replays {t_judge:.3f} s")
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
