"""Async all the way: async systems, async @tool and model calls, current_case() across awaits
and tasks, a deterministic order for concurrent calls, and replays that answer them."""

import json
import sqlite3

import pytest

from tests.async_project import make_async_project
from tests.conftest import write

SYNC_APP = '''\
from oloproof import Stateful, current_case, system, tool


@system(name="desk", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id):
        return dict(self.state["orders"][order_id])

    @tool
    def refund(self, order_id):
        if order_id == "boom":
            raise ValueError("cannot refund " + order_id)
        self.state["orders"][order_id]["status"] = "refunded"
        return {"status": "refunded"}

    @tool(kind="model")
    def think(self, prompt):
        return {"plan": ["lookup", "refund"], "prompt": prompt}

    def __call__(self, case):
        oid = case.input["order_id"]
        self.think(prompt=case.input["message"])
        current_case().message("looking " + oid)
        order = self.lookup(oid)
        current_case().checkpoint(id="before-refund")
        try:
            self.refund(oid)
        except ValueError:
            current_case().constraint("refund_ok", False)
            current_case().finish("failure")
            return {"answer": "failed"}
        current_case().constraint("refund_ok", True)
        current_case().final("refunded " + oid)
        current_case().finish("success")
        return {"answer": "refunded", "was": order["status"]}
'''

ASYNC_APP = (SYNC_APP
             .replace("    def lookup", "    async def lookup").replace("    def refund", "    async def refund")
             .replace("    def think", "    async def think").replace("    def __call__", "    async def __call__")
             .replace("self.think(", "await self.think(").replace("order = self.lookup(", "order = await self.lookup(")
             .replace("            self.refund(oid)", "            await self.refund(oid)"))

CONFIG = '''\
system: {name: desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: fault_recovery, tool: refund, fault: timeout}
'''

CASES = [
    {"id": "a", "input": {"order_id": "o1", "message": "refund o1"},
     "initial_state": {"orders": {"o1": {"status": "delivered"}}}, "expected": {"answer": "refunded"}},
    {"id": "b", "input": {"order_id": "boom", "message": "refund boom"},
     "initial_state": {"orders": {"boom": {"status": "delivered"}}}, "expected": {"answer": "refunded"}},
]


def streams(db, normalize=True, replays_by_content=False):
    """Every stream's payloads, with the run id taken out (it differs between runs). Replay
    streams are named by what they replay (case, kind, change) rather than by their key, and
    their code digest is taken out: replays are keyed by the system's code, which differs
    between the projects compared here. A case's observed wall time (``case_observed.v1``) is
    the one field a clock sets: it is zeroed."""
    conn = sqlite3.connect(db)
    runs = [r[0] for r in conn.execute("SELECT DISTINCT stream FROM events WHERE stream NOT LIKE '%/%'")]
    out = {}
    names = {}
    for stream, payload in conn.execute("SELECT stream, payload FROM events ORDER BY stream, seq"):
        text = bytes(payload).decode()
        for run in runs:
            stream, text = stream.replace(run, "RUN"), text.replace(run, "RUN")
        if '"type":"case_observed.v1"' in text:
            text = json.dumps({**json.loads(text), "wall_ms": 0}, sort_keys=True)
        if replays_by_content and stream.startswith("replay/"):
            event = json.loads(text)
            if event["type"].startswith("replay_started"):
                names[stream] = "replay:" + json.dumps([event["case_id"], event["kind"], event.get("change")],
                                                       sort_keys=True)
                for field in ("cache_key", "code_digest"):
                    event.pop(field, None)
                text = json.dumps(event, sort_keys=True)
            stream = names[stream]
        out.setdefault(stream, []).append(text)
    conn.close()
    return out


def project(tmp_path, name, app, cases=CASES, config=CONFIG):
    p = tmp_path / name
    write(p / "app.py", app)
    write(p / "oloproof.yaml", config)
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in cases))
    return p


# a sync-looking system that hands back a coroutine (no `async def __call__` to see)
WRAPPED_APP = ASYNC_APP.replace("    async def __call__(self, case):", "    def __call__(self, case):\n"
                                "        return self.handle(case)\n\n    async def handle(self, case):")


def test_sync_and_async_agents_record_byte_identical_events(cli, tmp_path):
    assert "async def" in ASYNC_APP and "await self.refund" in ASYNC_APP and "return self.handle" in WRAPPED_APP
    results = {}
    for name, app in (("sync", SYNC_APP), ("async", ASYNC_APP), ("wrapped", WRAPPED_APP)):
        p = project(tmp_path, name, app)
        r = cli("run", "--json", "r.json", cwd=p)
        assert r.exit_code == 0, r.output
        data = json.loads((p / "r.json").read_text())
        data.pop("run_id")
        data.pop("log_digest")
        results[name] = (data, {k: v for k, v in streams(p / ".oloproof" / "log.db", replays_by_content=True).items()
                                if k != "RUN"})
    sync, async_ = results["sync"], results["async"]
    assert sync[0] == async_[0] == results["wrapped"][0]
    assert sync[1] == async_[1] == results["wrapped"][1]  # every case and replay event, byte for byte
    case_b = [json.loads(e) for e in sync[1]["RUN/b"]]
    raised = [e for e in case_b if e.get("kind") == "tool_result" and e.get("raised")]
    assert raised and raised[0]["result"]["error"]["type"] == "ValueError"
    assert any(e["type"] == "checkpoint.v1" and e.get("id") == "before-refund" for e in case_b)
    assert any(e["type"] == "step.v1" and e["kind"] == "decision" for e in case_b)
    assert not any("branch" in e for e in case_b)  # no concurrent tasks: no tree positions


def test_gathered_calls_have_one_order_whatever_finishes_first(cli, tmp_path):
    p = make_async_project(tmp_path / "desk", cases=6)
    runs = []
    for latency in ("0.0", "0.01"):  # with latency, calls finish in random order
        app = (p / "app.py").read_text().replace("LATENCY = 0.004", f"LATENCY = {latency}")
        (p / "app.py").write_text(app.replace("LATENCY = 0.0\n", f"LATENCY = {latency}\n"))
        db = tmp_path / f"{latency}.db"
        r = cli("run", "--db", str(db), "--project", str(p), cwd=p)
        assert r.exit_code == 0, r.output
        runs.append(streams(db, replays_by_content=True))  # the code (its latency) differs
    a, b = runs
    a.pop("RUN"), b.pop("RUN")
    assert a == b
    steps = [json.loads(e) for e in a["RUN/case-2"] if '"step.v1"' in e]
    # three orders handled concurrently: each task's steps together, tasks in creation order
    orders = [s["arguments"].get("order_id") or s["arguments"].get("prompt", "").split()[-1]
              for s in steps if s["kind"] in ("tool_call", "decision")]
    assert orders == ["o2-0"] * 3 + ["o2-1"] * 2 + ["o2-2"] * 3
    assert [s["branch"][0] for s in steps[:-1]] == sorted(s["branch"][0] for s in steps[:-1])
    assert steps[-1]["kind"] == "message" and steps[-1]["branch"] == [3]


def test_replays_of_concurrent_calls(cli, tmp_path):
    p = make_async_project(tmp_path / "desk", cases=6)
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    verdicts = {c["case_id"]: c["verdicts"]["recovers_from_error_at_refund"] for c in data["cases"]}
    # careful agents escalate a failed refund; the others end in failure. Every control
    # replay reproduced the concurrent recording (none is missing as not faithful).
    assert verdicts == {"case-0": {"verdict": "pass"}, "case-1": {"verdict": "fail", "reason": "ended_in_failure"},
                        "case-2": {"verdict": "pass"}, "case-3": {"verdict": "fail", "reason": "ended_in_failure"},
                        "case-4": {"verdict": "pass"}, "case-5": {"verdict": "fail", "reason": "ended_in_failure"}}
    db = streams(p / ".oloproof" / "log.db")
    faults = [[json.loads(e) for e in events] for stream, events in db.items()
              if stream.startswith("replay/") and '"kind":"fault"' in events[0]]
    case2 = next(f for f in faults if f[0]["case_id"] == "case-2")
    refunds = [s for s in case2 if s.get("kind") == "tool_result" and s["tool_name"] == "refund"]
    # the first refund (order o2-0) got the fault; the third, in another task, ran live
    assert refunds[0]["result"] == {"error": {"type": "ToolError", "message": "refund failed"}}
    assert refunds[1]["result"] == {"status": "refunded"}
    assert case2[-1]["type"] == "replay_finished.v1"
    assert case2[-1]["output"]["outcomes"] == ["escalated", "denied", "refunded"]
    # the checkpoint the replays resumed from: just before the agent started its tasks
    assert case2[0]["checkpoint_step"] == 1


def test_current_case_across_awaits_and_in_tasks(cli, tmp_path):
    app = '''\
import asyncio
from oloproof import current_case, tool

@tool
async def ping(n):
    await asyncio.sleep(0.001 * (3 - n))
    return n

async def worker(n):
    await asyncio.sleep(0)
    current_case().message(f"task {n} for {current_case().id}")
    return await ping(n)

async def run(case):
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(worker(n)) for n in range(3)]
    async with asyncio.TaskGroup() as group:
        extra = group.create_task(worker(3))
    got = await asyncio.gather(*tasks)
    current_case().finish("success")
    return {"answer": "ok", "got": got + [extra.result()]}
'''
    config = ("system: {name: t, version: '1', callable: app:run, records: [agent_trajectory/v1]}\n"
              "evaluators: [{type: agent_tool_called, tool_name: ping, min_calls: 4}]\n")
    p = project(tmp_path, "tasks", app, cases=[{"id": "x", "input": {}}], config=config)
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    assert json.loads((p / "r.json").read_text())["cases"][0]["verdicts"]["agent_tool_ping_called"] == \
        {"verdict": "pass"}
    steps = [json.loads(e) for e in streams(p / ".oloproof" / "log.db")["RUN/x"] if '"step.v1"' in e]
    assert [s["arguments"]["text"] for s in steps if s["kind"] == "message"] == [f"task {n} for x" for n in range(4)]
    assert [s["index"] for s in steps] == list(range(1, 13))


@pytest.mark.parametrize("executor", [[], ["--concurrency", "4"]])
def test_async_timeout_is_a_missing_case_and_the_run_goes_on(cli, tmp_path, executor):
    app = '''\
import asyncio
from oloproof import current_case, tool

@tool
async def slow(seconds):
    await asyncio.sleep(seconds)
    return seconds

async def run(case):
    await slow(case.input["seconds"])
    current_case().finish("success")
    return {"answer": "ok"}
'''
    config = ("system: {name: t, version: '1', callable: app:run, records: [agent_trajectory/v1]}\n"
              "timeout: 0.3\n"
              "evaluators: [{type: contains, criterion: answer_correct, field: answer, expected_field: answer}]\n")
    cases = [{"id": f"c{i}", "input": {"seconds": s}, "expected": {"answer": "ok"}}
             for i, s in enumerate([0, 30, 0.01])]
    p = project(tmp_path, "slow", app, cases=cases, config=config)
    import time

    t0 = time.monotonic()
    r = cli("run", "--json", "r.json", *executor, cwd=p)
    assert time.monotonic() - t0 < 10
    data = json.loads((p / "r.json").read_text())
    v = {c["case_id"]: c["verdicts"]["answer_correct"] for c in data["cases"]}
    assert v == {"c0": {"verdict": "pass"}, "c1": {"verdict": "missing", "reason": "case_timeout"},
                 "c2": {"verdict": "pass"}}
    assert r.exit_code == 0
