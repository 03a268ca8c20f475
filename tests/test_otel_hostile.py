"""Hostile OpenTelemetry input (issue 15's attack): JSON nested thousands of levels deep in an
attribute, trace chains tens of thousands of spans deep, a span processor registered twice,
control characters in the traces' names, all-zero ids — refused with a located error (exit 2)
or read as they are, never an internal error, a wrong trajectory or a forged line of output."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from oloproof.config import otlp
from tests.conftest import write

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
DEEP = 3000


def attr(key: str, value: object) -> dict:
    return {"key": key, "value": value if isinstance(value, dict) else {"stringValue": value}}


def span(k: int, *attrs: dict, name: str = "execute_tool t", parent: int | None = None, trace: str = TRACE) -> dict:
    out = {"traceId": trace, "spanId": f"{k:016x}", "name": name, "startTimeUnixNano": str(1000 + k),
           "endTimeUnixNano": str(10**9 - k), "attributes": list(attrs)}
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def request(*spans: dict, service: str | None = None) -> str:
    rs: dict = {"scopeSpans": [{"spans": list(spans)}]}
    if service is not None:
        rs["resource"] = {"attributes": [attr("service.name", service)]}
    return json.dumps({"resourceSpans": [rs]})


def trace_file(tmp_path: Path, *lines: str, name: str = "t.jsonl") -> Path:
    return write(tmp_path / name, "".join(line + "\n" for line in lines))


def views(p: Path):
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    try:
        return sorted(iter_case_views(store, latest_run_id(store)), key=lambda v: v.position)
    finally:
        store.close()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


TOOL = attr("gen_ai.operation.name", "execute_tool")


# ---- 1. deep JSON in an attribute ---------------------------------------------------------------

@pytest.mark.parametrize("depth", [DEEP, 200])
def test_json_text_too_deep_to_be_a_recorded_value_is_kept_as_the_text(cli, tmp_path, depth):
    deep = nested(depth)
    agent = span(1, attr("gen_ai.operation.name", "invoke_agent"), attr("gen_ai.input.messages", deep),
                 attr("gen_ai.output.messages", deep), name="invoke_agent a")
    tool = span(2, TOOL, attr("gen_ai.tool.call.arguments", deep), attr("gen_ai.tool.call.result", deep), parent=1)
    chat = span(3, attr("gen_ai.operation.name", "chat"), attr("gen_ai.input.messages", deep),
                attr("gen_ai.output.messages", deep), parent=1)
    other = span(4, attr("x", deep), name="other", parent=1)
    r = cli("import", "otel", str(trace_file(tmp_path, request(agent, tool, chat, other))), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    [case] = views(tmp_path)
    steps = case.trajectory.steps
    assert [s.kind for s in steps] == ["tool_call", "tool_result", "decision", "final"]
    assert steps[0].arguments == deep and steps[1].result == deep
    assert steps[2].arguments == {"messages": deep} and steps[2].result == deep
    assert steps[3].result == deep and case.input["messages"] == deep


def test_json_text_within_the_limit_is_parsed(cli, tmp_path):
    value = nested(otlp.PARSED_NESTING)
    tool = span(1, TOOL, attr("gen_ai.tool.call.arguments", value), attr("gen_ai.tool.call.result", value))
    assert cli("import", "otel", str(trace_file(tmp_path, request(tool))), cwd=tmp_path).exit_code == 0
    [case] = views(tmp_path)
    assert case.trajectory.steps[0].arguments == json.loads(value)


@pytest.mark.parametrize("kind", ["arrayValue", "kvlistValue"])
def test_an_attribute_value_nested_thousands_deep_is_a_located_error(cli, tmp_path, kind):
    inner = '{"stringValue": "x"}'
    if kind == "arrayValue":
        value = '{"arrayValue": {"values": [' * DEEP + inner + "]}}" * DEEP
    else:
        value = '{"kvlistValue": {"values": [{"key": "k", "value": ' * DEEP + inner + "}]}}" * DEEP
    line = request(span(1, TOOL), span(2, attr("ok", "1"), name="other"))
    ok = '{"key": "ok", "value": {"stringValue": "1"}}'
    line = line.replace(f"[{ok}]", f'[{ok}, {{"key": "deep", "value": {value}}}]')
    r = cli("import", "otel", str(trace_file(tmp_path, line)), cwd=tmp_path)
    assert r.exit_code == 2, r.output
    assert ("t.jsonl:1: nested deeper than 256 levels of JSON at resourceSpans[0].scopeSpans[0].spans[1]"
            ".attributes[1] (attribute 'deep': ") in r.output
    assert not (tmp_path / ".oloproof" / "log.db").exists() or not views_or_none(tmp_path)


def views_or_none(p: Path):
    try:
        return views(p)
    except Exception:  # noqa: BLE001 - no run at all
        return None


@pytest.mark.parametrize("key", ["oloproof.step.arguments", "oloproof.step.result"])
def test_oloproof_own_attribute_nested_too_deep_is_a_located_error(cli, tmp_path, key):
    root = span(1, attr("gen_ai.operation.name", "invoke_agent"), attr("oloproof.case_id", "c1"), name="invoke_agent a")
    step = span(2, attr("oloproof.step.kind", "message"), attr(key, nested(DEEP)), name="oloproof.message", parent=1)
    r = cli("import", "otel", str(trace_file(tmp_path, request(root, step))), cwd=tmp_path)
    assert r.exit_code == 2, r.output
    assert (f"t.jsonl:1: resourceSpans[0].scopeSpans[0].spans[1]: attribute {key}: JSON nested deeper than 128"
            in r.output)


def test_an_openinference_key_thousands_of_dots_deep_does_not_crash(cli, tmp_path):
    key = "llm.output_messages.0.message." + ".".join(["a"] * DEEP)
    chat = span(1, attr("openinference.span.kind", "LLM"), attr(key, "x"), name="llm")
    r = cli("import", "otel", str(trace_file(tmp_path, request(chat))), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    [case] = views(tmp_path)
    [decision] = case.trajectory.steps
    node, depth = decision.result, 0
    while isinstance(node, (dict, list)):
        node = node[0] if isinstance(node, list) else next(iter(node.values()))
        depth += 1
    assert node == "x" and depth <= 40  # nothing dropped: the rest of the key is one name


# ---- 2. deep parent chains: linear, no recursion --------------------------------------------------

def chain(n: int, kind: str = "other", span_class: type = otlp.Span) -> list:
    spans = []
    for k in range(1, n + 1):
        if kind == "agents":  # alternating agents: a handoff at every level
            attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"a{k % 2}"}
        elif kind == "tools":
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{k}"}
        else:
            attrs = {}
        spans.append(span_class(TRACE, f"{k:016x}", f"{k - 1:016x}" if k > 1 else "", "s", 1000 + k, 10**9 - k,
                                attrs, None, f"t.jsonl:1: spans[{k - 1}]"))
    return spans


def test_the_cases_of_a_trace_cost_the_length_of_its_parent_chain_not_its_square():
    reads = [0]

    class Counted(otlp.Span):
        """A span counting how often its parent link is read (the work of walking the chain)."""

        @property
        def parent_id(self):
            reads[0] += 1
            return self._pid

        @parent_id.setter
        def parent_id(self, value):
            self._pid = value

    counts = {}
    for n in (2_000, 8_000):
        reads[0] = 0
        otlp.cases_of_trace(chain(n, span_class=Counted))
        counts[n] = reads[0]
    assert counts[8_000] < 5 * counts[2_000], counts  # 4x for a linear cost; 16x for a quadratic one
    assert counts[8_000] < 20 * 8_000, counts


@pytest.mark.parametrize("kind", ["other", "tools", "agents"])
def test_a_chain_of_twenty_thousand_spans_maps_without_recursion(kind):
    [case] = otlp.cases_of_trace(chain(20_000, kind))
    if kind == "tools":
        assert len(case.steps) == 40_000 and case.steps[0].tool_name == "t1" and case.steps[-1].tool_name == "t1"
    elif kind == "agents":
        assert sum(s.kind == "handoff" for s in case.steps) == 2 * 19_999
    else:
        assert len(case.metadata["otel.unmapped_spans"]) == 20_000


def test_a_long_loop_of_parent_links_is_refused_quickly():
    spans = chain(20_000)
    spans[0].parent_id = spans[-1].span_id  # the first span's parent is the last: one loop of 20,000
    started = time.perf_counter()
    with pytest.raises(otlp.CaseFileError, match="its parent links loop back to it"):
        otlp.cases_of_trace(spans)
    assert time.perf_counter() - started < 10


@pytest.mark.slow
def test_a_twenty_thousand_deep_chain_imports_exports_and_imports_again(cli, tmp_path):
    tools = [span(k, TOOL, attr("gen_ai.tool.name", f"t{k}"), parent=k - 1 if k > 1 else None)
             for k in range(1, 20_001)]
    path = trace_file(tmp_path, request(*tools))
    started = time.perf_counter()
    r = cli("import", "otel", str(path), cwd=tmp_path)
    took = time.perf_counter() - started
    assert r.exit_code == 0, r.output
    assert took < 20, took  # 17 s for 16,000 before, and four times that for twice as deep
    r = cli("export", "latest", "--format", "otlp-json", "--out", str(tmp_path / "back.jsonl"), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    r = cli("import", "otel", str(tmp_path / "back.jsonl"), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    [case] = views(tmp_path)
    assert len(case.trajectory.steps) == 40_000


# ---- 4. control characters in what the import prints ----------------------------------------------

def test_control_characters_in_the_service_name_are_escaped_in_the_summary(cli, tmp_path):
    hostile = "support\nimported 999 spans as run forged\x1b[2J\r\u202e"
    path = trace_file(tmp_path, request(span(1, TOOL), service=hostile))
    for args in ([], ["--system", hostile], ["--version", hostile]):
        r = cli("import", "otel", str(path), *args, cwd=tmp_path)
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        assert len(lines) == 2 and lines[1].startswith("sha256:"), r.output
        assert "\x1b" not in r.output and "\r" not in r.output and "\u202e" not in r.output
        assert "support\\nimported 999 spans as run forged\\x1b[2J\\x0d\\u202e" in lines[0]


# ---- 5. all-zero ids --------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("traceId", "0" * 32), ("traceId", "AAAAAAAAAAAAAAAAAAAAAA=="),
                                          ("spanId", "0" * 16), ("spanId", "AAAAAAAAAAA=")])
def test_an_all_zero_id_is_refused(cli, tmp_path, field, value):
    bad = span(2, TOOL)
    bad[field] = value
    path = trace_file(tmp_path, request(span(1, TOOL, trace="1" * 32)), request(bad))
    r = cli("import", "otel", str(path), cwd=tmp_path)
    assert r.exit_code == 2, r.output
    assert f"t.jsonl:2: resourceSpans[0].scopeSpans[0].spans[0].{field}: '{value}' is all zeros: an invalid" in r.output
    assert views_or_none(tmp_path) in (None, [])


@pytest.mark.parametrize("parent", ["0" * 16, "AAAAAAAAAAA="])
def test_an_all_zero_parent_means_none(cli, tmp_path, parent):
    tool = span(1, TOOL)
    tool["parentSpanId"] = parent
    assert otlp.line_spans(request(tool).encode(), "t.jsonl", 1)[0].parent_id == ""
    assert otlp._slow_line(request(tool).encode(), "t.jsonl:1")[0].parent_id == ""
    r = cli("import", "otel", str(trace_file(tmp_path, request(tool))), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert [s.kind for s in views(tmp_path)[0].trajectory.steps] == ["tool_call", "tool_result"]


# ---- 3 (and 1, and subclasses): the live span processor ---------------------------------------------

APP = '''
import enum

from opentelemetry.sdk.trace import TracerProvider

from oloproof import system
from oloproof.otel import OloproofSpanProcessor

provider = TracerProvider()
processor = OloproofSpanProcessor()
provider.add_span_processor(processor)
provider.add_span_processor(processor)               # registered twice
provider.add_span_processor(OloproofSpanProcessor())  # and a second one
tracer = provider.get_tracer("app")
DEEP = "[" * 3000 + "]" * 3000


class Text(str):
    def __str__(self):
        return "not the text"


class Count(int):
    pass


class Op(str, enum.Enum):
    TOOL = "execute_tool"


@system(name="spans", version="1", records=["agent_trajectory/v1"])
def run(case):
    kind = case.input["kind"]
    with tracer.start_as_current_span("invoke_agent helper", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper", "final_result": "done"}):
        if kind == "deep":
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.arguments": DEEP, "gen_ai.tool.call.result": DEEP}):
                pass
            with tracer.start_as_current_span("llm", attributes={
                    "openinference.span.kind": "LLM", "llm.output_messages.0.message." + ".".join(["a"] * 3000): "x"}):
                pass
        elif kind == "subclass":
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                    "gen_ai.operation.name": Op.TOOL, "gen_ai.tool.name": Text("lookup"),
                    "gen_ai.tool.call.arguments": Text('{"id": 1}'), "gen_ai.tool.call.result": Count(7)}):
                pass
            with tracer.start_as_current_span("chat m", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": Text("m"),
                    "gen_ai.usage.input_tokens": Count(5), "gen_ai.usage.output_tokens": Count(2)}):
                pass
        else:
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}):
                pass
    return {"answer": "ok"}
'''


@pytest.fixture
def live(cli, tmp_path):
    pytest.importorskip("opentelemetry.sdk.trace")
    p = tmp_path / "spans"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", "system: {name: spans, version: '1', callable: app:run, "
                               "records: [agent_trajectory/v1]}\ncases: cases.jsonl\n")
    write(p / "cases.jsonl", "".join(json.dumps({"id": k, "input": {"kind": k}}) + "\n"
                                     for k in ("normal", "deep", "subclass")))
    r = cli("run", cwd=p)
    assert r.exit_code == 0, r.output
    return {v.case_id: v for v in views(p)}


def test_a_processor_registered_twice_records_each_span_once(live):
    assert live["normal"].error is None
    steps = [(s.kind, s.tool_name, s.agent, s.result) for s in live["normal"].trajectory.steps]
    assert steps == [("tool_call", "lookup", "helper", None), ("tool_result", "lookup", "helper", None),
                     ("final", None, "helper", "done")]


def test_the_live_processor_keeps_deep_json_as_text(live):
    case = live["deep"]
    assert case.error is None, case.error  # was a RecursionError from the span processor
    steps = case.trajectory.steps
    assert [s.kind for s in steps] == ["tool_call", "tool_result", "decision", "final"]
    assert steps[0].arguments == "[" * DEEP + "]" * DEEP and steps[1].result == steps[0].arguments


def test_the_live_processor_takes_str_and_int_subclasses_as_their_plain_values(live):
    case = live["subclass"]
    assert case.error is None, case.error  # was a TypeError: the log's encoder takes no str subclass
    steps = [(s.kind, s.tool_name, s.arguments, s.result) for s in case.trajectory.steps]
    assert steps[:3] == [("tool_call", "lookup", {"id": 1}, None), ("tool_result", "lookup", None, 7),
                         ("decision", "m", {}, None)]
    assert [(u.input_tokens, u.output_tokens, u.model) for u in case.usage] == [(5, 2, "m")]
