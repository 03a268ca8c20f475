"""``pytest --oloproof [PROJECT]`` (issue 15): a project collected as tests — one item per case,
one for the gate — writing the same log as ``oloproof run``; inert without the option."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def pytest_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("OLOPROOF_LOG_KEY", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rf", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture
def support(cli, tmp_path):
    p = tmp_path / "support"
    assert cli("init", "--example", "support-agent", str(p)).exit_code == 0
    return p


@pytest.mark.slow
def test_the_support_example_runs_as_tests(cli, support, tmp_path):
    r = pytest_in(tmp_path, "--oloproof", "support")
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    failed = {line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("FAILED oloproof[")}
    assert "release-gate" in failed  # the example's gate fails on purpose (no-deletion)
    # the same log as `oloproof run`: one sealed run, whose verdicts say which cases fail
    runs = json.loads(cli("runs", "--json", cwd=support).output)
    assert len(runs) == 1 and runs[0]["status"] == "complete" and runs[0]["cases_committed"] == 40
    run_id = runs[0]["run_id"]
    assert cli("eval", run_id, "--json", "e.json", cwd=support).exit_code == 1
    cases = json.loads((support / "e.json").read_text())["cases"]
    bad = {c["case_id"] for c in cases if any(v["verdict"] in ("fail", "missing") for v in c["verdicts"].values())}
    assert failed - {"release-gate"} == bad
    assert f"{len(bad) + 1} failed, {40 - len(bad)} passed" in out
    some = sorted(bad)[0]
    import re

    hint = re.search(rf"see '(oloproof show {run_id} --db [^']*support/.oloproof/log.db {some})'", out)[1]
    assert "Traceback" not in out
    # the hint runs where pytest printed it (issue 23): it carries the log's --db
    shown = subprocess.run([sys.executable, "-m", *hint.split()], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and f"case {some}" in shown.stdout, shown.stderr


@pytest.mark.slow
def test_the_plugin_is_inert_without_the_option(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    (tmp_path / "oloproof.yaml").write_text("not: a project\n")  # never read
    r = pytest_in(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout and "collected 1 item" in r.stdout  # nothing of the project collected
    assert not (tmp_path / ".oloproof").exists()


@pytest.mark.slow
def test_a_project_that_does_not_load_is_a_usage_error(tmp_path):
    r = pytest_in(tmp_path, "--oloproof", "nowhere")
    assert r.returncode == 4, r.stdout + r.stderr  # pytest's usage error
    assert "--oloproof nowhere:" in r.stderr and "no oloproof.yaml here" in r.stderr
    assert "Traceback" not in r.stderr
