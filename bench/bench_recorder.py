"""Recorder overhead: a @tool-wrapped call inside a case vs the bare call (issue #2).

Targets: ≤ 5 µs more than the bare call (median over ≥ 100k calls) for call + result events;
a hand-built AgentStep ≤ 2 µs. The floor is a wrapper that builds two msgspec structs and
appends them to a list, measured in the same run.

    python bench/bench_recorder.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import msgspec

from oloproof import AgentStep, Case, tool
from oloproof.recorder.case import CaseRecorder
from oloproof.system import _CURRENT

BATCH = 1000


def lookup_order(order_id, verbose=False):
    return {"order_id": order_id, "status": "delivered"}


recorded = tool(lookup_order)


class Floor(msgspec.Struct):
    index: int
    kind: str
    tool_name: str
    arguments: object = None
    result: object = None


def floor_wrapper(steps):
    def wrapper(*args, **kwargs):
        steps.append(Floor(len(steps) + 1, "tool_call", "lookup_order", {"order_id": args[0]}))
        result = lookup_order(*args, **kwargs)
        steps.append(Floor(len(steps) + 1, "tool_result", "lookup_order", None, result))
        return result
    return wrapper


def per_call(fn, calls: int, fresh=None) -> float:
    """Median seconds per call over batches of BATCH calls."""
    samples = []
    for _ in range(calls // BATCH):
        if fresh:
            fresh()
        t0 = time.perf_counter_ns()
        for _ in range(BATCH):
            fn("ord-042")
        samples.append((time.perf_counter_ns() - t0) / BATCH)
    return statistics.median(samples) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()
    n = args.calls

    bare = per_call(lookup_order, n)

    steps: list = []
    floor = per_call(floor_wrapper(steps), n, fresh=steps.clear)

    holder = {}

    def fresh_case():
        if "token" in holder:
            _CURRENT.reset(holder["token"])
        holder["token"] = _CURRENT.set(CaseRecorder(Case("bench", {})))

    wrapped = per_call(recorded, n, fresh=fresh_case)
    _CURRENT.reset(holder["token"])
    outside = per_call(recorded, n)

    samples = []
    for _ in range(n // BATCH):
        t0 = time.perf_counter_ns()
        for i in range(BATCH):
            AgentStep(i + 1, "tool_call", tool_name="lookup_order", arguments={"order_id": "ord-042"})
        samples.append((time.perf_counter_ns() - t0) / BATCH)
    step = statistics.median(samples) / 1e9

    us = 1e6
    print(f"calls per measurement: {n} (median of batches of {BATCH})")
    print(f"bare call                        {bare * us:7.3f} µs")
    print(f"floor (2 structs + list append)  {floor * us:7.3f} µs  (+{(floor - bare) * us:.3f} µs)")
    print(f"@tool inside a case              {wrapped * us:7.3f} µs  (+{(wrapped - bare) * us:.3f} µs; target ≤ +5 µs)")
    print(f"@tool outside a case             {outside * us:7.3f} µs  (+{(outside - bare) * us:.3f} µs)")
    print(f"AgentStep built by hand          {step * us:7.3f} µs  (target ≤ 2 µs)")


if __name__ == "__main__":
    main()
