"""OpenTelemetry traces in and out (issue 15): traces the real SDK produced import into runs
that show, export and audit handle; malformed files are refused before anything is written;
export then import gives the same trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode


class Traces:
    """A real TracerProvider writing OTLP JSON lines (as the Collector's file exporter does)."""

    def __init__(self, service: str = "support", version: str = "2.1"):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service, "service.version": version}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def span(self, name: str, **attributes):
        return self.tracer.start_as_current_span(name, attributes=attributes)

    def write(self, path: Path, per_line: int = 1000) -> Path:
        spans = list(self.exporter.get_finished_spans())
        with path.open("w") as f:
            for i in range(0, len(spans), per_line):
                f.write(json.dumps(MessageToDict(encode_spans(spans[i:i + per_line]))) + "\n")
        return path


def refund_traces(t: Traces, n: int = 3) -> None:
    for k in range(n):
        with t.span("invoke_agent support", **{
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                "gen_ai.input.messages": json.dumps([{"role": "user", "content": f"refund ORD-{k}"}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant",
                                                       "parts": [{"type": "text",
                                                                  "content": "Refunded 20.00 EUR"}]}])}):
            with t.span("chat gpt-x", **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
                                         "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 9}):
                pass
            with t.span("execute_tool lookup_order", **{
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order",
                    "gen_ai.tool.call.arguments": json.dumps({"order_id": f"ORD-{k}"}),
                    "gen_ai.tool.call.result": json.dumps({"amount": 20.0})}):
                pass
            with t.span("execute_tool issue_refund", **{
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "issue_refund",
                    "gen_ai.tool.call.arguments": json.dumps({"order_id": f"ORD-{k}"})}) as s:
                if k == 1:
                    s.set_attribute("error.type", "TimeoutError")
                    s.set_status(Status(StatusCode.ERROR, "timed out"))
            with t.span("db.query", **{"db.system": "postgresql"}):
                pass


def views(p: Path, run: str | None = None):
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    try:
        return sorted(iter_case_views(store, run or latest_run_id(store)), key=lambda v: v.position)
    finally:
        store.close()


def steps_of(view):
    return [(s.kind, s.tool_name, s.arguments, s.result, s.agent, s.to_agent, s.raised) for s in view.trajectory.steps]


def test_real_sdk_traces_import_as_a_run(cli, tmp_path):
    t = Traces()
    refund_traces(t)
    path = t.write(tmp_path / "traces.jsonl", per_line=4)  # one trace spread over lines
    r = cli("import", "otel", str(path), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert "imported 15 spans" in r.output and "(support 2.1): 3 cases" in r.output
    assert "3 spans outside the GenAI mapping kept" in r.output
    cases = views(tmp_path)
    assert len(cases) == 3
    first, failed = cases[0], cases[1]
    assert steps_of(first) == [
        ("decision", "gpt-x", {}, None, "support", None, False),
        ("tool_call", "lookup_order", {"order_id": "ORD-0"}, None, "support", None, False),
        ("tool_result", "lookup_order", None, {"amount": 20.0}, "support", None, False),
        ("tool_call", "issue_refund", {"order_id": "ORD-0"}, None, "support", None, False),
        ("tool_result", "issue_refund", None, None, "support", None, False),
        ("final", None, None, "Refunded 20.00 EUR", "support", None, False)]
    assert steps_of(failed)[4] == ("tool_result", "issue_refund", None,
                                   {"error": {"type": "TimeoutError", "message": "timed out"}}, "support", None, True)
    assert first.trajectory.terminal_status == "success"
    assert first.input["messages"] == [{"role": "user", "content": "refund ORD-0"}]
    assert [s["name"] for s in first.metadata["otel.unmapped_spans"]] == ["db.query"]  # kept, not dropped
    assert [(u.input_tokens, u.output_tokens, u.model) for u in first.usage] == [(120, 9, "gpt-x")]
    for command in (["show", "latest"], ["show", "latest", first.case_id], ["audit", "verify"],
                    ["export", "latest", "--format", "jsonl"], ["runs"]):
        r = cli(*command, cwd=tmp_path)
        assert r.exit_code == 0, (command, r.output)


def test_openinference_spans_map_too(cli, tmp_path):
    t = Traces(service="rag")
    with t.span("agent", **{"openinference.span.kind": "AGENT", "input.value": "what is ORD-9?",
                            "output.value": "ORD-9 shipped"}):
        with t.span("llm", **{"openinference.span.kind": "LLM", "llm.model_name": "claude", "input.value": "q",
                              "output.value": "use the tool"}):
            pass
        with t.span("tool", **{"openinference.span.kind": "TOOL", "tool.name": "order_status",
                               "input.value": json.dumps({"id": "ORD-9"}), "output.value": "shipped"}):
            pass
    r = cli("import", "otel", str(t.write(tmp_path / "oi.jsonl")), "--system", "rag-agent", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    [case] = views(tmp_path)
    assert [(s.kind, s.tool_name) for s in case.trajectory.steps] == [
        ("decision", "claude"), ("tool_call", "order_status"), ("tool_result", "order_status"), ("final", None)]
    assert case.trajectory.steps[1].arguments == {"id": "ORD-9"} and case.trajectory.steps[2].result == "shipped"
    assert case.trajectory.steps[3].result == "ORD-9 shipped"


def test_a_nested_agent_is_a_handoff_and_back(cli, tmp_path):
    t = Traces()
    with t.span("invoke_agent triage", **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage"}):
        with t.span("invoke_agent billing",
                    **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"}):
            with t.span("execute_tool refund",
                        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"}):
                pass
    assert cli("import", "otel", str(t.write(tmp_path / "h.jsonl")), cwd=tmp_path).exit_code == 0
    [case] = views(tmp_path)
    assert [(s.kind, s.agent, s.to_agent) for s in case.trajectory.steps] == [
        ("handoff", "triage", "billing"), ("tool_call", "billing", None), ("tool_result", "billing", None),
        ("handoff", "billing", "triage")]


def test_a_trace_without_an_agent_span_is_one_case(cli, tmp_path):
    t = Traces()
    with t.span("execute_tool search", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}):
        pass
    assert cli("import", "otel", str(t.write(tmp_path / "x.jsonl")), cwd=tmp_path).exit_code == 0
    [case] = views(tmp_path)
    assert case.trajectory.terminal_status == "unknown" and case.trajectory.tool_names == ["search"]


HOSTILE = [
    ("not json", "malformed JSON"),
    ('{"foo": 1}', "expected an ExportTraceServiceRequest"),
    ('{"resourceSpans": 5}', "resourceSpans must be a list"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "00f067aa0ba902b7"}]}]}]}',
     "spans[0].traceId: 'xyz' is not a 16-byte id"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", '
     '"spanId": "00f067aa0ba902b7", "attributes": [{"key": "a", "value": {"doubleValue": "NaN"}}]}]}]}]}',
     "attributes[0].value: doubleValue is not finite"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", '
     '"spanId": "00f067aa0ba902b7", "startTimeUnixNano": true}]}]}]}', "startTimeUnixNano: expected an integer"),
    ("[" * 5000 + "]" * 5000, "nested deeper than"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", '
     '"spanId": "00f067aa0ba902b7", "attributes": [{"key": "n", "value": {"intValue": "--5"}}]}]}]}]}',
     "expected an integer, got '--5'"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", '
     '"spanId": "00f067aa0ba902b7", "startTimeUnixNano": "\u00b2"}]}]}]}', "expected an integer"),
    ('{"resourceSpans": [{"resource": [1], "scopeSpans": []}]}', "resource: expected an object"),
    # two spans with one id, whose parent links then loop: refused, not a hang
    ('{"resourceSpans": [{"scopeSpans": [{"spans": ['
     '{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00000000000000aa", "name": "execute_tool t"},'
     '{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00000000000000aa", '
     '"parentSpanId": "00000000000000aa", "name": "execute_tool t"}]}]}]}', "appears twice in trace"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": ['
     '{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00000000000000aa", '
     '"parentSpanId": "00000000000000bb"},'
     '{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00000000000000bb", '
     '"parentSpanId": "00000000000000aa"}]}]}]}', "parent links loop back"),
    # Oloproof's own attributes with the wrong types would store events no reader can decode
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", '
     '"spanId": "00000000000000aa", "name": "invoke_agent a", "attributes": ['
     '{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},'
     '{"key": "oloproof.case_id", "value": {"stringValue": "c1"}},'
     '{"key": "oloproof.metadata", "value": {"stringValue": "5"}}]}]}]}]}',
     "oloproof.metadata: expected a JSON object"),
]


@pytest.mark.parametrize("line, says", HOSTILE)
def test_a_malformed_trace_file_is_refused_with_nothing_written(cli, tmp_path, line, says):
    t = Traces()
    refund_traces(t, 1)
    good = t.write(tmp_path / "good.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n" + line + "\n")  # line 2
    r = cli("import", "otel", str(good), str(bad), cwd=tmp_path)
    assert r.exit_code == 2, r.output
    assert "bad.jsonl:2: " in r.output and says in r.output, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / ".oloproof" / "log.db").exists() or \
        cli("runs", "--json", cwd=tmp_path).output.strip() in ("[]", "")


@pytest.mark.parametrize("example", ["support-agent", "triage-agents", "release-gate"])
def test_export_then_import_gives_the_same_trajectories(cli, tmp_path, example):
    p = tmp_path / example
    assert cli("init", "--example", example, str(p)).exit_code == 0
    cli("run", cwd=p)
    r = cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=p)
    assert r.exit_code == 0, r.output
    from oloproof.app.runs import run_headers
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    original = run_headers(store)[-1].run_id
    store.close()
    assert cli("import", "otel", "t.jsonl", cwd=p).exit_code == 0
    before = {v.case_id.replace("/", "-"): v for v in views(p, original)}
    after = {v.case_id: v for v in views(p)}
    assert set(before) == set(after)
    for case_id, v in before.items():
        w = after[case_id]
        assert steps_of(w) == steps_of(v), case_id
        assert [(s.fault) for s in w.trajectory.steps] == [(s.fault) for s in v.trajectory.steps]
        assert w.trajectory.terminal_status == v.trajectory.terminal_status
        assert (w.trajectory.truncated, w.trajectory.step_limit) == (v.trajectory.truncated, v.trajectory.step_limit)
        assert [(c.name, c.passed, c.step_index) for c in w.trajectory.constraints] == \
            [(c.name, c.passed, c.step_index) for c in v.trajectory.constraints]
        assert (w.input, w.output) == (v.input, v.output)


def test_the_export_follows_the_genai_conventions(cli, tmp_path):
    p = tmp_path / "s"
    assert cli("init", "--example", "support-agent", str(p)).exit_code == 0
    cli("run", cwd=p)
    assert cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=p).exit_code == 0
    lines = (p / "t.jsonl").read_text().splitlines()
    assert len(lines) == 40  # one trace per case
    spans = json.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = spans[0]
    attrs = {a["key"]: a["value"] for a in root["attributes"]}
    assert attrs["gen_ai.operation.name"] == {"stringValue": "invoke_agent"}
    assert attrs["oloproof.verdict.answer_correct"]["stringValue"] in ("pass", "fail")
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert tools and all(s["parentSpanId"] == root["spanId"] and s["traceId"] == root["traceId"] for s in tools)
    tool_attrs = {a["key"]: a["value"] for a in tools[0]["attributes"]}
    assert "gen_ai.tool.name" in tool_attrs and "gen_ai.tool.call.arguments" in tool_attrs
    assert len(root["traceId"]) == 32 and len(root["spanId"]) == 16  # hex ids


def test_an_imported_run_can_be_attributed_and_frozen(cli, tmp_path):
    t = Traces()
    refund_traces(t, 2)
    write = t.write(tmp_path / "traces.jsonl")
    (tmp_path / "oloproof.yaml").write_text(
        "system: {name: support, version: '2.1', callable: app:x, records: [agent_trajectory/v1]}\n"
        "attribution: {change_tools: [issue_refund], verification_tools: [lookup_status]}\n")
    assert cli("import", "otel", str(write), cwd=tmp_path).exit_code == 0
    case = views(tmp_path)[1].case_id  # the refund that timed out, then "Refunded"
    r = cli("attribute", "latest", case, "--json", "a.json", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    a = json.loads((tmp_path / "a.json").read_text())["attribution"]
    assert a["primary"]["rule"] in ("declared_complete_without_verification", "tool_error_ignored")
    r = cli("prefix", "create", "latest", case, cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "prefixes" / f"{case}.yaml").exists()


def test_recorded_text_never_reaches_the_terminal_as_control_sequences(cli, tmp_path):
    t = Traces(service="[bold red]x[/] \x1b[2J\x1b]0;pwned\x07", version="1")
    with t.span("execute_tool t", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}):
        pass
    r = cli("import", "otel", str(t.write(tmp_path / "m.jsonl")), cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\\x1b" in r.output and "[bold red]x[/]" in r.output


def test_token_counts_that_are_not_counts_are_not_usage(cli, tmp_path):
    t = Traces()
    with t.span("chat m", **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                             "gen_ai.usage.input_tokens": "lots"}):
        pass
    assert cli("import", "otel", str(t.write(tmp_path / "u.jsonl")), cwd=tmp_path).exit_code == 0
    [case] = views(tmp_path)
    assert case.usage == () and case.trajectory.steps[0].kind == "decision"


def test_a_file_given_twice_is_refused_not_doubled(cli, tmp_path):
    t = Traces()
    with t.span("execute_tool t", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"}):
        pass
    path = t.write(tmp_path / "once.jsonl")
    r = cli("import", "otel", str(path), str(path), cwd=tmp_path)
    assert r.exit_code == 2 and "appears twice in trace" in r.output


@pytest.mark.parametrize("where", ["seal", "batch"])
def test_an_import_killed_at_any_point_leaves_the_log_as_it_was(cli, tmp_path, monkeypatch, where):
    """One transaction: killed after some cases (a batch written) or before the seal, the log
    holds nothing of the import — no incomplete run — and the same import then succeeds."""
    t = Traces()
    refund_traces(t, 3)
    path = t.write(tmp_path / "traces.jsonl")
    import oloproof.app.audit as audit
    import oloproof.app.otel as otel
    from oloproof.store import SQLiteStore

    monkeypatch.setattr(otel, "BATCH", 1)  # a commit per case: the first ones are written before the kill
    commits = []
    real_commit = SQLiteStore.commit

    def commit(self, appends, rows=None):
        commits.append(len(appends))
        if where == "batch" and len(commits) == 2:
            raise KeyboardInterrupt  # the process dies with one case written
        return real_commit(self, appends, rows)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies after the cases, before the seal

    monkeypatch.setattr(SQLiteStore, "commit", commit)
    if where == "seal":
        monkeypatch.setattr(audit, "seal", killed)
    assert cli("import", "otel", str(path), cwd=tmp_path).exit_code == 130  # interrupted
    assert commits and commits[0] == 1  # cases had been handed to the log
    monkeypatch.undo()
    log = SQLiteStore(tmp_path / ".oloproof" / "log.db")
    try:
        assert log.root_streams() == [] and list(log.read_all()) == [] and log.projection("runs") == []
    finally:
        log.close()
    r = cli("audit", "verify", cwd=tmp_path)
    assert r.exit_code == 0 and "INCOMPLETE" not in r.output
    r = cli("import", "otel", str(path), cwd=tmp_path)
    assert r.exit_code == 0 and "3 cases" in r.output
    assert cli("audit", "verify", cwd=tmp_path).exit_code == 0



def test_spans_outside_every_agent_invocation_are_kept_not_dropped(cli, tmp_path):
    """The app's own span around the agent, and a span after it: no step, but kept in the
    metadata (with the trace's first case), never dropped silently."""
    t = Traces()
    with t.span("POST /chat", **{"http.method": "POST"}):
        with t.span("invoke_agent support",
                    **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}):
            with t.span("execute_tool lookup",
                        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}):
                pass
        with t.span("invoke_agent audit", **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "audit"}):
            pass
        with t.span("db.commit", **{"db.system": "postgresql"}):
            pass
    r = cli("import", "otel", str(t.write(tmp_path / "t.jsonl")), cwd=tmp_path)
    assert r.exit_code == 0 and "2 spans outside the GenAI mapping" in r.output
    first, second = views(tmp_path)
    assert sorted(s["name"] for s in first.metadata["otel.unmapped_spans"]) == ["POST /chat", "db.commit"]
    assert "otel.unmapped_spans" not in second.metadata
    assert [s.kind for s in first.trajectory.steps] == ["tool_call", "tool_result"]
