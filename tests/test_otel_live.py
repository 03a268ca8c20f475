"""Live recording through OpenTelemetry (issue 15): a real Pydantic AI agent on its offline
FunctionModel, instrumented, recorded by ``oloproof.otel.OloproofSpanProcessor`` without any
``@tool`` — and its events are those the same trajectory gives when built by hand."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("opentelemetry.sdk.trace")

from tests.conftest import write

APP = '''
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from oloproof import Stateful, system
from oloproof.otel import OloproofSpanProcessor

provider = TracerProvider()
provider.add_span_processor(OloproofSpanProcessor())
INSTRUMENT = InstrumentationSettings(tracer_provider=provider)


def model(messages, info: AgentInfo):
    """A deterministic model: look the order up, refund it when it was delivered, answer."""
    asked = messages[0].parts[-1].content
    order = asked.split()[-1]
    returned = [p for m in messages[1:] for p in getattr(m, "parts", []) if p.part_kind == "tool-return"]
    if not returned:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": order}, tool_call_id="c1")])
    if len(returned) == 1 and returned[0].content["status"] == "delivered":
        return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": order}, tool_call_id="c2")])
    return ModelResponse(parts=[TextPart(f"Done with {order}.")])


@system(name="refunds", version="1", records=["agent_trajectory/v1", "environment_state/v1"])
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    def run(self, case):
        agent = Agent(FunctionModel(model), name="refunds")
        state = self.state

        @agent.tool_plain
        def lookup_order(order_id: str) -> dict:
            return {"order_id": order_id, "status": state["orders"][order_id]}

        @agent.tool_plain
        def issue_refund(order_id: str) -> dict:
            state["orders"][order_id] = "refunded"
            return {"refunded": order_id}

        Agent.instrument_all(INSTRUMENT)
        result = agent.run_sync(f"refund {case.input['order_id']}")
        return {"answer": result.output}
'''

CONFIG = ('system: {name: refunds, version: "1", callable: app:Desk, '
          """records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: state_matches, mode: subset}
  - {type: agent_tool_called, tool_name: lookup_order}
""")


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "pai"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    cases = [{"id": f"ord-{n}", "input": {"order_id": f"ord-{n}"},
              "initial_state": {"orders": {f"ord-{n}": status}},
              "expected": {"state": {"orders": {f"ord-{n}": "refunded" if status == "delivered" else status}}}}
             for n, status in enumerate(["delivered", "lost", "delivered"])]
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in cases))
    return p


def test_a_pydantic_ai_agent_is_recorded_live_without_any_tool_decorator(cli, project):
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code == 0, r.output
    data = json.loads((project / "r.json").read_text())
    rows = {c["criterion"]: (c["passed"], c["observed"]) for c in data["criteria"]}
    assert rows == {"state_matches": (3, 3), "agent_tool_lookup_order_called": (3, 3)}
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(project / ".oloproof" / "log.db", readonly=True)
    view = case_view(store, latest_run_id(store), "ord-0")
    store.close()
    steps = view.trajectory.steps
    assert [(s.kind, s.tool_name) for s in steps] == [
        ("decision", "function:model:"), ("tool_call", "lookup_order"), ("tool_result", "lookup_order"),
        ("decision", "function:model:"), ("tool_call", "issue_refund"), ("tool_result", "issue_refund"),
        ("decision", "function:model:"), ("final", None)]
    assert steps[1].arguments == {"order_id": "ord-0"}
    assert steps[2].result == {"order_id": "ord-0", "status": "delivered"}
    assert steps[-1].result == "Done with ord-0." and all(s.agent == "refunds" for s in steps)
    assert [u.input_tokens > 0 for u in view.usage] == [True, True, True]


def test_the_live_events_are_those_of_the_same_trajectory_built_by_hand(cli, project):
    assert cli("run", cwd=project).exit_code == 0
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.events import encode
    from oloproof.recorder.case import CaseRecorder
    from oloproof.records import AgentStep, AgentTrajectory, Case
    from oloproof.store import SQLiteStore

    store = SQLiteStore(project / ".oloproof" / "log.db", readonly=True)
    view = case_view(store, latest_run_id(store), "ord-1")
    store.close()
    live = [encode(s) for s in view.trajectory.steps]
    rec = CaseRecorder(Case("ord-1", {}))
    rec.agent_trajectory(AgentTrajectory(tuple(
        AgentStep(s.index, s.kind, tool_name=s.tool_name, arguments=s.arguments, result=s.result, agent=s.agent,
                  to_agent=s.to_agent) for s in view.trajectory.steps), "success"))
    by_hand = [encode(e) for e in rec.trajectory_events() if type(e).__name__ == "StepRecorded"]
    assert live == by_hand


SPANS = '''
from opentelemetry.sdk.trace import TracerProvider

from oloproof import system
from oloproof.otel import OloproofSpanProcessor

provider = TracerProvider()
provider.add_span_processor(OloproofSpanProcessor())
tracer = provider.get_tracer("app")

with tracer.start_as_current_span("execute_tool at_import", attributes={"gen_ai.operation.name": "execute_tool"}):
    pass  # outside any case: ignored


def tool(name):
    return tracer.start_as_current_span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name})


def agent(name):
    return tracer.start_as_current_span(f"invoke_agent {name}", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name, "final_result": f"{name} done"})


@system(name="spans", version="1", records=["agent_trajectory/v1"])
def run(case):
    kind = case.input["kind"]
    if kind == "abandon":  # an agent span that never ends
        span = tracer.start_span("invoke_agent bot", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": "bot"})
        span.set_attribute("x", 1)
        return {"answer": "left"}
    if kind == "preflight":  # a tool before the agent runs
        with tool("check"):
            pass
    with agent("helper"):
        with tool("lookup"):
            pass
    return {"answer": "ok"}
'''


def test_each_case_starts_afresh_and_mixed_agent_naming_never_errors_a_case(cli, tmp_path):
    p = tmp_path / "spans"
    write(p / "app.py", SPANS)
    write(p / "oloproof.yaml", "system: {name: spans, version: '1', callable: app:run, "
                               "records: [agent_trajectory/v1]}\n"
                               "cases: cases.jsonl\n")
    write(p / "cases.jsonl", "".join(json.dumps({"id": i, "input": {"kind": k}}) + "\n" for i, k in
                                     [("a", "abandon"), ("b", "normal"), ("c", "preflight"), ("d", "normal")]))
    r = cli("run", cwd=p)
    assert r.exit_code == 0 and "errored" not in r.output, r.output
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    cases = {v.case_id: v for v in iter_case_views(store, latest_run_id(store))}
    store.close()
    normal = [(s.kind, s.tool_name, s.agent, s.to_agent, s.result) for s in cases["b"].trajectory.steps]
    assert normal == [("tool_call", "lookup", "helper", None, None), ("tool_result", "lookup", "helper", None, None),
                      ("final", None, "helper", None, "helper done")]
    # the abandoned agent of case a never leaks into b or d: no invented handoff
    assert [(s.kind, s.agent) for s in cases["d"].trajectory.steps] == [(k, a) for k, _, a, _, _ in normal]
    # a tool before any agent: the case's steps name no agent (all or none), and nothing errors
    assert [(s.kind, s.tool_name, s.agent) for s in cases["c"].trajectory.steps] == [
        ("tool_call", "check", None), ("tool_result", "check", None), ("tool_call", "lookup", None),
        ("tool_result", "lookup", None), ("final", None, None)]
