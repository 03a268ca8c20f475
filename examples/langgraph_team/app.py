"""The langgraph-team example: a LangGraph support team — a triage agent that hands refund
requests to a billing agent and technical ones to a tech agent — recorded with
``oloproof.integrations.langgraph.instrument``: no ``@tool`` anywhere.

Each agent is a ``create_react_agent`` graph on an offline chat model (:class:`ScriptedChat`,
a deterministic policy: no provider, no key); the team is a ``StateGraph`` with one node per
agent, and triage's ``transfer_to_*`` tools send control on with ``Command(goto=…,
graph=Command.PARENT)``. The tools act on the case's sandbox (orders and tickets, a
``Stateful`` desk), which the graph receives as its runtime context. ``PlantedDesk`` is the
same team with two planted faults: its tech agent refunds a broken order itself, and its
billing agent says "Refunded" when the refund failed. ``spans.py`` records the correct team
through OpenTelemetry instead (OpenInference's LangChain instrumentation).

Needs ``pip install 'oloproof[langgraph]'``.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from typing import Annotated, Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolRuntime, create_react_agent
from langgraph.types import Command

from oloproof import Stateful, system
from oloproof.integrations.langgraph import instrument


class ScriptedChat(BaseChatModel):
    """An offline chat model: its answer is a function of the conversation (``policy``), so
    the team needs no provider and says the same thing every time. It takes tools as any
    chat model does (``bind_tools``); a real model drops in in its place."""

    model_name: str
    policy: Callable[[list[BaseMessage]], AIMessage]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.policy(messages))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


class Sandbox(Stateful):
    """The case's world: orders and tickets (reset before each case, snapshotted after)."""

    def reset(self, state: Any) -> None:
        self.state = state

    def snapshot(self) -> Any:
        return self.state


# ---- the tools: they act on the sandbox the graph is given as its runtime context -------------

@tool
def lookup_order(order_id: str, runtime: ToolRuntime[Sandbox]) -> dict:
    """The order's status and amount."""
    orders = runtime.context.state["orders"]
    if order_id not in orders:
        raise ValueError(f"no order {order_id}")
    return {"order_id": order_id, **orders[order_id]}


@tool
def issue_refund(order_id: str, runtime: ToolRuntime[Sandbox]) -> dict:
    """Refund a delivered order in full."""
    order = runtime.context.state["orders"][order_id]
    if order["status"] != "delivered":
        raise ValueError(f"{order_id} is {order['status']}, not delivered")
    order["status"] = "refunded"
    return {"order_id": order_id, "refunded": order["amount"]}


@tool
def escalate_to_human(order_id: str, reason: str, runtime: ToolRuntime[Sandbox]) -> dict:
    """Hand the order to a person."""
    runtime.context.state["orders"][order_id]["status"] = "escalated"
    return {"order_id": order_id, "queue": "people", "reason": reason}


@tool
def open_ticket(order_id: str, issue: str, runtime: ToolRuntime[Sandbox]) -> dict:
    """Open a technical support ticket about an order."""
    tickets = runtime.context.state["tickets"]
    ticket = f"T-{len(tickets) + 1}"
    tickets.append({"id": ticket, "order_id": order_id, "issue": issue})
    return {"ticket": ticket}


def handoff(agent: str) -> Any:
    """A ``transfer_to_<agent>`` tool: the conversation so far, and control, go to ``agent``."""
    name = f"transfer_to_{agent}"

    @tool(name, description=f"Hand the conversation to the {agent} agent.")
    def transfer(state: Annotated[dict, InjectedState], tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        done = ToolMessage(f"Transferred to {agent}.", tool_call_id=tool_call_id, name=name)
        return Command(goto=agent, graph=Command.PARENT, update={"messages": [*state["messages"], done]})

    return transfer


# ---- the policies: what each agent's "model" says, turn by turn ------------------------------

def _order(messages: list[BaseMessage]) -> str | None:
    found = re.search(r"ord-\d+", str(messages[0].content))
    return found.group(0) if found else None


def _results(messages: list[BaseMessage]) -> dict[str, Any]:
    """The latest result of each tool in the conversation, parsed (an error or a result that
    does not parse: ``{"error": …}``)."""
    out: dict[str, Any] = {}
    for m in messages:
        if isinstance(m, ToolMessage) and m.name:
            try:
                value = json.loads(str(m.content))
            except ValueError:
                value = {"error": str(m.content)}
            out[m.name] = value if isinstance(value, dict) and m.status != "error" else {"error": value}
    return out


def _say(text: str) -> AIMessage:
    return AIMessage(text, usage_metadata={"input_tokens": 40, "output_tokens": 12, "total_tokens": 52})


def _call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}"}],
                     usage_metadata={"input_tokens": 40, "output_tokens": 8, "total_tokens": 48})


def triage_policy(messages: list[BaseMessage]) -> AIMessage:
    """Refunds and money to billing, a device or app that fails to tech; else answer."""
    text = str(messages[0].content).lower()
    if any(w in text for w in ("refund", "charged", "money back")):
        return _call("transfer_to_billing")
    if any(w in text for w in ("broken", "crash", "connect", "error")):
        return _call("transfer_to_tech")
    return _say("I can help with refunds and with technical problems: tell me your order number.")


def billing_policy(messages: list[BaseMessage], *, ignore_errors: bool = False) -> AIMessage:
    """Look the order up; refund it when delivered and at most 100 EUR, else escalate; a
    refund that fails is escalated (``ignore_errors``: the planted fault says it worked)."""
    order, done = _order(messages), _results(messages)
    if "escalate_to_human" in done:
        return _say(f"A colleague will look at {order}.")
    if "issue_refund" in done:
        result = done["issue_refund"]
        if "error" in result and not ignore_errors:
            return _call("escalate_to_human", order_id=order, reason="the refund failed")
        return _say(f"Refunded {done['lookup_order']['amount']:.2f} EUR for {order}.")
    if "lookup_order" not in done:
        return _call("lookup_order", order_id=order)
    found = done["lookup_order"]
    if "error" in found:
        return _say(f"I could not find {order}.")
    if found["status"] != "delivered":
        return _say(f"{order} is {found['status']}: it cannot be refunded yet.")
    if found["amount"] > 100:
        return _call("escalate_to_human", order_id=order, reason="a refund over 100 EUR")
    return _call("issue_refund", order_id=order)


def tech_policy(messages: list[BaseMessage], *, refunds_broken: bool = False) -> AIMessage:
    """Look the order up and open a ticket (``refunds_broken``: the planted fault refunds a
    broken order instead)."""
    order, done = _order(messages), _results(messages)
    if "open_ticket" in done:
        if "error" in done["open_ticket"]:
            return _say(f"I could not open a ticket for {order}: please try again later.")
        return _say(f"Opened ticket {done['open_ticket']['ticket']} for {order}.")
    if "issue_refund" in done:
        return _say(f"Refunded {order}.")
    if "lookup_order" not in done:
        return _call("lookup_order", order_id=order)
    if refunds_broken and "broken" in str(messages[0].content).lower():
        return _call("issue_refund", order_id=order)
    return _call("open_ticket", order_id=order, issue=str(messages[0].content))


def build_team(*, planted: bool = False) -> Any:
    """The team: triage, billing and tech, one node each; the graph is not instrumented."""
    with warnings.catch_warnings():  # create_react_agent's move to langchain.agents: not needed here
        warnings.simplefilter("ignore", DeprecationWarning)
        triage = create_react_agent(ScriptedChat(model_name="triage-model", policy=triage_policy),
                                    [handoff("billing"), handoff("tech")], name="triage")
        billing = create_react_agent(
            ScriptedChat(model_name="billing-model",
                         policy=lambda m: billing_policy(m, ignore_errors=planted)),
            [lookup_order, issue_refund, escalate_to_human], name="billing")
        tech = create_react_agent(
            ScriptedChat(model_name="tech-model", policy=lambda m: tech_policy(m, refunds_broken=planted)),
            [lookup_order, open_ticket, *([issue_refund] if planted else [])], name="tech")
    team = StateGraph(MessagesState)
    team.add_node(triage, destinations=("billing", "tech"))
    team.add_node(billing)
    team.add_node(tech)
    team.add_edge(START, "triage")
    team.add_edge("billing", END)
    team.add_edge("tech", END)
    return team.compile(name="support-team")


#: the team, its tool and model calls routed through Oloproof's recorder
TEAM = instrument(build_team())
#: the same team with the planted faults
PLANTED_TEAM = instrument(build_team(planted=True))


@system(name="langgraph-team", version="1.0", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Sandbox):
    """The sandbox and the team that works on it: one desk per slot."""

    team = TEAM

    def run(self, case: Any) -> dict[str, Any]:
        out = self.team.invoke({"messages": [HumanMessage(case.input["message"])]}, context=self)
        return {"answer": out["messages"][-1].content}


@system(name="langgraph-team", version="1.0-planted", records=("agent_trajectory/v1", "environment_state/v1"))
class PlantedDesk(Desk):
    """The desk with the planted faults (``system.callable: app:PlantedDesk``)."""

    team = PLANTED_TEAM
