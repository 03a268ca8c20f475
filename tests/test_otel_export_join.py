"""OpenTelemetry export and import, joined to cases (issue 25, items 3 and 4).

The export's agent span carries what consumers match a trace to a case on: the case's input as
the GenAI user message, its answer as the assistant message and its case id. `import otel
--cases` joins a cases file's expected answers (by case id, or by a span attribute) to imported
traces — real spans from the OpenTelemetry SDK — so that `oloproof eval` judges production
traces with the checks that need `expected`, and a run exported and imported again keeps its
fingerprints and its verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder")

from tests.conftest import copy_example, write
from tests.test_otel import Traces, views


def root_attributes(line: str) -> dict:
    spans = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    [root] = [s for s in spans if not s.get("parentSpanId")]
    return {a["key"]: next(iter(a["value"].values())) for a in root["attributes"]}


def verdicts(cli, folder: Path, run: str, *flags: str) -> dict[str, dict[str, str]]:
    cli("eval", run, "--json", "r.json", *flags, cwd=folder)
    data = json.loads((folder / "r.json").read_text())
    return {c["case_id"]: {k: v["verdict"] for k, v in c["verdicts"].items()} for c in data["cases"]}


def run_ids(folder: Path) -> list[str]:
    from oloproof.app.runs import run_headers
    from oloproof.store import SQLiteStore

    store = SQLiteStore(folder / ".oloproof" / "log.db", readonly=True)
    try:
        return [h.run_id for h in run_headers(store)]
    finally:
        store.close()


def is_text_message(m: dict, role: str) -> bool:
    """A message of the GenAI conventions' JSON schema (gen-ai-input/output-messages.json):
    a role and a list of parts, here one text part ``{"type": "text", "content": TEXT}``."""
    return m["role"] == role and isinstance(m["parts"], list) and len(m["parts"]) == 1 \
        and m["parts"][0]["type"] == "text" and isinstance(m["parts"][0]["content"], str)


# ---- item 3: the export carries what consumers match on ----------------------------------------

def test_the_agent_span_carries_the_user_message_the_answer_and_the_case_id(cli, support_run):
    r = cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl",
            "--case-attribute", "agentevals.eval.case.id", cwd=support_run)
    assert r.exit_code == 0, r.output
    cases = [json.loads(line) for line in (support_run / "cases.jsonl").read_text().splitlines()]
    lines = (support_run / "t.jsonl").read_text().splitlines()
    assert len(lines) == len(cases) == 40
    by_id = {}
    for line in lines:
        a = root_attributes(line)
        by_id[a["oloproof.case.id"]] = a
        assert a["agentevals.eval.case.id"] == a["oloproof.case.id"] == a["oloproof.case_id"]
        assert "oloproof.case.trial" not in a  # a single trial
    assert set(by_id) == {c["id"] for c in cases}
    first = cases[0]
    a = by_id[first["id"]]
    [user] = json.loads(a["gen_ai.input.messages"])
    assert is_text_message(user, "user")
    # no message-like field in this input: the user's message is the input, as canonical JSON
    assert json.loads(user["parts"][0]["content"]) == first["input"]
    [answer] = json.loads(a["gen_ai.output.messages"])
    assert is_text_message(answer, "assistant") and answer["finish_reason"] == "stop"
    assert answer["parts"][0]["content"] == json.loads(a["oloproof.output"])["answer"]


def test_a_message_field_of_the_input_is_the_user_message(cli, tmp_path):
    p = copy_example("triage_agents", tmp_path / "t")
    cli("run", cwd=p)
    assert cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=p).exit_code == 0
    case = json.loads((p / "cases.jsonl").read_text().splitlines()[0])
    a = next(root_attributes(line) for line in (p / "t.jsonl").read_text().splitlines()
             if root_attributes(line)["oloproof.case.id"] == case["id"])
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": case["input"]["request"]}]}]


def test_trials_and_derived_cases_name_their_case_line(cli, tmp_path):
    p = copy_example("stateful_agent", tmp_path / "s")
    write(p / "oloproof.yaml", (p / "oloproof.yaml").read_text() + "trials: 2\n")
    cli("run", cwd=p)
    assert cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=p).exit_code == 0
    roots = {a["oloproof.case_id"]: a for a in map(root_attributes, (p / "t.jsonl").read_text().splitlines())}
    trial, derived = roots["ord-001/2"], roots["ord-001/2~injected"]
    assert (trial["oloproof.case.id"], trial["oloproof.case.trial"], trial.get("oloproof.case.transform")) == \
        ("ord-001", "2", None)
    assert (derived["oloproof.case.id"], derived["oloproof.case.trial"], derived["oloproof.case.transform"]) == \
        ("ord-001", "2", "injected")


@pytest.mark.parametrize("flags, says", [
    (["--format", "jsonl", "--case-attribute", "x.id"], "goes with --format otlp-json"),
    (["--format", "otlp-json", "--case-attribute", "gen_ai.conversation.id"], "the export's own"),
    (["--format", "otlp-json", "--case-attribute", "a b"], "without spaces"),
])
def test_a_bad_case_attribute_is_a_usage_error(cli, support_run, flags, says):
    r = cli("export", "latest", *flags, "--out", "t.jsonl", cwd=support_run)
    assert r.exit_code == 2 and says in r.output and not (support_run / "t.jsonl").exists()


# ---- item 4: import otel --cases ----------------------------------------------------------------

def test_an_exported_run_joined_to_its_cases_keeps_fingerprints_state_and_verdicts(cli, tmp_path):
    """The stateful example (an environment state, derived cases): exported, imported with its
    cases file, each case has its fingerprint back, the run its suite digest, and `eval` with
    the same project gives every case the verdicts it had (state checks included)."""
    p = copy_example("stateful_agent", tmp_path / "s")
    cli("run", cwd=p)
    assert cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=p).exit_code == 0
    r = cli("import", "otel", "t.jsonl", "--cases", "cases.jsonl", cwd=p)
    assert r.exit_code == 0, r.output
    assert "joined 44 of 44 cases to cases.jsonl (by case id); 0 cases matched no case line" in r.output
    assert "0 case lines matched no trace" in r.output
    original, imported = run_ids(p)
    before = {v.case_id.replace("~", "-"): v for v in views(p, original)}
    after = {v.case_id: v for v in views(p, imported)}
    assert set(before) == set(after)
    for case_id, v in before.items():
        w = after[case_id]
        assert (w.fingerprint, w.expected, w.initial_state, w.state) == \
            (v.fingerprint, v.expected, v.initial_state, v.state), case_id
    old = verdicts(cli, p, original)
    new = verdicts(cli, p, imported)
    judged = ("answer_correct", "state_matches", "other_order_untouched", "agent_tool_lookup_order_called")
    for case_id, v in old.items():
        assert {c: v[c] for c in judged} == {c: new[case_id.replace("~", "-")][c] for c in judged}, case_id
    assert {v["state_matches"] for v in new.values()} == {"pass", "fail"}  # judged, not missing


def test_without_cases_an_imported_case_has_no_expected(cli, tmp_path):
    p = copy_example("stateful_agent", tmp_path / "s")
    cli("run", cwd=p)
    cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=p)
    r = cli("import", "otel", "t.jsonl", cwd=p)
    assert r.exit_code == 0 and "joined" not in r.output
    new = verdicts(cli, p, "latest")
    assert {v["state_matches"] for v in new.values()} == {"excluded"}  # no expected.state


def production_traces(t: Traces, sessions: list[tuple[str, list[str], str, bool]]) -> None:
    """One trace per session: `triage` hands off to `billing` (a nested agent), which calls the
    tools; the state the agent left is on the agent span (`oloproof.state`). `session.id` is on
    the agent span — or, with the flag, only on the request's span around it."""
    for session, tools, status, outer in sessions:
        around = t.span("POST /chat", **({"session.id": session} if outer else {}))
        with around:
            with t.span("invoke_agent triage", **{
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage",
                    **({} if outer else {"session.id": session}),
                    "oloproof.state": json.dumps({"orders": {session: {"status": status}}}),
                    "gen_ai.input.messages": json.dumps([{"role": "user", "content": f"refund {session}"}])}):
                with t.span("invoke_agent billing",
                            **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"}):
                    for tool in tools:
                        with t.span(f"execute_tool {tool}", **{
                                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                "gen_ai.tool.call.arguments": json.dumps({"order_id": session})}):
                            pass


PROJECT = """system: {name: support, version: '2.1', callable: app:x,
         records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: agent_tool_sequence}
  - {type: agent_route}
  - {type: state_matches, mode: subset}
"""


def case_line(case_id: str, **fields) -> str:
    return json.dumps({"id": case_id, "input": {"order_id": case_id}, "expected": {
        "tools": ["lookup_order", "issue_refund"], "route": ["triage", "billing", "triage"],
        "state": {"orders": {case_id: {"status": "refunded"}}}}, **fields})


def test_production_traces_joined_by_an_attribute_are_judged_by_eval(cli, tmp_path):
    t = Traces()
    production_traces(t, [
        ("s-1", ["lookup_order", "issue_refund"], "refunded", False),  # right
        ("s-2", ["issue_refund"], "refunded", True),                    # skipped the lookup; key on the outer span
        ("s-3", ["lookup_order"], "delivered", False),                  # never refunded
        ("s-4", ["lookup_order", "issue_refund"], "refunded", False),   # no case line
    ])
    t.write(tmp_path / "traces.jsonl")
    write(tmp_path / "oloproof.yaml", PROJECT)
    write(tmp_path / "cases.jsonl", "\n".join([
        case_line("s-1", metadata={"channel": "chat"}, tags=["refund"]), case_line("s-2"), case_line("s-3"),
        case_line("s-9")]) + "\n")
    r = cli("import", "otel", "traces.jsonl", "--cases", "cases.jsonl", "--case-key", "session.id", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    assert "joined 3 of 4 cases to cases.jsonl (by session.id); 1 case matched no case line (kept without " \
           "expected); 1 case line matched no trace (s-9)" in r.output
    cases = {v.case_id: v for v in views(tmp_path)}
    assert {"s-1", "s-2", "s-3"} <= set(cases) and len(cases) == 4  # a joined case takes its line's id
    s1 = cases["s-1"]
    assert s1.metadata["channel"] == "chat" and s1.metadata["otel.trace_id"]  # the line's over the trace's
    assert s1.tags == ("refund",) and s1.state == {"orders": {"s-1": {"status": "refunded"}}}
    from oloproof.events import case_fingerprint

    line = json.loads(case_line("s-1"))
    assert s1.fingerprint == case_fingerprint(s1.input, None, line["expected"])  # as a run's case's
    [unjoined] = [v for v in cases.values() if v.case_id not in ("s-1", "s-2", "s-3")]
    assert unjoined.expected == {} and unjoined.metadata["otel.trace_id"] == unjoined.case_id
    got = verdicts(cli, tmp_path, "latest")
    assert got["s-1"] == {"agent_tool_sequence": "pass", "agent_route": "pass", "state_matches": "pass"}
    assert got["s-2"]["agent_tool_sequence"] == "fail" and got["s-2"]["state_matches"] == "pass"
    assert got["s-3"]["agent_tool_sequence"] == "fail" and got["s-3"]["state_matches"] == "fail"
    assert got[unjoined.case_id] == {"agent_tool_sequence": "excluded", "agent_route": "excluded",
                                     "state_matches": "excluded"}


def test_production_traces_join_by_their_case_id(cli, tmp_path):
    t = Traces()
    production_traces(t, [("s-1", ["lookup_order", "issue_refund"], "refunded", False)])
    t.write(tmp_path / "traces.jsonl")
    trace_id = format(t.exporter.get_finished_spans()[0].context.trace_id, "032x")  # the case's id
    write(tmp_path / "cases.jsonl", case_line(trace_id) + "\n")
    r = cli("import", "otel", "traces.jsonl", "--cases", "cases.jsonl", cwd=tmp_path)
    assert r.exit_code == 0 and "joined 1 of 1 case to cases.jsonl (by case id)" in r.output, r.output
    [case] = views(tmp_path)
    assert case.case_id == trace_id and case.expected["tools"] == ["lookup_order", "issue_refund"]


def assert_nothing_written(cli, folder: Path) -> None:
    assert not (folder / ".oloproof" / "log.db").exists() or \
        cli("runs", "--json", cwd=folder).output.strip() in ("[]", "")


@pytest.mark.parametrize("line, says", [
    ('{"id": "s-1", "input": {}, "expected": {"tools": "lookup_order"}}',
     "cases.jsonl:2: case 's-1': field 'expected.tools': must be a list of tool names"),
    ('{"id": "s-2", "input": {}, "expect": {}}', "cases.jsonl:2: case 's-2': field 'expect': unknown field"),
    ('{"id": "s-1", "input": {}}', "cases.jsonl:2: case 's-1': field 'id': duplicate id (first used on line 1)"),
    ('{"id": "s-2", "input": {', "cases.jsonl:2: malformed JSON"),
])
def test_a_bad_cases_file_is_exit_2_naming_the_line_with_nothing_written(cli, tmp_path, line, says):
    t = Traces()
    production_traces(t, [("s-1", ["lookup_order"], "refunded", False)])
    t.write(tmp_path / "traces.jsonl")
    write(tmp_path / "cases.jsonl", case_line("s-1") + "\n" + line + "\n")
    r = cli("import", "otel", "traces.jsonl", "--cases", "cases.jsonl", "--case-key", "session.id", cwd=tmp_path)
    assert r.exit_code == 2 and says in r.output, r.output
    assert "Traceback" not in r.output
    assert_nothing_written(cli, tmp_path)


def test_a_case_line_matched_by_two_traces_is_refused_naming_both(cli, tmp_path):
    t = Traces()
    production_traces(t, [("s-1", ["lookup_order"], "refunded", False), ("s-1", ["issue_refund"], "refunded", True)])
    t.write(tmp_path / "traces.jsonl")
    write(tmp_path / "cases.jsonl", case_line("s-1") + "\n")
    r = cli("import", "otel", "traces.jsonl", "--cases", "cases.jsonl", "--case-key", "session.id", cwd=tmp_path)
    assert r.exit_code == 2, r.output
    assert "cases.jsonl:1: case 's-1': matched by two traces (session.id = 's-1'): traces.jsonl:1: " in r.output
    assert " and traces.jsonl:1: " in r.output and "a case line joins one trace" in r.output
    assert_nothing_written(cli, tmp_path)


def test_a_case_key_needs_a_cases_file(cli, tmp_path):
    t = Traces()
    production_traces(t, [("s-1", ["lookup_order"], "refunded", False)])
    t.write(tmp_path / "traces.jsonl")
    r = cli("import", "otel", "traces.jsonl", "--case-key", "session.id", cwd=tmp_path)
    assert r.exit_code == 2 and "give --cases FILE too" in r.output
    r = cli("import", "otel", "traces.jsonl", "--cases", "missing.jsonl", cwd=tmp_path)
    assert r.exit_code == 2 and "missing.jsonl: case file not found" in r.output
    assert_nothing_written(cli, tmp_path)
