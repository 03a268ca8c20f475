"""What the terminal prints: recorded text as text, JSON alone on stdout, tables readable at 80
columns, plurals, the numbers behind each gate rule, the exit line, and the cases behind a row."""

import io
import json
import re

import pytest
from rich.console import Console

from tests.conftest import copy_example, write

NASTY = "[/] [beta] [bold red]x[/]"

APP = '''\
from oloproof import (AgentCheckpoint, AgentConstraintCheck, AgentStep, AgentTrajectory, Stateful,
                      current_case, system, tool)

NASTY = "[/] [beta] [bold red]x[/]"


@system(name="nasty", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id):
        return {"note": NASTY, "status": self.state["orders"][order_id]["status"]}

    @tool
    def refund(self, order_id):
        self.state["orders"][order_id]["status"] = "refunded"
        return {"status": "refunded", "note": NASTY}

    @tool
    def escalate(self, order_id):
        return {"ticket": NASTY}

    def __call__(self, case):
        b = case.input["behaviour"]
        if b == "explode":
            raise ValueError("agent failed: " + NASTY)
        if b == "hand":  # a tool, a constraint and a checkpoint named with brackets
            steps = (AgentStep(1, "tool_call", tool_name="[beta]", arguments={"q": NASTY}),
                     AgentStep(2, "tool_result", tool_name="[beta]", result={"r": NASTY}),
                     AgentStep(3, "final", result=NASTY))
            current_case().agent_trajectory(AgentTrajectory(
                steps, "success", constraints=(AgentConstraintCheck("[/]rule", True, 2),),
                checkpoints=(AgentCheckpoint(1, {"s": NASTY}, id="[/]cp"),)))
            return {"answer": "refunded " + NASTY}
        oid = case.input["order_id"]
        self.lookup(oid)
        result = self.refund(oid)
        if "error" in result:
            self.escalate(oid)
        current_case().finish("success")
        return {"answer": "refunded " + NASTY}
'''

CONFIG = '''\
system:
  name: nasty
  version: "1"
  callable: app:Desk
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: "answer[/]ok", field: answer, expected_field: answer}
  - {type: fault_recovery, tool: refund, fault: error, escalate_tools: [escalate]}
  - {type: state_matches, mode: subset}
slices: [metadata.tier]
min_slice_support: 1
release: release.yaml
'''

RELEASE = '''\
rules:
  - {name: "rule[/]one", criterion: "answer[/]ok", max_failures: 0}
'''

#: case ids hold no "/" (it separates the run from the case in the log): opening tags only
CASES = [("ord[red]1", "plain", "[beta]"), ("[bold red]x", "plain", "[/]"), ("[beta]", "hand", "[beta]"),
         ("boom[i]", "explode", "[/]")]


@pytest.fixture
def nasty(tmp_path):
    write(tmp_path / "app.py", APP)
    write(tmp_path / "oloproof.yaml", CONFIG)
    write(tmp_path / "release.yaml", RELEASE)
    lines = []
    for i, (cid, behaviour, tier) in enumerate(CASES):
        oid = f"o{i}"
        lines.append(json.dumps({
            "id": cid, "input": {"order_id": oid, "behaviour": behaviour, "note": NASTY},
            "initial_state": {"orders": {oid: {"status": "delivered", "note": NASTY}}},
            "expected": {"answer": "refunded", "state": {"orders": {oid: {"status": "refunded", "note": NASTY}}}},
            "metadata": {"tier": tier, "note": NASTY}}))
    write(tmp_path / "cases.jsonl", "\n".join(lines) + "\n")
    return tmp_path


def no_crash(result):
    text = result.output
    # a recorded traceback of the system's own is shown; one through Oloproof's frames is a crash
    assert not re.search(r'File "[^"]*/oloproof/', text), text
    assert "internal error" not in text and "MarkupError" not in text, text


# -- 1. recorded text is text ----------------------------------------------------------------

def test_recorded_text_prints_literally_everywhere(cli, nasty):
    r = cli("run", cwd=nasty)
    no_crash(r)
    # the explode case is missing, so the max_failures rule cannot pass: the normal exit 1
    assert r.exit_code == 1, r.output
    for name in ("answer[/]ok", "metadata.tier=[beta]", "metadata.tier=[/]", "rule[/]one"):
        assert name in r.output, name
    assert f"ValueError: agent failed: {NASTY}" in r.output  # the error message

    shown = cli("show", "latest")
    no_crash(shown)
    assert shown.exit_code == 0
    assert "answer[/]ok" in shown.output and "metadata.tier=[beta]" in shown.output and "rule[/]one" in shown.output

    plain = cli("show", "latest", "ord[red]1")
    no_crash(plain)
    assert plain.exit_code == 0
    assert "case ord[red]1" in plain.output
    assert f'"note":"{NASTY}"' in plain.output  # a tool result, the metadata, the state
    assert f'output: {{"answer":"refunded {NASTY}"}}' in plain.output
    assert f'metadata: {{"note":"{NASTY}","tier":"[beta]"}}' in plain.output

    hand = cli("show", "latest", "[beta]")
    no_crash(hand)
    assert hand.exit_code == 0
    for text in ("case [beta]", "│ [beta] ", "[/]rule", "[/]cp", f'{{"q":"{NASTY}"}}'):
        assert text in hand.output, text

    boom = cli("show", "latest", "boom[i]")
    no_crash(boom)
    assert boom.exit_code == 0 and f"error: ValueError: agent failed: {NASTY}" in boom.output

    rep = cli("replay", "--fault", "refund:timeout", cwd=nasty)
    no_crash(rep)
    assert rep.exit_code == 0, rep.output
    for text in ("[bold red]x", "ord[red]1", "boom[i]", f'"refunded {NASTY}"'):
        assert text in rep.output, text

    gate = cli("gate", "latest")
    no_crash(gate)
    assert gate.exit_code == 1 and "rule[/]one" in gate.output


def test_recorded_text_at_80_columns(cli, nasty, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("run", cwd=nasty)
    no_crash(r)
    assert r.exit_code == 1 and "rule[/]one" in r.output
    for args in (("show", "latest"), ("show", "latest", "[beta]"), ("show", "latest", "ord[red]1")):
        shown = cli(*args)
        no_crash(shown)
        assert shown.exit_code == 0
        assert max(len(line) for line in shown.stdout.splitlines()) <= 80, args


# -- 2. --json - writes only JSON to stdout ----------------------------------------------------

def test_json_dash_writes_only_json_to_stdout(cli, nasty):
    r = cli("run", "--json", "-", cwd=nasty)
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["gate"]["decision"] == "INSUFFICIENT_EVIDENCE"
    assert "answer[/]ok" in r.stderr  # the tables went to stderr

    ev = cli("eval", data["run_id"], "--json", "-")
    assert ev.exit_code == 1
    assert json.loads(ev.stdout)["run_id"] == data["run_id"] and "answer[/]ok" in ev.stderr

    rep = cli("replay", "--fault", "refund:timeout", "--json", "-")
    assert rep.exit_code == 0
    replayed = json.loads(rep.stdout)
    assert replayed["summary"]["criterion"] == "recovers_from_timeout_at_refund"
    assert "faithful" in rep.stderr

    runs = cli("runs", "--json")
    assert runs.exit_code == 0 and [r["run_id"] for r in json.loads(runs.stdout)] == [data["run_id"]]


# -- 3. readable output --------------------------------------------------------------------------

def test_tables_at_80_columns_never_break_a_name(cli, support_project, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("run", "--json", "r.json", cwd=support_project)
    assert r.exit_code == 1
    data = json.loads((support_project / "r.json").read_text())
    lines = r.stdout.splitlines()
    # every line but the seal's (a digest to copy, which cannot be broken) fits
    assert max(len(line) for line in lines if "sha256:" not in line) <= 80
    words = set(re.split(r"[\s│┃]+", r.output))
    names = [c["criterion"] for c in data["criteria"]] + [m["id"] for m in data["metrics"]]
    names += [s["slice"] for s in data["slices"]]
    names += [x for rule in data["gate"]["rules"] for x in (rule["name"], rule["criterion"], rule["status"],
                                                             rule["reason"])]
    for name in names:
        assert name in words, name  # whole, neither cut ("agent_constr…") nor wrapped
    for c in data["criteria"]:  # each criterion's rate and interval on its own line
        assert any(line.split()[:2] == [c["criterion"], f"{c['rate'] * 100:.1f}%"] for line in lines), c

    runs = cli("runs")
    assert max(len(line) for line in runs.stdout.splitlines()) <= 80
    assert data["run_id"] in set(runs.output.split()) and "complete" in runs.output.split()


def test_a_grid_is_a_table_when_it_fits_and_stacks_otherwise():
    from oloproof.report.terminal import Grid

    g = Grid(("criterion", "key"), ("rate", "key"), ("evidence", "text"))
    g.add_row("a_rather_long_criterion_name_here", "50.0%", "1 / 2 observed · 0 missing · 0 excluded")

    def render(width):
        out = io.StringIO()
        Console(file=out, width=width, no_color=True).print(g)
        return out.getvalue()

    wide = render(120)
    assert "│ a_rather_long_criterion_name_here │ 50.0% │ 1 / 2 observed" in wide
    medium = render(70)  # the evidence wraps between words, names stay whole
    assert "│ a_rather_long_criterion_name_here │ 50.0% │" in medium and "observed" in medium.split()
    narrow = render(44)  # no room for a readable table: stacked, nothing cut
    assert "┌" not in narrow and "a_rather_long_criterion_name_here  50.0%" in narrow
    assert "evidence: 1 / 2 observed" in narrow
    assert all(len(line) <= 44 for line in narrow.splitlines())
    for text in (wide, medium, narrow):
        assert "a_rather_long_criterion_name_here" in text.split()


def test_plurals():
    from oloproof.evaluate.engine import MetricRow, Summary
    from oloproof.report.terminal import criteria_table, plural
    from oloproof.stats.quantiles import QuantileInterval

    assert (plural(0, "call"), plural(1, "call"), plural(2, "call")) == ("0 calls", "1 call", "2 calls")
    assert plural(1, "replay") == "1 replay" and plural(3, "case") == "3 cases"
    summary = Summary({}, [MetricRow("tool_calls_p50", 0.5, "calls", QuantileInterval(1, 1, 2, 9, 0, 0)),
                           MetricRow("steps_p50", 0.5, "steps", QuantileInterval(3, 1, 4, 9, 0, 0))], [], None)
    out = io.StringIO()
    Console(file=out, width=200, no_color=True).print(criteria_table(summary))
    text = out.getvalue()
    assert "│ 1 call " in text and "1 calls" not in text and "│ 3 steps " in text


PENDING_PLURALS: set[str] = set()


def test_no_plural_is_built_by_hand():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "oloproof"
    hedged = re.compile(r"\}\s+\w+\(s\)")  # f"{n} case(s)": use report.terminal.plural
    for folder in ("report", "cli"):
        for path in sorted((root / folder).glob("*.py")):
            if f"{folder}/{path.name}" not in PENDING_PLURALS:
                assert not hedged.search(path.read_text(encoding="utf-8")), path


def test_help_texts_cite_no_spec_section(cli):
    from oloproof.cli.main import cli as group
    from tests.test_cli import all_commands

    for path in all_commands(group):
        text = cli(*path, "--help").output
        assert "SPEC" not in text and "§" not in text and "seeds/" not in text, path


def test_replay_summary_uses_the_run_s_interval_method(cli, tmp_path):
    target = tmp_path / "desk"
    copy_example("stateful_agent", target)
    cli("run", "--json", "r.json", cwd=target)
    row = next(c for c in json.loads((target / "r.json").read_text())["criteria"]
               if c["criterion"] == "recovers_from_error_at_issue_refund")
    assert row["method"] == "design_effect_clopper_pearson"  # sources and derived cases share clusters
    r = cli("replay", "--fault", "issue_refund:error", "--json", "rep.json", cwd=target)
    assert r.exit_code == 0, r.output
    interval = json.loads((target / "rep.json").read_text())["interval"]
    assert interval == {k: row[k] for k in ("rate", "low", "high", "method", "clusters")}
    assert f"≈ {row['clusters']} clusters" in r.output


# -- 4. what decided -----------------------------------------------------------------------------

def test_the_gate_table_shows_the_numbers_behind_each_rule(support_recording):
    r = support_recording  # what `oloproof run` printed
    assert r.exit_code == 1
    row = next(line for line in r.output.splitlines() if "no-deletion" in line)
    cells = [c.strip() for c in row.strip().strip("│").split("│")]
    assert cells[:4] == ["no-deletion", "agent_constraints_satisfied", "FAIL", "observed_failures_exceed_limit"]
    assert re.search(r"3 failures? > 0", cells[4]), cells


def test_rule_detail_falls_back_to_the_reason():
    from types import SimpleNamespace

    from oloproof.report.terminal import rule_detail

    assert rule_detail(SimpleNamespace(reason="missing_cases")) == "missing_cases"
    assert rule_detail(SimpleNamespace(reason="missing_cases", detail="2 missing could be failures")) == \
        "2 missing could be failures"
    assert rule_detail(SimpleNamespace(reason=None, detail=None)) == ""


def test_exit_line_says_what_the_exit_code_means():
    from oloproof.evaluate.gate import GateResult, RuleResult
    from oloproof.report.terminal import exit_line

    def rule(name, status, reason=None):
        return RuleResult(name, "c", "max_failures", 0, status, reason)

    assert exit_line(None).startswith("exit 0: nothing to gate")
    assert exit_line(GateResult("PASS", [rule("a", "PASS")])).startswith("exit 0: the gate passed")
    blocked = exit_line(GateResult("FAIL", [rule("a", "PASS"), rule("no-deletion", "FAIL", "x")]))
    assert blocked.startswith("exit 1: the gate is blocked (FAIL") and "no-deletion" in blocked
    assert "1 rule failed" in blocked
    unsure = exit_line(GateResult("INSUFFICIENT_EVIDENCE", [rule("r1", "INSUFFICIENT_EVIDENCE", "missing_cases"),
                                                            rule("r2", "INSUFFICIENT_EVIDENCE", "x")]))
    assert unsure.startswith("exit 1: the gate is blocked (INSUFFICIENT_EVIDENCE") and "r1, r2" in unsure


# -- 5. the cases behind a row -------------------------------------------------------------------

def test_show_failed_lists_the_cases_behind_a_row(cli, support_run, monkeypatch):
    monkeypatch.chdir(support_run)
    data = json.loads((support_run / "results.json").read_text())

    def ids(criterion, verdict):
        return [c["case_id"] for c in data["cases"] if c["verdicts"][criterion]["verdict"] == verdict]

    r = cli("show", "latest", "--failed", "agent_constraints_satisfied")
    assert r.exit_code == 0, r.output
    failed = ids("agent_constraints_satisfied", "fail")
    assert len(failed) == 3  # the three deletions of the example
    listed = re.findall(r"case_\d+", r.output)
    assert listed == failed and "failed: 3 cases" in r.output and "missing: none" in r.output

    loop = cli("show", "latest", "--failed", "agent_no_tool_loop")
    missing = ids("agent_no_tool_loop", "missing")
    assert missing and re.findall(r"case_\d+", loop.output) == ids("agent_no_tool_loop", "fail") + missing
    section = loop.output.split("missing:", 1)[1]
    assert all(cid in section for cid in missing) and "truncated" in section

    bad = cli("show", "latest", "--failed", "agent_constraint_satisfied")
    assert bad.exit_code == 2 and "did you mean 'agent_constraints_satisfied'" in bad.output
    assert cli("show", "latest", "case_001", "--failed", "answer_correct").exit_code == 2


def test_show_failed_with_recorded_brackets(cli, nasty):
    cli("run", cwd=nasty)
    r = cli("show", "latest", "--failed", "state_matches")
    no_crash(r)
    assert r.exit_code == 0
    before, after = r.output.split("missing:", 1)
    assert "│ [beta]" in before and "boom[i]" in after and "system_error" in after
