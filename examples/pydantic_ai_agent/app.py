"""The pydantic-ai-agent example: a Pydantic AI refund agent recorded live through
OpenTelemetry — no ``@tool`` anywhere.

The agent runs on Pydantic AI's offline ``FunctionModel`` (a deterministic policy: no
provider, no credentials), is instrumented with OpenTelemetry, and Oloproof's span processor
turns its GenAI spans into each case's trajectory. The sandbox (a ``Stateful`` desk holding
the orders) is reset before every case; the evaluators check the world it leaves.

Needs ``pip install 'oloproof[otel]' pydantic-ai-slim``.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from oloproof import Stateful, system
from oloproof.otel import OloproofSpanProcessor

provider = TracerProvider()
provider.add_span_processor(OloproofSpanProcessor())
Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))


def policy(messages: list[Any], info: AgentInfo) -> ModelResponse:
    """The "model": look the order up; refund it when it was delivered and is under the
    limit; otherwise escalate to a person; then say what happened."""
    order = messages[0].parts[-1].content.split()[-1]
    returns = [p for m in messages[1:] for p in getattr(m, "parts", []) if p.part_kind == "tool-return"]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": order}, tool_call_id="1")])
    if len(returns) == 1:
        found = returns[0].content
        if found["status"] == "delivered" and found["amount"] <= 100:
            return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": order}, tool_call_id="2")])
        return ModelResponse(parts=[ToolCallPart("escalate", {"order_id": order}, tool_call_id="2")])
    last = returns[-1]
    if last.tool_name == "issue_refund":
        return ModelResponse(parts=[TextPart(f"Refunded {last.content['amount']:.2f} EUR for {order}.")])
    return ModelResponse(parts=[TextPart(f"A colleague will look at {order}.")])


@system(name="pydantic-ai-refunds", version="1.0", records=("agent_trajectory/v1", "environment_state/v1"))
class RefundDesk(Stateful):
    """The sandbox and the agent: one desk per concurrent slot."""

    def reset(self, state: Any) -> None:
        self.state = state

    def snapshot(self) -> Any:
        return self.state

    def run(self, case: Any) -> dict[str, Any]:
        orders = self.state["orders"]
        agent = Agent(FunctionModel(policy), name="refunds")

        @agent.tool_plain
        def lookup_order(order_id: str) -> dict:
            """The order's status and amount."""
            return {"order_id": order_id, **orders[order_id]}

        @agent.tool_plain
        def issue_refund(order_id: str) -> dict:
            """Refund the order in full."""
            orders[order_id]["status"] = "refunded"
            return {"order_id": order_id, "amount": orders[order_id]["amount"]}

        @agent.tool_plain
        def escalate(order_id: str) -> dict:
            """Hand the order to a person."""
            orders[order_id]["status"] = "escalated"
            return {"order_id": order_id}

        result = agent.run_sync(f"refund {case.input['order_id']}")
        return {"answer": result.output}
