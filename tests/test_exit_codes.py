"""Exit codes mean one thing each, for every command (SPEC §17):

  0  the gate passed, or there is nothing to gate
  1  the gate blocked (FAIL or INSUFFICIENT_EVIDENCE); for `audit verify`: a broken chain
  2  bad input or usage: a bad argument, an unknown run id, a path that cannot be written,
     a port in use, a log that cannot be created or written, a full disk (results or report)
  3  an internal error: ONE line naming a file that holds the traceback; the traceback on
     stderr only with `oloproof --debug` or OLOPROOF_DEBUG=1
  130  interrupted

A full disk is exit 2, not 3: 3 says "a bug in Oloproof, report it", and a full disk is the
machine's, like a log that cannot be written (StoreError, exit 2); the operator has to act.

One support-agent run (its gate FAILs) and one of a lenient copy (its gate passes) are recorded
once for the module; commands that write to a log get a copy of it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import sqlite3
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from oloproof.cli.main import cli as group
from tests.conftest import ROOT, copy_example

COMMANDS = ["run", "eval", "gate", "show", "runs", "replay", "view", "export", "audit verify",
            "audit rebuild", "init"]


@dataclass
class Recorded:
    blocked: Path  # the support-agent example: gate FAIL (no-deletion)
    passing: Path  # the same with a lenient release rule: gate PASS
    blocked_run: str
    passing_run: str
    blocked_exit: int
    passing_exit: int
    blocked_stderr: str

    @property
    def blocked_db(self) -> Path:
        return self.blocked / ".oloproof" / "log.db"

    @property
    def passing_db(self) -> Path:
        return self.passing / ".oloproof" / "log.db"


def invoke(*args: object, env: dict[str, str] | None = None):
    return CliRunner().invoke(group, [str(a) for a in args], env=env, catch_exceptions=False)


def _forget_project_modules(before: set[str], root: Path) -> None:
    """What conftest's autouse fixture does for a test, for this module's fixture."""
    for name in set(sys.modules) - before:
        file = str(getattr(sys.modules.get(name), "__file__", "") or "")
        if not name.startswith("oloproof") and file.startswith(str(root)):
            del sys.modules[name]


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Recorded:
    base = tmp_path_factory.mktemp("exit-codes")
    blocked = copy_example("support_agent", base / "blocked")
    passing = copy_example("support_agent", base / "passing")
    release = passing / "release.yaml"
    release.write_text(release.read_text().replace("max_failures: 0", "max_failures: 5"))
    modules, path = set(sys.modules), list(sys.path)
    try:
        b = invoke("run", "--project", blocked, "--json", base / "blocked.json")
        p = invoke("run", "--project", passing, "--json", base / "passing.json")
    finally:
        _forget_project_modules(modules, base)
        sys.path[:] = path
    import json

    return Recorded(blocked, passing, json.loads((base / "blocked.json").read_text())["run_id"],
                    json.loads((base / "passing.json").read_text())["run_id"], b.exit_code, p.exit_code,
                    b.stderr)


@pytest.fixture(autouse=True)
def _quiet_temp(tmp_path, monkeypatch):
    """Tracebacks of forced internal errors land in this test's folder, not the system's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "systemp"))
    (tmp_path / "systemp").mkdir()
    monkeypatch.delenv("OLOPROOF_DEBUG", raising=False)


def copy_log(db: Path, to: Path) -> Path:
    to.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if Path(str(db) + suffix).exists():
            shutil.copy(str(db) + suffix, str(to / "log.db") + suffix)
    return to / "log.db"


def one_error_line(result) -> str:
    """stderr holds exactly one line, ``error: ...``, and no traceback anywhere."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


# -- 0: the gate passed, or nothing to gate -------------------------------------------------


def args_ok(command: str, r: Recorded, tmp: Path) -> list[object]:
    return {
        "run": ["run", "--project", r.passing, "--db", tmp / "log.db"],
        "eval": ["eval", r.passing_run, "--project", r.passing, "--db", r.passing_db],
        "gate": ["gate", r.passing_run, "--db", r.passing_db],
        "show": ["show", r.blocked_run, "case_001", "--db", r.blocked_db],
        "runs": ["runs", "--db", r.blocked_db],
        "replay": ["replay", "--fault", "issue_refund:error", "--case", "case_001", "--run", r.blocked_run,
                   "--project", r.blocked, "--db", copy_log(r.blocked_db, tmp / "copy")],
        "view": ["view", r.blocked_run, "--out", tmp / "report", "--db", r.blocked_db],
        "export": ["export", r.blocked_run, "--out", tmp / "run.jsonl", "--db", r.blocked_db],
        "audit verify": ["audit", "verify", "--db", r.blocked_db],
        "audit rebuild": ["audit", "rebuild", "--db", copy_log(r.blocked_db, tmp / "copy")],
        "init": ["init", "--example", "support-agent", tmp / "demo"],
    }[command]


@pytest.mark.parametrize("command", COMMANDS)
def test_exit_0(rec, tmp_path, command):
    result = invoke(*args_ok(command, rec, tmp_path))
    assert result.exit_code == 0, result.output
    assert not result.stderr.startswith("error:"), result.stderr


def test_a_run_without_release_rules_exits_0(rec, tmp_path):
    project = tmp_path / "norules"
    shutil.copytree(rec.blocked, project, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    config = project / "oloproof.yaml"
    config.write_text(config.read_text().replace("release: release.yaml\n", ""))
    assert invoke("run", "--project", project).exit_code == 0
    assert invoke("gate", "latest", "--db", project / ".oloproof" / "log.db").exit_code == 0


# -- 1: the gate blocked ----------------------------------------------------------------------


def test_exit_1_run(rec):
    assert rec.passing_exit == 0
    assert rec.blocked_exit == 1, rec.blocked_stderr
    assert "error" not in rec.blocked_stderr


@pytest.mark.parametrize("command", ["eval", "gate"])
def test_exit_1_gate_blocked(rec, command):
    args = {"eval": ["eval", rec.blocked_run, "--project", rec.blocked, "--db", rec.blocked_db],
            "gate": ["gate", rec.blocked_run, "--db", rec.blocked_db]}[command]
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and result.stderr == ""


def test_exit_1_audit_verify_broken_chain(rec, tmp_path):
    db = copy_log(rec.blocked_db, tmp_path / "copy")
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
    conn.execute("UPDATE events SET digest = 'tampered' WHERE stream LIKE '%/case_003' AND seq = 1")
    conn.commit()
    conn.close()
    result = invoke("audit", "verify", "--db", db)
    assert result.exit_code == 1, result.output
    assert "BROKEN" in result.output and "case_003" in result.output


# -- 2: bad input or usage ------------------------------------------------------------------


def args_bad(command: str, r: Recorded, tmp: Path) -> tuple[list[object], str]:
    """(arguments, a word the one-line message must hold)."""
    (tmp / "busy").mkdir()
    (tmp / "busy" / "app.py").write_text("# mine\n")  # init would overwrite it
    return {
        "run": (["run", "--project", r.blocked, "--db", tmp / "log.db", "--json", tmp], "--json"),
        "eval": (["eval", "nope", "--project", r.blocked, "--db", r.blocked_db], "no run 'nope'"),
        "gate": (["gate", "nope", "--db", r.blocked_db], "no run 'nope'"),
        "show": (["show", r.blocked_run, "no_such_case", "--db", r.blocked_db], "no_such_case"),
        "runs": (["runs", "--db", tmp / "missing.db"], "missing.db"),
        "replay": (["replay", "--fault", "issue_refund:bogus", "--run", r.blocked_run, "--project", r.blocked,
                    "--db", r.blocked_db], "bogus"),
        "view": (["view", "nope", "--out", tmp / "report", "--db", r.blocked_db], "no run 'nope'"),
        "export": (["export", "nope", "--db", r.blocked_db], "no run 'nope'"),
        "audit verify": (["audit", "verify", "--db", tmp / "missing.db"], "missing.db"),
        "audit rebuild": (["audit", "rebuild", "--db", tmp / "missing.db"], "missing.db"),
        "init": (["init", "--example", "support-agent", tmp / "busy"], "app.py"),
    }[command]


@pytest.mark.parametrize("command", COMMANDS)
def test_exit_2_bad_input_is_one_line(rec, tmp_path, command):
    args, needle = args_bad(command, rec, tmp_path)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert needle in one_error_line(result)
    assert not (tmp_path / "log.db").exists() and not (tmp_path / "report").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_exit_2_usage_errors(command):
    """click's own usage errors: an unknown option, for every command."""
    result = invoke(*command.split(), "--no-such-option")
    assert result.exit_code == 2
    assert "No such option" in result.stderr


def test_exit_2_unknown_command_and_no_command():
    assert invoke("nope").exit_code == 2
    assert invoke().exit_code == 2
    assert invoke("audit", "nope").exit_code == 2
    assert invoke("--help").exit_code == 0 and invoke("--version").exit_code == 0


@pytest.mark.parametrize("raised, code", [
    (click.ClickException("a click failure"), 2),  # click would exit 1
    (click.UsageError("bad usage"), 2),
    (click.BadParameter("bad value"), 2),
    (click.exceptions.Abort(), 130),  # click would exit 1 ("Aborted!")
    (KeyboardInterrupt(), 130),
])
def test_no_click_failure_exits_1(rec, monkeypatch, raised, code):
    import oloproof.app.runs

    def boom(*a, **k):
        raise raised

    monkeypatch.setattr(oloproof.app.runs, "list_runs", boom)
    result = invoke("runs", "--db", rec.blocked_db)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("error", ["OloproofError", "RecordError", "StoreError", "ConfigError"])
def test_no_oloproof_error_exits_1(rec, monkeypatch, error):
    """Only a blocked gate exits 1: an Oloproof error whose class says 1 exits 2."""
    import oloproof.app.runs
    import oloproof.errors

    def boom(*a, **k):
        raise getattr(oloproof.errors, error)(f"a {error}")

    monkeypatch.setattr(oloproof.app.runs, "list_runs", boom)
    result = invoke("runs", "--db", rec.blocked_db)
    assert result.exit_code == 2, result.output
    assert one_error_line(result) == f"error: a {error}"


# -- 2: output paths refused before anything runs -------------------------------------------


BAD_FILE_PATHS = {
    "a folder": lambda t: t / "folder",
    "a missing folder": lambda t: t / "missing" / "out.json",
    "under a regular file": lambda t: t / "file.txt" / "out.json",
}


@pytest.fixture
def places(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("a regular file\n")
    return tmp_path


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "systemp" not in p.parts}


@pytest.mark.parametrize("where", list(BAD_FILE_PATHS))
def test_run_json_refused_before_anything_runs(rec, places, where):
    before = snapshot(places)
    path = BAD_FILE_PATHS[where](places)
    result = invoke("run", "--project", rec.blocked, "--db", places / "log.db", "--json", path)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert line.startswith(f"error: --json {path}")
    assert result.stdout == ""  # nothing ran
    assert snapshot(places) == before  # no log, no FILE.tmp


@pytest.mark.parametrize("where", list(BAD_FILE_PATHS))
def test_eval_json_refused_before_anything_runs(rec, places, where):
    before = snapshot(places)
    path = BAD_FILE_PATHS[where](places)
    result = invoke("eval", rec.blocked_run, "--project", rec.blocked, "--db", rec.blocked_db, "--json", path)
    assert result.exit_code == 2, result.output
    assert one_error_line(result).startswith(f"error: --json {path}")
    assert result.stdout == ""
    assert snapshot(places) == before


@pytest.mark.parametrize("where", list(BAD_FILE_PATHS))
def test_export_out_refused_with_one_line(rec, places, where):
    before = snapshot(places)
    path = BAD_FILE_PATHS[where](places)
    result = invoke("export", rec.blocked_run, "--out", path, "--db", rec.blocked_db)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert str(path.relative_to(places)).split("/")[0] in line
    assert snapshot(places) == before


def test_export_out_message_names_the_option(rec, places):
    result = invoke("export", rec.blocked_run, "--out", places / "folder", "--db", rec.blocked_db)
    assert result.exit_code == 2 and one_error_line(result).startswith("error: --out ")


def test_replay_json_refused_with_one_line(rec, places):
    db = copy_log(rec.blocked_db, places / "copy")
    before = snapshot(places)
    result = invoke("replay", "--fault", "issue_refund:error", "--case", "case_001", "--run", rec.blocked_run,
                    "--project", rec.blocked, "--db", db, "--json", places / "missing" / "r.json")
    assert result.exit_code == 2, result.output
    assert "missing" in one_error_line(result)
    assert leftovers(places) == [] and not (places / "missing").exists()
    assert snapshot(places) - before <= {"copy/log.db-wal", "copy/log.db-shm"}


def test_replay_json_refused_before_anything_runs(rec, places):
    result = invoke("replay", "--fault", "issue_refund:error", "--case", "case_001", "--run", rec.blocked_run,
                    "--project", rec.blocked, "--db", rec.blocked_db, "--json", places / "folder")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("error: --json ")
    assert result.stdout == ""  # no replay table: nothing ran


BAD_FOLDERS = {
    "a regular file": (lambda t: t / "file.txt", "is a file"),
    "a folder that is not empty": (lambda t: t / "busy", "not empty"),
    "a missing parent": (lambda t: t / "missing" / "report", "does not exist"),
    "under a regular file": (lambda t: t / "file.txt" / "report", "is a file"),
}


@pytest.mark.parametrize("where", list(BAD_FOLDERS))
def test_view_out_refused_before_anything_runs(rec, places, monkeypatch, where):
    import oloproof.report.bundle

    (places / "busy").mkdir()
    (places / "busy" / "mine.txt").write_text("mine\n")

    def never(*a, **k):
        raise AssertionError("the report was built")

    monkeypatch.setattr(oloproof.report.bundle, "build_run_bundle", never)
    before = snapshot(places)
    make, needle = BAD_FOLDERS[where]
    path = make(places)
    result = invoke("view", rec.blocked_run, "--out", path, "--db", rec.blocked_db)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert line.startswith(f"error: --out {path}") and needle in line
    assert snapshot(places) == before


def test_view_out_into_an_empty_folder(rec, places):
    result = invoke("view", rec.blocked_run, "--out", places / "folder", "--db", rec.blocked_db)
    assert result.exit_code == 0, result.output
    assert (places / "folder" / "index.html").exists()


# -- 2: the log's folder is a regular file ----------------------------------------------------


def test_oloproof_folder_is_a_regular_file(rec, tmp_path):
    project = tmp_path / "p"
    shutil.copytree(rec.blocked, project, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    (project / ".oloproof").write_text("not a folder\n")
    result = invoke("run", "--project", project)
    assert result.exit_code == 2, result.output
    assert ".oloproof" in one_error_line(result)
    assert (project / ".oloproof").read_text() == "not a folder\n"
    for command in (["runs"], ["gate", "latest"], ["show", "latest"], ["audit", "verify"]):
        result = invoke(*command, "--db", project / ".oloproof" / "log.db")
        assert result.exit_code == 2, (command, result.output)
        one_error_line(result)


# -- 2: a port in use ---------------------------------------------------------------------


def test_view_port_in_use_refused_before_anything_is_computed(rec, tmp_path, monkeypatch):
    import oloproof.report.bundle

    def never(*a, **k):
        raise AssertionError("the report was built")

    monkeypatch.setattr(oloproof.report.bundle, "build_run_bundle", never)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("view", rec.blocked_run, "--port", port, "--db", rec.blocked_db)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert f"--port {port}" in line and "in use" in line
    assert result.stdout == ""
    assert list((tmp_path / "systemp").iterdir()) == []  # no report folder left in the temp folder


def test_view_serving_a_missing_log_leaves_nothing(tmp_path):
    result = invoke("view", "--port", 0, "--db", tmp_path / "missing.db")
    assert result.exit_code == 2 and "missing.db" in one_error_line(result)
    assert list((tmp_path / "systemp").iterdir()) == []  # the report folder made for serving is gone


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_view_port_out_of_range(rec, port):
    result = invoke("view", rec.blocked_run, "--port", port, "--db", rec.blocked_db)
    assert result.exit_code == 2 and f"--port {port}" in one_error_line(result)


def test_view_serves_after_binding(rec, tmp_path, monkeypatch):
    """The bound server serves the bundle built after it (and the folder goes when it stops)."""
    import urllib.request

    from oloproof.cli import view

    seen = {}

    def serve(server, folder):
        seen["folder"] = folder
        port = server.server_address[1]
        import threading

        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/data/summary.js", timeout=10).read().decode()
            seen["summary"] = page
        finally:
            server.shutdown()
            server.server_close()

    monkeypatch.setattr(view, "serve", serve)
    result = invoke("view", rec.blocked_run, "--port", 0, "--db", rec.blocked_db)
    assert result.exit_code == 0, result.output
    assert seen["summary"].startswith("OLOPROOF.summary(") and rec.blocked_run in seen["summary"]
    assert not seen["folder"].exists()


# -- 2: a full disk ---------------------------------------------------------------------------


def enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_writing_the_log_is_one_line(rec, tmp_path, monkeypatch):
    from oloproof.errors import StoreError
    from oloproof.store.sqlite import SQLiteStore

    def full(self, *a, **k):
        raise StoreError(f"{self.path}: cannot write the log: database or disk is full")

    monkeypatch.setattr(SQLiteStore, "commit", full)
    result = invoke("run", "--project", rec.blocked, "--db", tmp_path / "log.db")
    assert result.exit_code == 2, result.output
    assert "disk is full" in one_error_line(result)


def test_enospc_from_the_log_is_one_line(rec, tmp_path, monkeypatch):
    from oloproof.store.sqlite import SQLiteStore

    monkeypatch.setattr(SQLiteStore, "commit", enospc)
    result = invoke("run", "--project", rec.blocked, "--db", tmp_path / "log.db")
    assert result.exit_code == 2, result.output
    assert one_error_line(result) == "error: No space left on device"


def test_untranslated_sqlite_full_disk_is_one_line(rec, tmp_path, monkeypatch):
    from oloproof.store.sqlite import SQLiteStore

    def full(self, *a, **k):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(SQLiteStore, "commit", full)
    result = invoke("run", "--project", rec.blocked, "--db", tmp_path / "log.db")
    assert result.exit_code == 2, result.output
    assert "disk is full" in one_error_line(result)


def test_full_disk_writing_run_json(rec, tmp_path, monkeypatch):
    from oloproof.report.results import ResultsFile

    monkeypatch.setattr(ResultsFile, "_emit", enospc)
    result = invoke("run", "--project", rec.blocked, "--db", tmp_path / "log.db", "--json", tmp_path / "r.json")
    assert result.exit_code == 2, result.output
    assert "No space left on device" in one_error_line(result)
    assert not (tmp_path / "r.json").exists() and leftovers(tmp_path) == []


def test_full_disk_writing_eval_json(rec, tmp_path, monkeypatch):
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, text):
            enospc()

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real(fd, *a, **k)))
    result = invoke("eval", rec.blocked_run, "--project", rec.blocked, "--db", rec.blocked_db,
                    "--json", tmp_path / "r.json")
    assert result.exit_code == 2, result.output
    assert one_error_line(result) == "error: No space left on device"
    assert not (tmp_path / "r.json").exists() and leftovers(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir() if p.name != "systemp"] == []


def test_full_disk_writing_the_html_report(rec, tmp_path, monkeypatch):
    real = Path.write_text

    def write_text(self, *a, **k):
        if "cases-" in self.name:
            enospc()
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)
    result = invoke("view", rec.blocked_run, "--out", tmp_path / "report", "--db", rec.blocked_db)
    assert result.exit_code == 2, result.output
    assert one_error_line(result) == "error: No space left on device"
    assert not (tmp_path / "report").exists()  # no half-written report


# -- 3: an internal error -------------------------------------------------------------------


def forced(*a, **k):
    raise TypeError("forced for the test")


INTERNALS = {  # where to force a TypeError, per command
    "run": ("oloproof.app.run", "run_suite"),
    "eval": ("oloproof.app.evidence", "evaluate_run"),
    "gate": ("oloproof.app.reports", "run_report"),
    "show": ("oloproof.app.reports", "case_panel"),
    "runs": ("oloproof.app.runs", "list_runs"),
    "replay": ("oloproof.app.replay", "replay_run"),
    "view": ("oloproof.report.bundle", "build_run_bundle"),
    "export": ("oloproof.report.export", "export_lines"),
    "audit verify": ("oloproof.store.sqlite", "SQLiteStore.check_streams"),  # its one read of the log
    "audit rebuild": ("oloproof.app.projections", "rebuild_projections"),
    "init": ("oloproof.cli.init", "copy_example"),
}
LINE = re.compile(r"^error: internal error \(TypeError: forced for the test\); this is a bug in Oloproof: "
                  r"the traceback is in (\S+), please report it with that file$")


def force(monkeypatch, command: str) -> None:
    import importlib

    module, name = INTERNALS[command]
    target = importlib.import_module(module)
    *owner, attr = name.split(".")
    if owner:
        target = getattr(target, owner[0])
    monkeypatch.setattr(target, attr, forced)


@pytest.mark.parametrize("command", COMMANDS)
def test_exit_3_internal_error_is_one_line(rec, tmp_path, monkeypatch, command):
    force(monkeypatch, command)
    result = invoke(*args_ok(command, rec, tmp_path))
    assert result.exit_code == 3, result.output
    match = LINE.match(one_error_line(result))
    assert match, result.stderr
    report = Path(match.group(1))
    assert report.parent == tmp_path / "systemp"
    text = report.read_text()
    assert "Traceback (most recent call last)" in text and "TypeError: forced for the test" in text
    assert "oloproof " in text.splitlines()[0]


@pytest.mark.parametrize("how", ["--debug", "OLOPROOF_DEBUG=1"])
@pytest.mark.parametrize("command", ["runs", "view", "audit verify"])
def test_debug_prints_the_traceback(rec, tmp_path, monkeypatch, command, how):
    force(monkeypatch, command)
    args = args_ok(command, rec, tmp_path)
    if how == "--debug":
        result = invoke("--debug", *args)
    else:
        result = invoke(*args, env={"OLOPROOF_DEBUG": "1"})
    assert result.exit_code == 3
    assert "Traceback (most recent call last)" in result.stderr and "TypeError: forced for the test" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: internal error (TypeError: forced for the test)") and "traceback above" in last
    assert list((tmp_path / "systemp").iterdir()) == []  # printed, not written


def test_debug_flag_also_shows_bad_input_tracebacks(rec):
    result = invoke("--debug", "gate", "nope", "--db", rec.blocked_db)
    assert result.exit_code == 2 and "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: no run 'nope'")


def test_internal_error_when_the_traceback_cannot_be_written(rec, monkeypatch):
    def readonly(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    force(monkeypatch, "runs")
    monkeypatch.setattr(tempfile, "mkstemp", readonly)
    result = invoke("runs", "--db", rec.blocked_db)
    assert result.exit_code == 3
    assert one_error_line(result) == ("error: internal error (TypeError: forced for the test); this is a bug in "
                                      "Oloproof: run again with --debug for the traceback and report it")


def test_internal_error_message_is_one_line_even_for_a_multiline_message(rec, monkeypatch):
    import oloproof.app.runs

    def boom(*a, **k):
        raise ValueError("first\nsecond\n" + "x" * 1000)

    monkeypatch.setattr(oloproof.app.runs, "list_runs", boom)
    result = invoke("runs", "--db", rec.blocked_db)
    assert result.exit_code == 3
    line = one_error_line(result)
    assert line.startswith("error: internal error (ValueError: first second xxx") and len(line) < 600


def test_interrupted_is_130(rec, monkeypatch):
    import oloproof.app.runs
    from oloproof.errors import Interrupted

    def stop(*a, **k):
        raise Interrupted()

    monkeypatch.setattr(oloproof.app.runs, "list_runs", stop)
    result = invoke("runs", "--db", rec.blocked_db)
    assert result.exit_code == 130 and one_error_line(result) == "error: interrupted"


def test_console_script_entry_point_exit_codes(rec, tmp_path):
    """The installed command (not click's test runner) keeps to the codes as well."""
    import subprocess

    def run(*args):
        return subprocess.run([sys.executable, "-m", "oloproof", *map(str, args)], cwd=tmp_path, check=False,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})

    assert run("gate", rec.blocked_run, "--db", rec.blocked_db).returncode == 1
    assert run("gate", rec.passing_run, "--db", rec.passing_db).returncode == 0
    bad = run("gate", "nope", "--db", rec.blocked_db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert run("nope").returncode == 2
