"""One CLI convention (issue 23, SPEC §18.2): RUN defaults to latest on every read command,
``--json [FILE]`` everywhere (standard output without FILE), read commands find the log in a
parent folder, hints carry what they need to run where they are printed, statuses coloured on
a terminal (never under NO_COLOR)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.conftest import copy_example, one_function_project


def invoke(cwd, *args):
    from oloproof.cli.main import cli as group

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(group, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    p = tmp_path_factory.mktemp("conv") / "demo"
    copy_example("support_agent", p)
    r = invoke(p, "run")
    assert r.exit_code == 1, r.output  # the example's gate fails on purpose
    return p


@pytest.mark.parametrize("args, code", [
    (("show",), 0), (("show", "case_007"), 0), (("gate",), 1), (("eval",), 1), (("export",), 0),
    (("attribute", "case_007"), 0),
])
def test_run_defaults_to_latest(demo, args, code):
    r = invoke(demo, *args)
    assert r.exit_code == code, r.output
    latest = json.loads(invoke(demo, "runs", "--json").output)[-1]["run_id"]
    # each read the latest run: its id, or the case of it, is in what it printed
    said = {"show": "case case_007" if len(args) > 1 else f"run {latest}", "gate": latest, "eval": latest,
            "export": f'"run_id":"{latest}"', "attribute": "case_007"}[args[0]]
    assert said in r.output, (args, r.output[:500])


def test_show_of_one_argument_that_is_a_run_is_the_run(demo):
    latest = json.loads(invoke(demo, "runs", "--json").output)[-1]["run_id"]
    assert f"run {latest}" in invoke(demo, "show", latest).output
    r = invoke(demo, "show", "case_99x")
    assert r.exit_code == 2 and "case_99x" in r.output  # a typo of a case: a located error


@pytest.mark.parametrize("args", [
    ("show", "--json"), ("show", "case_007", "--json"), ("gate", "--json"), ("eval", "--json"),
    ("runs", "--json"), ("search", "delete_customer", "--json"), ("show", "--failed", "answer_correct", "--json"),
    ("replay", "--fault", "lookup_order:error", "--case", "case_001", "--json"),
])
def test_json_without_a_file_is_standard_output_alone(demo, args):
    from oloproof.cli.main import cli as group

    old = os.getcwd()
    os.chdir(demo)
    try:
        r = CliRunner(mix_stderr=False).invoke(group, list(args), catch_exceptions=False) \
            if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else \
            CliRunner().invoke(group, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    assert r.exit_code in (0, 1), r.output
    json.loads(r.stdout)  # stdout holds the JSON alone: the tables went to stderr


def test_json_to_a_file_on_show_and_gate(demo):
    assert invoke(demo, "gate", "--json", "g.json").exit_code == 1
    g = json.loads((demo / "g.json").read_text())
    assert g["gate"]["decision"] == "FAIL" and g["gate"]["rules"][0]["name"] == "no-deletion"
    assert invoke(demo, "show", "case_007", "--json", "c.json").exit_code == 0
    c = json.loads((demo / "c.json").read_text())
    assert c["case_id"] == "case_007" and "verdicts" in c and c["trajectory"]


def test_read_commands_find_the_log_in_a_parent_folder(demo):
    sub = demo / "deep" / "er"
    sub.mkdir(parents=True, exist_ok=True)
    assert invoke(sub, "show").exit_code == 0
    assert invoke(sub, "gate").exit_code == 1
    assert invoke(sub, "runs", "--json").exit_code == 0


def test_hints_carry_the_log_they_need(tmp_path):
    """A run whose log is not ./.oloproof/log.db prints hints with its --db, and they run here."""
    one_function_project(tmp_path / "p", "    raise ValueError('boom')\n")
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("OLOPROOF_LOG_KEY", None)
    r = subprocess.run([sys.executable, "-m", "oloproof", "run", "--project", "p", "--db", "elsewhere.db"],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stderr.splitlines() if "errored" in x)
    hint = line.split("see '", 1)[1].split("'", 1)[0].replace(" CASE", " c1")
    assert "--db elsewhere.db" in hint
    shown = subprocess.run([sys.executable, "-m", *hint.split()], cwd=tmp_path, capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0 and "ValueError: boom" in shown.stdout, shown.stderr


def test_statuses_are_coloured_on_a_terminal_and_never_under_no_color(monkeypatch):
    import io

    from rich.console import Console

    from oloproof.report.terminal import status_text

    def render(**kw):
        buf = io.StringIO()
        Console(file=buf, force_terminal=True, color_system="standard", **kw).print(status_text("PASS", "gate: "))
        return buf.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[1;32mPASS" in render()
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="standard").print(status_text("FAIL"), status_text(
        "INSUFFICIENT_EVIDENCE"))
    assert "\x1b[1;31mFAIL" in buf.getvalue() and "\x1b[1;33mINSUFFICIENT_EVIDENCE" in buf.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = render()
    assert "32m" not in plain and "gate: " in plain and "PASS" in plain  # no colour (bold may stay)
