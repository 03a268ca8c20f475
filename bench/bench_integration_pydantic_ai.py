"""What ``oloproof.integrations.pydantic_ai.instrument`` adds to every tool call and model
request of a Pydantic AI agent (issue 25's target: at most 25 µs per call).

Two agents built alike on Pydantic AI's offline ``FunctionModel`` — ``bare`` and
``instrumented`` (the only difference) — each run ``--runs`` times per round on a prompt
that makes the model call a tool ``--tools`` times (a lookup of ~500 bytes of JSON each) and
then answer: ``2 * tools + 1`` routed calls per run (``tools`` tool calls, ``tools + 1``
model requests). Per call = (instrumented − bare) / calls, two ways:

* **in case** — each run inside a case: a ``CaseRecorder`` in the context variable, as
  ``oloproof run`` sets it, and (``Stateful``) a snapshot before each tool call; the
  recorder does its real work — a ``tool_call``/``tool_result`` per tool call, a
  ``decision`` per model request (the request's messages and the response encoded as
  Pydantic AI's JSON, on the tape), model usage — everything but the case's events being
  committed when it ends;
* **outside** — no case running: the capability is there and declines to wrap anything.

Times are the CPU time of the thread that runs the agent (``time.thread_time_ns``: the
event loop, so every hook, wrapper and recorder call; the sync tool functions Pydantic AI
runs in worker threads are the same in both agents): on a machine shared with other work,
wall-clock differences of a few µs per call drown in the scheduler's noise, CPU time much
less. Each round runs the conditions interleaved (bare, instrumented, bare, …: neighbours are
milliseconds apart, so a busy machine moves both alike); a round's figure is the median of
the per-pair differences. Reported: the median and range over rounds. A run of the bare
agent takes milliseconds, so on a shared machine these differences are noisy; a third,
steadier figure:

* **own** — inside a case, the time spent in the integration's own code per call: the
  recorder's work around each routed call (its steps, the checkpoint's snapshot, the
  codec encoding the response) and the encoding of each request, timed around them (the
  framework's own work inside each call subtracted). What it leaves out — Pydantic AI
  entering the wrapper model and wrapper toolset it is given, and handing every hook of the
  run through the recording capability that wraps the root one — is in the end-to-end figure.

    python bench/bench_integration_pydantic_ai.py [--tools 5] [--runs 40] [--rounds 7]   (about 20 s)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from oloproof.integrations.pydantic_ai import instrument
from oloproof.recorder.case import CaseRecorder
from oloproof.records import Case
from oloproof.system import _CURRENT

STATE = {"orders": {f"ORD-{k:04d}": {"status": "delivered", "total": 49.9 + k} for k in range(20)}}


def make_agent(tools: int, routed: bool) -> Agent[None, str]:
    def policy(messages: list[Any], info: Any) -> ModelResponse:
        done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
        if done < tools:
            return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": f"ORD-{done:04d}"},
                                                     tool_call_id=f"call-{done}")])
        return ModelResponse(parts=[TextPart(f"Looked up {done} orders; all delivered.")])

    agent: Agent[None, str] = Agent(FunctionModel(policy, model_name="policy"), name="desk")

    @agent.tool_plain
    def lookup_order(order_id: str) -> dict[str, Any]:
        """An order with its items (~500 bytes of JSON)."""
        return {"order_id": order_id, **STATE["orders"][order_id],
                "items": [{"sku": f"SKU-{j:05d}", "qty": 1 + j, "price": 12.5 * (j + 1), "name": "a boxed item"}
                          for j in range(5)],
                "notes": "Delivered to the front door; signed for by the customer."}

    return instrument(agent) if routed else agent


def one_run(agent: Agent[None, str], in_case: bool) -> int:
    """One run of ``agent``; the ns it took (inside a case when ``in_case``)."""
    token = None
    if in_case:
        rec = CaseRecorder(Case("bench", {"prompt": "look"}), snapshot=lambda: STATE, auto_checkpoints=True)
        token = _CURRENT.set(rec)
    try:
        t0 = time.thread_time_ns()
        agent.run_sync("look the orders up")
        return time.thread_time_ns() - t0
    finally:
        if token is not None:
            _CURRENT.reset(token)


class OwnTime:
    """Times the integration's own code around each routed call (see the module)."""

    def __init__(self) -> None:
        import oloproof.integrations.pydantic_ai as integration

        self.ns = 0
        self.calls = 0
        self.integration = integration
        route, request = integration.aroute, integration._request

        async def timed_route(name: str, fn: Any, args: tuple = (), kwargs: dict | None = None, **kw: Any) -> Any:
            inner = 0

            async def framework(*a: Any, **k: Any) -> Any:
                nonlocal inner
                t = time.thread_time_ns()
                try:
                    return await fn(*a, **k)
                finally:
                    inner += time.thread_time_ns() - t

            t0 = time.thread_time_ns()
            try:
                return await route(name, framework, args, kwargs, **kw)
            finally:
                self.ns += time.thread_time_ns() - t0 - inner
                self.calls += 1

        def timed_request(*a: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return request(*a)
            finally:
                self.ns += time.thread_time_ns() - t0

        self.patched = (timed_route, timed_request)
        self.original = (route, request)

    def __enter__(self) -> OwnTime:
        self.integration.aroute, self.integration._request = self.patched
        return self

    def __exit__(self, *exc: Any) -> None:
        self.integration.aroute, self.integration._request = self.original


def round_(bare: Agent[None, str], routed: Agent[None, str], runs: int, in_case: bool, calls: int) -> float:
    """The median per-call difference (µs) of ``runs`` neighbouring pairs."""
    diffs = []
    gc.disable()
    try:
        for _ in range(runs):
            a = one_run(bare, in_case)
            b = one_run(routed, in_case)
            diffs.append((b - a) / calls / 1000)
    finally:
        gc.enable()
        gc.collect()
    return statistics.median(diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=5, help="tool calls per run")
    parser.add_argument("--runs", type=int, default=40, help="runs per condition and round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    calls = 2 * args.tools + 1
    bare, routed = make_agent(args.tools, False), make_agent(args.tools, True)
    for agent in (bare, routed):  # warm: schemas, validators, the event loop
        one_run(agent, True)
        one_run(agent, False)
    base = statistics.median(one_run(bare, False) for _ in range(args.runs)) / calls / 1000
    print(f"bare agent: {base:.1f} µs per call ({calls} calls a run: {args.tools} tool calls, "
          f"{args.tools + 1} model requests)")
    for label, in_case in (("in case", True), ("outside", False)):
        figures = [round_(bare, routed, args.runs, in_case, calls) for _ in range(args.rounds)]
        print(f"{label:8s} overhead per call: median {statistics.median(figures):6.1f} µs, "
              f"range [{min(figures):.1f}, {max(figures):.1f}] over {args.rounds} rounds")
    own = []
    for _ in range(args.rounds):
        with OwnTime() as timer:
            for _ in range(args.runs):
                one_run(routed, True)
        assert timer.calls == calls * args.runs, timer.calls
        own.append(timer.ns / timer.calls / 1000)
    print(f"own      time per call:     median {statistics.median(own):6.1f} µs, "
          f"range [{min(own):.1f}, {max(own):.1f}] over {args.rounds} rounds (inside a case)")


if __name__ == "__main__":
    main()
