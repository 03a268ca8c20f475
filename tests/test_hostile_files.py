"""Hostile files, arguments, keys and logs: each test reproduces an attack that worked (a hang,
an exit 3, a misleading message) and now ends in a clear one-line error naming what is wrong
(exit 2), with nothing half-written in the log."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oloproof.config.prefixes import PrefixCases, load_prefix_file
from oloproof.errors import CaseFileError
from oloproof.store.sqlite import _SCHEMA, _TRIGGERS, _split
from tests.conftest import write

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only (FIFOs, devices, flock)")

APP = '''\
import os
import signal
import time

from oloproof import current_case, tool


@tool
def act(what):
    return {"ok": what}


def agent(case):
    if os.environ.get("DIE_AT") == case.id:
        os.kill(os.getpid(), signal.SIGKILL)  # the run is killed in the middle
    time.sleep(float(os.environ.get("SLOW", "0")))
    act(case.input["what"])
    current_case().finish("success")
    return {"answer": "ok"}
'''

CONFIG = '''\
system: {name: tiny, version: "1", callable: app:agent, records: [agent_trajectory/v1]}
cases: cases.jsonl
release: release.yaml
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
'''
LABELS = '''\
metamorphic:
  transforms:
    - {name: loud, field: what, template: "{value}!", validity_labels: labels.jsonl}
'''
RELEASE = "rules:\n  - {name: answers, criterion: answer_correct, max_failures: 0}\n"
LOG = Path(".oloproof") / "log.db"


def tiny(tmp_path: Path, n: int = 6, config: str = CONFIG) -> Path:
    p = tmp_path / "tiny"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", config)
    write(p / "release.yaml", RELEASE)
    write(p / "cases.jsonl", "".join(
        json.dumps({"id": f"c{i}", "input": {"what": f"w{i}"}, "expected": {"answer": "ok"}}) + "\n"
        for i in range(n)))
    return p


def oloproof(*args: str | bytes, cwd: Path, env: dict | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command in its own process (a hang is a timeout, not a stuck test run)."""
    return subprocess.run([sys.executable, "-m", "oloproof", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


# ---- 1. a project file that is a FIFO or a device ----------------------------------------------

def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize("name", ["cases.jsonl", "oloproof.yaml", "release.yaml", "labels.jsonl"])
@pytest.mark.parametrize("make", [_fifo, _dev_zero], ids=["fifo", "dev-zero"])
def test_a_project_file_that_is_a_pipe_or_a_device_is_refused_at_once(tmp_path, name, make):
    p = tiny(tmp_path, config=CONFIG + LABELS)
    make(p / name)
    started = time.monotonic()
    r = oloproof("run", cwd=p, timeout=30)  # before: a FIFO hung for ever, /dev/zero filled the memory
    assert time.monotonic() - started < 20
    one_line_error(r, name, "not a regular file", "named pipe" if make is _fifo else "character device")
    assert not (p / LOG).exists()  # nothing written


def test_a_symlink_to_a_regular_file_is_still_read(tmp_path):
    p = tiny(tmp_path)
    (p / "cases.jsonl").rename(p / "real-cases.jsonl")
    (p / "cases.jsonl").symlink_to("real-cases.jsonl")
    r = oloproof("run", cwd=p)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def alarm():
    """A read that would block fails the test instead of hanging it."""
    def on_alarm(signum, frame):
        raise TimeoutError("blocked reading a FIFO")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_prefix_file_that_is_a_pipe_is_refused_not_skipped(tmp_path, alarm):
    folder = tmp_path / "prefixes"
    folder.mkdir()
    os.mkfifo(folder / "c1.yaml")
    (folder / "c2.yaml").symlink_to("/dev/zero")
    assert [f.name for f in PrefixCases(folder).files()] == ["c1.yaml", "c2.yaml"]  # before: skipped silently
    with pytest.raises(CaseFileError, match=r"c1\.yaml: is not a regular file but a named pipe"):
        PrefixCases(folder).validate()
    with pytest.raises(CaseFileError, match=r"c2\.yaml: is not a regular file but a character device"):
        load_prefix_file(folder / "c2.yaml")


# ---- 2. a command-line argument that is not UTF-8 ----------------------------------------------

BAD = os.fsdecode(b"\xff")  # what Python makes of the byte: a lone surrogate (surrogateescape)

COMMANDS = {
    "show": ["show", b"\xff"],
    "run --db": ["run", "--db", b"\xff.db"],
    "runs --pin": ["runs", "--pin", b"\xff", "release"],
    "search": ["search", b"refund\xff"],
    "gate": ["gate", b"\xff"],
    "diff": ["diff", "latest", b"\xff"],
    "eval": ["eval", b"\xff"],
    "replay --fault": ["replay", "latest", "--fault", b"act:\xff"],
    "export": ["export", b"\xff"],
    "view": ["view", "latest", "--out", b"\xff"],
    "import otel": ["import", "otel", b"\xff.jsonl"],
    "audit verify": ["audit", "verify", "--expect", b"\xff"],
    "attribute": ["attribute", "latest", b"\xff"],
    "prefix create": ["prefix", "create", "latest", b"\xff"],
    "init": ["init", b"\xff"],
}


def test_a_non_utf8_argument_is_bad_input_for_every_command(tmp_path):
    p = tiny(tmp_path)
    assert oloproof("run", cwd=p).returncode == 0
    env = {**os.environ, "COLUMNS": "200"}
    procs = {name: subprocess.Popen([sys.executable, "-m", "oloproof", *args], cwd=p, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, args in COMMANDS.items()}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        line = one_line_error(r, "is not valid UTF-8", "0xff", r"\xff")
        assert "argument" in line, (name, line)
    assert not (p / "\udcff.db").exists() and not (p / "\udcff").exists()


def test_the_check_runs_in_process_too(cli, tmp_path):
    r = cli("show", BAD, cwd=tmp_path)
    assert r.exit_code == 2 and "is not valid UTF-8" in r.output


# ---- 3. a wrong OLOPROOF_LOG_KEY is not tampering ----------------------------------------------

def _keyed(cli, tmp_path, monkeypatch, key: str) -> Path:
    p = tiny(tmp_path)
    monkeypatch.setenv("OLOPROOF_LOG_KEY", key)
    assert cli("run", cwd=p).exit_code == 0
    return p


def test_a_wrong_key_is_named_as_the_wrong_key(cli, tmp_path, monkeypatch):
    p = _keyed(cli, tmp_path, monkeypatch, "s3cret")
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "other")
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "wrong key" in r.output, r.output
    assert "digest mismatch" not in r.output and "altered" not in r.output and r.output.count("BROKEN") == 1
    before = (p / LOG).stat().st_size, len(list((p / ".oloproof").iterdir()))
    r = cli("run", cwd=p)  # before: appended a run chained under the other key
    assert r.exit_code == 2 and "wrong key" in r.output, r.output
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "s3cret")
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 0 and "1 run (1 sealed)" in r.output, r.output  # nothing was added
    assert before[1] == len(list((p / ".oloproof").iterdir()))


@pytest.mark.parametrize("written, given", [("s3cret", "s3cret\n"), ("s3cret\n", "s3cret"), ("s3cret", "s3cret\r\n")])
def test_a_trailing_newline_in_the_key_is_named(cli, tmp_path, monkeypatch, written, given):
    p = _keyed(cli, tmp_path, monkeypatch, written)
    monkeypatch.setenv("OLOPROOF_LOG_KEY", given)
    for command in (["audit", "verify"], ["run"]):
        r = cli(*command, cwd=p)
        assert r.exit_code in (1, 2) and "wrong key" in r.output and "newline" in r.output, r.output
        assert "digest mismatch" not in r.output


def _tamper(db: Path, sql: str, *args) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    for name in _TRIGGERS:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute(sql, args)
    for definition in _TRIGGERS.values():
        conn.execute(definition)
    conn.close()


def test_with_the_right_key_a_broken_chain_is_still_tampering(cli, tmp_path, monkeypatch):
    p = _keyed(cli, tmp_path, monkeypatch, "s3cret")
    _tamper(p / LOG, "UPDATE events SET payload = CAST(payload AS TEXT) || ' ' "
                     "WHERE stream LIKE '%/c2' AND seq = 1")
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "c2 #1: digest mismatch" in r.output and "wrong key" not in r.output, r.output
    # the first event of the only run rewritten: the cases' streams still prove the key
    _tamper(p / LOG, "UPDATE events SET payload = CAST(payload AS TEXT) || ' ' "
                     "WHERE instr(stream, '/') = 0 AND seq = 0")
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "#0: digest mismatch" in r.output and "wrong key" not in r.output, r.output


def test_a_non_utf8_key_is_taken_as_its_bytes(tmp_path):
    p = tiny(tmp_path)
    key = os.fsdecode(b"k\xffey")
    assert oloproof("run", cwd=p, env={"OLOPROOF_LOG_KEY": key}).returncode == 0  # before: exit 3
    assert oloproof("audit", "verify", cwd=p, env={"OLOPROOF_LOG_KEY": key}).returncode == 0
    r = oloproof("audit", "verify", cwd=p, env={"OLOPROOF_LOG_KEY": "key"})
    assert r.returncode == 1 and "wrong key" in r.stdout, r.stdout


# ---- 4. a log whose creation was interrupted ---------------------------------------------------

def _zero_length(db: Path) -> None:
    db.write_bytes(b"")


def _empty_wal(db: Path) -> None:  # killed right after the file was switched to WAL
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.close()


def _partial(db: Path) -> None:  # some of the store's own tables, no events table
    conn = sqlite3.connect(db)
    statements = [s for s in _split(_SCHEMA) if s.startswith("CREATE TABLE IF NOT EXISTS meta")]
    assert statements
    for statement in statements:
        conn.execute(statement)
    conn.execute("CREATE TABLE runs (run_id)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("make", [_zero_length, _empty_wal, _partial], ids=["zero-length", "empty-wal", "partial"])
def test_a_log_whose_creation_was_interrupted_is_named_and_finished_by_a_writer(cli, tmp_path, make):
    p = tiny(tmp_path)
    db = p / LOG
    db.parent.mkdir()
    make(db)
    for command in (["runs"], ["show", "latest"], ["gate", "latest"], ["audit", "verify"]):
        r = cli(*command, cwd=p)
        assert r.exit_code == 2 and "creation was interrupted" in r.output, (command, r.output)
        assert "not an Oloproof log" not in r.output
    r = cli("run", cwd=p)  # the writer creates (or finishes creating) the log
    assert r.exit_code == 0, r.output
    assert cli("runs", cwd=p).exit_code == 0
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 0 and "1 run (1 sealed)" in r.output, r.output


def test_a_foreign_database_is_still_not_an_oloproof_log(cli, tmp_path):
    p = tiny(tmp_path)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    for command in (["runs"], ["run"]):
        r = cli(*command, "--db", str(foreign), cwd=p)
        assert r.exit_code == 2 and "not an Oloproof log" in r.output, r.output


# ---- 5. two resumes of one run at once --------------------------------------------------------

def _events(db: Path, stream: str) -> int:
    try:
        conn = sqlite3.connect(db, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM events WHERE stream = ?", (stream,)).fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return 0


@pytest.mark.slow
def test_a_second_resume_of_one_run_is_refused_by_name(tmp_path):
    p = tiny(tmp_path, n=8)
    killed = oloproof("run", cwd=p, env={"DIE_AT": "c2"})
    assert killed.returncode == -signal.SIGKILL
    runs = json.loads(oloproof("runs", "--json", cwd=p).stdout)
    assert runs[0]["status"] == "incomplete"
    run_id = runs[0]["run_id"]
    before = _events(p / LOG, run_id)
    env = {**os.environ, "SLOW": "0.5", "COLUMNS": "200"}
    first = subprocess.Popen([sys.executable, "-m", "oloproof", "run", "--resume", run_id], cwd=p, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _events(p / LOG, run_id) == before:  # the first one has resumed (run_resumed is written)
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.02)
        second = oloproof("run", "--resume", run_id, cwd=p, env={"SLOW": "0.5"})
        assert first.poll() is None  # still resuming: the two overlapped
        one_line_error(second, f"run {run_id!r} is being resumed by another process (pid {first.pid})")
        assert "UNIQUE" not in second.stderr
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    runs = json.loads(oloproof("runs", "--json", cwd=p).stdout)
    assert runs[0]["status"] == "complete" and runs[0]["cases_committed"] == 8
    verify = oloproof("audit", "verify", cwd=p)
    assert verify.returncode == 0 and "1 run (1 sealed)" in verify.stdout, verify.stdout
    assert not list((p / ".oloproof").glob("*.lock"))  # let go of when the run was sealed
