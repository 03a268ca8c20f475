"""What ``oloproof.integrations.openai_agents.instrument`` adds to each tool call and each model
call of an OpenAI Agents SDK agent (issue 25's target: at most 25 µs per call).

Two copies of the same calls, one bare and one instrumented, called the way the SDK's run loop
calls them:

* ``tool``: ``FunctionTool.on_invoke_tool(ToolContext, '{"order_id": …}')`` of a
  ``function_tool`` (an ``async def`` tool returning a small dict; a sync one adds the SDK's
  ``asyncio.to_thread`` hop to both sides alike): argument parsing, validation, the call;
* ``model``: ``Model.get_response(...)`` of an offline model answering a fixed
  ``ModelResponse`` (a function call), with a realistic request — system instructions, eight
  input items of a conversation, three tools, two handoffs;
* ``run``: a whole ``Runner.run`` of a two-agent team (triage hands off to billing, billing
  calls a tool then answers: 3 model calls, 1 tool call, 1 handoff), per routed call — what
  the SDK's own run loop costs around the calls (hooks, items, tracing off) is in both.

**in case**: the calls made inside a case (a ``CaseRecorder`` as ``current_case()``): each
routed call records its steps (a ``tool_call`` and a ``tool_result``, or a ``decision`` with
the request and the response encoded as JSON) — what the integration and the recorder cost
the agent. **outside**: no case running (one context-variable read per call).

Interleaved: every round times a batch of bare calls and a batch of instrumented calls back to
back, in alternating order; the figure of a round is the difference of the two batches' median
call. Median and range over the rounds.

    python bench/bench_integration_openai_agents.py [--calls 400] [--rounds 15]   (about 20 s)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool, handoff
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.testing import assistant_message, function_call
from agents.tool_context import ToolContext

from oloproof.integrations.openai_agents import instrument
from oloproof.recorder.case import CaseRecorder
from oloproof.records import Case
from oloproof.system import _CURRENT

QUIET = RunConfig(tracing_disabled=True)


async def lookup_order(order_id: str) -> dict:
    """The order's status and amount."""
    return {"order_id": order_id, "status": "delivered", "amount": 40.0}


async def issue_refund(order_id: str) -> dict:
    """Refund the order."""
    return {"order_id": order_id, "refunded": 40.0}


async def escalate(order_id: str, reason: str) -> dict:
    """Hand the order to a person."""
    return {"ticket": 1}


class Fixed(Model):
    """An offline model with one answer: a refund call."""

    model = "fixed"

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=[function_call("issue_refund", {"order_id": "ord-001"}, call_id="c2")],
                             usage=Usage(requests=1, input_tokens=120, output_tokens=9), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
        yield


class Script(Model):
    """The team's offline model: the next answer of its script, round and round."""

    model = "script"

    def __init__(self, answers: list[list[Any]]) -> None:
        self.answers, self.i = answers, 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        out = self.answers[self.i % len(self.answers)]
        self.i += 1
        return ModelResponse(output=out, usage=Usage(requests=1), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
        yield


def agent_pair() -> tuple[Agent, Agent]:
    """The same billing agent twice: bare, and instrumented."""
    def make() -> Agent:
        return Agent(name="billing", model=Fixed(), instructions="Refund delivered orders up to 100 EUR.",
                     tools=[function_tool(f) for f in (lookup_order, issue_refund, escalate)])
    return make(), instrument(make())


def team() -> Agent:
    billing = Agent(name="billing", model=Script([[function_call("issue_refund", {"order_id": "ord-001"},
                                                                 call_id="c1")],
                                                  [assistant_message("Refunded.")]]),
                    tools=[function_tool(issue_refund)])
    return Agent(name="triage", model=Script([[function_call("transfer_to_billing", {}, call_id="h1")]]),
                 handoffs=[billing])


CONVERSATION: list[Any] = [
    {"role": "user", "content": "Please refund order ord-001, it arrived broken"},
    {"type": "function_call", "call_id": "h1", "id": "h1", "name": "transfer_to_billing", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "h1", "output": '{"assistant": "billing"}'},
    {"type": "function_call", "call_id": "c1", "id": "c1", "name": "lookup_order",
     "arguments": '{"order_id":"ord-001"}'},
    {"type": "function_call_output", "call_id": "c1",
     "output": "{'amount': 40.0, 'order_id': 'ord-001', 'status': 'delivered'}"},
    {"role": "assistant", "content": "Let me check the order."},
    {"role": "user", "content": "It is the blue one."},
    {"type": "function_call_output", "call_id": "c0", "output": "ok"},
]


HANDOFFS = [handoff(Agent(name="person")), handoff(Agent(name="tech", handoff_description="Technical problems."))]


async def tool_calls(agent: Agent, n: int) -> list[float]:
    tool = agent.tools[0]
    ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id="c1",
                      tool_arguments='{"order_id": "ord-001"}', agent=agent)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await tool.on_invoke_tool(ctx, '{"order_id": "ord-001"}')
        out.append(time.perf_counter() - t0)
    return out


async def model_calls(agent: Agent, n: int) -> list[float]:
    model = agent.model
    handoffs = HANDOFFS
    tools = agent.tools
    settings = ModelSettings()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await model.get_response(agent.instructions, CONVERSATION, settings, tools, None, handoffs,
                                 ModelTracing.DISABLED, previous_response_id=None, conversation_id=None, prompt=None)
        out.append(time.perf_counter() - t0)
    return out


async def runs(agent: Agent, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await Runner.run(agent, "refund ord-001", run_config=QUIET)
        out.append(time.perf_counter() - t0)
    return out


def timed(kind: str, agent: Agent, n: int, in_case: bool) -> float:
    """The median call of a batch of ``n`` (a run: per routed call, 4 of them)."""
    make = {"tool": tool_calls, "model": model_calls, "run": runs}[kind]
    token = _CURRENT.set(CaseRecorder(Case("bench", {}))) if in_case else None
    try:
        times = asyncio.run(make(agent, n))
    finally:
        if token is not None:
            _CURRENT.reset(token)
    return statistics.median(times) / (4 if kind == "run" else 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    bare, routed = agent_pair()
    bare_team, routed_team = team(), instrument(team())
    pairs = {"tool": (bare, routed), "model": (bare, routed), "run": (bare_team, routed_team)}
    for kind, (b, r) in pairs.items():  # warm up: imports, caches, the SDK's first-call work
        for where in (False, True):
            timed(kind, b, 20, where)
            timed(kind, r, 20, where)
    gc.collect()
    print(f"{'call':6s} {'where':8s} {'bare µs':>9s} {'instrumented µs':>16s} {'overhead µs (median [min, max])':>34s}")
    for kind, (b, r) in pairs.items():
        n = args.calls if kind != "run" else max(20, args.calls // 10)
        for where in (True, False):
            diffs, bares, ours = [], [], []
            for i in range(args.rounds):
                if i % 2 == 0:
                    tb, tr = timed(kind, b, n, where), timed(kind, r, n, where)
                else:
                    tr, tb = timed(kind, r, n, where), timed(kind, b, n, where)
                bares.append(tb * 1e6)
                ours.append(tr * 1e6)
                diffs.append((tr - tb) * 1e6)
            print(f"{kind:6s} {'in case' if where else 'outside':8s} {statistics.median(bares):9.1f} "
                  f"{statistics.median(ours):16.1f} {statistics.median(diffs):12.1f} "
                  f"[{min(diffs):.1f}, {max(diffs):.1f}]")


if __name__ == "__main__":
    main()
