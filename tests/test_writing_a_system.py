"""docs/writing-a-system.md: every snippet is a complete app.py, run here as a project; and
``oloproof init --blank`` writes a skeleton that runs and passes its gate (issue 23)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import write

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-system.md"
SNIPPET = re.compile(r"<!-- snippet callable=(\S+) records=(\S+) -->\n```python\n(.*?)```", re.S)
SNIPPETS = SNIPPET.findall(DOC.read_text())

CASE = {"id": "c1", "input": {"question": "hi", "order_id": "o-1"}, "initial_state": {},
        "expected": {"answer": "x"}}


ANSWERED = "{type: contains, criterion: answered, field: answer, expected_field: answer}"


def snippet_project(tmp_path, code, callable_, evaluator=ANSWERED, records="agent_trajectory/v1"):
    """A project around one snippet: its @system's name and version, one case."""
    name = re.search(r'@system\(name="([^"]+)", version="([^"]+)"', code)
    p = tmp_path / "p"
    write(p / "app.py", code)
    write(p / "oloproof.yaml", f"system:\n  name: {name[1]}\n  version: \"{name[2]}\"\n  callable: {callable_}\n"
                               f"  records: [{', '.join(records.split(','))}]\ncases: cases.jsonl\nevaluators:\n"
                               f"  - {evaluator}\n")
    write(p / "cases.jsonl", json.dumps(CASE) + "\n")
    return p


def test_the_page_has_its_snippets():
    assert len(SNIPPETS) >= 6
    assert DOC.read_text().count("```python") == len(SNIPPETS)  # none left untested


@pytest.mark.parametrize("callable_, records, code", SNIPPETS, ids=[s[0] + f"-{i}" for i, s in enumerate(SNIPPETS)])
def test_each_snippet_runs_as_a_project(cli, tmp_path, callable_, records, code):
    p = snippet_project(tmp_path, code, callable_, records=records)
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    case = json.loads((p / "r.json").read_text())["cases"][0]
    assert case.get("error") is None, case
    assert case["verdicts"]["answered"]["verdict"] in ("pass", "fail"), case  # observed: it ran and answered


def test_the_tool_snippet_records_the_renamed_tool(cli, tmp_path):
    code = next(c for _, _, c in SNIPPETS if "notify_customer" in c)
    p = snippet_project(tmp_path, code, "app:run", "{type: agent_tool_called, tool_name: notify_customer}")
    assert cli("run", cwd=p).exit_code == 0
    out = cli("show", "latest", "c1", cwd=p).output
    assert "notify_customer" in out and "lookup" in out


def test_the_replayable_snippet_is_fault_replayed(cli, tmp_path):
    code = next(c for _, _, c in SNIPPETS if "Replayable" in c)
    p = snippet_project(tmp_path, code, "app:Agent")
    assert cli("run", cwd=p).exit_code == 0
    r = cli("replay", "--fault", "lookup:error", "--json", "rep.json", cwd=p)
    assert r.exit_code == 0, r.output
    case = json.loads((p / "rep.json").read_text())["cases"][0]
    assert case["control"]["faithful"] is True, case
    assert case["verdict"] == "fail" and case["reason"] == "ended_in_failure", case


def test_init_blank_writes_a_skeleton_that_runs_and_passes(cli, tmp_path):
    r = cli("init", "--blank", str(tmp_path / "mine"))
    assert r.exit_code == 0, r.output
    assert "docs/writing-a-system.md" in r.output
    p = tmp_path / "mine"
    assert sorted(f.name for f in p.iterdir()) == ["app.py", "cases.jsonl", "oloproof.yaml", "release.yaml"]
    assert len((p / "cases.jsonl").read_text().splitlines()) == 3
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    result = json.loads((p / "r.json").read_text())
    assert result["gate"]["decision"] == "PASS"
    assert {c["criterion"] for c in result["criteria"]} == {"answer_correct", "state_matches"}
    assert "docs/writing-a-system.md" in (p / "app.py").read_text()  # comments point to the docs
    # the tool is real: a fault replay of it runs
    assert cli("replay", "--fault", "add_note:error", cwd=p).exit_code == 0


def test_init_needs_exactly_one_of_example_and_blank(cli, tmp_path):
    assert cli("init", str(tmp_path / "a")).exit_code == 2
    r = cli("init", "--blank", "--example", "support-agent", str(tmp_path / "b"))
    assert r.exit_code == 2 and "one of --example" in r.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_init_names_what_an_example_needs(cli, tmp_path):
    r = cli("init", "--example", "pydantic-ai-agent", str(tmp_path / "x"))
    assert r.exit_code == 0 and "pip install 'oloproof[otel]' pydantic-ai-slim" in r.output
