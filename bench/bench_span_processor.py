"""What ``oloproof.otel.OloproofSpanProcessor`` adds to every span (issue 15's target: at
most 20 µs per span).

Two ``TracerProvider``s in one process: ``baseline`` has no span processor (the SDK still
builds, times and ends every span), ``processor`` has an ``OloproofSpanProcessor`` — the only
difference. One function makes the spans for both, with the shapes of GenAI instrumentation
(attributes set at start, the response's set just before the end, as instrumentations do):

* ``tool``: ``execute_tool`` spans — ``gen_ai.operation.name``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments`` (JSON, ~200 bytes) and
  ``gen_ai.tool.call.result`` (JSON, ~500 bytes);
* ``chat``: model spans — request model and parameters, ``gen_ai.input.messages`` and
  ``gen_ai.output.messages`` (JSON, ~1 KB each), response id and model, usage tokens;
* ``http``: non-GenAI spans (an HTTP client call: method, URL, status, server address);
* ``mix``: a realistic agent turn, repeated: chat, tool, http, tool, http;

each series under one ``invoke_agent`` parent span per case (its start, its answer → the
``final`` step: counted in, spread over the case's spans). Inside a case they run in a real
``oloproof run`` (in this process: ``oloproof.cli``, serial executor, a fresh log per run,
``durability: full``), so the processor does its real work: a ``tool_call`` and a
``tool_result`` step per tool span, a ``decision`` step and a usage report per chat span,
recorded into the case. ``outside``: the ``mix`` spans made with no case running (the
processor only looks at the context variable).

Two measures, each round taking every kind in turn, median and range over the rounds:

1. **in case** — the time the agent's code spends making the spans (first span started to
   last span ended, timed inside ``run(case)``), per span: what the processor costs the
   traced code itself. One run per kind whose cases take the two providers in turn
   (baseline, processor, baseline, …: neighbours are milliseconds apart, so a busy machine
   moves both alike); a round's figures are the median case of each provider and the
   median difference of neighbouring cases (a collection or a scheduler hiccup landing in
   one case moves neither). ``outside`` alternates the same way, with no case running.
   ``alone``: a third kind of case in the same turn hands the spans the SDK made for that
   kind (kept once) straight to an ``OloproofSpanProcessor``'s ``on_start`` and ``on_end`` —
   the processor's own cost with no SDK around it (the least noisy figure);
2. **end to end** — a whole ``oloproof run`` per provider (baseline run, then processor
   run), per span, with the log on disk and on tmpfs (/dev/shm: fsync free, only software
   cost shows): adds what the steps the processor recorded cost when the case ends (their
   events encoded, committed, judged), and every collection and hiccup. The run's fixed
   start-up is in both and cancels out in the difference, with more noise.

    python bench/bench_span_processor.py [--spans 2000] [--per-case 100] [--rounds 5]   (under a minute)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind

from oloproof.otel import OloproofSpanProcessor

KINDS = ("tool", "chat", "http", "mix")
MIX = ("chat", "tool", "http", "tool", "http")

# ---- the spans -------------------------------------------------------------------------------


def _tool_payloads(k: int) -> tuple[str, str]:
    args = json.dumps({"order_id": f"ORD-{k:06d}", "customer_id": f"cus_{k:08x}", "reason": "item arrived damaged",
                       "amount": {"value": 49.9 + k % 7, "currency": "EUR"}, "notify": True,
                       "channel": "email", "idempotency_key": f"refund-{k:06d}-a1b2c3d4"})
    result = json.dumps({"ok": True, "order": {"id": f"ORD-{k:06d}", "status": "refunded", "placed": "2026-03-01",
                                               "items": [{"sku": f"SKU-{k + j:05d}", "qty": 1 + j,
                                                          "price": 12.5 * (j + 1)}
                                                         for j in range(3)]},
                         "refund": {"id": f"re_{k:012x}", "amount": 49.9, "currency": "EUR", "state": "succeeded",
                                    "created": "2026-03-02T10:11:12Z"},
                         "notes": "Refund issued to the original payment method; the customer was notified by "
                                  "email and the ticket was closed automatically."})
    return args, result


def _chat_payloads(k: int) -> tuple[str, str]:
    inp = json.dumps([
        {"role": "system", "parts": [{"type": "text", "content": "You are the support desk of an online shop. "
                                      "Look orders up before acting, refund delivered orders that arrived damaged, "
                                      "never refund twice, and answer the customer in one short paragraph."}]},
        {"role": "user", "parts": [{"type": "text", "content": f"Hello, my order ORD-{k:06d} arrived damaged, "
                                    "the box was crushed and two items are broken. I would like a refund please. "
                                    "I have photos of the box and of the broken items if you need them, and I "
                                    "still have the delivery note. I paid by card."}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "Let me look your order up first."}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": f"call_{k:08x}", "name": "lookup_order",
                                         "arguments": {"order_id": f"ORD-{k:06d}"}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{k:08x}",
                                    "response": {"order_id": f"ORD-{k:06d}", "status": "delivered",
                                                 "total": 49.9, "currency": "EUR"}}]}])
    out = json.dumps([{"role": "assistant", "finish_reason": "stop", "parts": [
        {"type": "text", "content": f"I am sorry your order ORD-{k:06d} arrived damaged. I have looked it up: it "
                                    "was delivered on 1 March and the box was clearly mishandled in transit. "
                                    "I have issued a full refund of 49.90 EUR to your original payment method; "
                                    "you will receive a confirmation email shortly and the money should appear "
                                    "on your statement within five to seven working days. There is no need to "
                                    "send the broken items back. Is there anything else I can help you with? "
                                    "Thank you for your patience, and again, apologies for the trouble caused. "
                                    + "Kind regards, the support desk. " * 12}]}])
    return inp, out


VARIANTS = 16
TOOLS = [_tool_payloads(k) for k in range(VARIANTS)]
CHATS = [_chat_payloads(k) for k in range(VARIANTS)]
ANSWER = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Refunded 49.90 EUR."}]}])


def emit(tracer, kind: str, n: int) -> int:
    """Make ``n`` spans of ``kind`` under one ``invoke_agent`` span; the ns it took."""
    kinds = MIX if kind == "mix" else (kind,)
    start_span = tracer.start_as_current_span
    t0 = time.perf_counter_ns()
    with start_span("invoke_agent support", kind=SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
            "gen_ai.system": "openai"}) as agent:
        for i in range(n):
            what = kinds[i % len(kinds)]
            if what == "tool":
                args, result = TOOLS[i % VARIANTS]
                with start_span("execute_tool issue_refund", kind=SpanKind.INTERNAL, attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "issue_refund",
                        "gen_ai.tool.call.id": f"call_{i}", "gen_ai.tool.type": "function",
                        "gen_ai.tool.call.arguments": args}) as span:
                    span.set_attribute("gen_ai.tool.call.result", result)
            elif what == "chat":
                messages, output = CHATS[i % VARIANTS]
                with start_span("chat gpt-4o", kind=SpanKind.CLIENT, attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                        "gen_ai.request.model": "gpt-4o", "gen_ai.request.temperature": 0.2,
                        "gen_ai.request.max_tokens": 1024, "server.address": "api.openai.com",
                        "gen_ai.input.messages": messages}) as span:
                    span.set_attributes({"gen_ai.output.messages": output, "gen_ai.response.id": f"chatcmpl-{i}",
                                         "gen_ai.response.model": "gpt-4o-2024-08-06",
                                         "gen_ai.response.finish_reasons": ("stop",),
                                         "gen_ai.usage.input_tokens": 812 + i % 50,
                                         "gen_ai.usage.output_tokens": 96 + i % 20})
            else:
                with start_span("GET", kind=SpanKind.CLIENT, attributes={
                        "http.request.method": "GET", "url.full": f"https://orders.internal/api/v1/orders/ORD-{i:06d}",
                        "server.address": "orders.internal", "server.port": 443,
                        "network.protocol.version": "1.1"}) as span:
                    span.set_attribute("http.response.status_code", 200)
        agent.set_attribute("gen_ai.output.messages", ANSWER)
    return time.perf_counter_ns() - t0


class _Keep(SpanProcessor):
    """Keeps what a span processor is handed, in order: ``(False, span)`` at its start (the
    live span), ``(True, span)`` at its end (the ended span)."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, object]] = []

    def on_start(self, span, parent_context=None) -> None:
        self.calls.append((False, span))

    def on_end(self, span) -> None:
        self.calls.append((True, span))


def recorded_calls(kind: str, n: int) -> list[tuple[bool, object]]:
    provider = TracerProvider()
    keep = _Keep()
    provider.add_span_processor(keep)
    emit(provider.get_tracer("bench"), kind, n)
    return keep.calls


def alone(kind: str, n: int) -> int:
    """Hand the spans ``emit`` made (kept once) straight to a processor's ``on_start`` and
    ``on_end``, in their order; the ns it took — the processor's own cost, no SDK around it."""
    calls = SINK.calls.get((kind, n))
    if calls is None:
        calls = SINK.calls[(kind, n)] = recorded_calls(kind, n)
    on_start, on_end = SINK.alone.on_start, SINK.alone.on_end
    t0 = time.perf_counter_ns()
    for ended, span in calls:
        if ended:
            on_end(span)
        else:
            on_start(span)
    return time.perf_counter_ns() - t0


def make(which: str, kind: str, n: int) -> int:
    """``n`` spans of ``kind``: made on the ``baseline`` or the ``processor`` provider, or
    handed to the processor ``alone``; the ns it took."""
    return alone(kind, n) if which == "alone" else emit(SINK.tracers[which], kind, n)


# ---- the project -----------------------------------------------------------------------------

#: what the project's module and this script share (a module of its own: the run reloads app.py)
SINK = types.ModuleType("_oloproof_bench_sink")
SINK.make = make
SINK.times = []
SINK.tracers = {}
SINK.calls = {}
SINK.alone = OloproofSpanProcessor()
sys.modules[SINK.__name__] = SINK

APP = '''
import _oloproof_bench_sink as SINK

from oloproof import system


@system(name="otel-bench", version="1", records=["agent_trajectory/v1"])
def run(case):
    which = case.input["with"]
    SINK.times.append((which, SINK.make(which, case.input["kind"], case.input["spans"])))
    return {"answer": "ok"}
'''

CONFIG = """system: {name: otel-bench, version: "1", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
"""


def make_project(folder: Path) -> Path:
    """The project: its system makes the spans its case asks for (cases.jsonl: written per run)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP)
    (folder / "oloproof.yaml").write_text(CONFIG)
    return folder


def write_cases(folder: Path, kind: str, plan: list[str], per_case: int) -> int:
    """The run's cases, one per entry of ``plan`` (the provider it uses), each making
    ``per_case`` spans of ``kind``; how many spans in all."""
    with (folder / "cases.jsonl").open("w") as f:
        for c, which in enumerate(plan):
            f.write(json.dumps({"id": f"{kind}-{c:04d}", "input": {"kind": kind, "with": which,
                                                                   "spans": per_case}}) + "\n")
    return len(plan) * per_case


def run_once(folder: Path, db: Path) -> float:
    """One ``oloproof run`` in this process on a fresh log; its wall time."""
    from click.testing import CliRunner

    from oloproof.cli.main import cli

    for p in db.parent.glob(db.name + "*"):
        p.unlink()
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        t0 = time.perf_counter()
        r = CliRunner().invoke(cli, ["run", "--db", str(db)], catch_exceptions=False)
        elapsed = time.perf_counter() - t0
    finally:
        os.chdir(cwd)
    if r.exit_code != 0 or "errored" in r.output:
        raise SystemExit(f"oloproof run failed ({r.exit_code}):\n{r.output}")
    return elapsed


def check_recorded(db: Path, kind: str, per_case: int) -> None:
    """The processor did its real work: the case's steps are in the log."""
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(db, readonly=True)
    view = next(iter(iter_case_views(store, latest_run_id(store))))
    store.close()
    made = [MIX[i % len(MIX)] if kind == "mix" else kind for i in range(per_case)]
    want = 2 * made.count("tool") + made.count("chat") + 1
    steps = view.trajectory.steps
    if len(steps) != want or steps[-1].kind != "final" or len(view.usage) != made.count("chat"):
        raise SystemExit(f"{kind}: expected {want} steps ending with final and {made.count('chat')} usage reports, "
                         f"the log holds {len(steps)} and {len(view.usage)}")


# ---- the measure -----------------------------------------------------------------------------


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):6.1f} [{min(xs):5.1f}, {max(xs):5.1f}]"


def paired(times: list[tuple[str, int]], spans: int) -> tuple[float, float, float, float]:
    """Baseline, processor (and processor alone) cases taken in turn: the median of each (µs
    per span), and the median of the differences of neighbouring baseline/processor pairs."""
    us = {w: [ns / 1e3 / spans for which, ns in times if which == w] for w in ("baseline", "processor", "alone")}
    base, proc = us["baseline"], us["processor"]
    return (statistics.median(base), statistics.median(proc), statistics.median(p - b for b, p in zip(base, proc)),
            statistics.median(us["alone"]) if us["alone"] else float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=2000,
                    help="spans of each kind per provider per run (and outside a case)")
    ap.add_argument("--per-case", type=int, default=100, help="spans per case")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    per_case = min(args.per_case, args.spans)
    cases = max(2, args.spans // per_case)
    whiches = ("baseline", "processor")
    order = ("baseline", "processor", "alone")

    plain = TracerProvider()
    traced = TracerProvider()
    traced.add_span_processor(OloproofSpanProcessor())
    SINK.tracers.update(baseline=plain.get_tracer("bench"), processor=traced.get_tracer("bench"))

    places = {"disk": Path(tempfile.gettempdir())}
    if Path("/dev/shm").is_dir():
        places["tmpfs"] = Path("/dev/shm")
    dirs = {name: Path(tempfile.mkdtemp(prefix="oloproof-bench-otel-", dir=where)) for name, where in places.items()}
    project = make_project(Path(tempfile.mkdtemp(prefix="oloproof-bench-otel-project-")))
    try:
        print(f"{cases * per_case:,} spans of each kind per provider per run, {per_case} a case; {args.rounds} "
              f"interleaved rounds; logs on {', '.join(f'{n} ({d})' for n, d in dirs.items())}; "
              f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        # warm up: imports, bytecode, the first run's one-off costs; and check the real work
        for kind in KINDS:
            for which in ("processor", "alone"):
                write_cases(project, kind, [which], per_case)
                run_once(project, dirs["disk"] / "warm.db")
                check_recorded(dirs["disk"] / "warm.db", kind, per_case)
        for which in order:
            make(which, "mix", per_case)

        in_case: dict[str, list[tuple[float, float, float, float]]] = {}
        e2e: dict[tuple[str, str, str], list[float]] = {}
        started = time.perf_counter()
        for _ in range(args.rounds):
            for kind in KINDS:
                # in case: one run, its cases taking the providers (and the processor alone) in turn
                write_cases(project, kind, [order[c % 3] for c in range(3 * cases)], per_case)
                SINK.times.clear()
                run_once(project, dirs[next(iter(dirs))] / "log.db")
                in_case.setdefault(kind, []).append(paired(SINK.times, per_case))
                # end to end: a run on each provider, on each log location
                for place, d in dirs.items():
                    for which in whiches:
                        spans = write_cases(project, kind, [which] * cases, per_case)
                        wall = run_once(project, d / "log.db")
                        e2e.setdefault((kind, which, place), []).append(wall * 1e6 / spans)
            times = [(order[c % 3], make(order[c % 3], "mix", per_case)) for c in range(3 * cases)]
            in_case.setdefault("outside", []).append(paired(times, per_case))
            gc.collect()
        took = time.perf_counter() - started

        print(f"\nµs per span: median [min, max] over {args.rounds} rounds; added = processor − baseline")
        head = f"{'kind':8s} {'baseline':>20s} {'processor':>20s} {'added':>20s}"
        print("\nin case (the traced code's own time; a round: the median case of each provider, the median "
              "difference of neighbouring cases; alone: the processor's on_start + on_end only)\n"
              + head + f" {'alone':>20s}")
        worst = 0.0
        for kind in KINDS + ("outside",):
            base, proc, added, by_itself = zip(*in_case[kind])
            worst = max(worst, statistics.median(added))
            print(f"{kind:8s} {spread(base):>20s} {spread(proc):>20s} {spread(added):>20s} {spread(by_itself):>20s}")
        for place in dirs:
            print(f"\nend to end (the whole oloproof run, log on {place})\n" + head)
            for kind in KINDS:
                base, proc = e2e[(kind, "baseline", place)], e2e[(kind, "processor", place)]
                added = [p - b for p, b in zip(proc, base)]
                print(f"{kind:8s} {spread(base):>20s} {spread(proc):>20s} {spread(added):>20s}")
        verdict = "within" if worst <= 20 else "OVER"
        print(f"\nworst median added in case: {worst:.1f} µs per span — {verdict} the 20 µs target "
              f"(measured in {took:.0f} s)")
    finally:
        shutil.rmtree(project, ignore_errors=True)
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
