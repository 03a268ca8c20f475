"""The openai-agents-team example: a triage agent on the OpenAI Agents SDK hands refund
requests to a billing agent and technical ones to a tech agent — recorded, replayed and
fault-injected without a single ``@tool``.

The agents run on an offline model (:class:`PolicyModel`: a deterministic policy behind the
SDK's ``Model`` interface — no provider, no key, no network). The sandbox (orders and tickets)
is the ``Stateful`` desk, handed to the tools as the run's context. Three systems:

* ``app:TeamDesk`` — the team instrumented with ``oloproof.integrations.openai_agents``: every
  tool call and model call goes through Oloproof's recorder (replayable, faultable), agent
  names and handoffs come from the SDK;
* ``app:SloppyTeamDesk`` (version ``1.1-sloppy``) — the same team with two planted faults:
  triage sends a request that mentions a crash to tech even when it asks for a refund, and
  tech then issues the refund itself; billing ignores a failed refund and says it is done;
* ``app:TracedTeamDesk`` (version ``1.0-spans``) — the correct team recorded through the span path instead:
  OpenInference's ``OpenAIAgentsInstrumentor`` on a TracerProvider with
  ``oloproof.otel.OloproofSpanProcessor`` (needs ``oloproof[otel]`` and
  ``openinference-instrumentation-openai-agents``).

Needs ``pip install 'oloproof[openai-agents]'``.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Callable
from typing import Any

from agents import Agent, ModelResponse, RunConfig, RunContextWrapper, Runner, Usage, function_tool
from agents.models.chatcmpl_converter import Converter
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.tracing import generation_span

from oloproof import Stateful, system
from oloproof.integrations.openai_agents import instrument

MAX_TURNS = 10
REFUND_LIMIT = 100.0
KB = {"kb-12": ("The app crashes on start", ["crash", "crashes", "freezes"]),
      "kb-31": ("Resetting your password", ["password", "reset"])}


# ---- the offline model ----------------------------------------------------------------------

class Turn:
    """What a policy reads of the conversation: the customer's request and the results of the
    calls the current agent made since it took over (name, parsed output)."""

    def __init__(self, items: list[Any]) -> None:
        self.request = ""
        names: dict[str, str] = {}
        self.results: list[tuple[str, Any]] = []
        for item in items:
            kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
            data = item if isinstance(item, dict) else item.model_dump()
            if kind is None and data.get("role") == "user" and not self.request:
                self.request = str(data.get("content"))
            elif kind == "function_call":
                names[data["call_id"]] = data["name"]
            elif kind == "function_call_output":
                name = names.get(data["call_id"], "")
                if name.startswith("transfer_to_"):
                    self.results = []  # a new agent took over: its own calls start here
                else:
                    self.results.append((name, _parsed(data["output"])))
        found = re.search(r"ord-\d+", self.request)
        self.order = found.group(0) if found else None

    def called(self, name: str) -> bool:
        return any(n == name for n, _ in self.results)


def _parsed(output: Any) -> Any:
    """A tool output as the model reads it: the SDK shows a dict as its ``str()``; a truncated
    or garbled output is ``None`` (unreadable)."""
    if not isinstance(output, str):
        return output
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(output)
        except (ValueError, SyntaxError):
            continue
    return None


Policy = Callable[[Turn], list[Any]]


class PolicyModel(Model):
    """An offline model: ``policy(turn)`` gives the response's output items (function calls,
    a message). Deterministic: call ids count the agent's calls in the conversation."""

    model = "offline-policy"

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any,
                           conversation_id: Any, prompt: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        # traced as the SDK's Chat Completions model traces a call (what the span path reads)
        with generation_span(model=self.model, disabled=tracing.is_disabled()) as span:
            output = self.policy(Turn(items))
            if tracing.include_data():
                span.span_data.input = Converter.items_to_messages(items)
                span.span_data.output = [chat_message(output)]
        size = len(json.dumps(items, default=str))
        return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=size // 4, output_tokens=8,
                                                        total_tokens=size // 4 + 8), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the offline policy answers get_response only: use Runner.run")
        yield  # an async generator, as the interface says


def chat_message(output: list[Any]) -> dict[str, Any]:
    """The response's output items as one Chat Completions assistant message."""
    text = "".join(part.text for item in output if item.type == "message" for part in item.content)
    calls = [{"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
             for item in output if item.type == "function_call"]
    return {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}


def call(name: str, turn: Turn, **arguments: Any) -> list[Any]:
    return [function_call(name, arguments, call_id=f"{name}-{len(turn.results) + 1}")]


def say(text: str) -> list[Any]:
    return [assistant_message(text, item_id="msg")]


BILLING_WORDS = ("refund", "charged", "invoice", "money back")


def triage_policy(turn: Turn) -> list[Any]:
    billing = any(w in turn.request.lower() for w in BILLING_WORDS)
    return call("transfer_to_billing" if billing else "transfer_to_tech", turn)


def sloppy_triage_policy(turn: Turn) -> list[Any]:
    text = turn.request.lower()
    if any(w in text for w in ("crash", "error", "log in", "password")):
        return call("transfer_to_tech", turn)  # a crash first, whatever else is asked
    return triage_policy(turn)


def billing_policy(turn: Turn, *, read_errors: bool = True) -> list[Any]:
    order = turn.order
    if order is None:
        return say("Which order is it about?")
    if not turn.results:
        return call("lookup_order", turn, order_id=order)
    name, result = turn.results[-1]
    if name == "lookup_order":
        if not isinstance(result, dict) or "error" in result:
            return say(f"I could not find order {order}.")
        if result["status"] == "refunded":
            return say(f"Order {order} was already refunded.")
        if result["amount"] > REFUND_LIMIT:
            return call("escalate", turn, order_id=order, reason="over the refund limit")
        return call("issue_refund", turn, order_id=order)
    if name == "issue_refund":
        if read_errors and (not isinstance(result, dict) or "error" in result):
            return call("escalate", turn, order_id=order, reason="the refund failed")
        amount = result.get("refunded") if isinstance(result, dict) else None
        return say(f"Refunded {amount} EUR for {order}." if amount is not None else f"Refunded {order}.")
    return say(f"A colleague will follow up on {order}.")


def sloppy_billing_policy(turn: Turn) -> list[Any]:
    return billing_policy(turn, read_errors=False)


def tech_policy(turn: Turn, *, refunds: bool = False) -> list[Any]:
    if not turn.results:
        return call("search_kb", turn, query=turn.request)
    name, result = turn.results[-1]
    if name == "search_kb":
        if refunds and turn.order and "refund" in turn.request.lower():
            return call("issue_refund", turn, order_id=turn.order)  # not tech's to do
        if isinstance(result, dict) and result.get("article"):
            return say(f"Try this: {result['title']} ({result['article']}).")
        return call("open_ticket", turn, summary=turn.request)
    if name == "issue_refund":
        return say(f"Refunded {turn.order} and noted the crash.")
    return say(f"Ticket {result.get('ticket') if isinstance(result, dict) else '?'} is open; we will be in touch.")


def sloppy_tech_policy(turn: Turn) -> list[Any]:
    return tech_policy(turn, refunds=True)


# ---- tools: they act on the desk the run was given as its context -----------------------------

def lookup_order(ctx: RunContextWrapper[Any], order_id: str) -> dict:
    """The order's status and amount."""
    order = ctx.context.state["orders"].get(order_id)
    if order is None:
        return {"error": f"no order {order_id}"}
    return {"order_id": order_id, **order}


def issue_refund(ctx: RunContextWrapper[Any], order_id: str) -> dict:
    """Refund the order in full."""
    order = ctx.context.state["orders"][order_id]
    order["status"] = "refunded"
    return {"order_id": order_id, "refunded": order["amount"]}


def escalate(ctx: RunContextWrapper[Any], order_id: str, reason: str) -> dict:
    """Hand the order to a person, saying why."""
    state = ctx.context.state
    state["orders"][order_id]["status"] = "escalated"
    state["tickets"].append({"owner": "person", "order_id": order_id, "reason": reason})
    return {"ticket": len(state["tickets"])}


def search_kb(ctx: RunContextWrapper[Any], query: str) -> dict:
    """Search the knowledge base."""
    words = set(re.findall(r"[a-z]+", query.lower()))
    for article, (title, keys) in KB.items():
        if words & set(keys):
            return {"article": article, "title": title}
    return {"article": None}


def open_ticket(ctx: RunContextWrapper[Any], summary: str) -> dict:
    """Open a ticket for the tech team."""
    tickets = ctx.context.state["tickets"]
    tickets.append({"owner": "tech", "summary": summary})
    return {"ticket": len(tickets)}


def build_team(triage: Policy = triage_policy, billing: Policy = billing_policy,
               tech: Policy = tech_policy, tech_tools: tuple[Callable[..., Any], ...] = ()) -> Agent:
    """Three agents; each build makes its own tool objects (instrumenting routes them)."""
    billing_agent = Agent(name="billing", model=PolicyModel(billing),
                          instructions="Refund delivered orders up to 100 EUR; escalate the rest.",
                          tools=[function_tool(f) for f in (lookup_order, issue_refund, escalate)])
    tech_agent = Agent(name="tech", model=PolicyModel(tech), instructions="Solve technical problems.",
                       tools=[function_tool(f) for f in (search_kb, open_ticket, *tech_tools)])
    return Agent(name="triage", model=PolicyModel(triage), instructions="Route each request.",
                 handoffs=[billing_agent, tech_agent])


#: the team, instrumented: at module level, so its tools are declared to the tool-name check
team = instrument(build_team())
sloppy_team = instrument(build_team(sloppy_triage_policy, sloppy_billing_policy, sloppy_tech_policy,
                                    tech_tools=(issue_refund,)))


# ---- the systems ------------------------------------------------------------------------------

class _Desk(Stateful):
    team: Agent
    run_config: RunConfig | None = RunConfig(tracing_disabled=True)  # no trace leaves the machine

    def reset(self, state: Any) -> None:
        self.state = copy.deepcopy(state)
        self.state.setdefault("tickets", [])

    def snapshot(self) -> Any:
        return self.state

    def run(self, case: Any) -> dict[str, Any]:
        result = Runner.run_sync(self.team, case.input["request"], context=self, max_turns=MAX_TURNS,
                                 run_config=self.run_config)
        return {"answer": result.final_output}


@system(name="openai-agents-team", version="1.0", records=("agent_trajectory/v1", "environment_state/v1"))
class TeamDesk(_Desk):
    """The correct team, instrumented."""

    team = team


@system(name="openai-agents-team", version="1.1-sloppy", records=("agent_trajectory/v1", "environment_state/v1"))
class SloppyTeamDesk(_Desk):
    """The team with the planted faults, instrumented."""

    team = sloppy_team


_TRACED: dict[str, Any] = {}


def _traced_team() -> Agent:
    """The correct team, not instrumented, traced by OpenInference into Oloproof's span
    processor (installed once per process; it replaces the SDK's exporter to OpenAI)."""
    if "team" not in _TRACED:
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
        from opentelemetry.sdk.trace import TracerProvider

        from oloproof.otel import OloproofSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(OloproofSpanProcessor())
        OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
        _TRACED["team"] = build_team()
    return _TRACED["team"]


@system(name="openai-agents-team", version="1.0-spans", records=("agent_trajectory/v1", "environment_state/v1"))
class TracedTeamDesk(_Desk):
    """The correct team recorded through the span path."""

    run_config = None  # traced: OpenInference's processor is the only one

    def __init__(self) -> None:
        self.team = _traced_team()
