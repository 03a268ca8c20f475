"""What every framework integration stands on (issue 25): a model call whose request and
response are not JSON goes on the tape through a codec (``@tool(kind="model", encode=,
decode=)``, ``oloproof.integrations.route``), the agent in control names each routed step and
a change of control is one ``handoff`` step, and a tool that returns a pydantic model, a
dataclass or a msgspec struct is recorded as its JSON form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oloproof.errors import RecordError
from oloproof.system import tool
from tests.conftest import write

APP = '''\
import dataclasses

import msgspec
from pydantic import BaseModel

from oloproof import Stateful, current_case, system, tool
from oloproof.integrations import declare, route, switch_to


class Reply(BaseModel):
    """A model client's response object: not JSON, and the agent reads its attributes."""
    action: str
    order_id: str


@dataclasses.dataclass
class Receipt:
    order_id: str
    amount: float


class Ticket(msgspec.Struct):
    number: int


def encode(value):
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


MODEL_CALLS = []


@system(name="desk", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool(kind="model", encode=encode, decode=lambda data: Reply(**data))
    def think(self, history):
        MODEL_CALLS.append(len(history))
        order = history[0].order_id
        return Reply(action="refund" if len(history) == 1 else "done", order_id=order)

    def lookup(self, order_id):
        return Receipt(order_id, self.state["orders"][order_id]["amount"])

    def refund(self, order_id):
        self.state["orders"][order_id]["status"] = "refunded"
        return {"status": "refunded"}

    def ticket(self, order_id):
        return Ticket(7)

    def __call__(self, case):
        oid = case.input["order_id"]
        history = [Reply(action="ask", order_id=oid)]
        switch_to("triage")
        route("ticket", self.ticket, (oid,), arguments={"order_id": oid}, agent="triage")
        decision = self.think(history)  # a model call of the agent in control: billing, below
        history.append(decision)
        assert isinstance(decision, Reply), type(decision)  # rebuilt from the tape in a replay
        route("lookup", self.lookup, (oid,), arguments={"order_id": oid}, agent="billing")
        result = route("refund", self.refund, (oid,), arguments={"order_id": oid}, agent="billing")
        if isinstance(result, dict) and "error" in result:
            route("lookup", self.lookup, (oid,), arguments={"order_id": oid}, agent="billing")
            current_case().finish("failure")
            return {"answer": "could not refund"}
        current_case().finish("success")
        return {"answer": "refunded"}


for name in ("ticket", "lookup", "refund"):
    declare(Desk, name, schema={"order_id": "string"})
'''

CONFIG = '''\
system:
  name: desk
  version: "1"
  callable: app:Desk
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: agent_route}
  - {type: fault_recovery, tool: refund, fault: error}
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "app.py", APP)
    write(tmp_path / "oloproof.yaml", CONFIG)
    write(tmp_path / "cases.jsonl", json.dumps({
        "id": "c1", "input": {"order_id": "o1"}, "initial_state": {"orders": {"o1": {"amount": 12.5}}},
        "expected": {"route": ["triage", "billing"], "state": {"orders": {"o1": {"status": "refunded"}}}}}) + "\n")
    return tmp_path


def steps_of(project: Path, stream: str = "c1") -> list[dict]:
    import sqlite3

    conn = sqlite3.connect(project / ".oloproof" / "log.db")
    rows = conn.execute("SELECT payload FROM events WHERE stream LIKE ? AND type = 'step.v1' ORDER BY pos",
                        (f"%/{stream}",)).fetchall()
    conn.close()
    return [json.loads(r[0]) for r in rows]


def test_routed_calls_name_their_agent_and_a_change_of_control_is_one_handoff(cli, project):
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code == 0, r.output
    steps = steps_of(project)
    assert [(s["kind"], s.get("tool_name"), s.get("agent"), s.get("to_agent")) for s in steps] == [
        ("tool_call", "ticket", "triage", None), ("tool_result", "ticket", "triage", None),
        # the model call made while triage had control is triage's; billing's first call hands over
        ("decision", "think", "triage", None),
        ("handoff", None, "triage", "billing"),
        ("tool_call", "lookup", "billing", None), ("tool_result", "lookup", "billing", None),
        ("tool_call", "refund", "billing", None), ("tool_result", "refund", "billing", None)]
    # not JSON, recorded as their JSON form: a msgspec struct, a pydantic model, a dataclass
    assert steps[1]["result"] == {"number": 7}
    assert steps[2]["arguments"] == {"history": [{"action": "ask", "order_id": "o1"}]}
    assert steps[2]["result"] == {"action": "refund", "order_id": "o1"}
    assert steps[5]["result"] == {"order_id": "o1", "amount": 12.5}
    data = json.loads((project / "r.json").read_text())
    assert data["cases"][0]["verdicts"]["agent_route"] == {"verdict": "pass"}


def test_a_model_call_rebuilt_by_its_codec_lets_the_control_replay_reproduce_the_run(cli, project):
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code == 0, r.output
    data = json.loads((project / "r.json").read_text())
    # control faithful (the tape's decision came back as a Reply, not a dict), fault judged
    assert data["cases"][0]["verdicts"]["recovers_from_error_at_refund"] == {
        "verdict": "fail", "reason": "ended_in_failure"}
    r = cli("replay", "--fault", "refund:timeout", "--json", "-", cwd=project)
    assert r.exit_code == 0, r.output
    [case] = json.loads(r.stdout)["cases"]
    assert case["control"]["faithful"] is True and case["verdict"] == "fail", case
    assert case["after_fault"][:2] == ['refund({"order_id":"o1"})',
                                       '→ {"error":{"message":"refund timed out","type":"TimeoutError"}} (injected)']


def test_the_codec_hooks_are_checked_and_their_errors_name_the_tool():
    with pytest.raises(RecordError, match=r"decode=\.\.\.\) needs encode"):
        tool(kind="model", decode=lambda d: d)(lambda prompt: prompt)
    with pytest.raises(RecordError, match=r"encode=\.\.\.\) must be a function"):
        tool(kind="model", encode="json")(lambda prompt: prompt)


ORDER_APP = '''\
from oloproof import Stateful, current_case, system, tool

SEEN = []


@system(name="order", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id):
        return {"status": self.state["orders"][order_id]["status"], "amount": 12.5, "id": order_id}

    @tool
    def refund(self, order_id):
        self.state["orders"][order_id]["status"] = "refunded"
        return {"status": "refunded"}

    @tool
    def outer(self, order_id):  # a tool that calls a tool: no checkpoint inside it
        return self.lookup(order_id)

    @tool(kind="model")
    def think(self, prompt):  # the model reads tool results as text, as every real one does
        SEEN.append(prompt)
        return "refund" if "delivered" in prompt else "stop"

    def __call__(self, case):
        found = self.outer("o1")
        if self.think(prompt=str(found) + " " + str(self.state)) == "refund":
            result = self.refund("o1")
            if "error" in result:
                current_case().finish("failure")
                return {"answer": "no"}
        current_case().finish("success")
        return {"answer": "done"}
'''


def test_recorded_values_keep_their_key_order_so_text_built_from_them_replays_the_same(cli, tmp_path):
    """The tape hands a tool's dict back with its keys in the order the tool built them, and a
    replay's sandbox is reset to the checkpoint's state in the order the sandbox held it: a
    model that reads ``str(result)`` and the state sees the same text in the control replay."""
    write(tmp_path / "app.py", ORDER_APP)
    write(tmp_path / "oloproof.yaml", CONFIG.replace("app:Desk", "app:Desk").replace("name: desk", "name: order")
          .replace("agent_route", "agent_tool_called, tool_name: refund"))
    write(tmp_path / "cases.jsonl", json.dumps({
        "id": "c1", "input": {}, "initial_state": {"orders": {"o1": {"status": "delivered", "amount": 12.5}}},
        "expected": {}}) + "\n")
    r = cli("run", "--json", "r.json", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    [case] = json.loads((tmp_path / "r.json").read_text())["cases"]
    assert case["verdicts"]["recovers_from_error_at_refund"] == {"verdict": "fail", "reason": "ended_in_failure"}
    steps = steps_of(tmp_path)
    assert list(steps[3]["result"]) == ["status", "amount", "id"]  # lookup's result, as built
    # checkpoints: before outer (step 1) and before refund, none inside outer (at lookup, step 2)
    import sqlite3

    conn = sqlite3.connect(tmp_path / ".oloproof" / "log.db")
    at = [json.loads(p)["step_index"] for (p,) in conn.execute(
        "SELECT payload FROM events WHERE type = 'checkpoint.v1' AND stream NOT LIKE 'replay/%' ORDER BY pos")]
    conn.close()
    assert at == [1, 6], at
