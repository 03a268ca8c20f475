"""What ``oloproof import otel`` costs against the raw parse of the same file (issue 15's target:
10,000 traces of about 20 spans at 2,000 traces/s or more, memory flat).

A generated OTLP JSON file (the Collector's file-exporter format: one ExportTraceServiceRequest
per line, 100 traces a line, hex ids): each trace an ``invoke_agent`` span with a chat span,
eight tool spans (arguments and results as JSON text), one unmapped span, nine HTTP spans,
usage and output messages — 20 spans. Interleaved rounds (each round times every measure once,
in turn); median and range of each:

1. ``json``: ``json.loads`` of every line, as the interpreter runs it by default — the floor
   any importer pays, and the baseline of the ratios; ``json (gc off)``: the same with the
   cyclic garbage collector paused, as the importer runs (for a fair reading of the ratio);
2. ``import disk`` / ``import tmpfs``: :func:`oloproof.app.otel.import_traces` into a fresh
   log (durability full) on disk and on /dev/shm (fsync free: only software cost shows) —
   everything: both passes over the file, validation, mapping, the events encoded, decoded
   back and chained, the projection rows, the seal, in one transaction.

Memory: the peak resident size of a fresh process importing 2,000 and 10,000 traces (and
the peak of Python allocations, tracemalloc) — flat means the second is not 5× the first.

    python bench/bench_import.py [--traces 10000] [--rounds 5]     (about 2 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _attr(key: str, value: object) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def trace_spans(n: int) -> list[dict]:
    trace = f"{n:032x}"
    root = f"{n:08x}{0:08x}"
    t0 = 1_700_000_000_000_000_000 + n * 10**9
    spans = [{"traceId": trace, "spanId": root, "name": "invoke_agent support", "kind": 1,
              "startTimeUnixNano": str(t0), "endTimeUnixNano": str(t0 + 10**8), "attributes": [
                  _attr("gen_ai.operation.name", "invoke_agent"), _attr("gen_ai.agent.name", "support"),
                  _attr("gen_ai.input.messages", json.dumps([{"role": "user", "content": f"refund ORD-{n}"}])),
                  _attr("gen_ai.output.messages",
                        json.dumps([{"role": "assistant", "content": "Refunded 20.00 EUR"}]))],
              "status": {}}]
    kids = [("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
                      "gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 20})]
    for k in range(8):
        kids.append((f"execute_tool tool_{k}", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool_{k}",
            "gen_ai.tool.call.arguments": json.dumps({"order_id": f"ORD-{n}", "k": k}),
            "gen_ai.tool.call.result": json.dumps({"ok": True, "amount": 20.0 + k})}))
    kids.append(("db.query", {"db.system": "postgresql"}))
    for i, (name, attrs) in enumerate(kids, start=1):
        start = t0 + i * 10**6
        spans.append({"traceId": trace, "spanId": f"{n:08x}{i:08x}", "parentSpanId": root, "name": name, "kind": 1,
                      "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 5 * 10**5),
                      "attributes": [_attr(k, v) for k, v in attrs.items()], "status": {}})
    # 10 more small spans under the first tool call: 20 spans a trace
    for j in range(9):
        start = t0 + (20 + j) * 10**6
        spans.append({"traceId": trace, "spanId": f"{n:08x}{100 + j:08x}", "parentSpanId": f"{n:08x}{2:08x}",
                      "name": f"http.get {j}", "kind": 3, "startTimeUnixNano": str(start),
                      "endTimeUnixNano": str(start + 1000), "attributes": [_attr("http.status_code", 200)],
                      "status": {}})
    return spans


def make_file(path: Path, traces: int, per_line: int = 100) -> int:
    spans = 0
    resource = {"attributes": [_attr("service.name", "support"), _attr("service.version", "1")]}
    with path.open("w") as f:
        # traces numbered from 1: an all-zero trace id is no trace id (OTLP), and the importer refuses it
        for start in range(1, traces + 1, per_line):
            batch = [s for n in range(start, min(traces + 1, start + per_line)) for s in trace_spans(n)]
            spans += len(batch)
            f.write(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "bench"}, "spans": batch}]}]}) + "\n")
    return spans


def t_json(path: Path, collect: bool = True) -> float:
    import gc

    enabled = gc.isenabled()
    if not collect:
        gc.disable()
    try:
        start = time.perf_counter()
        with path.open("rb") as f:
            for line in f:
                json.loads(line)
        return time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


def t_import(path: Path, where: Path) -> float:
    from oloproof.app.otel import import_traces
    from oloproof.store import SQLiteStore

    with tempfile.TemporaryDirectory(dir=where) as d:
        store = SQLiteStore(Path(d) / "log.db")
        start = time.perf_counter()
        out = import_traces(store, [path], clock=lambda: "2026-12-01T00:00:00Z")
        elapsed = time.perf_counter() - start
        assert out.spans == 20 * out.cases, out  # every span read, every trace a case
        store.close()
    return elapsed


_MEMORY = """
import resource, sys, tempfile, tracemalloc
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from oloproof.app.otel import import_traces
from oloproof.store import SQLiteStore
with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:
    store = SQLiteStore(Path(d) / "log.db")
    if sys.argv[4] == "trace":
        tracemalloc.start()
    import_traces(store, [Path(sys.argv[1])], clock=lambda: "2026-12-01T00:00:00Z")
    peak = tracemalloc.get_traced_memory()[1] if sys.argv[4] == "trace" else 0
    store.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, peak)
"""


def memory(path: Path, where: Path, how: str) -> int:
    """Peak resident bytes (``rss``) or peak Python allocations (``trace``) of a fresh process
    importing ``path``."""
    import subprocess

    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", _MEMORY, str(path), str(where), root, how],
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]) if how == "rss" else int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    places = {"disk": Path(tempfile.gettempdir())}
    if Path("/dev/shm").is_dir():
        places["tmpfs"] = Path("/dev/shm")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "traces.jsonl"
        spans = make_file(path, args.traces)
        small = Path(d) / "small.jsonl"
        make_file(small, max(1, args.traces // 5))
        print(f"{args.traces:,} traces, {spans:,} spans, {path.stat().st_size / 1e6:.1f} MB; "
              f"{args.rounds} interleaved rounds; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        samples: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            samples.setdefault("json", []).append(t_json(path))
            samples.setdefault("json (gc off)", []).append(t_json(path, collect=False))
            for name, where in places.items():
                samples.setdefault(f"import {name}", []).append(t_import(path, where))
        base = statistics.median(samples["json"])
        for name, xs in samples.items():
            m = statistics.median(xs)
            print(f"{name:14s} median {m:7.3f} s  [{min(xs):.3f}, {max(xs):.3f}]  "
                  f"{args.traces / m:9,.0f} traces/s  {m / base:5.2f}× json")
        where = places.get("tmpfs", places["disk"])
        for how, label in (("rss", "peak resident size"), ("trace", "peak Python allocations")):
            a, b = memory(small, where, how), memory(path, where, how)
            print(f"{label} of an import: {a / 1e6:.0f} MB at {args.traces // 5:,} traces, "
                  f"{b / 1e6:.0f} MB at {args.traces:,} ({b / max(a, 1):.2f}×)")


if __name__ == "__main__":
    main()
