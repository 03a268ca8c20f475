"""The README says what the code does: its fault table, its commands and its seed table."""

import json
import re
from pathlib import Path

from oloproof.cli.main import cli
from oloproof.replay.faults import FAULT_KINDS, fault_result

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_fault_table_matches_the_fault_results():
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|$", README, re.M))
    for kind in FAULT_KINDS:
        shown = rows[kind].replace("<tool>", "issue_refund")
        value = fault_result(kind, "issue_refund")
        if isinstance(value, dict):
            assert json.loads(shown.split("`")[1]) == value
        else:
            assert f"'{value}'" in shown


def test_every_command_is_in_the_readme_table():
    for name, _command in cli.commands.items():
        assert re.search(rf"^\| `oloproof {name}\b", README, re.M), name


def test_the_two_commands_and_ci():
    blocks = re.findall(r"```bash\n(.+?)\n```", README, re.S)
    assert len(blocks) >= 2
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert blocks[1].strip() in ci.splitlines()  # .ci/run calls exactly the README's test command
    assert "oloproof init --example support-agent" in blocks[0] and "oloproof run" in blocks[0]


def test_the_executor_options_timeouts_and_the_sandbox_rule_are_documented():
    run = cli.commands["run"]
    for option in ("--concurrency", "--workers", "--executor", "--scheduler"):
        assert any(option in p.opts for p in run.params), option
        assert f"oloproof run {option}" in README or f"`{option}" in README, option
    assert "--executor dask" in README and "timeout: 30" in README and "case_timeout" in README
    assert "worker_died" in README and "One sandbox per slot" in README and "factory: app:new_desk" in README
