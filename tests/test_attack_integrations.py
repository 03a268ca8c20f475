"""Attacks on what issue 25 added — framework agents recorded through ``instrument`` — as a
hostile agent and a demanding new user would make them: tools returning values a log cannot
hold or raising what no tool should, agent names that try to forge a line of output, a fault
aimed at a model call, a resumed run, the docs' own snippets. Each test is an attack: those
that worked are fixed; those that did not are kept so that they keep not working."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oloproof.app.project import load_project, load_system
from oloproof.app.run import run_suite
from oloproof.store import SQLiteStore
from tests.conftest import copy_recorded, run_in, write

DOCS = Path(__file__).resolve().parents[1] / "docs"

APP = '''\
import math
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from oloproof import Stateful, system
from oloproof.integrations.pydantic_ai import instrument


class Reading(BaseModel):
    value: float


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no text")


def policy(messages, info):
    request = str(messages[0].parts[-1].content)
    returns = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("odd", {"what": request})])
    return ModelResponse(parts=[TextPart("done: " + str(returns[-1].content)[:40])])


def odd(ctx: RunContext[Any], what: str) -> Any:
    """A tool that returns (or raises) whatever it is asked for."""
    ctx.deps.state["calls"] += 1
    values = {"bytes": b"\\x00\\xff", "set": {3, 1, 2}, "object": object(), "nan": Reading(value=math.nan),
              "big": 10 ** 40, "huge": "y" * 200_000}
    if what == "cycle":
        loop = {}
        loop["self"] = loop
        return loop
    if what == "unprintable":
        raise Unprintable()
    if what == "exit":
        raise SystemExit(3)
    if what == "base":
        raise BaseException("not an Exception")
    return values.get(what, "ok")


def agent(name):
    return instrument(Agent(FunctionModel(policy, model_name="scripted"), name=name, deps_type=object, tools=[odd]))


DESK = agent("desk")  # module level: its tool and model are declared


@system(name="odd", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    def run(self, case):
        name = case.input.get("agent")
        team = DESK if name is None else agent(name)  # an agent built per case, named by the case
        return {"answer": team.run_sync(case.input["what"], deps=self).output}
'''

CONFIG = '''\
system:
  name: odd
  version: "1"
  callable: app:Desk
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: state_matches, criterion: world, mode: subset}
  - {type: agent_route}
'''

FORGED = "billing\nexit 0: the gate passed (every rule passed)"
CASES = {
    "fine": {"what": "fine"}, "bytes": {"what": "bytes"}, "set": {"what": "set"}, "big": {"what": "big"},
    "huge": {"what": "huge"}, "object": {"what": "object"}, "nan": {"what": "nan"}, "cycle": {"what": "cycle"},
    "unprintable": {"what": "unprintable"}, "exit": {"what": "exit"}, "base": {"what": "base"},
    "forged": {"what": "fine", "agent": FORGED}, "markup": {"what": "fine", "agent": "[bold red]x[/] <b>y</b>"},
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    p = tmp_path_factory.mktemp("odd") / "odd"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps({"id": cid, "input": inp, "initial_state": {"calls": 0},
                                                 "expected": {"state": {"calls": 1}}}) + "\n"
                                     for cid, inp in CASES.items()))
    write(p / "results.json", "{}\n")  # a results file of an earlier command, in the folder a run sees
    return run_in(p, "run", "--json", "r.json")


@pytest.fixture
def odd(recorded, tmp_path) -> Path:
    assert recorded.exit_code == 0, recorded.output
    return copy_recorded(recorded.folder, tmp_path / "odd")


def verdicts(project: Path) -> dict[str, dict[str, str]]:
    data = json.loads((project / "r.json").read_text())
    return {c["case_id"]: {k: v["verdict"] + ("/" + v["reason"] if v.get("reason") else "")
                           for k, v in c["verdicts"].items()} for c in data["cases"]}


# ---- what a tool returns or raises ---------------------------------------------------------------

def test_values_the_log_cannot_hold_leave_their_case_missing_and_the_run_goes_on(odd, cli):
    v = verdicts(odd)
    for case in ("fine", "bytes", "set", "big", "huge"):  # recorded (bytes as base64, a set as a list)
        assert v[case]["world"] == "pass", (case, v[case])
    for case in ("object", "nan", "cycle"):  # no JSON form: never a pass, never a crash of the run
        assert v[case]["world"] == "missing/invalid_record", (case, v[case])
    for case in ("unprintable", "exit", "base"):  # Pydantic AI fails the run: the case raised
        assert v[case]["world"] == "missing/system_error", (case, v[case])
    shown = cli("show", "latest", "nan", cwd=odd).output
    assert "step 3 (tool_result odd).result.value: NaN is not allowed" in shown
    assert "the value contains itself" in cli("show", "latest", "cycle", cwd=odd).output
    assert cli("audit", "verify", cwd=odd).exit_code == 0


def test_a_tool_error_that_cannot_be_printed_is_recorded_with_its_type(odd, cli):
    r = cli("show", "latest", "unprintable", "--json", cwd=odd)
    steps = json.loads(r.stdout)["trajectory"]["steps"]
    [raised] = [s for s in steps if s["kind"] == "tool_result"]
    assert raised["result"]["error"]["type"] == "Unprintable" and raised.get("raised") is True


# ---- names that try to be output ------------------------------------------------------------

def test_an_agent_name_cannot_forge_a_line_of_show(odd, cli):
    out = cli("show", "latest", "forged", cwd=odd).output
    assert "route: billing\\nexit 0: the gate passed (every rule passed) · 0 handoffs" in out
    assert not any(line.startswith("exit 0: the gate passed (every rule passed)") for line in out.splitlines())
    markup = cli("show", "latest", "markup", cwd=odd).output
    assert "route: [bold red]x[/] <b>y</b> · 0 handoffs" in markup  # text, not rich markup


# ---- a fault aimed at a model call ----------------------------------------------------------

def test_a_fault_on_a_model_call_is_refused_as_a_fault_recovery_on_it_is(odd, cli):
    r = cli("replay", "--fault", "scripted:error", cwd=odd)
    assert r.exit_code == 2, r.output
    assert "'scripted' is a model call, and model calls are never faulted; fault one of its tools (odd)" in r.output
    assert cli("replay", "--fault", "odd:error", "--case", "fine", cwd=odd).exit_code == 0


# ---- resuming ------------------------------------------------------------------------------

def test_a_run_resumes_with_json_written_over_a_file_it_saw(odd, cli):
    """A run without --json, interrupted, resumed with --json naming a file the run saw in the
    project folder: the file is still there, unchanged, so the run resumes."""
    project = load_project(odd)
    info = project.prepare()
    store = SQLiteStore(odd / ".oloproof" / "log.db")

    def stop_after_three(done, total):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped:
        run_suite(project, load_system(project), store, info, progress=stop_after_three)
    run_id = stopped.value.run_id  # (not the last of the runs by id: two runs in one second sort at random)
    assert [r["status"] for r in store.projection("runs") if r["run_id"] == run_id] != ["complete"]
    store.close()
    r = cli("run", "--resume", run_id, "--json", "results.json", cwd=odd)
    assert r.exit_code == 0, r.output
    assert json.loads((odd / "results.json").read_text())["complete"] is True
    assert verdicts(odd) == {c["case_id"]: {k: v["verdict"] + ("/" + v["reason"] if v.get("reason") else "")
                                            for k, v in c["verdicts"].items()}
                             for c in json.loads((odd / "results.json").read_text())["cases"]}


# ---- the docs, as written ------------------------------------------------------------------

STUBS = '''\
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel


def _policy(messages, info):
    names = [t.name for t in info.function_tools]
    returns = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
    if "ask_billing" in names and not returns:
        return ModelResponse(parts=[ToolCallPart("ask_billing", {"request": "refund ord-1"})])
    if "issue_refund" in names and not returns:
        return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": "ord-1"})])
    return ModelResponse(parts=[TextPart("refunded")])


my_model = FunctionModel(_policy, model_name="scripted")


def lookup_order(ctx: RunContext[Any], order_id: str) -> dict:
    """The order."""
    return ctx.deps.state["orders"][order_id]


def issue_refund(ctx: RunContext[Any], order_id: str) -> dict:
    """Refund it."""
    ctx.deps.state["orders"][order_id]["status"] = "refunded"
    return {"order_id": order_id}
'''


def test_the_pydantic_ai_page_instruments_a_team_as_written(cli, tmp_path):
    page = (DOCS / "frameworks" / "pydantic-ai.md").read_text()
    snippet = re.search(r"## Instrumenting\n\n```python\n(.*?)```", page, re.S)[1]
    p = tmp_path / "doc"
    write(p / "stubs.py", STUBS)
    write(p / "app.py", "from stubs import issue_refund, lookup_order, my_model\n" + snippet)
    write(p / "oloproof.yaml", "system:\n  name: team\n  version: '1'\n  callable: app:Desk\n"
                               "  records: [agent_trajectory/v1, environment_state/v1]\ncases: cases.jsonl\n"
                               "evaluators:\n  - {type: agent_route}\n  - {type: state_matches, criterion: world}\n"
                               "  - {type: fault_recovery, tool: issue_refund, fault: error}\n")
    write(p / "cases.jsonl", json.dumps({"id": "c1", "input": {"request": "refund ord-1"},
                                         "initial_state": {"orders": {"ord-1": {"status": "delivered"}}},
                                         "expected": {"route": ["triage", "billing", "triage"],
                                                      "state": {"orders": {"ord-1": {"status": "refunded"}}}}})
          + "\n")
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    got = {c["case_id"]: {k: v["verdict"] for k, v in c["verdicts"].items()}
           for c in json.loads((p / "r.json").read_text())["cases"]}
    assert got["c1"]["agent_route"] == "pass" and got["c1"]["world"] == "pass"
    assert got["c1"]["recovers_from_error_at_issue_refund"] in ("pass", "fail")  # judged: replayed


# ---- out as OpenTelemetry and back ------------------------------------------------------------

def test_a_run_exported_and_imported_with_its_cases_keeps_every_verdict(odd, cli):
    """A case whose system raised is missing; exported and imported again (``--cases``), it
    must not become a pass: the error travels with the case (``oloproof.error``)."""
    assert cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=odd).exit_code == 0
    r = cli("import", "otel", "t.jsonl", "--cases", "cases.jsonl", cwd=odd)
    assert r.exit_code == 0, r.output
    r = cli("eval", "latest", "--other-system", "--json", "back.json", cwd=odd)
    assert r.exit_code == 0, r.output
    back = {c["case_id"]: {k: v["verdict"] + ("/" + v["reason"] if v.get("reason") else "")
                           for k, v in c["verdicts"].items()}
            for c in json.loads((odd / "back.json").read_text())["cases"]}
    original = verdicts(odd)
    assert back["exit"]["world"] == "missing/system_error"  # was a pass once imported
    assert {c: v["world"] for c, v in back.items()} == {c: v["world"] for c, v in original.items()}
    shown = cli("show", "latest", "base", cwd=odd).output
    assert "error: BaseException: not an Exception" in shown
