"""A closed standard output never turns into exit 1, the gate's code (issue 22, SPEC §18.1):
``oloproof gate latest | true`` keeps the gate's decision; a command that decides nothing and
could not deliver its output exits 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import copy_example


def oloproof_closed_stdout(cwd, *args):
    """Run the CLI with stdout a pipe whose reader is already gone (every write: EPIPE)."""
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([sys.executable, "-m", "oloproof", *args], cwd=cwd, stdout=write,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    return p


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    p = tmp_path_factory.mktemp("pipe") / "demo"
    copy_example("support_agent", p)
    release = p / "release.yaml"
    release.write_text(release.read_text().replace("max_failures: 0", "max_failures: 5"))  # a passing gate
    r = oloproof_closed_stdout(p, "run")
    assert r.returncode == 0, r.stderr  # a passing run, its table thrown away, keeps its 0
    return p


def test_a_passing_gate_into_a_closed_pipe_exits_0(demo):
    r = oloproof_closed_stdout(demo, "gate", "latest")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_a_blocked_gate_into_a_closed_pipe_exits_1(demo, tmp_path):
    p = tmp_path / "blocked"
    shutil.copytree(demo, p)
    (p / "release.yaml").write_text((p / "release.yaml").read_text().replace("max_failures: 5", "max_failures: 0"))
    r = oloproof_closed_stdout(p, "run")
    assert r.returncode == 1, r.stderr
    assert oloproof_closed_stdout(p, "gate", "latest").returncode == 1
    assert oloproof_closed_stdout(p, "eval", "latest").returncode == 1


@pytest.mark.parametrize("args", [("show", "latest"), ("runs",), ("search", "refund"), ("show", "latest", "case_001")])
def test_a_command_that_decides_nothing_exits_2(demo, args):
    r = oloproof_closed_stdout(demo, *args)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
