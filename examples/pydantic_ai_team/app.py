"""The pydantic-ai-team example: a support team of three Pydantic AI agents — triage hands
refund requests to billing and technical ones to tech, each by a tool that runs the other
agent (Pydantic AI's agent delegation) — recorded without a single ``@tool``.

Every agent runs on Pydantic AI's offline ``FunctionModel`` (a deterministic policy: no
provider, no credentials). The sandbox — orders and tickets — is a ``Stateful`` desk, reset
before every case and handed to the agents as their ``deps``.

Two ways to record the same team (``OLOPROOF_RECORDING``):

* unset (the default): ``oloproof.integrations.pydantic_ai.instrument`` routes each agent's
  tool calls and model requests through the recorder — fault-replayable, agents and handoffs
  named by the framework, final answer and status from the outermost run;
* ``spans``: the agents' OpenTelemetry spans (Pydantic AI's own instrumentation) go to
  ``oloproof.otel.OloproofSpanProcessor`` (``pip install 'oloproof[otel]'``).

Two versions of the team: ``app:Desk`` (correct) and ``app:CarelessDesk`` (two planted faults:
its tech agent refunds a double charge itself, and its billing agent reports a refund that
failed as done).

Needs ``pip install 'oloproof[pydantic-ai]'``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from oloproof import Stateful, system

#: the most billing refunds without a person
REFUND_LIMIT = 100.0


def _request(messages: list[ModelMessage]) -> str:
    """The user's request: the first message's prompt."""
    return str(messages[0].parts[-1].content)  # type: ignore[union-attr]


def _returns(messages: list[ModelMessage]) -> list[Any]:
    return [p for m in messages for p in m.parts if p.part_kind == "tool-return"]


def _order(text: str) -> str | None:
    found = re.search(r"ord-\d+", text)
    return found.group(0) if found else None


def _failed(content: Any) -> bool:
    return not isinstance(content, dict) or "error" in content


def _call(tool: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, args)])


def _say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


# ---- the policies (the "models") ----------------------------------------------------------

def triage_policy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Refunds and charges go to billing, everything else to tech; then pass the answer on."""
    request = _request(messages)
    done = _returns(messages)
    if not done:
        billing = re.search(r"\brefund", request, re.I) is not None
        return _call("ask_billing" if billing else "ask_tech", request=request)
    return _say(str(done[-1].content))


def billing_policy(messages: list[ModelMessage], info: AgentInfo, *, careless: bool = False) -> ModelResponse:
    """Look the order up; refund it when it was delivered and is within the limit, else hand
    it to a person; a refund that fails goes to a person too (the careless version says it
    refunded anyway)."""
    order = _order(_request(messages))
    done = _returns(messages)
    if not done:
        return _call("lookup_order", order_id=order)
    last = done[-1]
    if last.tool_name == "lookup_order":
        found = last.content
        if not _failed(found) and found["status"] == "delivered" and found["amount"] <= REFUND_LIMIT:
            return _call("issue_refund", order_id=order)
        return _call("escalate", order_id=order, reason="needs a person")
    if last.tool_name == "issue_refund":
        if _failed(last.content) and not careless:
            return _call("escalate", order_id=order, reason="the refund failed")
        return _say(f"Refunded order {order}.")
    return _say(f"A colleague will look at order {order}.")


def tech_policy(messages: list[ModelMessage], info: AgentInfo, *, careless: bool = False) -> ModelResponse:
    """Open a ticket for the problem and give its number (the careless version refunds a
    double charge itself)."""
    request = _request(messages)
    order = _order(request)
    done = _returns(messages)
    if not done:
        if careless and order and "charged twice" in request:
            return _call("issue_refund", order_id=order)
        return _call("open_ticket", summary=request)
    last = done[-1]
    if last.tool_name == "issue_refund":
        return _say(f"Refunded order {order}.")
    if _failed(last.content):
        return _say("I could not open a ticket; please write to support.")
    return _say(f"Ticket {last.content['ticket']} is open; we will be in touch.")


# ---- the tools: they act on the desk the run was given ------------------------------------

def lookup_order(ctx: RunContext[Desk], order_id: str) -> dict[str, Any]:
    """The order's status and amount."""
    order = ctx.deps.state["orders"].get(order_id)
    if order is None:
        return {"error": {"type": "NotFound", "message": f"no order {order_id}"}}
    return {"order_id": order_id, **order}


def issue_refund(ctx: RunContext[Desk], order_id: str) -> dict[str, Any]:
    """Refund the order in full."""
    order = ctx.deps.state["orders"][order_id]
    order["status"] = "refunded"
    order["refunded"] = order["amount"]
    return {"order_id": order_id, "refunded": order["amount"]}


def escalate(ctx: RunContext[Desk], order_id: str, reason: str) -> dict[str, Any]:
    """Hand the order to a person."""
    ctx.deps.state["orders"][order_id]["status"] = "escalated"
    return {"order_id": order_id, "queue": "people", "reason": reason}


def open_ticket(ctx: RunContext[Desk], summary: str) -> dict[str, Any]:
    """Open a support ticket."""
    tickets = ctx.deps.state["tickets"]
    number = f"T-{len(tickets) + 1}"
    tickets.append({"ticket": number, "summary": summary})
    return {"ticket": number}


@system(name="pydantic-ai-team", version="1.0", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    """The sandbox (orders and tickets) and the team that works on it: one desk per slot."""

    #: the team's entry point (triage), set below once the agents are built
    team: Agent[Desk, str]

    def reset(self, state: Any) -> None:
        self.state = state

    def snapshot(self) -> Any:
        return self.state

    def run(self, case: Any) -> dict[str, Any]:
        result = self.team.run_sync(case.input["request"], deps=self)
        return {"answer": result.output}


@system(name="pydantic-ai-team", version="1.1-careless", records=("agent_trajectory/v1", "environment_state/v1"))
class CarelessDesk(Desk):
    """The same desk with the careless team: the planted faults (another version, so that its
    replays are its own: ``callable: app:CarelessDesk`` and ``version: 1.1-careless``)."""

    # its team is set below


def build_team(*, careless: bool = False) -> tuple[Agent[Desk, str], Agent[Desk, str], Agent[Desk, str]]:
    """The three agents: triage (the one the desk runs), billing and tech."""
    billing = Agent(FunctionModel(lambda m, i: billing_policy(m, i, careless=careless), model_name="billing-policy"),
                    name="billing", deps_type=Desk, tools=[lookup_order, issue_refund, escalate])
    tech_tools = [open_ticket, issue_refund] if careless else [open_ticket]
    tech = Agent(FunctionModel(lambda m, i: tech_policy(m, i, careless=careless), model_name="tech-policy"),
                 name="tech", deps_type=Desk, tools=tech_tools)
    triage = Agent(FunctionModel(triage_policy, model_name="triage-policy"), name="triage", deps_type=Desk)

    @triage.tool
    async def ask_billing(ctx: RunContext[Desk], request: str) -> str:
        """Hand a refund or charge question to billing; returns its answer."""
        result = await billing.run(request, deps=ctx.deps, usage=ctx.usage)
        return result.output

    @triage.tool
    async def ask_tech(ctx: RunContext[Desk], request: str) -> str:
        """Hand a technical problem to tech; returns its answer."""
        result = await tech.run(request, deps=ctx.deps, usage=ctx.usage)
        return result.output

    for agent in (triage, billing, tech):
        _record(agent)
    return triage, billing, tech


def _record(agent: Agent[Desk, str]) -> None:
    if os.environ.get("OLOPROOF_RECORDING") == "spans":
        agent.instrument = _span_settings()
    else:
        from oloproof.integrations.pydantic_ai import instrument

        instrument(agent)


_SETTINGS: Any = None


def _span_settings() -> Any:
    """Pydantic AI's OpenTelemetry instrumentation, its spans going to Oloproof's processor
    (one provider for the process)."""
    global _SETTINGS
    if _SETTINGS is None:
        from opentelemetry.sdk.trace import TracerProvider
        from pydantic_ai import InstrumentationSettings

        from oloproof.otel import OloproofSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(OloproofSpanProcessor())
        _SETTINGS = InstrumentationSettings(tracer_provider=provider)
    return _SETTINGS


# module-level, so that the tools each instrumented agent routes are declared to the tool-name
# check (oloproof.yaml and the cases name them)
triage, billing, tech = build_team()
careless_triage, careless_billing, careless_tech = build_team(careless=True)
Desk.team = triage
CarelessDesk.team = careless_triage
