"""What ``oloproof.integrations.langgraph.instrument`` adds to each tool call and each chat
model call of a LangGraph agent (issue 25's target: at most 25 µs per call).

Bare and instrumented copies of the same calls, made the way LangGraph makes them:

* ``tool``: ``BaseTool.invoke(tool_call, config)`` of a ``@tool`` (a small dict back), as a
  ``ToolNode`` calls it: argument validation, the call, the ``ToolMessage``;
* ``model``: ``BaseChatModel.invoke(messages)`` of an offline chat model answering a tool
  call (a new message each time, as a provider's is), with a realistic request — eight
  messages of a conversation (a human turn, tool calls, tool results, an answer), three tools
  bound — that grows as a graph's does: each request is the previous one, its answer and a new
  tool result (so, in a case, two messages not written before: what a run's next model call
  brings), a conversation starting again every fourth call; the bare side runs LangChain's own
  ``_generate_with_cache``, the instrumented side the hook that routes it;
* ``run``: a whole ``graph.invoke`` of a two-agent team (``create_react_agent`` agents: triage
  hands off to billing, billing calls a tool then answers: 3 model calls, 1 tool call, 1
  handoff tool), per routed call (4) — LangGraph's own engine around the calls is in both.

**in case**: inside a case (a ``CaseRecorder`` as ``current_case()``) and, for ``tool`` and
``model``, inside an instrumented graph's run (what :func:`instrument` 's graph sets around
its runs): each routed call records its steps (a ``tool_call`` and a ``tool_result``, or a
``decision`` with the request and the ``ChatResult`` as JSON). **outside**: no case running.

Times are the CPU time of the thread that makes the calls (``time.thread_time_ns``: on a
machine shared with other work, wall-clock differences of a few µs drown in the scheduler's
noise); ``run`` is timed in CPU time of the process, as ``ToolNode`` runs its tool calls in a
worker thread.

Interleaved: every round times a batch of bare calls and a batch of instrumented calls back to
back, in alternating order; the figure of a round is the difference of the two batches' median
call. Median and range over the rounds.

    python bench/bench_integration_langgraph.py [--calls 400] [--rounds 15]   (about 30 s)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, StructuredTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, create_react_agent
from langgraph.types import Command

from oloproof.integrations import langgraph as integration
from oloproof.recorder.case import CaseRecorder
from oloproof.records import Case
from oloproof.system import _CURRENT


def lookup_order(order_id: str) -> dict:
    """The order's status and amount."""
    return {"order_id": order_id, "status": "delivered", "amount": 40.0}


def issue_refund(order_id: str) -> dict:
    """Refund the order."""
    return {"order_id": order_id, "refunded": 40.0}


def escalate(order_id: str, reason: str) -> dict:
    """Hand the order to a person."""
    return {"ticket": 1}


def tools() -> list[Any]:
    return [StructuredTool.from_function(f) for f in (lookup_order, issue_refund, escalate)]


class Chat(BaseChatModel):
    """An offline chat model: the next answer of its script, round and round."""

    model_name: str = "script"
    answers: list[AIMessage]
    i: int = 0

    @property
    def _llm_type(self) -> str:
        return "script"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        out = self.answers[self.i % len(self.answers)].model_copy()  # a provider's answer is a new message
        self.i += 1
        return ChatResult(generations=[ChatGeneration(message=out)])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def call(name: str, n: int, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{n}"}],
                     usage_metadata={"input_tokens": 120, "output_tokens": 9, "total_tokens": 129})


CONVERSATION = [
    HumanMessage("Please refund order ord-001, it arrived broken"),
    call("transfer_to_billing", 0),
    ToolMessage("Transferred to billing.", tool_call_id="c0", name="transfer_to_billing"),
    call("lookup_order", 1, order_id="ord-001"),
    ToolMessage('{"amount": 40.0, "order_id": "ord-001", "status": "delivered"}', tool_call_id="c1",
                name="lookup_order"),
    AIMessage("Let me check the order."),
    HumanMessage("It is the blue one."),
    ToolMessage("ok", tool_call_id="c9", name="escalate"),
]


def transfer(tool_call_id: Annotated[str, InjectedToolCallId], state: Annotated[dict, InjectedState]) -> Command:
    """Hand the conversation to billing."""
    done = ToolMessage("Transferred.", tool_call_id=tool_call_id, name="transfer_to_billing")
    return Command(goto="billing", graph=Command.PARENT, update={"messages": [*state["messages"], done]})


def team() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        triage = create_react_agent(Chat(answers=[call("transfer_to_billing", 1)]),
                                    [tool("transfer_to_billing")(transfer)], name="triage")
        billing = create_react_agent(Chat(answers=[call("issue_refund", 2, order_id="ord-001"), AIMessage("Done.")]),
                                     [StructuredTool.from_function(issue_refund)], name="billing")
    g = StateGraph(MessagesState)
    g.add_node(triage, destinations=("billing",))
    g.add_node(billing)
    g.add_edge(START, "triage")
    g.add_edge("billing", END)
    return g.compile()


TOOL_CALL = {"name": "lookup_order", "args": {"order_id": "ord-001"}, "id": "c1", "type": "tool_call"}


def tool_calls(t: Any, n: int) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.thread_time_ns()
        t.invoke(TOOL_CALL)
        out.append(time.thread_time_ns() - t0)
    return out


def model_calls(model: Any, n: int) -> list[int]:
    out = []
    request = CONVERSATION
    for i in range(n):
        t0 = time.thread_time_ns()
        answer = model.invoke(request)
        out.append(time.thread_time_ns() - t0)
        # the next request, as a graph makes it: the conversation so far, this answer, its tool's
        # result; every fourth call a conversation starts again (8 to 14 messages a request)
        request = CONVERSATION if i % 4 == 3 else [
            *request, answer, ToolMessage('{"refunded": 40.0}', tool_call_id=f"r{i}", name="issue_refund")]
    return out


def runs(graph: Any, n: int) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.process_time_ns()
        graph.invoke({"messages": [HumanMessage("refund ord-001")]})
        out.append(time.process_time_ns() - t0)
    return out


integration._install_model_hook()
HOOKED: tuple[Any, Any] = (BaseChatModel._generate_with_cache, BaseChatModel._agenerate_with_cache)
ORIGINAL: tuple[Any, Any] = (HOOKED[0].__wrapped__, HOOKED[1].__wrapped__)


def timed(kind: str, target: Any, n: int, in_case: bool, instrumented: bool) -> float:
    """The median call of a batch of ``n`` (a run: per routed call, 4 of them)."""
    # the bare model: LangChain's own generate path, without the hook (installed for the class)
    hooks = HOOKED if instrumented or kind != "model" else ORIGINAL
    BaseChatModel._generate_with_cache, BaseChatModel._agenerate_with_cache = hooks  # type: ignore[method-assign]
    tokens = []
    if in_case:
        tokens.append((_CURRENT, _CURRENT.set(CaseRecorder(Case("bench", {})))))
        if kind != "run":  # what an instrumented graph's run sets around its calls (private: a benchmark)
            run = integration._Run(integration._Graph(team()), 0)
            tokens.append((integration._RUN, integration._RUN.set(run)))
    try:
        times = {"tool": tool_calls, "model": model_calls, "run": runs}[kind](target, n)
    finally:
        for var, token in reversed(tokens):
            var.reset(token)
        BaseChatModel._generate_with_cache, BaseChatModel._agenerate_with_cache = HOOKED  # type: ignore[method-assign]
    return statistics.median(times) / 1e9 / (4 if kind == "run" else 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", choices=("tool", "model", "run"), help="time only these calls")
    args = ap.parse_args()
    bare_tool, routed_tool = tools()[0], tools()[0]
    integration._route_tool(routed_tool)
    model = Chat(answers=[call("issue_refund", 2, order_id="ord-001")]).bind_tools(tools())
    pairs = {"tool": (bare_tool, routed_tool), "model": (model, model), "run": (team(), integration.instrument(team()))}
    for kind, (b, r) in pairs.items():  # warm up: imports, caches, LangChain's first-call work
        for where in (False, True):
            timed(kind, b, 20, where, False)
            timed(kind, r, 20, where, True)
    gc.collect()
    print(f"{'call':6s} {'where':8s} {'bare µs':>9s} {'instrumented µs':>16s} {'overhead µs (median [min, max])':>34s}")
    for kind, (b, r) in pairs.items():
        if args.only and kind != args.only:
            continue
        n = args.calls if kind != "run" else max(20, args.calls // 10)
        for where in (True, False):
            diffs, bares, ours = [], [], []
            for i in range(args.rounds):
                if i % 2 == 0:
                    tb, tr = timed(kind, b, n, where, False), timed(kind, r, n, where, True)
                else:
                    tr, tb = timed(kind, r, n, where, True), timed(kind, b, n, where, False)
                bares.append(tb * 1e6)
                ours.append(tr * 1e6)
                diffs.append((tr - tb) * 1e6)
            print(f"{kind:6s} {'in case' if where else 'outside':8s} {statistics.median(bares):9.1f} "
                  f"{statistics.median(ours):16.1f} {statistics.median(diffs):12.1f} "
                  f"[{min(diffs):.1f}, {max(diffs):.1f}]")


if __name__ == "__main__":
    main()
