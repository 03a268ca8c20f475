"""``oloproof.integrations.pydantic_ai.instrument`` (issue 25, SPEC §18.4): real Pydantic AI
agents on its offline ``FunctionModel`` and ``TestModel``, no mock of the framework — tool
calls and model requests routed through the recorder, agents and handoffs named by the
framework, final answer and status from the outermost run, replays and faults answered from
the tape, and the pydantic-ai-team example recorded both ways."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel

from oloproof.integrations.pydantic_ai import (
    decode_response,
    encode_messages,
    encode_response,
    instrument,
)
from oloproof.system import fault_result
from tests.conftest import copy_example, copy_recorded, edit, run_in, write


def view(folder: Path, case_id: str, run: str | None = None):
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(folder / ".oloproof" / "log.db", readonly=True)
    try:
        return case_view(store, run or latest_run_id(store), case_id)
    finally:
        store.close()


def shape(steps) -> list[tuple]:
    return [(s.kind, s.tool_name, s.agent, s.to_agent) for s in steps]


def verdicts(results: Path, criterion: str) -> dict[str, str]:
    data = json.loads(results.read_text())
    return {c["case_id"]: c["verdicts"][criterion]["verdict"] for c in data["cases"]}


@pytest.fixture(scope="module")
def team_recording(tmp_path_factory):
    """The pydantic-ai-team example run once (instrument path): tests copy it."""
    return run_in(copy_example("pydantic_ai_team", tmp_path_factory.mktemp("recorded") / "team"),
                  "run", "--json", "results.json")


@pytest.fixture
def team(team_recording, tmp_path) -> Path:
    assert team_recording.exit_code == 0, team_recording.output
    return copy_recorded(team_recording.folder, tmp_path / "team")


# ---- the example --------------------------------------------------------------------------

def test_a_delegating_team_records_agents_handoffs_the_final_answer_and_the_status(team):
    case = view(team, "refund-ord-1")
    t = case.trajectory
    assert shape(t.steps) == [
        ("decision", "triage-policy", "triage", None),
        ("tool_call", "ask_billing", "triage", None),
        ("handoff", None, "triage", "billing"),  # billing's run starts inside triage's tool
        ("decision", "billing-policy", "billing", None),
        ("tool_call", "lookup_order", "billing", None), ("tool_result", "lookup_order", "billing", None),
        ("decision", "billing-policy", "billing", None),
        ("tool_call", "issue_refund", "billing", None), ("tool_result", "issue_refund", "billing", None),
        ("decision", "billing-policy", "billing", None),
        ("handoff", None, "billing", "triage"),  # ... and hands control back when it ends
        ("tool_result", "ask_billing", "triage", None),
        ("decision", "triage-policy", "triage", None),
        ("final", None, "triage", None)]  # the outermost run's answer only (not billing's)
    assert t.steps[-1].result == "Refunded order ord-1." and t.terminal_status == "success"
    assert t.steps[8].result == {"order_id": "ord-1", "refunded": 40.0}
    # the model request as Pydantic AI's JSON, the response a ModelResponse's, ids numbered
    request = t.steps[3].arguments["messages"]
    prompt = {"part_kind": "user-prompt", "content": "Please refund order ord-1, it arrived broken."}
    assert request == [{"kind": "request", "state": "complete", "parts": [prompt]}]
    assert t.steps[3].result["parts"] == [{"part_kind": "tool-call", "tool_name": "lookup_order",
                                           "args": {"order_id": "ord-1"}, "tool_call_id": "pyd_ai_call_2"}]
    # a later request: only what the model had not seen (the response before it is a step already)
    assert t.steps[6].arguments == {"messages": [{"kind": "request", "state": "complete", "parts": [
        {"part_kind": "tool-return", "tool_name": "lookup_order", "tool_call_id": "pyd_ai_call_2",
         "content": {"amount": 40.0, "order_id": "ord-1", "status": "delivered"}, "outcome": "success",
         "content_file_digests": []}]}]}
    assert [u.model for u in case.usage] == ["triage-policy", "billing-policy", "billing-policy", "billing-policy",
                                             "triage-policy"]
    assert case.state["orders"]["ord-1"]["status"] == "refunded"


def test_the_example_passes_every_criterion_and_its_gate(team):
    data = json.loads((team / "results.json").read_text())
    rows = {c["criterion"]: (c["passed"], c["observed"], c["excluded"]) for c in data["criteria"]}
    assert rows == {"agent_route": (10, 10, 0), "agent_tool_permissions": (10, 10, 0), "world_correct": (10, 10, 0),
                    "other_orders_untouched": (10, 10, 0), "recovers_from_error_at_issue_refund": (4, 4, 6)}
    assert data["gate"]["decision"] == "PASS"
    # each call once: billing, reached by triage's tool, is instrumented too
    steps = view(team, "refund-ord-2").trajectory.steps
    assert [s.tool_name for s in steps if s.kind == "tool_call"] == ["ask_billing", "lookup_order", "issue_refund"]


def test_the_planted_faults_are_caught_by_the_criteria_meant_for_them(cli, team):
    edit(team / "oloproof.yaml", "callable: app:Desk", "callable: app:CarelessDesk")
    edit(team / "oloproof.yaml", 'version: "1.0"', 'version: "1.1-careless"')
    r = cli("run", "--json", "careless.json", cwd=team)
    assert r.exit_code == 1, r.output
    data = json.loads((team / "careless.json").read_text())
    failed = {c["case_id"]: sorted(k for k, v in c["verdicts"].items() if v["verdict"] == "fail")
              for c in data["cases"]}
    # tech refunds a double charge itself: a permission it does not have, and the world shows it
    assert failed["tech-double-charge"] == ["agent_tool_permissions", "recovers_from_error_at_issue_refund",
                                            "world_correct"]
    # billing reports a refund that failed as done: only the fault replay shows it
    for case in ("refund-ord-1", "refund-ord-2", "refund-ord-5", "refund-ord-10"):
        assert failed[case] == ["recovers_from_error_at_issue_refund"], case
    reasons = {c["case_id"]: c["verdicts"]["recovers_from_error_at_issue_refund"].get("reason") for c in data["cases"]}
    assert reasons["refund-ord-1"] == "state_contradicts_claim"
    assert data["gate"]["decision"] == "FAIL"


def test_the_results_do_not_depend_on_how_the_cases_ran(cli, team):
    r = cli("run", "--concurrency", "3", "--json", "threads.json", cwd=team)
    assert r.exit_code == 0, r.output
    threads = json.loads((team / "threads.json").read_text())["cases"]
    assert threads == json.loads((team / "results.json").read_text())["cases"]


def test_an_async_system_records_the_same_steps_and_its_replays_hold(cli, team):
    before = {c: shape(view(team, c).trajectory.steps) for c in ("refund-ord-1", "tech-crash")}
    edit(team / "app.py", "    def run(self, case: Any) -> dict[str, Any]:\n"
                          "        result = self.team.run_sync(case.input[\"request\"], deps=self)",
         "    async def run(self, case: Any) -> dict[str, Any]:\n"
         "        result = await self.team.run(case.input[\"request\"], deps=self)")
    r = cli("run", "--json", "async.json", cwd=team)  # the agents' tasks now run on Oloproof's loop
    assert r.exit_code == 0, r.output
    assert {c: shape(view(team, c).trajectory.steps) for c in before} == before
    data = json.loads((team / "async.json").read_text())
    rows = {c["criterion"]: (c["passed"], c["observed"]) for c in data["criteria"]}
    assert rows["recovers_from_error_at_issue_refund"] == (4, 4)  # every control replay faithful


def test_replay_fault_error_gives_a_faithful_control_and_a_verdict(cli, team):
    r = cli("replay", "--fault", "issue_refund:error", "--case", "refund-ord-1", "--json", "-", cwd=team)
    assert r.exit_code == 0, r.output
    [case] = json.loads(r.stdout)["cases"]
    assert case["control"]["faithful"] is True and case["verdict"] == "pass", case
    # resumed before triage's delegating call (a call inside it gets no checkpoint): triage's
    # first model request came from the tape, billing ran live and escalated after the fault
    assert case["after_fault"][:4] == [
        'issue_refund({"order_id":"ord-1"})',
        '→ {"error":{"message":"issue_refund failed","type":"ToolError"}} (injected)', "decision",
        'escalate({"order_id":"ord-1","reason":"the refund failed"})']


def test_every_fault_kind_reaches_the_agent_as_the_tool_result(cli, team):
    base = json.loads((team / "cases.jsonl").read_text().splitlines()[0])
    lines = []
    for kind in ("error", "timeout", "malformed", "timeout_after_effect", "denied"):
        lines.append(json.dumps({**base, "id": f"fault-{kind}", "fault": {"tool": "issue_refund", "kind": kind}}))
    write(team / "cases.jsonl", "\n".join(lines) + "\n")
    r = cli("run", "--json", "faults.json", cwd=team)
    assert r.exit_code in (0, 1), r.output
    for kind in ("error", "timeout", "malformed", "timeout_after_effect", "denied"):
        case = view(team, f"fault-{kind}")
        steps = case.trajectory.steps
        result = next(s for s in steps if s.kind == "tool_result" and s.tool_name == "issue_refund")
        assert result.result == fault_result(kind, "issue_refund") and result.fault == kind, kind
        # the model's next request holds it as the tool's return, and billing hands the order on
        seen = steps[result.index].arguments["messages"][-1]["parts"][0]
        assert (seen["part_kind"], seen["content"]) == ("tool-return", fault_result(kind, "issue_refund")), kind
        assert [s.tool_name for s in steps if s.kind == "tool_call"][-1] == "escalate", kind
        order = case.state["orders"]["ord-1"]
        # only timeout_after_effect lets the refund land (then billing, told it timed out, escalates)
        assert ("refunded" in order) is (kind == "timeout_after_effect"), (kind, order)
        assert case.fault_fired is True
    denied = view(team, "fault-denied").evidence
    assert [(e.kind, e.data["allowed"], e.source) for e in denied] == [("access", False, "harness")]


def test_a_prefix_run_answers_model_requests_and_calls_from_the_frozen_tape(cli, team):
    r = cli("prefix", "create", "latest", "refund-ord-1", "--before-step", "13", cwd=team)
    assert r.exit_code == 0, r.output
    # the candidate: another prompt for triage (its configuration is not in the recorded requests)
    edit(team / "app.py", 'name="triage", deps_type=Desk)',
         'name="triage", deps_type=Desk, instructions="Answer in one sentence.", system_prompt="You triage.")')
    r = cli("prefix", "run", "--json", "prefix.json", cwd=team)
    assert r.exit_code in (0, 1), r.output
    steps = view(team, "refund-ord-1").trajectory.steps
    # the candidate re-ran from the start; every call before the boundary came from the tape
    # (triage's request rebuilt as a ModelResponse, billing's work not executed again), and
    # its first action past the boundary is its answer
    assert [s.kind for s in steps][-2:] == ["decision", "final"]
    assert steps[-1].result == "Refunded order ord-1."
    data = json.loads((team / "prefix.json").read_text())
    assert data["cases"][0]["verdicts"]["prefix_action_acceptable"]["reason"] != "replay_diverged"


def test_the_span_path_gives_the_same_route_and_permission_verdicts(cli, team, monkeypatch):
    pytest.importorskip("opentelemetry.sdk.trace")
    shutil.rmtree(team / ".oloproof")
    monkeypatch.setenv("OLOPROOF_RECORDING", "spans")
    r = cli("run", "--json", "spans.json", cwd=team)
    assert r.exit_code == 1, r.output  # recovery cannot be replayed through spans: missing
    for criterion in ("agent_route", "agent_tool_permissions"):
        spans = verdicts(team / "spans.json", criterion)
        assert spans == verdicts(team / "results.json", criterion) and set(spans.values()) == {"pass"}, criterion
    assert set(verdicts(team / "spans.json", "recovers_from_error_at_issue_refund").values()) == {"missing", "excluded"}


# ---- the scenarios the example does not show ---------------------------------------------

APP = '''\
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel

from oloproof import Stateful, system
from oloproof.integrations.pydantic_ai import instrument


class Route(BaseModel):
    team: str
    urgent: bool


def returns(messages):
    return [p for m in messages for p in m.parts if p.part_kind in ("tool-return", "retry-prompt")]


def router_policy(messages, info):
    if not returns(messages):
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"team": "billing", "urgent": True})])
    return ModelResponse(parts=[TextPart("unused")])


def billing_policy(messages, info):
    done = returns(messages)
    if not done:  # no tool_call_id: Pydantic AI makes one up at random
        return ModelResponse(parts=[ToolCallPart("flaky_lookup", {"order_id": "o1"})])
    if len(done) == 1:
        return ModelResponse(parts=[ToolCallPart("flaky_lookup", {"order_id": "o1"})])
    if len(done) == 2:
        return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": "o1"})])
    return ModelResponse(parts=[TextPart(f"done: {done[-1].content}")])


router = instrument(instrument(Agent(FunctionModel(router_policy, model_name="router-policy"), name="router",
                                     output_type=Route)))
billing = instrument(Agent(FunctionModel(billing_policy, model_name="billing-policy"), name="billing"))
nameless = {"one": instrument(Agent(TestModel(custom_output_text="hello")))}
modelless = instrument(Agent(name="modelless"))
broken = instrument(Agent(TestModel(), name="broken"))
streamer = instrument(Agent(TestModel(), name="streamer"))
CALLS = []


@billing.tool_plain
def flaky_lookup(order_id: str) -> dict:
    CALLS.append(order_id)
    if len(CALLS) % 2:
        raise ModelRetry("try again")
    return {"order_id": order_id}


@billing.tool_plain
def issue_refund(order_id: str) -> dict:
    STATE["refunded"] = True
    return {"ok": True}


@broken.tool_plain
def explode(n: int) -> str:
    raise ValueError("boom")


@streamer.tool_plain(name="issue_refund")
def refund_streamed(order_id: str) -> dict:
    STATE["refunded"] = True
    return {"ok": True}


STATE = {}


@system(name="scenarios", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Scenarios(Stateful):
    def reset(self, state):
        global STATE
        STATE = self.state = state
        CALLS.clear()

    def snapshot(self):
        return self.state

    def run(self, case):
        scenario = case.input["scenario"]
        if scenario == "handoff":  # the app runs the router, then the agent it chose
            route = router.run_sync("refund o1").output
            return {"answer": billing.run_sync(f"refund o1 ({route.team})").output}
        if scenario == "nameless":
            return {"answer": nameless["one"].run_sync("hi").output}
        if scenario == "per-run-model":
            return {"answer": modelless.run_sync("hi", model=TestModel(custom_output_text="from the run")).output}
        if scenario == "raises":
            return {"answer": broken.run_sync("go").output}
        if scenario == "stream":  # every model request streamed (run_stream)
            with streamer.run_stream_sync("refund a") as result:
                return {"answer": result.get_output()}
        if scenario == "spec-override":  # replaces the agent's capabilities for the block
            with nameless["one"].override(name="overridden", spec={"capabilities": [{"Thinking": {}}]}):
                return {"answer": nameless["one"].run_sync("hi").output}
'''

CONFIG = '''\
system:
  name: scenarios
  version: "1"
  callable: app:Scenarios
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: agent_route}
  - {type: fault_recovery, tool: issue_refund, fault: error}
'''


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    p = tmp_path_factory.mktemp("scenarios")
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps({"id": s, "input": {"scenario": s}, "initial_state": {},
                                                 "expected": {"route": route}}) + "\n"
                                     for s, route in (("handoff", ["router", "billing"]), ("nameless", ["agent"]),
                                                      ("per-run-model", ["modelless"]), ("raises", ["broken"]),
                                                      ("spec-override", ["overridden"]), ("stream", ["streamer"]))))
    return run_in(p, "run", "--json", "results.json")


def test_a_programmatic_handoff_structured_output_and_made_up_ids(scenarios):
    t = view(scenarios.folder, "handoff").trajectory
    assert shape(t.steps) == [
        ("decision", "router-policy", "router", None),
        ("final", None, "router", None),  # each outermost run gives its answer...
        ("handoff", None, "router", "billing"),
        ("decision", "billing-policy", "billing", None),
        ("tool_call", "flaky_lookup", "billing", None), ("tool_result", "flaky_lookup", "billing", None),
        ("decision", "billing-policy", "billing", None),
        ("tool_call", "flaky_lookup", "billing", None), ("tool_result", "flaky_lookup", "billing", None),
        ("decision", "billing-policy", "billing", None),
        ("tool_call", "issue_refund", "billing", None), ("tool_result", "issue_refund", "billing", None),
        ("decision", "billing-policy", "billing", None),
        ("final", None, "billing", None)]  # ... and the last one's status stands
    assert t.steps[1].result == {"team": "billing", "urgent": True}  # a structured output: its JSON form
    assert t.steps[5].result == {"error": {"type": "ModelRetry", "message": "try again"}}
    ids = [p["tool_call_id"] for s in t.steps if s.kind == "decision" for p in s.result["parts"]
           if p["part_kind"] == "tool-call"]
    assert ids == ["pyd_ai_call_1", "pyd_ai_call_2", "pyd_ai_call_3", "pyd_ai_call_4"]
    assert t.terminal_status == "success"
    results = json.loads((scenarios.folder / "results.json").read_text())
    row = {c["case_id"]: c["verdicts"] for c in results["cases"]}["handoff"]
    assert row["agent_route"] == {"verdict": "pass"}
    # the control replay resumes after the ModelRetry the tape answers again as a ModelRetry
    assert row["recovers_from_error_at_issue_refund"] == {"verdict": "pass"}, row


def test_an_unnamed_agent_a_per_run_model_an_override_and_a_run_that_raises(scenarios):
    nameless = view(scenarios.folder, "nameless").trajectory
    assert shape(nameless.steps) == [("decision", "test", "agent", None), ("final", None, "agent", None)]
    per_run = view(scenarios.folder, "per-run-model").trajectory
    assert shape(per_run.steps) == [("decision", "test", "modelless", None), ("final", None, "modelless", None)]
    assert per_run.steps[-1].result == "from the run"
    overridden = view(scenarios.folder, "spec-override").trajectory
    assert shape(overridden.steps) == [("decision", "test", "overridden", None), ("final", None, "overridden", None)]
    raised = view(scenarios.folder, "raises")
    assert raised.trajectory.terminal_status == "failure"
    assert [s.result for s in raised.trajectory.steps if s.kind == "tool_result"][0] == {
        "error": {"type": "ValueError", "message": "boom"}}


def test_streamed_model_requests_are_recorded_and_answered_from_the_tape(scenarios):
    t = view(scenarios.folder, "stream").trajectory
    assert shape(t.steps) == [("decision", "test", "streamer", None),
                              ("tool_call", "issue_refund", "streamer", None),
                              ("tool_result", "issue_refund", "streamer", None),
                              ("decision", "test", "streamer", None), ("final", None, "streamer", None)]
    assert t.steps[0].result["parts"][0]["tool_name"] == "issue_refund"
    results = json.loads((scenarios.folder / "results.json").read_text())
    # the control replay answered the first (streamed) request from the tape: faithful, judged
    row = {c["case_id"]: c["verdicts"] for c in results["cases"]}["stream"]
    assert row["recovers_from_error_at_issue_refund"] == {"verdict": "pass"}, row


def test_the_tools_an_instrumented_agent_routes_are_declared_even_when_registered_after(scenarios, cli):
    edit(scenarios.folder / "oloproof.yaml", "tool: issue_refund", "tool: issue_refnd")
    try:
        r = cli("run", cwd=scenarios.folder)
    finally:
        edit(scenarios.folder / "oloproof.yaml", "tool: issue_refnd", "tool: issue_refund")
    assert r.exit_code == 2, r.output
    assert "no tool 'issue_refnd'; did you mean 'issue_refund'?" in r.output
    # the tools registered after instrument(), and the models (kind "model") the agents route
    assert "(its tools: billing-policy, explode, flaky_lookup, issue_refund, router-policy, test)" in r.output


# ---- without a case ------------------------------------------------------------------------

def policy(messages, info):
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("double", {"n": 21})])
    return ModelResponse(parts=[TextPart(f"it is {messages[-1].parts[0].content}")])


def make_agent() -> Agent:
    agent = Agent(FunctionModel(policy), name="calc")

    @agent.tool_plain
    def double(n: int) -> int:
        return 2 * n

    return agent


def test_outside_a_case_the_agent_runs_as_it_would_bare():
    bare, routed = make_agent(), make_agent()
    assert instrument(routed) is routed
    a, b = bare.run_sync("go"), routed.run_sync("go")
    assert a.output == b.output == "it is 42"
    # the same messages (the ids Pydantic AI makes up at random aside: no two bare runs share them)
    assert _blank_ids(encode_messages(a.all_messages())) == _blank_ids(encode_messages(b.all_messages()))
    assert "pyd_ai_call_" not in json.dumps(encode_messages(b.all_messages()))
    # outside a case the agent has not even one more capability: its root is as built
    from oloproof.integrations.pydantic_ai import _Recording

    assert not any(isinstance(c, _Recording) for c in _leaves(routed))
    assert routed._effective_root_capability() is routed.root_capability


def _blank_ids(messages: list) -> list:
    for m in messages:
        for p in m["parts"]:
            if "tool_call_id" in p:
                p["tool_call_id"] = "ID"
    return messages


def _leaves(agent):
    found = []
    agent.root_capability.apply(found.append)
    return found


def test_instrument_is_idempotent_and_refuses_what_is_not_an_agent():
    from oloproof.integrations.pydantic_ai import _Recording

    agent = make_agent()
    instrument(instrument(agent))
    # what a run inside a case starts from: the agent's root and the recording capability, once
    from oloproof.system import _CURRENT

    token = _CURRENT.set(object())
    try:
        root = agent._effective_root_capability()
    finally:
        _CURRENT.reset(token)
    found: list = []
    root.apply(found.append)
    assert sum(isinstance(c, _Recording) for c in found) == 1 and root is not agent.root_capability
    with pytest.raises(TypeError, match="takes a pydantic_ai.Agent, got FunctionModel"):
        instrument(FunctionModel(policy))


def test_the_codec_round_trips_a_response_with_tool_calls_and_text():
    response = ModelResponse(parts=[ThinkingPart("let me see"), TextPart("Refunding."),
                                    ToolCallPart("issue_refund", {"order_id": "o1", "lines": [1, {"x": None}]},
                                                 tool_call_id="c1")],
                             model_name="m", provider_response_id="resp-7", finish_reason="tool_call")
    data = json.loads(json.dumps(encode_response(response)))
    assert "timestamp" not in data and "provider_response_id" not in data
    rebuilt = decode_response(data)
    assert isinstance(rebuilt, ModelResponse)
    assert rebuilt == dataclasses.replace(response, timestamp=rebuilt.timestamp, provider_response_id=None)
    # a whole run's messages: requests and responses, encoded the same twice over
    run = Agent(TestModel(), name="t")

    @run.tool_plain
    def lookup(order_id: str) -> dict:
        return {"order_id": order_id}

    one, two = run.run_sync("a").all_messages(), run.run_sync("a").all_messages()
    assert encode_messages(one) == encode_messages(two)
    responses = [m for m in one if isinstance(m, ModelResponse)]
    for r in responses:
        back = decode_response(json.loads(json.dumps(encode_response(r))))
        assert back == dataclasses.replace(r, timestamp=back.timestamp, run_id=None, conversation_id=None)


def test_what_is_recorded_from_the_messages_fields_is_what_the_type_adapter_writes():
    """A model call's request and response are written from the messages' fields (JSON bytes,
    made once) when they are plain JSON, through the type adapter otherwise: the same data
    either way, decoded the same."""
    import datetime as dt
    import decimal

    import msgspec
    from pydantic import BaseModel
    from pydantic_ai.messages import (
        BinaryContent,
        FilePart,
        ImageUrl,
        ModelRequest,
        RetryPromptPart,
        SystemPromptPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.usage import RequestUsage

    from oloproof.integrations.pydantic_ai import CODEC, _request

    class Model_(BaseModel):
        a: int | None = None

    @dataclasses.dataclass
    class Plain:
        x: int

    def by_the_adapter(messages):
        encoded = encode_messages(messages)
        for m in encoded:
            if m.get("kind") == "request":
                m.pop("instructions", None)
                m["parts"] = [p for p in m.get("parts", ()) if p.get("part_kind") != "system-prompt"]
        return {"messages": [m for m in encoded if m.get("parts") or m.get("kind") != "request"]}

    def data(recorded):
        return msgspec.json.decode(recorded) if isinstance(recorded, msgspec.Raw) else recorded

    plain = [{"a": 1, "b": None, "c": [1, 2.5, "x", None, {"d": True}]}, "text", 3, 2.5, True, None, [1, 2], [], {},
             {"kind": "binary", "data": "x", "media_type": "image/png"}]
    other = [Model_(a=1), Plain(1), float("nan"), (1, 2), {1: "a"}, dt.datetime(2020, 1, 1), decimal.Decimal("1.5"),
             b"bytes", {"x": float("inf")}]
    requests = [ModelRequest(parts=[ToolReturnPart("t", c, tool_call_id="i1", metadata=c)], instructions="hi",
                             run_id="r") for c in plain + other]
    requests += [
        ModelRequest(parts=[SystemPromptPart("sys"), UserPromptPart("hello")], instructions="inst"),
        ModelRequest(parts=[UserPromptPart(["a", "b"])]),
        ModelRequest(parts=[UserPromptPart([ImageUrl("https://example.com/y.png")])]),
        ModelRequest(parts=[RetryPromptPart("try again", tool_name="t", tool_call_id="c")]),
        ModelRequest(parts=[RetryPromptPart([{"type": "missing", "loc": ("a", 1), "msg": "m", "input": {}}])]),
        ModelRequest(parts=[SystemPromptPart("only")]),
        ModelRequest(parts=[], metadata={"k": 1}),
        ModelRequest(parts=[ToolReturnPart("t", "x", tool_call_id="c", outcome="failed", tool_kind="function")]),
    ]
    raw = 0
    for request in [*requests, requests]:
        messages = request if isinstance(request, list) else [request]
        recorded = _request(None, messages)
        raw += isinstance(recorded, msgspec.Raw)
        assert data(recorded) == by_the_adapter(messages), request
    assert raw == len(plain) + 6  # plain JSON: bytes; the rest through the adapter
    responses = [
        ModelResponse(parts=[TextPart("hi"), ToolCallPart("t", {"a": None, "b": [1]}, tool_call_id="c")],
                      model_name="m", usage=RequestUsage(input_tokens=3, output_tokens=0, details={"x": 1}),
                      provider_details={"a": 1}, provider_response_id="r", finish_reason="stop", provider_name="p"),
        ModelResponse(parts=[ThinkingPart("hmm", signature="s"), ToolCallPart("t", '{"a":1}')]),
        ModelResponse(parts=[ToolCallPart("t", None)], usage=RequestUsage(cache_read_tokens=5)),
        ModelResponse(parts=[TextPart("x")], metadata={"a": {"b": [None]}}),
        ModelResponse(parts=[TextPart("x", provider_details={"t": (1, 2)})]),
        ModelResponse(parts=[FilePart(BinaryContent(b"x", media_type="image/png"))]),
    ]
    for response in responses:
        recorded = CODEC.encode(response)
        assert isinstance(recorded, msgspec.Raw) == (response in responses[:4])
        assert data(recorded) == encode_response(response)
        back, again = decode_response(recorded), decode_response(encode_response(response))
        assert back == dataclasses.replace(again, timestamp=back.timestamp)


def test_an_agent_both_instrumented_and_traced_is_recorded_once():
    """A process that also traces Pydantic AI into Oloproof's span processor (an example app
    left ``Agent.instrument_all`` on, say): the integration records the case's calls, and the
    processor leaves that case alone instead of recording every call a second time."""
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace import TracerProvider
    from pydantic_ai import InstrumentationSettings

    from oloproof.otel import OloproofSpanProcessor
    from oloproof.recorder.case import CaseRecorder
    from oloproof.records import Case
    from oloproof.system import _CURRENT

    provider = TracerProvider()
    provider.add_span_processor(OloproofSpanProcessor())
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        agent = instrument(make_agent())
        rec = CaseRecorder(Case("c1", {}))
        token = _CURRENT.set(rec)
        try:
            agent.run_sync("refund o1")
        finally:
            _CURRENT.reset(token)
        steps = [e for e in rec.trajectory_events() if type(e).__name__ == "StepRecorded"]
        calls = [s.tool_name for s in steps if s.kind == "tool_call"]
        assert calls and len(calls) == len(set(calls)), calls  # each call once
        assert {s.agent for s in steps} == {"calc"}
    finally:
        Agent.instrument_all(False)
