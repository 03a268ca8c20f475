"""LangGraph, instrumented (issue 25, SPEC §18.4): ``oloproof.integrations.langgraph.instrument``
routes a real LangGraph team's tool and chat model calls through the recorder — on the
framework's own machinery (``create_react_agent``, ``ToolNode``, ``Command(graph=PARENT)``
handoffs) and an offline chat model, no mocks of the framework, no network."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.prebuilt")

from tests.conftest import EXAMPLES, copy_example, copy_recorded, edit, run_in

KINDS = ("error", "timeout", "malformed", "timeout_after_effect", "denied")
REFUNDS = ("charged-twice", "refund-late", "refund-limit")


def example_module() -> Any:
    """The example's ``app.py``, loaded under a name of its own (tests of other projects
    import modules called ``app`` too)."""
    name = "oloproof_langgraph_team_app"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / "langgraph_team" / "app.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def team_run(tmp_path_factory):
    """The example as shipped (the correct team), run once: `oloproof run --json results.json`."""
    return run_in(copy_example("langgraph_team", tmp_path_factory.mktemp("langgraph") / "team"),
                  "run", "--json", "results.json")


@pytest.fixture
def team(team_run, tmp_path) -> Path:
    assert team_run.exit_code == 0, team_run.output
    return copy_recorded(team_run.folder, tmp_path / "team")


def rows(folder: Path, name: str = "results.json") -> dict[str, tuple[int, int, int, int]]:
    data = json.loads((folder / name).read_text())
    return {c["criterion"]: (c["passed"], c["observed"], c["missing"], c["excluded"]) for c in data["criteria"]}


def verdicts(folder: Path, name: str = "results.json") -> dict[str, dict[str, str]]:
    data = json.loads((folder / name).read_text())
    return {c["case_id"]: {k: v["verdict"] for k, v in c["verdicts"].items()} for c in data["cases"]}


def view(folder: Path, case_id: str, run: int = -1) -> Any:
    """``case_id`` as the latest run (``run``: the n-th, oldest first) recorded it."""
    from oloproof.app.runs import case_view, run_headers
    from oloproof.store import SQLiteStore

    store = SQLiteStore(folder / ".oloproof" / "log.db", readonly=True)
    try:
        return case_view(store, run_headers(store)[run].run_id, case_id)
    finally:
        store.close()


def first_run(folder: Path) -> str:
    from oloproof.app.runs import run_headers
    from oloproof.store import SQLiteStore

    store = SQLiteStore(folder / ".oloproof" / "log.db", readonly=True)
    try:
        return run_headers(store)[0].run_id
    finally:
        store.close()


def shape(steps: Any) -> list[tuple]:
    return [(s.kind, s.tool_name, s.agent, s.to_agent) for s in steps]


REFUND_LATE = [
    ("decision", "triage-model", "triage", None), ("handoff", None, "triage", "billing"),
    ("decision", "billing-model", "billing", None),
    ("tool_call", "lookup_order", "billing", None), ("tool_result", "lookup_order", "billing", None),
    ("decision", "billing-model", "billing", None),
    ("tool_call", "issue_refund", "billing", None), ("tool_result", "issue_refund", "billing", None),
    ("decision", "billing-model", "billing", None), ("final", None, "billing", None)]


# ---- the example, recorded with instrument --------------------------------------------------

def test_the_correct_team_passes_every_criterion_and_its_gate(team):
    assert rows(team) == {
        "agent_route": (10, 10, 0, 0), "agent_tool_permissions": (10, 10, 0, 0), "world_correct": (10, 10, 0, 0),
        "other_orders_untouched": (10, 10, 0, 0), "answer_correct": (10, 10, 0, 0),
        # the three refunds: a faithful control, then a tool error the billing agent escalates
        "recovers_from_error_at_issue_refund": (3, 3, 0, 7)}
    assert json.loads((team / "results.json").read_text())["gate"]["decision"] == "PASS"


def test_steps_name_their_agents_a_handoff_is_one_step_and_the_answer_is_final(team):
    refund = view(team, "refund-late")
    assert shape(refund.trajectory.steps) == REFUND_LATE  # no transfer_to_billing tool call
    assert refund.trajectory.terminal_status == "success"
    assert refund.trajectory.steps[-1].result == "Refunded 20.00 EUR for ord-1." == refund.output["answer"]
    # the model gave the arguments; the injected runtime and the tool call's id are not recorded
    assert refund.trajectory.steps[3].arguments == {"order_id": "ord-1"}
    assert refund.trajectory.steps[4].result == {"amount": 20.0, "order_id": "ord-1", "status": "delivered"}
    request = refund.trajectory.steps[2].arguments
    assert request["tools"] == ["lookup_order", "issue_refund", "escalate_to_human"]
    assert [m["type"] for m in request["messages"]] == ["human", "ai", "tool"]
    assert not any("id" in m["data"] for m in request["messages"])  # random uuids: dropped
    answer = refund.trajectory.steps[2].result["generations"][0]["message"]
    assert answer["data"]["tool_calls"] == [
        {"name": "lookup_order", "args": {"order_id": "ord-1"}, "id": "call-lookup_order", "type": "tool_call"}]
    assert [(u.input_tokens, u.output_tokens, u.model) for u in refund.usage] == [
        (40, 8, "triage-model"), (40, 8, "billing-model"), (40, 8, "billing-model"), (40, 12, "billing-model")]
    assert refund.trajectory.checkpoints[0].state["orders"]["ord-1"]["status"] == "delivered"
    # triage answers by itself: one agent, no handoff
    hours = view(team, "opening-hours")
    assert shape(hours.trajectory.steps) == [("decision", "triage-model", "triage", None),
                                             ("final", None, "triage", None)]
    tech = view(team, "kettle-broken")
    assert [s.agent for s in tech.trajectory.steps[:3]] == ["triage", "triage", "tech"]
    assert tech.trajectory.steps[1].to_agent == "tech"


def test_replay_fault_error_gives_a_faithful_control_and_a_verdict(cli, team):
    r = cli("replay", "--fault", "issue_refund:error", "--json", "-", cwd=team)
    assert r.exit_code == 0, r.output
    cases = {c["case_id"]: c for c in json.loads(r.stdout)["cases"] if "control" in c}
    assert sorted(cases) == list(REFUNDS)
    for c in cases.values():
        assert c["control"] == {"faithful": True, "first_difference": None} and c["verdict"] == "pass", c
    assert cases["refund-late"]["after_fault"][:3] == [
        'issue_refund({"order_id":"ord-1"})',
        '→ {"error":{"message":"issue_refund failed","type":"ToolError"}} (injected)', "decision"]
    assert cases["refund-late"]["after_fault"][3].startswith("escalate_to_human(")


@pytest.mark.parametrize("kind", KINDS)
def test_every_fault_kind_reaches_the_model_as_the_tools_result(cli, team, kind):
    from oloproof.system import MALFORMED, fault_result

    # a case that declares the fault: the run itself injects it into the first refund
    cases = team / "cases.jsonl"
    lines = [json.loads(line) for line in cases.read_text().splitlines()]
    faulted = next(c for c in lines if c["id"] == "refund-late")
    faulted["fault"] = {"tool": "issue_refund", "kind": kind, "call": 1}
    cases.write_text(json.dumps(faulted) + "\n")
    edit(team / "oloproof.yaml", "release: release.yaml\n", "")
    r = cli("run", "--json", "faulted.json", cwd=team)
    assert r.exit_code == 0, r.output
    steps = view(team, "refund-late").trajectory.steps
    result = next(s for s in steps if s.kind == "tool_result" and s.tool_name == "issue_refund")
    assert result.result == fault_result(kind, "issue_refund") and result.fault == kind
    # the billing model's next request holds it as the tool's message, then escalates
    told = steps[result.index].arguments["messages"][-1]["data"]
    expected = MALFORMED if kind == "malformed" else json.dumps(fault_result(kind, "issue_refund"))
    assert (told["name"], told["content"]) == ("issue_refund", expected)
    assert [s.tool_name for s in steps if s.kind == "tool_call"][-1] == "escalate_to_human"
    state = view(team, "refund-late").state["orders"]["ord-1"]["status"]
    assert state == "escalated"  # timeout_after_effect: refunded first (the tool ran), then escalated
    # and the same kind substituted by a replay: a faithful control, a verdict
    r = cli("replay", "--fault", f"issue_refund:{kind}", "--run", first_run(team), "--case", "refund-late",
            "--json", "-", cwd=team)
    assert r.exit_code == 0, r.output
    [replayed] = json.loads(r.stdout)["cases"]
    assert replayed["control"]["faithful"] is True and replayed["verdict"] == "pass", replayed


def test_the_planted_faults_are_caught_by_the_criteria_meant_for_them(cli, team):
    edit(team / "oloproof.yaml", "callable: app:Desk", "callable: app:PlantedDesk")
    edit(team / "oloproof.yaml", 'version: "1.0"', 'version: "1.0-planted"')
    r = cli("run", "--json", "planted.json", cwd=team)
    assert r.exit_code == 1, r.output
    found = rows(team, "planted.json")
    assert found["agent_route"] == (10, 10, 0, 0)  # triage still routes right
    # tech refunds the broken orders itself: the permission map and the world say so
    assert found["agent_tool_permissions"] == (8, 10, 0, 0) and found["world_correct"] == (8, 10, 0, 0)
    by_case = verdicts(team, "planted.json")
    assert {c for c, v in by_case.items() if v["agent_tool_permissions"] == "fail"} == {"kettle-broken",
                                                                                      "speaker-broken"}
    # billing says "Refunded" after a refund error: every faulted refund fails recovery
    assert found["recovers_from_error_at_issue_refund"] == (0, 5, 0, 5)
    gate = {g["name"]: g["status"] for g in json.loads((team / "planted.json").read_text())["gate"]["rules"]}
    assert gate == {"routed-right": "PASS", "permissions-hold": "FAIL", "world": "FAIL", "untouched": "PASS",
                    "recovers": "FAIL"}


def test_a_prefix_run_answers_the_calls_before_the_boundary_from_the_tape(cli, team):
    r = cli("prefix", "create", "latest", "refund-late", "--before-step", "6", cwd=team)
    assert r.exit_code == 0, r.output
    edit(team / "prefixes" / "refund-late.yaml", "- tool: lookup_order\n", "- tool: issue_refund\n")
    r = cli("prefix", "run", "--json", "prefix.json", cwd=team)
    data = json.loads((team / "prefix.json").read_text())
    assert data["cases"][0]["verdicts"]["prefix_action_acceptable"] == {"verdict": "pass"}, r.output
    steps = view(team, "refund-late").trajectory.steps
    recorded = view(team, "refund-late", 0).trajectory.steps
    # steps 1-5 are the frozen ones (the decisions rebuilt from the tape, the handoff made
    # again), step 6 the model deciding live, step 7 the refund: recorded, never executed
    assert shape(steps) == REFUND_LATE[:7]
    assert [s.result for s in steps[:5]] == [s.result for s in recorded[:5]]
    assert steps[6].result is None and view(team, "refund-late").state is not None


def test_an_async_team_records_the_same_steps(cli, team):
    app = team / "app.py"
    app.write_text(app.read_text() + '''

class AsyncDesk(Desk):
    async def run(self, case):
        out = await self.team.ainvoke({"messages": [HumanMessage(case.input["message"])]}, context=self)
        return {"answer": out["messages"][-1].content}
''')
    edit(team / "oloproof.yaml", "callable: app:Desk", "callable: app:AsyncDesk")
    r = cli("run", "--json", "async.json", cwd=team)
    assert r.exit_code == 0, r.output
    assert rows(team, "async.json") == rows(team)
    def steps(run: int, case_id: str) -> list[tuple]:  # (the async steps also say where each task ran)
        return [(s.kind, s.tool_name, s.agent, s.to_agent, s.arguments, s.result)
                for s in view(team, case_id, run).trajectory.steps]

    for case_id in ("refund-late", "kettle-broken", "opening-hours"):
        assert steps(-1, case_id) == steps(0, case_id)


def test_the_tool_names_are_declared_to_the_name_check(cli, team):
    edit(team / "oloproof.yaml", "billing: [lookup_order, issue_refund,", "billing: [lookup_order, issue_refnd,")
    r = cli("run", cwd=team)
    assert r.exit_code == 2 and "no tool 'issue_refnd'" in r.output and "did you mean 'issue_refund'" in r.output
    edit(team / "oloproof.yaml", "issue_refnd", "issue_refund")
    edit(team / "oloproof.yaml", "tool: issue_refund, fault: error", "tool: billing-model, fault: error")
    edit(team / "release.yaml", "recovers_from_error_at_issue_refund", "recovers_from_error_at_billing-model")
    r = cli("run", cwd=team)
    assert r.exit_code == 2 and "'billing-model' is a model call" in r.output, r.output


def test_init_copies_the_example_and_names_its_extra(cli, tmp_path):
    r = cli("init", "--example", "langgraph-team", str(tmp_path / "t"))
    assert r.exit_code == 0 and "pip install 'oloproof[langgraph]'" in r.output, r.output
    assert {p.name for p in (tmp_path / "t").iterdir()} >= {"app.py", "spans.py", "cases.jsonl", "oloproof.yaml",
                                                             "release.yaml"}


# ---- the span path: the same team through OpenInference ------------------------------------

@pytest.fixture
def traced(team):
    pytest.importorskip("opentelemetry.sdk.trace")
    instrumentation = pytest.importorskip("openinference.instrumentation.langchain")
    yield team
    instrumentation.LangChainInstrumentor().uninstrument()  # it patches LangChain for the whole process


def test_the_span_path_gives_the_same_route_and_permission_verdicts(cli, traced):
    edit(traced / "oloproof.yaml", "callable: app:Desk", "callable: spans:SpanDesk")
    r = cli("run", "--json", "spans.json", cwd=traced)
    assert r.exit_code in (0, 1), r.output
    assert rows(traced, "spans.json")["world_correct"] == (10, 10, 0, 0)  # the world is the same either way
    spans, instrumented = verdicts(traced, "spans.json"), verdicts(traced)
    for criterion in ("agent_route", "agent_tool_permissions"):
        assert {c: v[criterion] for c, v in spans.items()} == {c: v[criterion] for c, v in instrumented.items()}
    # the same steps, agents and handoff (the handoff tool is no tool call there either)
    for case_id in ("refund-late", "kettle-broken", "opening-hours"):
        assert shape(view(traced, case_id).trajectory.steps) == shape(view(traced, case_id, 0).trajectory.steps)


# ---- in process: one case recorded around a graph -------------------------------------------

def record(fn: Any, *, snapshot: Any = None, recorder: Any = None) -> tuple[Any, list[Any], Any]:
    """Run ``fn()`` as the case in progress: its output, its steps and how it ended."""
    from oloproof.recorder.case import CaseRecorder
    from oloproof.records import Case
    from oloproof.system import _CURRENT

    rec = recorder or CaseRecorder(Case("c", {}), snapshot=snapshot, auto_checkpoints=snapshot is not None)
    token = _CURRENT.set(rec)
    try:
        out = fn()
    finally:
        _CURRENT.reset(token)
    events = rec.trajectory_events()
    return out, [e for e in events if type(e).__name__ == "StepRecorded"], events


def plain(value: Any) -> Any:
    """A recorded value as JSON data (the recorder keeps most as encoded bytes)."""
    import msgspec

    return msgspec.json.decode(msgspec.json.encode(value))


def sandbox(orders: dict[str, Any]) -> Any:
    box = example_module().Sandbox()
    box.reset({"orders": orders, "tickets": []})
    return box


def ask(graph: Any, text: str, box: Any) -> Any:
    from langchain_core.messages import HumanMessage

    return graph.invoke({"messages": [HumanMessage(text)]}, context=box)


def test_instrument_is_idempotent_and_a_separately_instrumented_agent_records_once():
    from oloproof.integrations.langgraph import instrument

    app = example_module()
    orders = {"ord-1": {"status": "delivered", "amount": 20.0}}
    team = app.build_team()
    assert instrument(team) is team and instrument(team) is team
    _, steps, _ = record(lambda: ask(team, "Please refund order ord-1", sandbox(copy.deepcopy(orders))))
    assert shape(steps) == REFUND_LATE
    # billing, the agent triage hands off to, instrumented on its own first, then the team
    team = app.build_team()
    billing = team.nodes["billing"].bound
    assert instrument(billing) is billing
    instrument(team)
    _, steps, _ = record(lambda: ask(team, "Please refund order ord-1", sandbox(copy.deepcopy(orders))))
    assert shape(steps) == REFUND_LATE
    # billing run alone is the outermost run: a react agent named "billing", its own answer
    _, steps, events = record(lambda: ask(billing, "Please refund order ord-1", sandbox(copy.deepcopy(orders))))
    assert shape(steps) == [(k, t, "billing", None) for k, t, _, _ in REFUND_LATE[2:]]
    assert events[-1].terminal_status == "success"


def test_outside_a_case_the_graph_runs_as_before():
    from oloproof.integrations.langgraph import _RUN, instrument

    app = example_module()
    orders = {"ord-1": {"status": "delivered", "amount": 20.0}}

    def conversation(graph: Any) -> list[tuple]:
        out = ask(graph, "Please refund order ord-1", sandbox(copy.deepcopy(orders)))
        return [(type(m).__name__, m.content, getattr(m, "tool_calls", None)) for m in out["messages"]]

    bare = conversation(app.build_team())
    assert conversation(instrument(app.build_team())) == bare
    # the tool's value reached LangChain as the tool returned it (its key order too)
    assert bare[4][1] == '{"order_id": "ord-1", "status": "delivered", "amount": 20.0}'
    assert _RUN.get() is None


def test_a_tool_that_raised_is_rebuilt_from_the_tape_as_the_same_exception():
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode

    from oloproof.integrations.langgraph import instrument
    from oloproof.records import Case
    from oloproof.replay.tape import TapeRecorder

    app = example_module()
    said: list[int] = []

    @tool
    def fetch(key: str) -> str:
        """Fetch a key."""
        raise ValueError(f"no key {key}")

    @tool
    def store(key: str) -> dict:
        """Store a key."""
        return {"stored": key, "at": 1}

    def policy(messages: list[Any]) -> Any:
        said.append(len(messages))
        tools = [m.name for m in messages if isinstance(m, ToolMessage)]
        if not tools:
            return app._call("fetch", key="k")
        if tools == ["fetch"]:
            return app._call("store", key="k")
        return app._say("stored")

    with pytest.warns(DeprecationWarning):  # create_react_agent's move to langchain.agents
        solo = instrument(app.create_react_agent(app.ScriptedChat(model_name="m", policy=policy),
                                                 ToolNode([fetch, store], handle_tool_errors=True), name="solo"))
    _, steps, _ = record(lambda: solo.invoke({"messages": [("user", "go")]}), snapshot=lambda: {})
    assert shape(steps) == [("decision", "m", "solo", None), ("tool_call", "fetch", "solo", None),
                            ("tool_result", "fetch", "solo", None), ("decision", "m", "solo", None),
                            ("tool_call", "store", "solo", None), ("tool_result", "store", "solo", None),
                            ("decision", "m", "solo", None), ("final", None, "solo", None)]
    assert steps[2].raised and plain(steps[2].result) == {
        "error": {"type": "ValueError", "message": "no key k"}}
    told = plain(steps[3].arguments)["messages"][-1]["data"]["content"]
    assert told == "Error: ValueError('no key k')\n Please fix your mistakes."
    # a control replay from before `store`: the model decisions and fetch's error come from
    # the tape (the model is asked once more, at the end), and LangGraph writes the same error
    import msgspec

    tape = [msgspec.json.decode(msgspec.json.encode(s), type=type(s)) for s in steps]
    said.clear()
    replay = TapeRecorder(Case("c", {}), tape, resume_at=5, change=None)
    _, again, _ = record(lambda: solo.invoke({"messages": [("user", "go")]}), recorder=replay)
    assert replay.diverged is None and len(said) == 1
    assert [msgspec.json.encode(s) for s in again] == [msgspec.json.encode(s) for s in steps]


def test_a_flat_graph_names_its_nodes_and_a_tool_node_runs_the_agent_in_controls_tools():
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from oloproof.integrations.langgraph import instrument

    app = example_module()

    @tool
    def look(q: str) -> dict:
        """Look."""
        return {"q": q}

    def policy(messages: list[Any]) -> Any:
        return app._say("done") if isinstance(messages[-1], ToolMessage) else app._call("look", q="x")

    model = app.ScriptedChat(model_name="flat-model", policy=policy).bind_tools([look])
    builder = StateGraph(MessagesState)
    builder.add_node("planner", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([look]))
    builder.add_edge(START, "planner")
    builder.add_conditional_edges("planner", tools_condition)
    builder.add_edge("tools", "planner")
    graph = instrument(builder.compile())
    out, steps, events = record(lambda: graph.invoke({"messages": [("user", "go")]}))
    assert shape(steps) == [("decision", "flat-model", "planner", None), ("tool_call", "look", "planner", None),
                            ("tool_result", "look", "planner", None), ("decision", "flat-model", "planner", None),
                            ("final", None, "planner", None)]
    assert plain(steps[-1].result) == "done" == out["messages"][-1].content
    assert events[-1].terminal_status == "success"
    # a graph that raises: status failure, no final step
    with pytest.warns(DeprecationWarning):
        broken = instrument(app.create_react_agent(app.ScriptedChat(model_name="m", policy=lambda m: 1 / 0), [look]))
    with pytest.raises(ZeroDivisionError):
        record(lambda: broken.invoke({"messages": [("user", "go")]}))


def test_the_codec_round_trips_a_response_with_tool_calls_and_text():
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from oloproof.integrations.langgraph import CODEC, request_of

    said = AIMessage("Let me look.", id="lc_run--0b7c-0", response_metadata={"model_name": "m"},
                     tool_calls=[{"name": "lookup_order", "args": {"order_id": "ord-1"}, "id": "call-1"}],
                     usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7})
    result = ChatResult(generations=[ChatGeneration(message=said, generation_info={"finish_reason": "tool_calls"})],
                        llm_output={"model": "m"})
    def encoded(r):  # JSON bytes, as the recorder stores them
        return json.loads(bytes(CODEC.encode(r)))

    data = encoded(result)
    assert "id" not in data["generations"][0]["message"]["data"]  # LangChain made it up: random
    back = CODEC.decode(json.loads(json.dumps(data)))
    assert isinstance(back, ChatResult) and isinstance(back.generations[0].message, AIMessage)
    message = back.generations[0].message
    assert message == said.model_copy(update={"id": None})
    assert (message.text, message.tool_calls[0]["args"], back.llm_output) == ("Let me look.", {"order_id": "ord-1"},
                                                                              {"model": "m"})
    assert back.generations[0].generation_info == {"finish_reason": "tool_calls"}
    assert encoded(back) == data
    # a None inside is data (a tool call without an id, an argument that is null)
    odd = AIMessage("", tool_calls=[{"name": "t", "args": {"a": None}, "id": None}])
    assert CODEC.decode(CODEC.encode(ChatResult(generations=[ChatGeneration(message=odd)]))).generations[
        0].message == odd
    # a provider's own id is kept; a request's ids (uuids add_messages gives) never are
    kept = AIMessage("x", id="chatcmpl-42")
    assert encoded(ChatResult(generations=[ChatGeneration(message=kept)]))["generations"][0][
        "message"]["data"]["id"] == "chatcmpl-42"
    one = request_of([HumanMessage("hi", id="a"), kept], None, {"tools": [{"type": "function", "function": {
        "name": "lookup_order", "parameters": {}}}], "tool_choice": "auto"})
    assert bytes(one) == bytes(request_of([HumanMessage("hi", id="b"), kept.model_copy(update={"id": "c"})], None,
                                          {"tool_choice": "auto", "tools": [{"function": {"name": "lookup_order"}}]}))
    assert json.loads(bytes(one)) == {"messages": [{"type": "human", "data": {"content": "hi"}},
                                                   {"type": "ai", "data": {"content": "x"}}],
                                      "tool_choice": "auto", "tools": ["lookup_order"]}
    assert json.loads(bytes(request_of([HumanMessage("hi")]))) == {"messages": [{"type": "human",
                                                                                 "data": {"content": "hi"}}]}


def test_a_message_is_written_byte_for_byte_as_its_data_would_be():
    """Messages of plain fields are written by pydantic straight to JSON (the fast way); the
    bytes are those of the message's data written by msgspec (what recordings hold), for every
    kind of message and field: empty fields and LangChain's ids left out, a None inside kept,
    floats with exponents, text that needs escapes; and what pydantic cannot write."""
    import datetime
    from typing import Annotated

    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from pydantic import ConfigDict, Field, PlainSerializer, computed_field, field_serializer

    from oloproof.integrations.langgraph import _encode_json, _message_bytes, _message_json

    class Loud(HumanMessage):  # writes its content its own way
        @field_serializer("content")
        def _loud(self, content: Any) -> Any:
            return content.upper()

    class Tagged(HumanMessage):  # writes a field it computes
        @computed_field
        @property
        def tag(self) -> str:
            return "t"

    class Hidden(HumanMessage):  # a field never written
        secret: str = Field("s", exclude=True)

    class Renamed(HumanMessage):  # a field written under another name, when asked to
        model_config = ConfigDict(serialize_by_alias=True)
        who: str = Field("me", serialization_alias="author")

    class Shouted(HumanMessage):  # a field written through its own serializer
        mood: Annotated[str, PlainSerializer(str.upper)] = "calm"

    messages = [
        HumanMessage('h\u00e9llo \u2028 \x00 "q" \\ / \U0001f600', id="b7c1"), HumanMessage("", id="lc_run--1-0"),
        AIMessage("", id="run-9", tool_calls=[{"name": "f", "args": {"a": None, "l": [], "d": {}}, "id": None}],
                  usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}),
        AIMessage("x", id="chatcmpl-4", response_metadata={"big": 1e16, "small": 2.5e-10, "n": [1e22, -0.0]}),
        AIMessage("x", name=""), AIMessage([], id="chatcmpl-5", response_metadata={"n": 0, "no": False, "f": 0.0}),
        AIMessage([{"type": "text", "text": "hi"}], additional_kwargs={"when": datetime.date(2026, 1, 2), "t": (1,)}),
        AIMessage("", additional_kwargs={"bad": b"\xff"}), AIMessage("", response_metadata={"nan": float("nan")}),
        ToolMessage("ok", tool_call_id="c1", status="success"), ToolMessage("ok", tool_call_id="c1", artifact=()),
        ToolMessage("ok", tool_call_id="c1", artifact={"rows": 2}),
        ToolMessage("ok", tool_call_id="c1", artifact=object()),
        SystemMessage("be brief", extra_field=[]), Loud("quiet"), Tagged("hi"), Hidden("h"), Renamed("r"),
        Shouted("s"), HumanMessage.model_construct(content="partly built"),
        ToolMessage.model_construct(status="error", tool_call_id="c2", content="boom", type="tool"),
    ]
    def written(write: Any) -> Any:
        try:
            return write()
        except Exception as e:  # noqa: BLE001 - bytes no JSON holds: the same error either way
            return type(e)

    for message in messages:
        for keep_id in (True, False):
            assert written(lambda: _message_bytes(message, keep_id=keep_id)) == written(
                lambda: _encode_json(_message_json(message, keep_id=keep_id))), (message, keep_id)


def test_a_request_in_a_run_is_written_as_request_of_writes_it():
    """In a run, messages and options already written are reused (the same objects): every
    request is still the bytes ``request_of`` makes of it, whatever changed between two."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from oloproof.integrations.langgraph import _Graph, _request, _Run, request_of

    g = StateGraph(MessagesState)
    g.add_node("a", lambda state: state)
    g.add_edge(START, "a")
    run = _Run(_Graph(g.compile()), 0)
    first, second = [{"type": "function", "function": {"name": "lookup"}}], [{"name": "refund"}]
    said = AIMessage("ok")
    conversation = [HumanMessage("hi"), said]
    calls: list[tuple[Any, Any, dict[str, Any]]] = [
        (conversation, None, {"tools": first}), (conversation, None, {"tools": first}),
        (conversation, None, {"tools": second}), (conversation, ["\n"], {"tools": second}),
        (conversation, None, {"tool_choice": second}), (conversation[:1], None, {"tools": first, "x": 1}),
        (conversation, None, {}), ([*conversation, HumanMessage("more")], None, {"tools": first}),
    ]
    for messages, stop, options in calls:
        assert bytes(_request(run, messages, stop, options)) == bytes(request_of(messages, stop, options))
    said.content = "changed"  # a message changed in place is written again
    assert b"changed" in bytes(_request(run, conversation, None, {"tools": first}))


def test_instrument_refuses_what_is_not_a_compiled_graph():
    from langgraph.graph import MessagesState, StateGraph

    from oloproof.integrations.langgraph import instrument

    with pytest.raises(TypeError, match=r"got StateGraph \(call \.compile\(\) on it first\)"):
        instrument(StateGraph(MessagesState))
    with pytest.raises(TypeError, match="takes a compiled LangGraph graph"):
        instrument(object())


def test_the_async_api_in_process_records_the_same_steps():
    app = example_module()
    from langchain_core.messages import HumanMessage

    from oloproof.integrations.langgraph import instrument

    team = instrument(app.build_team())
    box = sandbox({"ord-1": {"status": "delivered", "amount": 20.0}})
    out, steps, _ = record(lambda: asyncio.run(team.ainvoke({"messages": [HumanMessage("Please refund ord-1")]},
                                                            context=box)))
    assert shape(steps) == REFUND_LATE and out["messages"][-1].content == "Refunded 20.00 EUR for ord-1."
    chunks: list[Any] = []
    box = sandbox({"ord-1": {"status": "delivered", "amount": 20.0}})
    _, streamed, events = record(lambda: chunks.extend(team.stream(
        {"messages": [HumanMessage("Please refund ord-1")]}, context=box, stream_mode="values")))
    assert shape(streamed) == REFUND_LATE and events[-1].terminal_status == "success"


def test_the_tool_calls_of_one_message_are_recorded_in_its_order():
    import time

    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    from oloproof.integrations.langgraph import instrument

    app = example_module()

    @tool
    def slow(key: str) -> str:
        """Slow."""
        time.sleep(0.05)  # LangGraph runs a message's tool calls in threads: this one ends last
        return key

    @tool
    def fast(key: str) -> str:
        """Fast."""
        return key

    def policy(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return app._say("both")
        return AIMessage("", tool_calls=[{"name": "slow", "args": {"key": "a"}, "id": "1"},
                                         {"name": "fast", "args": {"key": "b"}, "id": "2"}])

    with pytest.warns(DeprecationWarning):
        pair = instrument(app.create_react_agent(app.ScriptedChat(model_name="m", policy=policy), [slow, fast],
                                                 name="pair"))
    _, steps, _ = record(lambda: pair.invoke({"messages": [("user", "go")]}))
    assert [(s.kind, s.tool_name) for s in steps] == [
        ("decision", "m"), ("tool_call", "slow"), ("tool_result", "slow"), ("tool_call", "fast"),
        ("tool_result", "fast"), ("decision", "m"), ("final", None)]


def test_a_tool_a_node_calls_by_hand_is_routed_when_named_and_an_interrupt_is_unknown():
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.types import interrupt

    from oloproof.integrations.langgraph import instrument

    @tool
    def stamp(text: str) -> str:
        """Stamp a text."""
        return f"[{text}]"

    def clerk(state: Any) -> dict:
        return {"messages": [AIMessage(stamp.invoke({"text": "ok"}))]}

    builder = StateGraph(MessagesState)
    builder.add_node("clerk", clerk)
    builder.add_edge(START, "clerk")
    graph = instrument(builder.compile(), tools=[stamp])
    out, steps, events = record(lambda: graph.invoke({"messages": [("user", "go")]}))
    assert shape(steps) == [("tool_call", "stamp", "clerk", None), ("tool_result", "stamp", "clerk", None),
                            ("final", None, "clerk", None)]
    assert plain(steps[0].arguments) == {"text": "ok"} and out["messages"][-1].content == "[ok]"
    assert "stamp" in graph.__oloproof_tools__
    # a graph that stops at an interrupt has not ended: no final step, status unknown
    asking = StateGraph(MessagesState)
    asking.add_node("ask", lambda state: {"messages": [AIMessage(interrupt("which order?"))]})
    asking.add_edge(START, "ask")
    paused = instrument(asking.compile(checkpointer=InMemorySaver()))
    out, steps, events = record(lambda: paused.invoke({"messages": [("user", "go")]},
                                                      {"configurable": {"thread_id": "t"}}))
    assert "__interrupt__" in out and steps == [] and events[-1].terminal_status == "unknown"


def test_an_agent_a_function_node_invokes_is_found_and_named_after_the_node():
    """As langgraph-supervisor adds its agents: a function node calling ``agent.invoke``."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    from oloproof.integrations.langgraph import instrument

    app = example_module()
    billing = app.build_team().nodes["billing"].bound  # a create_react_agent graph, its tools in a ToolNode

    def call_billing(state: Any) -> dict:
        return {"messages": billing.invoke(state)["messages"]}

    builder = StateGraph(MessagesState)
    builder.add_node("refunds", call_billing)
    builder.add_edge(START, "refunds")
    builder.add_edge("refunds", END)
    graph = instrument(builder.compile())
    assert {"lookup_order", "issue_refund", "escalate_to_human", "billing-model"} <= set(graph.__oloproof_tools__)
    box = sandbox({"ord-1": {"status": "delivered", "amount": 20.0}})
    _, steps, _ = record(lambda: ask(graph, "Please refund order ord-1", box))
    assert shape(steps) == [(k, t, "refunds", None) for k, t, _, _ in REFUND_LATE[2:]]
