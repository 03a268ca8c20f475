"""Live recording through OpenTelemetry (issue 15): a real LangGraph agent on LangChain's fake
chat model, traced by OpenInference's LangChain instrumentation, recorded by
``oloproof.otel.OloproofSpanProcessor`` without any ``@tool`` — and its events are those the
same trajectory gives when built by hand. Then the mapping's LangChain cases, one by one."""

from __future__ import annotations

import json

import pytest

from oloproof.config.otlp import (
    message_text,
    model_step,
    model_usage,
    tool_call_step,
    tool_calls_of,
    tool_result_step,
)
from tests.conftest import write

APP = '''
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from oloproof import Stateful, system
from oloproof.otel import OloproofSpanProcessor

provider = TracerProvider()
provider.add_span_processor(OloproofSpanProcessor())
SPANS = InMemorySpanExporter()  # the same spans, kept: a test imports them with `oloproof import otel`
provider.add_span_processor(SimpleSpanProcessor(SPANS))
LangChainInstrumentor().instrument(tracer_provider=provider)


class FakeChat(GenericFakeChatModel):
    """LangChain's fake chat model (it says its scripted messages in turn), named, and bound
    to tools as a real one is (it needs no schema to say what it was scripted to)."""

    model_name: str = "fake-refunds"

    @property
    def _identifying_params(self):
        return {"model_name": self.model_name}

    def bind_tools(self, tools, **kwargs):
        return self


def ask(n, tool_name, order):
    return AIMessage("", tool_calls=[{"name": tool_name, "args": {"order_id": order}, "id": f"c{n}"}],
                     usage_metadata={"input_tokens": 10 * n, "output_tokens": 5, "total_tokens": 10 * n + 5})


def say(text):
    return AIMessage(text, usage_metadata={"input_tokens": 40, "output_tokens": 7, "total_tokens": 47})


SCRIPTS = {  # what the model says, turn by turn
    "careful": lambda o: [ask(1, "lookup_order", o), ask(2, "issue_refund", o), say(f"Refunded {o}.")],
    "hasty": lambda o: [ask(1, "issue_refund", o), say(f"Could not refund {o}.")],
}


@system(name="refunds", version="1", records=["agent_trajectory/v1", "environment_state/v1"])
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    def run(self, case):
        orders = self.state["orders"]

        @tool
        def lookup_order(order_id: str) -> dict:
            """Look an order up."""
            return {"order_id": order_id, "status": orders[order_id]}

        @tool
        def issue_refund(order_id: str) -> dict:
            """Refund a delivered order."""
            if orders[order_id] != "delivered":
                raise ValueError(f"{order_id} was not delivered")
            orders[order_id] = "refunded"
            return {"refunded": order_id}

        tools = [lookup_order, issue_refund]
        order = case.input["order_id"]
        model = FakeChat(messages=iter(SCRIPTS[case.input["plan"]](order))).bind_tools(tools)
        graph = StateGraph(MessagesState)
        graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
        graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        result = graph.compile(name="refunds").invoke({"messages": [("user", f"refund {order}")]})
        return {"answer": result["messages"][-1].content}
'''

CONFIG = ('system: {name: refunds, version: "1", callable: app:Desk, '
          """records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: state_matches, mode: subset}
  - {type: agent_tool_called, tool_name: issue_refund}
""")

CASES = [("ord-0", "careful", "delivered", "refunded"), ("ord-1", "hasty", "lost", "lost"),
         ("ord-2", "careful", "delivered", "refunded")]


@pytest.fixture
def project(tmp_path):
    pytest.importorskip("langgraph.prebuilt")
    pytest.importorskip("opentelemetry.sdk.trace")
    instrumentation = pytest.importorskip("openinference.instrumentation.langchain")
    p = tmp_path / "langgraph"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps({
        "id": i, "input": {"order_id": i, "plan": plan}, "initial_state": {"orders": {i: before}},
        "expected": {"state": {"orders": {i: after}}}}) + "\n" for i, plan, before, after in CASES))
    yield p
    # the instrumentation patches LangChain's callback manager for the whole process: undone
    # here, so no other test is traced (and the next test's app instruments afresh)
    instrumentation.LangChainInstrumentor().uninstrument()
    assert not instrumentation.LangChainInstrumentor().is_instrumented_by_opentelemetry


def recorded(project, case_id):
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(project / ".oloproof" / "log.db", readonly=True)
    try:
        return case_view(store, latest_run_id(store), case_id)
    finally:
        store.close()


# the messages of the model decisions, as OpenInference writes them (llm.input_messages.*)
def user(text):
    return {"role": "user", "content": text}


def asked(n, tool_name, order):
    return {"role": "assistant", "tool_calls": [
        {"id": f"c{n}", "function": {"name": tool_name, "arguments": {"order_id": order}}}]}


def told(n, tool_name, content):
    return {"role": "tool", "content": content, "tool_call_id": f"c{n}", "name": tool_name}


def said(text):
    return {"role": "assistant", "content": text}


def test_a_langgraph_agent_is_recorded_live_and_its_tools_changed_the_world(cli, project):
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code == 0, r.output
    data = json.loads((project / "r.json").read_text())
    rows = {c["criterion"]: (c["passed"], c["observed"]) for c in data["criteria"]}
    assert rows == {"state_matches": (3, 3), "agent_tool_issue_refund_called": (3, 3)}
    view = recorded(project, "ord-0")
    assert [(s.kind, s.tool_name) for s in view.trajectory.steps] == [
        ("decision", "fake-refunds"), ("tool_call", "lookup_order"), ("tool_result", "lookup_order"),
        ("decision", "fake-refunds"), ("tool_call", "issue_refund"), ("tool_result", "issue_refund"),
        ("decision", "fake-refunds"), ("final", None)]
    assert view.state == {"orders": {"ord-0": "refunded"}} and view.output == {"answer": "Refunded ord-0."}
    assert [(u.input_tokens, u.output_tokens, u.model) for u in view.usage] == [
        (10, 5, "fake-refunds"), (20, 5, "fake-refunds"), (40, 7, "fake-refunds")]


def by_hand(case_id, steps, *, raised=()):
    """The step events of ``steps`` as a hand-built ``agent_trajectory`` gives them; the steps
    numbered in ``raised`` marked raised (an error result: a flag ``AgentStep`` has not)."""
    import msgspec

    from oloproof.events import encode
    from oloproof.recorder.case import CaseRecorder
    from oloproof.records import AgentStep, AgentTrajectory, Case

    rec = CaseRecorder(Case(case_id, {}))
    rec.agent_trajectory(AgentTrajectory(tuple(
        AgentStep(i, kind, tool_name=tool_name, arguments=arguments, result=result)
        for i, (kind, tool_name, arguments, result) in enumerate(steps, start=1)), "success"))
    return [encode(msgspec.structs.replace(e, raised=True) if e.index in raised else e)
            for e in rec.trajectory_events() if type(e).__name__ == "StepRecorded"]


def test_the_live_events_are_those_of_the_same_trajectory_built_by_hand(cli, project):
    assert cli("run", cwd=project).exit_code == 0
    from oloproof.events import encode

    o, model = "ord-0", "fake-refunds"
    lookup = json.dumps({"order_id": o, "status": "delivered"})
    refund = json.dumps({"refunded": o})
    steps = [
        ("decision", model, {"messages": [user(f"refund {o}")]}, [asked(1, "lookup_order", o)]),
        ("tool_call", "lookup_order", {"order_id": o}, None),
        ("tool_result", "lookup_order", None, {"order_id": o, "status": "delivered"}),
        ("decision", model, {"messages": [user(f"refund {o}"), asked(1, "lookup_order", o),
                                          told(1, "lookup_order", lookup)]}, [asked(2, "issue_refund", o)]),
        ("tool_call", "issue_refund", {"order_id": o}, None),
        ("tool_result", "issue_refund", None, {"refunded": o}),
        ("decision", model, {"messages": [user(f"refund {o}"), asked(1, "lookup_order", o),
                                          told(1, "lookup_order", lookup), asked(2, "issue_refund", o),
                                          told(2, "issue_refund", refund)]}, [said(f"Refunded {o}.")]),
        ("final", None, None, f"Refunded {o}.")]
    live = [encode(s) for s in recorded(project, o).trajectory.steps]
    assert live == by_hand(o, steps)


def test_a_tool_that_raises_is_an_error_result_and_the_world_is_unchanged(cli, project):
    assert cli("run", cwd=project).exit_code == 0
    from oloproof.events import encode

    o, model = "ord-1", "fake-refunds"
    error = {"error": {"type": "ValueError", "message": f"{o} was not delivered"}}
    # what the model is told is LangGraph's ToolNode's own wording of the error
    told_error = told(1, "issue_refund", f"Error: ValueError('{o} was not delivered')\n Please fix your mistakes.")
    steps = [
        ("decision", model, {"messages": [user(f"refund {o}")]}, [asked(1, "issue_refund", o)]),
        ("tool_call", "issue_refund", {"order_id": o}, None),
        ("tool_result", "issue_refund", None, error),
        ("decision", model, {"messages": [user(f"refund {o}"), asked(1, "issue_refund", o), told_error]},
         [said(f"Could not refund {o}.")]),
        ("final", None, None, f"Could not refund {o}.")]
    view = recorded(project, o)
    assert [encode(s) for s in view.trajectory.steps] == by_hand(o, steps, raised={3})
    assert view.trajectory.steps[2].raised
    assert view.state == {"orders": {o: "lost"}} and view.output == {"answer": f"Could not refund {o}."}


def test_the_importer_reads_the_same_spans_as_the_same_trajectories(cli, project, tmp_path):
    encoder = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")
    import sys

    from google.protobuf.json_format import MessageToDict

    from oloproof.events import encode

    assert cli("run", cwd=project).exit_code == 0
    spans = sys.modules["app"].SPANS.get_finished_spans()
    live = {i: [encode(s) for s in recorded(project, i).trajectory.steps] for i, *_ in CASES}
    p = tmp_path / "imported"
    write(p / "traces.jsonl", json.dumps(MessageToDict(encoder.encode_spans(spans))) + "\n")
    r = cli("import", "otel", "traces.jsonl", cwd=p)
    assert r.exit_code == 0 and ": 3 cases;" in r.output, r.output  # one per graph run, not per node
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    # the case's input is the graph's: {"messages": [["user", "refund ord-0"]]}
    imported = {v.input["messages"]["messages"][0][1].split()[-1]: v
                for v in iter_case_views(store, latest_run_id(store))}
    store.close()
    assert {i: [encode(s) for s in v.trajectory.steps] for i, v in imported.items()} == live
    # the graph's own chain spans (the tool node, the routing) are kept, not dropped
    assert {s["name"] for s in imported["ord-0"].metadata["otel.unmapped_spans"]} == {"tools", "tools_condition"}


# ---- the mapping of OpenInference's LangChain spans, one case each ----------------------------

def test_openinference_flattened_messages_are_a_decisions_messages():
    a = {"openinference.span.kind": "LLM", "llm.model_name": "m",
         "input.value": '{"messages": [[{"lc": 1, "kwargs": {"id": "run-uuid"}}]]}',
         "output.value": '{"generations": [[{"text": ""}]]}',
         "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "hi",
         "llm.input_messages.0.message.contents.0.message_content.type": "text",
         "llm.output_messages.0.message.role": "assistant",
         "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "look",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"q": 1}',
         "llm.output_messages.0.message.tool_calls.1.tool_call.function.name": "other",
         "llm.output_messages.0.message.tool_calls.1.tool_call.function.arguments": "not json"}
    step = model_step(a)
    assert step["arguments"] == {"messages": [{"role": "user", "content": "hi", "contents": [{"type": "text"}]}]}
    assert step["result"] == [{"role": "assistant", "tool_calls": [
        {"id": "c1", "function": {"name": "look", "arguments": {"q": 1}}},
        {"function": {"name": "other", "arguments": "not json"}}]}]
    assert tool_calls_of(step["result"]) == [("look", {"q": 1})]  # arguments that are no object: no call
    # GenAI's messages come first; without either, input.value / output.value as before
    assert model_step({**a, "gen_ai.input.messages": "[]"})["arguments"] == {"messages": []}
    assert model_step({"input.value": "q", "output.value": "a"}) == {
        "kind": "decision", "tool_name": "model", "arguments": {"messages": "q"}, "result": "a"}


def test_openinference_token_counts_are_usage():
    u = model_usage({"llm.model_name": "m", "llm.token_count.prompt": 12, "llm.token_count.completion": 3}, 0, 0, 0)
    assert (u.input_tokens, u.output_tokens, u.model) == (12, 3, "m")
    u = model_usage({"gen_ai.usage.input_tokens": 5, "llm.token_count.prompt": 12}, 0, 0, 0)
    assert u.input_tokens == 5  # GenAI's first


def test_a_langchain_tool_message_is_its_content():
    envelope = {"type": "tool", "data": {"content": '{"refunded": "o"}', "tool_call_id": "c1", "status": "success"}}
    assert tool_result_step("t", {"tool.name": "t", "output.value": json.dumps(envelope)}, None)["result"] == {
        "refunded": "o"}
    dumped = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
              "kwargs": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}
    assert tool_result_step("t", {"output.value": json.dumps(dumped)}, None)["result"] == "a\nb"
    # a result that only looks a bit like one is kept as it is
    for value in ({"type": "tool", "data": {"content": "x"}, "more": 1}, {"type": "tool", "data": "x"}):
        assert tool_result_step("t", {"output.value": json.dumps(value)}, None)["result"] == value


def test_a_langchain_run_error_is_its_exception_without_the_traceback():
    error = "ValueError('ord-1 was not delivered')Traceback (most recent call last):\n  File \"/x.py\", line 1"
    assert tool_result_step("t", {"tool.name": "t"}, error)["result"] == {
        "error": {"type": "ValueError", "message": "ord-1 was not delivered"}}
    odd = "pkg.Odd('a', 2)Traceback (most recent call last):\n"
    assert tool_result_step("t", {"error.type": "E"}, odd)["result"]["error"] == {
        "type": "E", "message": "pkg.Odd('a', 2)"}
    # GenAI's error.type and status message are as before
    assert tool_result_step("t", {"error.type": "TimeoutError"}, "timed out")["result"] == {
        "error": {"type": "TimeoutError", "message": "timed out"}}


def test_a_one_argument_tools_bare_input_gets_its_name_back_from_the_models_call():
    calls = [("note", {"text": "x"}), ("refund", {"order_id": "ord-0"}), ("refund", {"order_id": "ord-1"})]
    step = tool_call_step("refund", {"tool.name": "refund", "input.value": "ord-1"}, calls)
    assert step["arguments"] == {"order_id": "ord-1"} and len(calls) == 2  # used up
    assert tool_call_step("count", {"tool.name": "count", "input.value": "5"}, [("count", {"n": 5})])[
        "arguments"] == {"n": 5}
    # older LangChain writes Python's text of the arguments
    assert tool_call_step("refund", {"tool.name": "refund", "input.value": "{'order_id': 'ord-0', 'n': 2}"},
                          [("refund", {"order_id": "ord-0", "n": 2})])["arguments"] == {"order_id": "ord-0", "n": 2}
    # no such call, or arguments that are an object already: as given
    assert tool_call_step("refund", {"tool.name": "refund", "input.value": "ord-9"}, calls)["arguments"] == "ord-9"
    assert tool_call_step("refund", {"tool.name": "refund", "input.value": '{"order_id": "ord-0"}'}, calls)[
        "arguments"] == {"order_id": "ord-0"} and len(calls) == 2


def test_a_langgraph_state_answer_is_its_last_messages_text():
    state = {"messages": [{"type": "human", "data": {"content": "refund"}},
                          {"type": "ai", "data": {"content": '{"not": "parsed"}', "tool_calls": []}}]}
    assert message_text(state) == '{"not": "parsed"}'
    assert message_text({"messages": [{"role": "assistant", "content": "plain"}]}) == "plain"
    assert message_text({"messages": []}) == {"messages": []}
    assert message_text([{"role": "assistant", "parts": [{"type": "text", "content": "GenAI"}]}]) == "GenAI"


def langchain_like_spans(tracer):
    """Spans shaped as OpenInference's LangChain instrumentation makes them: no attributes at
    start, the kind set when the run ends; a graph (CHAIN) whose ``agent`` node is an AGENT."""
    def run(name, parent=None, **attributes):
        from opentelemetry import trace

        span = tracer.start_span(name, context=trace.set_span_in_context(parent) if parent else None)
        return span, attributes

    def end(pair):
        span, attributes = pair
        span.set_attributes(attributes)
        span.end()

    graph = run("refunds", **{"openinference.span.kind": "CHAIN", "output.value": json.dumps(
        {"messages": [{"type": "ai", "data": {"content": "Done."}}]})})
    node = run("agent", graph[0], **{"openinference.span.kind": "AGENT", "output.value": '{"messages": []}'})
    end(run("FakeChat", node[0], **{"openinference.span.kind": "LLM", "llm.model_name": "m",
                                    "llm.output_messages.0.message.content": "x"}))
    end(node)
    tools = run("tools", graph[0], **{"openinference.span.kind": "CHAIN"})
    end(run("look", tools[0], **{"openinference.span.kind": "TOOL", "tool.name": "look", "input.value": "a"}))
    end(tools)
    end(graph)


def test_the_processor_takes_the_outermost_langchain_run_for_the_answer_and_no_node_for_an_agent():
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace import TracerProvider

    from oloproof.events import encode
    from oloproof.otel import OloproofSpanProcessor
    from oloproof.recorder.case import CaseRecorder
    from oloproof.records import Case
    from oloproof.system import _CURRENT

    provider = TracerProvider()
    provider.add_span_processor(OloproofSpanProcessor())
    rec = CaseRecorder(Case("c", {}))
    token = _CURRENT.set(rec)
    try:
        langchain_like_spans(provider.get_tracer("t"))
    finally:
        _CURRENT.reset(token)
    steps = [e for e in rec.trajectory_events() if type(e).__name__ == "StepRecorded"]
    assert [(s.kind, s.tool_name, s.agent) for s in steps] == [
        ("decision", "m", None), ("tool_call", "look", None), ("tool_result", "look", None), ("final", None, None)]
    assert json.loads(encode(steps[-1]))["result"] == "Done."  # the graph's answer; the node's is none


def test_the_importer_takes_a_traces_outermost_chain_as_its_one_case():
    from oloproof.config.otlp import Span, cases_of_trace

    t = "ab" * 16

    def span(i, parent, name, start, **attributes):
        return Span(t, f"{i:016x}", f"{parent:016x}" if parent else "", name, start, start + 10, attributes, None,
                    f"span {i}")

    spans = [span(1, 0, "refunds", 1, **{"openinference.span.kind": "CHAIN", "output.value": json.dumps(
                 {"messages": [{"type": "ai", "data": {"content": "Done."}}]})}),
             span(2, 1, "agent", 2, **{"openinference.span.kind": "AGENT"}),
             span(3, 2, "FakeChat", 3, **{"openinference.span.kind": "LLM", "llm.model_name": "m"}),
             span(4, 1, "agent", 4, **{"openinference.span.kind": "AGENT"}),
             span(5, 1, "tools", 5, **{"openinference.span.kind": "CHAIN"}),
             span(6, 5, "look", 6, **{"openinference.span.kind": "TOOL", "tool.name": "look"})]
    [case] = cases_of_trace(spans)  # one case, not one per "agent" node; the tool is not dropped
    assert [(s.kind, s.tool_name, s.agent, s.result) for s in case.steps] == [
        ("decision", "m", None, None), ("tool_call", "look", None, None), ("tool_result", "look", None, None),
        ("final", None, None, "Done.")]
    assert case.terminal_status == "success" and [u["name"] for u in case.metadata["otel.unmapped_spans"]] == ["tools"]
    # an agent that names itself below the graph is still an agent
    spans[1] = span(2, 1, "agent", 2, **{"openinference.span.kind": "AGENT", "gen_ai.agent.name": "billing"})
    [case] = cases_of_trace(spans)
    assert case.steps[0].agent == "billing"
