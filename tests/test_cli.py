"""CLI behaviour: help with examples, init, bad input exits 2 with nothing written."""


import pytest

from oloproof.cli.main import cli as group
from tests.conftest import write


def all_commands(cmd, prefix=()):
    import click

    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from all_commands(sub, prefix + (name,))
    else:
        yield prefix


@pytest.mark.parametrize("path", list(all_commands(group)))
def test_every_command_has_help_with_an_example(cli, path):
    result = cli(*path, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output and "oloproof " in result.output.split("Example:")[1]


def test_init_copies_and_refuses_to_overwrite(cli, tmp_path):
    r = cli("init", "--example", "support-agent", str(tmp_path / "demo"))
    assert r.exit_code == 0
    assert {p.name for p in (tmp_path / "demo").iterdir()} >= {"app.py", "cases.jsonl", "oloproof.yaml",
                                                                "release.yaml", "tools.py"}
    (tmp_path / "demo" / "app.py").write_text("# mine\n")
    r = cli("init", "--example", "support-agent", str(tmp_path / "demo"))
    assert r.exit_code == 2 and "refusing to overwrite" in r.output
    assert (tmp_path / "demo" / "app.py").read_text() == "# mine\n"


def test_init_refuses_partial_writes(cli, tmp_path):
    write(tmp_path / "d" / "tools.py", "# mine\n")
    r = cli("init", "--example", "support-agent", str(tmp_path / "d"))
    assert r.exit_code == 2
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["tools.py"]


def test_init_refuses_writing_through_a_symlink(cli, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "outside.py").write_text("# outside\n")
    (tmp_path / "d" / "app.py").symlink_to(tmp_path / "outside.py")
    r = cli("init", "--example", "support-agent", str(tmp_path / "d"))
    assert r.exit_code == 2
    assert (tmp_path / "outside.py").read_text() == "# outside\n"


def test_init_unknown_example(cli, tmp_path):
    r = cli("init", "--example", "nope", str(tmp_path / "x"))
    assert r.exit_code == 2 and "support-agent" in r.output
    assert not (tmp_path / "x").exists()


def test_copy_example_outside_target_is_refused(tmp_path, monkeypatch):
    from oloproof.app import examples
    from oloproof.errors import UsageError

    src = tmp_path / "src" / "evil"
    write(src / "ok.py", "x = 1\n")
    monkeypatch.setattr(examples, "examples_root", lambda: tmp_path / "src")
    monkeypatch.setitem(examples.EXAMPLES, "evil", "evil")
    real = examples.example_files
    monkeypatch.setattr(examples, "example_files",
                        lambda name: (src, [src / "ok.py", src / ".." / ".." / "escape.py"]) if name == "evil"
                        else real(name))
    with pytest.raises(UsageError, match="outside"):
        examples.copy_example("evil", tmp_path / "target")
    assert not (tmp_path / "target" / "ok.py").exists()


BAD_INPUTS = {
    "unknown config key": ("oloproof.yaml", lambda t: t.replace("min_slice_support", "min_slice_suport"),
                           "did you mean 'min_slice_support'"),
    "bad evaluator option": ("oloproof.yaml", lambda t: t.replace("max_repeats: 2", "max_repeats: -1"),
                             "oloproof.yaml:11: evaluators[2].max_repeats"),
    "bad release rule": ("release.yaml", lambda t: t.replace("agent_constraints_satisfied", "agent_constraint"),
                         "release.yaml:2"),
    "malformed case": ("cases.jsonl", lambda t: t.replace('"case_007"', '"case_007" "x"'), "cases.jsonl:7"),
    "duplicate case": ("cases.jsonl", lambda t: t.replace('"case_008"', '"case_007"'), "duplicate id"),
    "tools not a list": ("cases.jsonl", lambda t: t.replace('"tools": ["lookup_order"]', '"tools": "lookup_order"', 1),
                         "expected.tools"),
    "tilde in id": ("cases.jsonl", lambda t: t.replace('"case_003"', '"case~003"'), "reserved"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_exit_2_and_nothing_written(cli, support_project, name):
    file, edit, needle = BAD_INPUTS[name]
    path = support_project / file
    path.write_text(edit(path.read_text()))
    r = cli("run", cwd=support_project)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert r.output.startswith("error: ")
    assert not (support_project / ".oloproof").exists()


def test_bad_cli_arguments(cli, support_project):
    assert cli("run", "--durability", "sometimes", cwd=support_project).exit_code == 2
    r = cli("run", "--resume", "nope", cwd=support_project)
    assert r.exit_code == 2 and "no event log" in r.output
    r = cli("runs", cwd=support_project)
    assert r.exit_code == 2 and "no event log" in r.output
    assert not (support_project / ".oloproof").exists()


def test_corrupt_log_is_exit_2(cli, tmp_path):
    write(tmp_path / "log.db", "garbage" * 200)
    r = cli("runs", "--db", str(tmp_path / "log.db"))
    assert r.exit_code == 2 and "log.db" in r.output


def test_system_errors_are_missing_not_lost(cli, support_project):
    app = support_project / "app.py"
    app.write_text(app.read_text().replace(
        "    steps = []\n",
        "    steps = []\n    if case.id == 'case_005':\n        raise ValueError('model timeout')\n", 1))
    r = cli("run", "--json", "r.json", cwd=support_project)
    assert r.exit_code == 1
    import json

    data = json.loads((support_project / "r.json").read_text())
    c5 = next(c for c in data["cases"] if c["case_id"] == "case_005")
    assert c5["verdicts"]["answer_correct"] == {"verdict": "missing", "reason": "system_error"}
    assert data["criteria"][0]["missing"] == 1 and data["criteria"][0]["observed"] == 39
    panel = cli("show", "latest", "case_005")
    assert "ValueError: model timeout" in panel.output


def test_invalid_record_is_reported_with_case_and_field(cli, support_project):
    app = support_project / "app.py"
    app.write_text(app.read_text().replace("step_index=deletion if deletion is not None else len(steps)",
                                           "step_index=99"))
    r = cli("run", "--json", "r.json", cwd=support_project)
    # every case missing: no-deletion cannot be decided either way
    assert r.exit_code == 1 and "constraints[0].step_index" in r.output and "40 cases errored" in r.output
    import json

    data = json.loads((support_project / "r.json").read_text())
    assert len(data["cases"]) == 40
    assert all(c["verdicts"]["agent_tool_sequence"]["reason"] == "invalid_record" for c in data["cases"])
    panel = cli("show", "latest", "case_001")
    assert "constraints[0].step_index" in panel.output and "case 'case_001'" in panel.output


def test_bad_input_after_a_run_writes_nothing(cli, support_run):
    import sqlite3

    db = support_run / ".oloproof" / "log.db"
    count = lambda: sqlite3.connect(db).execute("SELECT COUNT(*) FROM events").fetchone()[0]  # noqa: E731
    before = count()
    cases = support_run / "cases.jsonl"
    cases.write_text(cases.read_text() + '{"id": "case_041", "input": {}, "expected": {"tools": "x"}}\n')
    r = cli("run", cwd=support_run)
    assert r.exit_code == 2 and "cases.jsonl:41" in r.output and "case 'case_041'" in r.output
    assert count() == before


def test_undecodable_event_is_a_clear_error(cli, support_run, monkeypatch):
    import sqlite3

    monkeypatch.chdir(support_run)
    db = support_run / ".oloproof" / "log.db"
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET payload = '{\"type\": \"mystery.v9\"}' WHERE stream LIKE '%/case_003' AND seq = 1")
    conn.commit()
    conn.close()
    r = cli("show", "latest", "case_003")
    # the run's audit refuses it before anything decodes it
    assert r.exit_code == 2 and "case_003 #1: digest mismatch" in r.output and "fails its audit" in r.output
    r = cli("audit", "rebuild")  # rebuilding reads every event
    assert r.exit_code == 2 and "case_003" in r.output
    v = cli("audit", "verify")
    assert v.exit_code == 1 and "case_003 #1" in v.output and "cannot be decoded" in v.output


def test_progress_bar_on_a_terminal():
    import io

    from rich.console import Console

    from oloproof.cli.run import _progress

    out = Console(file=io.StringIO(), force_terminal=True, width=80)
    with _progress(out, 10) as update:
        assert update is not None
        update(5, 10)
    plain = Console(file=io.StringIO(), force_terminal=False)
    with _progress(plain, 10) as update:
        assert update is None
