"""What an attack on this release's features found (issues 22 and 23), each now held."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import edit, one_function_project

MODEL_TOOL = '''
    @tool(kind="model")
    def think(self, text):
        return {"plan": "save"}
'''


def test_a_fault_on_a_model_call_is_refused(cli, blank):
    edit(blank / "app.py", "    @tool\n    def add_note", MODEL_TOOL + "\n    @tool\n    def add_note")
    cases = blank / "cases.jsonl"
    first, rest = cases.read_text().split("\n", 1)
    line = json.loads(first)
    line["fault"] = {"tool": "think", "kind": "error"}
    cases.write_text(json.dumps(line) + "\n" + rest)
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "model calls are never faulted" in r.output, r.output
    cases.write_text(first + "\n" + rest)
    edit(blank / "oloproof.yaml", "  - {type: state_matches, mode: subset}\n",
         "  - {type: state_matches, mode: subset}\n  - {type: fault_recovery, tool: think, fault: error}\n")
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "model calls are never faulted" in r.output, r.output


BAD_STR = '''
class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("str exploded")
'''


@pytest.mark.parametrize("where", ["system", "tool"])
def test_an_exception_whose_str_raises_is_recorded(cli, blank, where):
    app = blank / "app.py"
    edit(app, "from oloproof import", BAD_STR + "\nfrom oloproof import")
    if where == "system":
        edit(app, '        note = case.input["note"].strip()', '        raise BadStr()')
    else:
        edit(app, '        self.state.setdefault("notes", []).append(text)', '        raise BadStr()')
        edit(app, '        self.add_note(note)', '        try:\n            self.add_note(note)\n'
                                              '        except BadStr:\n            return {"answer": "caught"}')
    r = cli("run", "--json", "r.json", cwd=blank)
    assert r.exit_code in (0, 1), r.output
    assert "internal error" not in r.output
    cases = json.loads((blank / "r.json").read_text())["cases"]
    if where == "system":
        missing = {"verdict": "missing", "reason": "system_error"}
        assert len(cases) == 3 and all(c["verdicts"]["answer_correct"] == missing for c in cases)
        assert "BadStr: <str() of the exception raised RuntimeError>" in cli("show", "note-1", cwd=blank).output
    else:  # re-raised unchanged: the agent's own `except BadStr` caught it
        assert len(cases) == 3 and all(c["verdicts"]["answer_correct"]["verdict"] == "fail" for c in cases)
        assert "<str() of the exception raised RuntimeError>" in cli("show", "note-1", cwd=blank).output


def test_a_huge_exception_message_is_kept_short(cli, blank):
    edit(blank / "app.py", '        note = case.input["note"].strip()', '        raise ValueError("x" * 5_000_000)')
    r = cli("run", cwd=blank)
    assert len(r.output) < 200_000 and "characters left out" in r.output


def test_a_release_with_no_rules_decides_nothing(cli, blank):
    (blank / "release.yaml").write_text("rules: []\n")
    r = cli("run", "--json", "r.json", cwd=blank)
    assert r.exit_code == 1 and "the release has no rules" in r.output
    assert json.loads((blank / "r.json").read_text())["gate"]["decision"] == "INSUFFICIENT_EVIDENCE"
    r = cli("run", "--case", "note-1", cwd=blank)  # nor does a partial run with no rules
    assert r.exit_code == 1 and "gate passed" not in r.output


def test_a_closed_stdout_at_start_is_no_crash_and_never_lands_in_the_log(blank):
    env = {**os.environ}
    env.pop("OLOPROOF_LOG_KEY", None)
    for args, code in ((["run"], 0), (["gate"], 0), (["show"], 2)):
        r = subprocess.run(f"{sys.executable} -m oloproof {' '.join(args)} >&-", shell=True, cwd=blank,
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == code, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "oloproof", "audit", "verify"], cwd=blank, capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("args, needle", [
    (("run", "--json", "app.py"), "Python file"),
    (("run", "--json", "cases.jsonl"), "JSONL file"),
    (("show", "--json", "oloproof.yaml"), "YAML file"),
    (("export", "--out", "release.yaml"), "YAML file"),
    (("show", "--json", "note-1"), "names no file"),
    (("gate", "--json", "latest"), "names no file"),
])
def test_an_output_never_replaces_the_projects_own_files(cli, blank, args, needle):
    assert cli("run", cwd=blank).exit_code == 0
    before = {f.name: f.read_bytes() for f in blank.iterdir() if f.is_file()}
    r = cli(*args, cwd=blank)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert {f.name: f.read_bytes() for f in blank.iterdir() if f.is_file()} == before


@pytest.mark.slow
def test_the_pytest_plugin_escapes_recorded_text(blank, tmp_path):
    from tests.test_pytest_plugin import pytest_in

    edit(blank / "app.py", '        note = case.input["note"].strip()',
         '        raise ValueError("\\x1b[31mred\\rback")')
    r = pytest_in(tmp_path, "--oloproof", "blank")
    assert r.returncode == 1
    assert "\x1b[31m" not in r.stdout and "\\x1b[31mred\\x0dback" in r.stdout


def test_a_case_id_that_looks_like_an_option_gets_a_hint_that_pastes(cli, tmp_path):
    from oloproof.report.terminal import case_argument

    assert case_argument("-rf") == "-- -rf" and case_argument("a b") == "'a b'"
    p = one_function_project(tmp_path / "p", "    return {'a': 'delete everything'}\n",
                             '{"id": "-rf", "input": {}, "expected": {"a": "x"}}\n')
    assert cli("run", cwd=p).exit_code == 0
    run_id = json.loads(cli("runs", "--json", cwd=p).output)[0]["run_id"]
    assert cli("show", run_id, "--", "-rf", cwd=p).exit_code == 0  # the hint's form works
