"""The smaller findings of a newcomer's first hour (issue 23, item 5), each as it was met."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.conftest import copy_example, edit


def test_a_byte_order_mark_is_named(cli, blank):
    (blank / "cases.jsonl").write_bytes(b"\xef\xbb\xbf" + (blank / "cases.jsonl").read_bytes())
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "cases.jsonl:1" in r.output and "byte-order mark (BOM)" in r.output


def test_a_case_spread_over_lines_is_named(cli, blank):
    (blank / "cases.jsonl").write_text('{"id": "a",\n "input": {"note": "x"}}\n')
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "cases.jsonl:1" in r.output and "a case is one line" in r.output


def test_a_numeric_version_says_quote_it(cli, blank):
    edit(blank / "oloproof.yaml", 'version: "0.1"', "version: 1.0")
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and 'quote it ("1.0")' in r.output and "oloproof.yaml:6" in r.output


def test_a_callable_typo_gets_a_did_you_mean(cli, blank):
    edit(blank / "oloproof.yaml", "callable: app:Agent", "callable: app:Agnet")
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "did you mean 'Agent'?" in r.output


def test_a_choice_typo_gets_a_did_you_mean_and_no_pydantic_prefix(cli, blank):
    edit(blank / "oloproof.yaml", "mode: subset", "mode: subsett")
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "did you mean 'subset'?" in r.output
    edit(blank / "oloproof.yaml", "mode: subsett", "mode: subset")
    edit(blank / "release.yaml", "max_failures: 0}", "no_regression: {baseline: 'pin:x', max_p: 0.1, "
                                                     "max_regressions: 0}}")
    r = cli("run", cwd=blank)
    assert r.exit_code == 2 and "exactly one of" in r.output and "Value error" not in r.output


def test_export_sqlite_never_overwrites_without_force_nor_a_python_file(cli, blank):
    assert cli("run", cwd=blank).exit_code == 0
    assert cli("export", "--format", "sqlite", "a.db", cwd=blank).exit_code == 0
    before = (blank / "a.db").read_bytes()
    r = cli("export", "--format", "sqlite", "a.db", cwd=blank)
    assert r.exit_code == 2 and "--force" in r.output and (blank / "a.db").read_bytes() == before
    assert cli("export", "--format", "sqlite", "a.db", "--force", cwd=blank).exit_code == 0
    code = (blank / "app.py").read_text()
    for args in (("export", "latest", "app.py"), ("export", "--format", "sqlite", "app.py", "--force")):
        r = cli(*args, cwd=blank)
        assert r.exit_code == 2 and "Python file" in r.output, args
    assert (blank / "app.py").read_text() == code


def test_view_port_prints_its_address_at_once(cli, blank):
    assert cli("run", cwd=blank).exit_code == 0
    env = {**os.environ}
    env.pop("OLOPROOF_LOG_KEY", None)
    proc = subprocess.Popen([sys.executable, "-m", "oloproof", "view", "--port", "0"], cwd=blank,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        start = time.monotonic()
        line = proc.stdout.readline()  # a pipe: block-buffered unless flushed
        assert "serving the report on http://127.0.0.1:" in line, line
        assert time.monotonic() - start < 60
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_imported_run_says_which_command_judges_it(cli, blank):
    assert cli("run", cwd=blank).exit_code == 0
    assert cli("export", "latest", "--format", "otlp-json", "--out", "t.jsonl", cwd=blank).exit_code == 0
    assert cli("import", "otel", "t.jsonl", cwd=blank).exit_code == 0
    r = cli("show", cwd=blank)
    assert r.exit_code == 0 and "imported from OpenTelemetry traces" in r.output
    assert "oloproof eval " in r.output and "--project DIR" in r.output


def test_import_from_standard_input_says_it_cannot(cli, blank):
    r = cli("import", "otel", "-", cwd=blank)
    assert r.exit_code == 2 and "standard input cannot be imported" in r.output


def test_a_changed_code_note_names_the_file(cli, blank):
    assert cli("run", cwd=blank).exit_code == 0
    edit(blank / "app.py", "note = case.input[\"note\"].strip()", "note = case.input[\"note\"].strip()  # edited")
    r = cli("run", cwd=blank)
    assert r.exit_code == 0
    note = next(line for line in r.output.splitlines() if "changed since run" in line)
    assert "(app.py)" in note, note


def test_replay_tables_fit_120_columns(tmp_path):
    p = tmp_path / "desk"
    copy_example("stateful_agent", p)
    env = {**os.environ, "COLUMNS": "120"}
    env.pop("OLOPROOF_LOG_KEY", None)
    run = subprocess.run([sys.executable, "-m", "oloproof", "run"], cwd=p, capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode in (0, 1), run.stderr
    r = subprocess.run([sys.executable, "-m", "oloproof", "replay", "--fault", "issue_refund:timeout"], cwd=p,
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    wide = [line for line in r.stdout.splitlines() if len(line) > 120]
    assert not wide, wide[:3]


def test_copyable_commands_are_never_wrapped(cli, blank, monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    r = cli("run", "--case", "note-1", cwd=blank)
    assert r.exit_code == 1
    lines = [line for line in r.output.splitlines() if line.startswith("partial run: ")]
    assert len(lines) == 1 and lines[0].rstrip().endswith("to decide a release"), r.output


def test_a_missing_extra_is_named_by_the_import_error(cli, blank):
    edit(blank / "app.py", "from oloproof import", "import pydantic_ai_not_here  # noqa\nfrom oloproof import")
    from oloproof.app import project

    project.MISSING_EXTRAS["pydantic_ai_not_here"] = "pip install 'oloproof[otel]' pydantic-ai-slim"
    try:
        r = cli("run", cwd=blank)
    finally:
        del project.MISSING_EXTRAS["pydantic_ai_not_here"]
    assert r.exit_code == 2 and "install it with: pip install 'oloproof[otel]' pydantic-ai-slim" in r.output
