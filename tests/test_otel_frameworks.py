"""The span path on real framework agents (issue 25, SPEC §18.4): a two-agent agent — a
triage (or router) agent that hands a billing question to a billing agent — on each of the
OpenAI Agents SDK, LangGraph, Google ADK, Pydantic AI and smolagents, every one on a scripted
offline model (no keys, no network), recorded live by ``OloproofSpanProcessor`` and, from the
same spans written as OTLP JSON lines, by ``oloproof import otel``.

Each project has two cases: ``invoice`` (billing looks the invoice up and answers) and
``refund`` (billing's ``refund`` tool raises ``ValueError("refunds are closed")``). Both
recordings must name the agents, record the handoff as a ``handoff`` step (never a tool call),
end with the final answer and the terminal status the framework gave, keep the exception's type
and message, and pass ``agent_route`` and ``agent_tool_permissions``; and the imported steps
must be the live ones, in the same order."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")

from tests.conftest import run_in, write

# Every project writes each case's spans, as the OpenTelemetry Collector's file exporter would
# (one ExportTraceServiceRequest as OTLP JSON per line), to spans/<case id>.jsonl: the same
# spans the live processor saw, for `oloproof import otel`.
SPANS_OUT = '''
import json
import re
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from oloproof.otel import OloproofSpanProcessor

SPANS = InMemorySpanExporter()


def traced(provider):
    provider.add_span_processor(OloproofSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(SPANS))
    return provider


def keep(case):
    spans = SPANS.get_finished_spans()
    SPANS.clear()
    Path("spans").mkdir(exist_ok=True)
    Path("spans", f"{case.id}.jsonl").write_text(json.dumps(MessageToDict(encode_spans(spans))) + "\\n")
    # the attribute values of subclasses of str, int... (an enum's member, smolagents' AgentText)
    types = {type(v).__name__ for s in spans for v in s.attributes.values() if type(v) not in (str, int, float, bool)}
    Path("spans", f"{case.id}.types.json").write_text(json.dumps(sorted(types)))
'''

OPENAI_AGENTS = '''
import asyncio
import json
import re

from agents import Agent, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tracing import generation_span
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from oloproof import system
from spans_out import keep, traced

# exclusive: OpenInference's processor replaces the SDK's own, which would send the traces to OpenAI
OpenAIAgentsInstrumentor().instrument(tracer_provider=traced(TracerProvider()), exclusive_processor=True)


def call(name, arguments, n):
    return ResponseFunctionToolCall(id=f"fc{n}", call_id=f"c{n}", name=name, arguments=json.dumps(arguments),
                                    type="function_call")


def say(text):
    return ResponseOutputMessage(id="m1", role="assistant", status="completed", type="message",
                                 content=[ResponseOutputText(text=text, type="output_text", annotations=[])])


class Scripted(Model):
    """An offline model: its scripted turns in order, each traced as the SDK's chat completions
    model traces a call (a generation span with its messages and usage)."""

    def __init__(self, turns):
        self.turns = list(turns)

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, **kwargs):
        output = self.turns.pop(0)
        messages = [{"role": "assistant", "content": o.content[0].text} if o.type == "message" else
                    {"role": "assistant", "tool_calls": [{"id": o.call_id, "type": "function", "function": {
                        "name": o.name, "arguments": o.arguments}}]} for o in output]
        asked = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        with generation_span(model="scripted", input=asked, output=messages, disabled=tracing.is_disabled(),
                             usage={"input_tokens": 12, "output_tokens": 3}):
            pass
        return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=12, output_tokens=3,
                                                         total_tokens=15), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


@function_tool
def lookup_invoice(invoice_id: str) -> dict:
    """Look an invoice up."""
    return {"invoice_id": invoice_id, "amount": 40}


@function_tool(failure_error_function=lambda ctx, error: f"refund failed: {error}")
def refund(invoice_id: str) -> dict:
    """Refund an invoice."""
    raise ValueError("refunds are closed")


BILLING = {
    "invoice": [[call("lookup_invoice", {"invoice_id": "i1"}, 2)], [say("Invoice i1 is 40.")]],
    "refund": [[call("refund", {"invoice_id": "i1"}, 2)], [say("Refunds are closed.")]],
}


@system(name="desk", version="1", records=["agent_trajectory/v1"])
def run(case):
    try:
        billing = Agent(name="billing", model=Scripted(BILLING[case.input["plan"]]),
                        tools=[lookup_invoice, refund])
        triage = Agent(name="triage", model=Scripted([[call("transfer_to_billing", {}, 1)]]), handoffs=[billing])
        return {"answer": Runner.run_sync(triage, case.input["question"]).final_output}
    finally:
        keep(case)
'''

LANGGRAPH = '''
import warnings
from typing import Annotated

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.types import Command
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from oloproof import system
from spans_out import keep, traced

LangChainInstrumentor().instrument(tracer_provider=traced(TracerProvider()))


class FakeChat(GenericFakeChatModel):
    """LangChain's fake chat model (its scripted messages in turn), bound to tools as a real one is."""

    model_name: str = "scripted"

    @property
    def _identifying_params(self):
        return {"model_name": self.model_name}

    def bind_tools(self, tools, **kwargs):
        return self


def ask(n, name, args):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{n}"}],
                     usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15})


@tool
def transfer_to_billing(tool_call_id: Annotated[str, InjectedToolCallId]):
    """Hand the conversation to the billing agent."""
    return Command(goto="billing", graph=Command.PARENT,
                   update={"messages": [ToolMessage("Transferred to billing", tool_call_id=tool_call_id)]})


@tool
def lookup_invoice(invoice_id: str) -> dict:
    """Look an invoice up."""
    return {"invoice_id": invoice_id, "amount": 40}


@tool
def refund(invoice_id: str) -> dict:
    """Refund an invoice."""
    raise ValueError("refunds are closed")


BILLING = {
    "invoice": lambda: [ask(2, "lookup_invoice", {"invoice_id": "i1"}), AIMessage("Invoice i1 is 40.")],
    "refund": lambda: [ask(2, "refund", {"invoice_id": "i1"}), AIMessage("Refunds are closed.")],
}


@system(name="desk", version="1", records=["agent_trajectory/v1"])
def run(case):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent moved to langchain.agents (not installed)
            triage = create_react_agent(FakeChat(messages=iter([ask(1, "transfer_to_billing", {})])),
                                        [transfer_to_billing], name="triage")
            billing = create_react_agent(FakeChat(messages=iter(BILLING[case.input["plan"]]())),
                                         ToolNode([lookup_invoice, refund], handle_tool_errors=True), name="billing")
        graph = StateGraph(MessagesState)
        graph.add_node("triage", triage, destinations=("billing",))
        graph.add_node("billing", billing)
        graph.add_edge(START, "triage")
        result = graph.compile(name="desk").invoke({"messages": [("user", case.input["question"])]})
        return {"answer": result["messages"][-1].content}
    finally:
        keep(case)
'''

ADK = '''
import asyncio

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.models import BaseLlm, LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.telemetry.context import ContentCapturingMode, TelemetryConfig
from google.genai import types
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from oloproof import system
from spans_out import keep, traced

# ADK traces through OpenTelemetry's global tracer provider: ours, or the one already set
if not isinstance(trace.get_tracer_provider(), TracerProvider):
    trace.set_tracer_provider(TracerProvider())
traced(trace.get_tracer_provider())
CONTENT = RunConfig(telemetry=TelemetryConfig(capture_message_content=ContentCapturingMode.SPAN_ONLY))


class Scripted(BaseLlm):
    """An offline model: its scripted responses in turn."""

    turns: list = []

    async def generate_content_async(self, llm_request, stream=False):
        yield self.turns.pop(0)


def call(name, args):
    return LlmResponse(content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(name=name, args=args))]))


def say(text):
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def lookup_invoice(invoice_id: str) -> dict:
    """Look an invoice up."""
    return {"invoice_id": invoice_id, "amount": 40}


def refund(invoice_id: str) -> dict:
    """Refund an invoice."""
    raise ValueError("refunds are closed")


BILLING = {
    "invoice": lambda: [call("lookup_invoice", {"invoice_id": "i1"}), say("Invoice i1 is 40.")],
    "refund": lambda: [call("refund", {"invoice_id": "i1"}), say("Refunds are closed.")],
}


async def ask(case):
    billing = LlmAgent(name="billing", description="Answers billing questions.", tools=[lookup_invoice, refund],
                       model=Scripted(model="scripted", turns=BILLING[case.input["plan"]]()))
    triage = LlmAgent(name="triage", description="Routes questions.", sub_agents=[billing],
                      model=Scripted(model="scripted", turns=[call("transfer_to_agent", {"agent_name": "billing"})]))
    runner = InMemoryRunner(agent=triage, app_name="desk")
    session = await runner.session_service.create_session(app_name="desk", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=case.input["question"])])
    answer = None
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message, run_config=CONTENT):
        for part in event.content.parts if event.content and event.content.parts else ():
            answer = part.text or answer
    return answer


@system(name="desk", version="1", records=["agent_trajectory/v1"])
def run(case):
    try:
        return {"answer": asyncio.run(ask(case))}
    except ValueError as e:  # ADK ends the run when a tool raises
        return {"error": str(e)}
    finally:
        keep(case)
'''

PYDANTIC_AI = '''
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings, RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from oloproof import system
from spans_out import keep, traced

Agent.instrument_all(InstrumentationSettings(tracer_provider=traced(TracerProvider())))


def returned(messages):
    return [p for m in messages for p in getattr(m, "parts", []) if p.part_kind == "tool-return"]


def billing_model(messages, info):
    asked = messages[0].parts[-1].content
    if not returned(messages):
        tool = "refund" if "refund" in asked else "lookup_invoice"
        return ModelResponse(parts=[ToolCallPart(tool, {"invoice_id": "i1"}, tool_call_id="b1")])
    return ModelResponse(parts=[TextPart("Invoice i1 is 40.")])


def router_model(messages, info):
    done = returned(messages)
    if not done:
        question = messages[0].parts[-1].content
        return ModelResponse(parts=[ToolCallPart("ask_billing", {"question": question}, tool_call_id="r1")])
    return ModelResponse(parts=[TextPart(done[0].content)])


billing = Agent(FunctionModel(billing_model), name="billing")
router = Agent(FunctionModel(router_model), name="router")


@billing.tool_plain
def lookup_invoice(invoice_id: str) -> dict:
    """Look an invoice up."""
    return {"invoice_id": invoice_id, "amount": 40}


@billing.tool_plain
def refund(invoice_id: str) -> dict:
    """Refund an invoice."""
    raise ValueError("refunds are closed")


@router.tool
async def ask_billing(ctx: RunContext, question: str) -> str:
    """Delegate a billing question to the billing agent."""
    return (await billing.run(question, usage=ctx.usage)).output


@system(name="desk", version="1", records=["agent_trajectory/v1"])
def run(case):
    try:
        return {"answer": router.run_sync(case.input["question"]).output}
    except ValueError as e:  # a tool that raises ends the run
        return {"error": str(e)}
    finally:
        keep(case)
'''

SMOLAGENTS = '''
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import LogLevel, TokenUsage

from oloproof import system
from spans_out import keep, traced

SmolagentsInstrumentor().instrument(tracer_provider=traced(TracerProvider()))


class Scripted(Model):
    """An offline model: each turn one scripted tool call."""

    def __init__(self, turns):
        super().__init__(model_id="scripted")
        self.turns = list(turns)

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        name, arguments = self.turns.pop(0)
        return ChatMessage(role=MessageRole.ASSISTANT, content=None, token_usage=TokenUsage(12, 3), tool_calls=[
            ChatMessageToolCall(id=f"c{len(self.turns)}", type="function",
                                function=ChatMessageToolCallFunction(name=name, arguments=arguments))])


@tool
def lookup_invoice(invoice_id: str) -> dict:
    """Look an invoice up.

    Args:
        invoice_id: the invoice's id
    """
    return {"invoice_id": invoice_id, "amount": 40}


@tool
def refund(invoice_id: str) -> dict:
    """Refund an invoice.

    Args:
        invoice_id: the invoice's id
    """
    raise ValueError("refunds are closed")


BILLING = {
    "invoice": [("lookup_invoice", {"invoice_id": "i1"}), ("final_answer", {"answer": "Invoice i1 is 40."})],
    "refund": [("refund", {"invoice_id": "i1"}), ("final_answer", {"answer": "Refunds are closed."})],
}


@system(name="desk", version="1", records=["agent_trajectory/v1"])
def run(case):
    try:
        plan = BILLING[case.input["plan"]]
        billing = ToolCallingAgent(tools=[lookup_invoice, refund], model=Scripted(plan), name="billing",
                                   description="Answers billing questions.", verbosity_level=LogLevel.OFF)
        triage = ToolCallingAgent(tools=[], managed_agents=[billing], name="triage", verbosity_level=LogLevel.OFF,
                                  model=Scripted([("billing", {"task": case.input["question"]}),
                                                  ("final_answer", {"answer": plan[-1][1]["answer"]})]))
        return {"answer": str(triage.run(case.input["question"]))}
    finally:
        keep(case)
'''

CASES = [{"id": "invoice", "input": {"question": "What is invoice i1?", "plan": "invoice"}},
         {"id": "refund", "input": {"question": "Please refund invoice i1.", "plan": "refund"}}]


class Framework:
    """One framework's project: its app, the agents (the one asked first, the billing one),
    the route a correct agent takes, what each agent may call, and how the tool's exception
    reaches the trace."""

    def __init__(self, name, app, instrumentation, first="triage", back=False, error_type="ValueError",
                 refund_status="success", route_tools=(), subclasses=()):
        self.name, self.app, self.instrumentation = name, app, instrumentation
        self.first = first
        # a delegated agent hands control back (Pydantic AI's agent in a tool, smolagents' managed agent)
        self.route = [first, "billing", first] if back else [first, "billing"]
        self.permissions = {first: list(route_tools), "billing": ["lookup_invoice", "refund"]}
        self.error_type = error_type
        self.refund_status = refund_status
        self.subclasses = subclasses  # the types of attribute values that subclass str, int...


FRAMEWORKS = {
    "openai_agents": Framework("openai_agents", OPENAI_AGENTS, "openinference.instrumentation.openai_agents",
                               error_type="Error"),  # the SDK's spans carry the message, not the type
    "langgraph": Framework("langgraph", LANGGRAPH, "openinference.instrumentation.langchain"),
    "adk": Framework("adk", ADK, "google.adk", refund_status="failure"),
    "pydantic_ai": Framework("pydantic_ai", PYDANTIC_AI, "pydantic_ai", first="router", back=True,
                             refund_status="failure", route_tools=["ask_billing"]),
    "smolagents": Framework("smolagents", SMOLAGENTS, "openinference.instrumentation.smolagents", back=True,
                            subclasses=["AgentText"]),
}

def _uninstrument(module: str, name: str) -> None:
    getattr(__import__(module, fromlist=[name]), name)().uninstrument()


# what each app patched for the whole process, undone so that no other test is traced (ADK's
# global tracer provider cannot be unset: the processors left on it record nothing outside a case)
UNINSTRUMENT = {
    "openai_agents": lambda: _uninstrument("openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor"),
    "langgraph": lambda: _uninstrument("openinference.instrumentation.langchain", "LangChainInstrumentor"),
    "smolagents": lambda: _uninstrument("openinference.instrumentation.smolagents", "SmolagentsInstrumentor"),
    "pydantic_ai": lambda: __import__("pydantic_ai").Agent.instrument_all(False),
}


def case_views(folder: Path, run: str | None = None):
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(folder / ".oloproof" / "log.db", readonly=True)
    try:
        return list(iter_case_views(store, run or latest_run_id(store)))
    finally:
        store.close()


@pytest.fixture(scope="module", params=sorted(FRAMEWORKS))
def recorded(request, tmp_path_factory):
    """The framework's project recorded live (`oloproof run --json`), then its spans imported
    into another folder (`oloproof import otel`)."""
    fw = FRAMEWORKS[request.param]
    pytest.importorskip(fw.instrumentation)
    p = tmp_path_factory.mktemp(fw.name) / "desk"
    write(p / "spans_out.py", SPANS_OUT)
    write(p / "app.py", fw.app)
    permissions = json.dumps(fw.permissions)
    write(p / "oloproof.yaml", "system: {name: desk, version: '1', callable: app:run, "
                               "records: [agent_trajectory/v1]}\ncases: cases.jsonl\nevaluators:\n"
                               "  - {type: agent_route}\n"
                               f"  - {{type: agent_tool_permissions, permissions: {permissions}}}\n")
    write(p / "cases.jsonl", "".join(json.dumps({**c, "expected": {"route": fw.route}}) + "\n" for c in CASES))
    try:
        live = run_in(p, "run", "--json", "results.json")
    finally:
        if request.param in UNINSTRUMENT:
            UNINSTRUMENT[request.param]()
    assert live.exit_code == 0, live.output
    imported = p.parent / "imported"
    imported.mkdir()
    files = sorted(str(f) for f in (p / "spans").glob("*.jsonl"))
    r = run_in(imported, "import", "otel", *files)
    assert r.exit_code == 0, r.output
    return fw, p, imported, r.output


def by_id(folder):
    return {v.case_id: v for v in case_views(folder)}


def imported_by_case(folder, spans_dir):
    """The imported cases by the id of the live case whose spans they are."""
    import base64

    cases = {}
    for view in case_views(folder):
        for case in CASES:
            first = json.loads((spans_dir / f"{case['id']}.jsonl").read_text())
            trace = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
            if base64.b64decode(trace).hex() == view.metadata["otel.trace_id"]:
                cases[case["id"]] = view
    return cases


def steps(view):
    return [(s.kind, s.tool_name, s.agent, s.to_agent) for s in view.trajectory.steps]


def test_each_agent_is_named_and_the_handoff_is_a_handoff_step(recorded):
    fw, p, *_ = recorded
    for view in by_id(p).values():
        assert view.error is None, view.error
        trajectory = steps(view)
        assert all(agent is not None for _, _, agent, _ in trajectory), trajectory
        handoffs = [(agent, to) for kind, _, agent, to in trajectory if kind == "handoff"]
        assert handoffs[0] == (fw.first, "billing"), trajectory
        assert [(a, b) for a, b in zip(fw.route, fw.route[1:])] == handoffs, trajectory
        tools = [tool for kind, tool, _, _ in trajectory if kind in ("tool_call", "tool_result")]
        assert not [t for t in tools if "transfer" in t or "billing" in t and t != "ask_billing"], trajectory
        assert {agent for kind, tool, agent, _ in trajectory if tool in ("lookup_invoice", "refund")} == {"billing"}


def test_the_last_step_is_the_answer_and_the_status_is_the_frameworks(recorded):
    fw, p, *_ = recorded
    cases = by_id(p)
    invoice = cases["invoice"].trajectory
    assert (invoice.steps[-1].kind, invoice.steps[-1].result) == ("final", "Invoice i1 is 40."), steps(cases["invoice"])
    assert invoice.steps[-1].agent == fw.route[-1]
    assert invoice.terminal_status == "success"
    refund = cases["refund"].trajectory
    assert refund.terminal_status == fw.refund_status, steps(cases["refund"])
    assert (refund.steps[-1].kind == "final") == (fw.refund_status == "success")


def test_a_tool_that_raised_is_its_exceptions_type_and_message(recorded):
    fw, p, *_ = recorded
    [result] = [s for s in by_id(p)["refund"].trajectory.steps if s.kind == "tool_result" and s.tool_name == "refund"]
    assert result.raised and result.agent == "billing"
    assert result.result == {"error": {"type": fw.error_type, "message": "refunds are closed"}}


def test_route_and_permissions_pass_on_the_correct_agent(recorded):
    fw, p, *_ = recorded
    rows = {c["criterion"]: (c["passed"], c["observed"])
            for c in json.loads((p / "results.json").read_text())["criteria"]}
    assert rows == {"agent_route": (2, 2), "agent_tool_permissions": (2, 2)}, rows


def test_the_imported_spans_give_the_live_steps_in_the_same_order(recorded):
    from oloproof.events import encode

    fw, p, imported, output = recorded
    assert re.search(r": 2 cases[;.]", output), output  # one per conversation, not one per agent
    live = by_id(p)
    again = imported_by_case(imported, p / "spans")
    assert sorted(again) == ["invoice", "refund"]
    for case_id, view in live.items():
        assert [encode(s) for s in again[case_id].trajectory.steps] == [encode(s) for s in view.trajectory.steps]
        assert again[case_id].trajectory.terminal_status == view.trajectory.terminal_status


def test_attribute_values_of_str_subclasses_are_taken(recorded):
    """smolagents writes its final answer as an ``AgentText`` (a ``str`` subclass, legal in
    OpenTelemetry): the case still records."""
    fw, p, *_ = recorded
    for case_id, view in by_id(p).items():
        assert set(fw.subclasses) <= set(json.loads((p / "spans" / f"{case_id}.types.json").read_text()))
        assert view.error is None and view.trajectory.steps


# ---- the mapping's rules, one by one, on spans made by hand -------------------------------------

T1, T2 = "ab" * 16, "cd" * 16


def span(i, parent, name, start, *, trace=T1, error=None, exception=None, **attributes):
    from oloproof.config.otlp import Span

    return Span(trace, f"{i:016x}", f"{parent:016x}" if parent else "", name, start, start + 10, attributes, error,
                f"span {i}", exception=exception)


def genai(op, **more):
    return {"gen_ai.operation.name": op, **more}


def mapped(spans):
    from oloproof.config.otlp import cases_of_trace

    return [[(s.kind, s.tool_name, s.agent, s.to_agent) for s in c.steps] for c in cases_of_trace(spans)]


def test_an_adk_turn_without_a_workflow_span_is_one_case_by_its_conversation():
    """ADK's agents of one turn, side by side in one trace (no workflow span above them), share
    a ``gen_ai.conversation.id``: one case, not one per agent."""
    talk = {"gen_ai.conversation.id": "s1"}
    spans = [span(1, 0, "invoke_agent triage", 1, **genai("invoke_agent", **{"gen_ai.agent.name": "triage"}, **talk)),
             span(2, 1, "execute_tool transfer_to_agent", 2, **genai("execute_tool", **{
                 "gen_ai.tool.name": "transfer_to_agent", "gen_ai.tool.call.arguments": '{"agent_name": "billing"}'})),
             span(3, 0, "invoke_agent billing", 20,
                  **genai("invoke_agent", **{"gen_ai.agent.name": "billing"}, **talk)),
             span(4, 3, "execute_tool lookup", 21, **genai("execute_tool", **{"gen_ai.tool.name": "lookup"}))]
    assert mapped(spans) == [[("handoff", None, "triage", "billing"), ("tool_call", "lookup", "billing", None),
                              ("tool_result", "lookup", "billing", None)]]
    other = {"gen_ai.conversation.id": "s2"}  # another conversation in the same trace: its own case
    spans[2] = span(3, 0, "invoke_agent billing", 20,
                    **genai("invoke_agent", **{"gen_ai.agent.name": "billing"}, **other))
    assert len(mapped(spans)) == 2


def said(text):
    return [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]


def test_an_adk_conversation_over_several_traces_is_one_case():
    """Each turn of an ADK conversation is a trace of its own (a workflow run): joined into one
    case, the turns in the order they started, however the traces are ordered in the files."""
    from oloproof.config.otlp import iter_cases

    def turn(trace, start, agent, tool, answer):
        return [span(1, 0, f"invoke_workflow {agent}", start, trace=trace,
                     **genai("invoke_workflow", **{"gen_ai.conversation.id": "s1"})),
                span(2, 1, f"invoke_agent {agent}", start + 1, trace=trace,
                     **genai("invoke_agent", **{"gen_ai.agent.name": agent})),
                span(3, 2, f"execute_tool {tool}", start + 2, trace=trace, **genai("execute_tool", **{
                    "gen_ai.tool.name": tool})),
                span(4, 2, "generate_content m", start + 3, trace=trace, **genai("generate_content", **{
                    "gen_ai.output.messages": json.dumps(said(answer))}))]

    lone = [span(9, 0, "invoke_agent solo", 5, trace="ef" * 16, **genai("invoke_agent", **{"gen_ai.agent.name": "x"}))]
    spans = [0]
    out = list(iter_cases([turn(T2, 100, "triage", "check", "Later."), lone, turn(T1, 1, "billing", "lookup", "40.")],
                          spans))
    assert spans == [9]
    assert [(trace[0].trace_id, [c.case_id for c in cases]) for trace, cases in out] == [
        ("ef" * 16, ["ef" * 16]), (T1, [T1])]  # the lone trace at once; the conversation at the end
    [case] = out[1][1]
    assert [(s.index, s.kind, s.tool_name, s.agent, s.to_agent, s.result) for s in case.steps] == [
        (1, "tool_call", "lookup", "billing", None, None), (2, "tool_result", "lookup", "billing", None, None),
        (3, "decision", "model", "billing", None, said("40.")),
        (4, "final", None, "billing", None, "40."), (5, "handoff", None, "billing", "triage", None),
        (6, "tool_call", "check", "triage", None, None), (7, "tool_result", "check", "triage", None, None),
        (8, "decision", "model", "triage", None, said("Later.")),
        (9, "final", None, "triage", None, "Later.")]
    assert case.terminal_status == "success" and case.output == {"final": "Later."}
    assert case.metadata["otel.trace_ids"] == [T1, T2] and case.metadata["otel.conversation_id"] == "s1"


def test_a_transfer_without_its_target_is_a_handoff_to_the_next_agent():
    """ADK without its content captured writes no ``transfer_to_agent`` arguments: the handoff
    is still no tool call, and the agent that acts next is the one it went to."""
    spans = [span(1, 0, "invoke_workflow triage", 1, **genai("invoke_workflow")),
             span(2, 1, "invoke_agent triage", 2, **genai("invoke_agent", **{"gen_ai.agent.name": "triage"})),
             span(3, 2, "execute_tool transfer_to_agent", 3, **genai("execute_tool", **{
                 "gen_ai.tool.name": "transfer_to_agent", "gen_ai.tool.type": "TransferToAgentTool"})),
             span(4, 1, "invoke_agent billing", 20, **genai("invoke_agent", **{"gen_ai.agent.name": "billing"})),
             span(5, 4, "execute_tool lookup", 21, **genai("execute_tool", **{"gen_ai.tool.name": "lookup"}))]
    assert mapped(spans) == [[("handoff", None, "triage", "billing"), ("tool_call", "lookup", "billing", None),
                              ("tool_result", "lookup", "billing", None)]]


def test_a_transfer_tool_that_returns_no_command_is_a_tool_call():
    """``transfer_to_savings`` (moving money) is a tool like any other: only a LangGraph
    ``Command`` result makes a ``transfer_to_X`` tool a handoff."""
    spans = [span(1, 0, "bank", 1, **{"openinference.span.kind": "AGENT", "agent.name": "bank"}),
             span(2, 1, "transfer_to_savings", 2, **{
                 "openinference.span.kind": "TOOL", "tool.name": "transfer_to_savings",
                 "input.value": '{"amount": 5}', "output.value": '{"ok": true}'})]
    assert mapped(spans) == [[("tool_call", "transfer_to_savings", "bank", None),
                              ("tool_result", "transfer_to_savings", "bank", None)]]


def test_langgraph_metadata_flattened_names_the_agent_too():
    """LangChain's metadata as flattened attributes (``metadata.langgraph_checkpoint_ns``) names
    the agent as OpenInference's JSON ``metadata`` does: the node running the subgraph."""
    spans = [span(1, 0, "desk", 1, **{"openinference.span.kind": "CHAIN", "output.value": "Done."}),
             span(2, 1, "lookup", 2, **{"openinference.span.kind": "TOOL", "tool.name": "lookup",
                                        "metadata.langgraph_checkpoint_ns": "billing:1|tools:2"}),
             span(3, 1, "note", 3, **{"openinference.span.kind": "TOOL", "tool.name": "note",
                                      "metadata": json.dumps({"langgraph_checkpoint_ns": "tools:3"})})]
    # the second tool runs in a node of the graph itself (no subgraph): the agent in control
    assert mapped(spans) == [[("tool_call", "lookup", "billing", None), ("tool_result", "lookup", "billing", None),
                              ("tool_call", "note", "billing", None), ("tool_result", "note", "billing", None),
                              ("final", None, "billing", None)]]


def test_graph_node_parent_id_is_the_handoff_when_nothing_acted_before():
    spans = [span(1, 0, "billing", 1, **{"openinference.span.kind": "AGENT", "graph.node.id": "billing",
                                         "graph.node.parent_id": "triage"}),
             span(2, 1, "lookup", 2, **{"openinference.span.kind": "TOOL", "tool.name": "lookup"})]
    assert mapped(spans) == [[("handoff", None, "triage", "billing"), ("tool_call", "lookup", "billing", None),
                              ("tool_result", "lookup", "billing", None)]]


def test_unnamed_steps_take_the_agent_around_them_or_the_last_one():
    """A step whose span names no agent acts for the agent span around it, else the agent in
    control; the steps before any agent is known, for the first agent named (all or none)."""
    spans = [span(1, 0, "run", 1, **{"openinference.span.kind": "AGENT"}),
             span(2, 1, "llm", 2, **{"openinference.span.kind": "LLM", "llm.model_name": "m"}),
             span(3, 1, "triage", 3, **{"openinference.span.kind": "AGENT", "agent.name": "triage"}),
             span(4, 3, "check", 4, **{"openinference.span.kind": "TOOL", "tool.name": "check"}),
             span(5, 1, "after", 20, **{"openinference.span.kind": "TOOL", "tool.name": "after"})]
    assert mapped(spans) == [[("decision", "m", "triage", None), ("tool_call", "check", "triage", None),
                              ("tool_result", "check", "triage", None), ("tool_call", "after", "triage", None),
                              ("tool_result", "after", "triage", None)]]


def test_an_agent_that_raised_is_a_failure_with_its_exception():
    from oloproof.config.otlp import cases_of_trace

    [case] = cases_of_trace([span(1, 0, "invoke_agent a", 1, error="", exception=("ValueError", "closed"),
                                  **genai("invoke_agent", **{"gen_ai.agent.name": "a"}))])
    assert case.terminal_status == "failure" and case.output == {"error": {"type": "ValueError", "message": "closed"}}


EVENT = {"timeUnixNano": "5", "name": "exception", "attributes": [
    {"key": "exception.type", "value": {"stringValue": "smolagents.utils.AgentToolExecutionError"}},
    {"key": "exception.message", "value": {"stringValue": "refunds are closed"}},
    {"key": "exception.escaped", "value": {"boolValue": False}}]}
EVENTS = [[EVENT], [{"name": "log"}, EVENT], [EVENT, {**EVENT, "attributes": EVENT["attributes"][:1]}], [],
          [{"name": "exception", "attributes": [{"key": "exception.message", "value": {"intValue": "x"}}]}],
          [{"name": "exception", "attributes": [{"key": "exception.type", "value": {"doubleValue": 1.5}}]}],
          [{"name": "log", "attributes": 5}], [{"name": 7}], [5], "events", None]


@pytest.mark.parametrize("events", EVENTS)
def test_exception_events_are_read_alike_by_both_readers(events):
    """The exception a span's events record (its last ``exception`` event: the class's own
    name, its message) is read alike by the fast reader and the located one (or is the same
    located error)."""
    from oloproof.config import otlp
    from oloproof.errors import CaseFileError

    raw = {"traceId": T1, "spanId": "00000000000000aa", "name": "execute_tool t", "events": events,
           "status": {"code": 2}}
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [raw]}]}]}).encode()

    def read(f):
        try:
            return [(s.span_id, s.error, s.exception) for s in f()]
        except CaseFileError as e:
            return str(e)

    fast, slow = read(lambda: otlp.line_spans(line, "t.jsonl", 3)), read(lambda: otlp._slow_line(line, "t.jsonl:3"))
    assert fast == slow
    if events in (EVENTS[0], EVENTS[1]):
        assert fast == [("00000000000000aa", "", ("AgentToolExecutionError", "refunds are closed"))]
    if events == EVENTS[2]:  # the last one's: its message missing
        assert fast[0][2] == ("AgentToolExecutionError", "")


def test_the_fast_reader_reads_exception_events_itself(monkeypatch):
    from oloproof.config import otlp

    def slow(*args):
        raise AssertionError("the slow path was used")

    raw = {"traceId": T1, "spanId": "00000000000000aa", "name": "execute_tool t", "events": [EVENT]}
    monkeypatch.setattr(otlp, "_slow_line", slow)
    [got] = otlp.line_spans(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [raw]}]}]}).encode(), "t", 1)
    assert got.exception == ("AgentToolExecutionError", "refunds are closed")
