"""The pydantic-ai-agent example (issue 15): a Pydantic AI agent recorded live through
OpenTelemetry, no @tool — six refund requests, every world check passes, and the results do not
depend on how the cases ran."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("opentelemetry.sdk.trace")


@pytest.fixture
def example(cli, tmp_path):
    p = tmp_path / "pai"
    assert cli("init", "--example", "pydantic-ai-agent", str(p)).exit_code == 0
    return p


def test_the_example_is_recorded_live_and_passes_its_gate(cli, example):
    r = cli("run", "--json", "r.json", cwd=example)
    assert r.exit_code == 0, r.output
    data = json.loads((example / "r.json").read_text())
    rows = {c["criterion"]: (c["passed"], c["observed"], c["excluded"]) for c in data["criteria"]}
    assert rows == {"world_correct": (6, 6, 0), "other_orders_untouched": (6, 6, 0),
                    "agent_tool_lookup_order_called": (6, 6, 0), "report_supported": (3, 3, 3)}
    assert data["gate"]["decision"] == "PASS"
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(example / ".oloproof" / "log.db", readonly=True)
    refunded, escalated = (case_view(store, latest_run_id(store), c) for c in ("ord-2", "ord-4"))
    store.close()
    assert [(s.kind, s.tool_name) for s in refunded.trajectory.steps if s.kind != "decision"] == [
        ("tool_call", "lookup_order"), ("tool_result", "lookup_order"), ("tool_call", "issue_refund"),
        ("tool_result", "issue_refund"), ("final", None)]
    assert refunded.trajectory.steps[-1].result == "Refunded 85.50 EUR for ord-2."
    assert [s.tool_name for s in escalated.trajectory.steps if s.kind == "tool_call"] == ["lookup_order", "escalate"]
    assert escalated.state["orders"]["ord-4"]["status"] == "escalated"
    assert len(refunded.usage) == 3  # one model request per decision, with its tokens


def test_the_results_do_not_depend_on_how_the_cases_ran(cli, example):
    assert cli("run", "--json", "serial.json", cwd=example).exit_code == 0
    assert cli("run", "--concurrency", "3", "--json", "threads.json", cwd=example).exit_code == 0
    serial = json.loads((example / "serial.json").read_text())["cases"]
    assert json.loads((example / "threads.json").read_text())["cases"] == serial
