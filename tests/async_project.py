"""An async refund desk used by several tests: ``async def`` tools and model calls, and an
agent that handles several orders concurrently with ``asyncio.gather``. Tool latencies are
random, so calls finish in a different order on every run."""

from __future__ import annotations

import json
from pathlib import Path

APP = '''\
import asyncio
import random

from oloproof import Stateful, current_case, system, tool

LATENCY = 0.004


@system(name="async-desk", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    async def lookup(self, order_id):
        await asyncio.sleep(random.random() * LATENCY)
        return dict(self.state["orders"][order_id])

    @tool
    async def refund(self, order_id):
        await asyncio.sleep(random.random() * LATENCY)
        self.state["orders"][order_id]["status"] = "refunded"
        return {"status": "refunded"}

    @tool
    async def escalate(self, order_id):
        self.state.setdefault("tickets", []).append(order_id)
        return {"ticket": len(self.state["tickets"])}

    @tool(kind="model")
    async def think(self, prompt):
        await asyncio.sleep(random.random() * LATENCY)
        return "refund"

    async def handle(self, order_id, careful):
        await self.think(prompt=f"order {order_id}")
        order = await self.lookup(order_id)
        if order["status"] != "delivered":
            return "denied"
        result = await self.refund(order_id)
        if "error" in result:
            if careful:
                await self.escalate(order_id)
                return "escalated"
            return "failed"
        return "refunded"

    async def __call__(self, case):
        careful = case.input.get("careful", False)
        outcomes = await asyncio.gather(*(self.handle(o, careful) for o in case.input["orders"]))
        current_case().message("handled " + ", ".join(outcomes))
        ok = all(o in ("refunded", "denied", "escalated") for o in outcomes)
        current_case().finish("success" if ok else "failure")
        return {"answer": "done" if ok else "partial", "outcomes": outcomes}
'''

CONFIG = '''\
system: {name: async-desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: state_matches, mode: subset}
  - {type: fault_recovery, tool: refund, fault: error, escalate_tools: [escalate]}
metrics:
  - {id: steps_p50, type: quantile, source: agent_steps, quantile: 0.5}
'''


def make_async_project(folder: Path, cases: int = 8) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP)
    (folder / "oloproof.yaml").write_text(CONFIG)
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(cases):
            orders = [f"o{i}-{k}" for k in range(1 + i % 3)]
            state = {"orders": {o: {"status": "delivered" if k != 1 else "refunded"} for k, o in enumerate(orders)}}
            expected = {"orders": {o: {"status": "refunded"} for o in orders}}
            fh.write(json.dumps({"id": f"case-{i}", "input": {"orders": orders, "careful": i % 2 == 0},
                                 "initial_state": state,
                                 "expected": {"answer": "done", "state": expected}}) + "\n")
    return folder
