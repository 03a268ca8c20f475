"""A case cannot take the run down: timeouts, dying workers, SystemExit and KeyboardInterrupt
raised by the system, a module that exits on import, Ctrl-C — and sandboxes never shared."""

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import write

APP = '''\
import os
import sys
import threading
import time

from oloproof import Stateful, current_case, tool

MADE = []
MEET = {}


class Box(Stateful):
    def __init__(self):
        MADE.append(self)
        self.number = len(MADE)  # which system object of this process ran the case

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def act(self, what):
        if what == "sleep":
            time.sleep(30)
        elif what == "busy":
            end = time.monotonic() + 4
            while time.monotonic() < end:
                pass
        elif what == "exit":
            sys.exit(0)
        elif what == "interrupt":
            raise KeyboardInterrupt
        elif what == "die":
            os._exit(7)
        elif what == "segfault":
            import ctypes
            ctypes.string_at(0)
        elif what.startswith("meet"):  # "meet3": wait until 3 cases run at once (3 slots in use)
            MEET.setdefault(what, threading.Barrier(int(what[4:]), timeout=10)).wait()
        self.state["done"] = what
        return {"ok": what}

    def __call__(self, case):
        self.act(case.input["what"])
        current_case().finish("success")
        return {"answer": "ok", "box": self.number, "pid": os.getpid()}
'''

CONFIG = '''\
system: {name: box, version: "1", callable: app:Box, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
TIMEOUT
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: state_matches, mode: subset}
'''


def make(tmp_path, whats, timeout=None, app=APP):
    write(tmp_path / "app.py", app)
    write(tmp_path / "oloproof.yaml", CONFIG.replace("TIMEOUT", f"timeout: {timeout}" if timeout else ""))
    write(tmp_path / "cases.jsonl", "".join(
        json.dumps({"id": f"c{i}-{w}", "input": {"what": w}, "initial_state": {"n": i},
                    "expected": {"answer": "ok", "state": {"done": w}}}) + "\n" for i, w in enumerate(whats)))
    return tmp_path


def results(cli, p, *args):
    r = cli("run", "--json", "r.json", *args, cwd=p)
    assert (p / "r.json").exists(), r.output
    data = json.loads((p / "r.json").read_text())
    return r, {c["case_id"]: c["verdicts"]["answer_correct"] for c in data["cases"]}


def outputs(p):
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    rows = conn.execute("SELECT stream, payload FROM events WHERE type = 'case_finished.v2'").fetchall()
    conn.close()
    return {s.split("/", 1)[1]: json.loads(x) for s, x in rows}


@pytest.mark.parametrize("executor", [[], ["--concurrency", "2"], ["--workers", "2"]])
@pytest.mark.slow
def test_a_case_past_its_timeout_is_missing_and_its_sandbox_discarded(cli, tmp_path, executor):
    p = make(tmp_path, ["ok", "sleep", "ok", "busy", "ok"], timeout=0.5)
    t0 = time.monotonic()
    r, v = results(cli, p, *executor)
    assert time.monotonic() - t0 < 20
    assert v == {"c0-ok": {"verdict": "pass"}, "c1-sleep": {"verdict": "missing", "reason": "case_timeout"},
                 "c2-ok": {"verdict": "pass"}, "c3-busy": {"verdict": "missing", "reason": "case_timeout"},
                 "c4-ok": {"verdict": "pass"}}
    out = outputs(p)
    assert "timeout of 0.5 s" in out["c1-sleep"]["error"] and out["c1-sleep"]["error_kind"] == "case_timeout"
    if not executor:  # one slot: each timed-out case's system object was replaced
        assert [out[c]["output"]["box"] for c in ("c0-ok", "c2-ok", "c4-ok")] == [1, 2, 3]
    assert r.exit_code == 0


@pytest.mark.parametrize("what", ["die", "segfault"])
@pytest.mark.slow
def test_a_case_that_kills_its_worker_process_is_that_cases_error(cli, tmp_path, what):
    p = make(tmp_path, ["ok", what, "ok", "ok", what, "ok"])
    r, v = results(cli, p, "--workers", "2")
    assert v[f"c1-{what}"] == v[f"c4-{what}"] == {"verdict": "missing", "reason": "worker_died"}
    assert all(v[c] == {"verdict": "pass"} for c in ("c0-ok", "c2-ok", "c3-ok", "c5-ok"))
    out = outputs(p)
    assert "died" in out[f"c1-{what}"]["error"]
    assert ("SIGSEGV" if what == "segfault" else "exit code 7") in out[f"c1-{what}"]["error"]
    assert r.exit_code == 0, r.output  # no release rules: nothing to gate
    assert "2 cases errored" in r.output, r.output  # said, not hidden


@pytest.mark.slow
def test_a_case_that_kills_its_dask_worker_is_that_cases_error(cli, tmp_path):
    pytest.importorskip("distributed")
    p = make(tmp_path, ["ok", "die", "ok", "ok"])
    r, v = results(cli, p, "--executor", "dask", "--workers", "2")
    assert v == {"c0-ok": {"verdict": "pass"}, "c1-die": {"verdict": "missing", "reason": "worker_died"},
                 "c2-ok": {"verdict": "pass"}, "c3-ok": {"verdict": "pass"}}
    assert r.exit_code == 0


@pytest.mark.parametrize("executor", [[], ["--concurrency", "2"], ["--workers", "2"]])
@pytest.mark.parametrize("what", ["exit", "interrupt"])
def test_system_exit_and_keyboard_interrupt_only_error_their_case(cli, tmp_path, executor, what):
    p = make(tmp_path, ["ok", what, "ok"])
    r, v = results(cli, p, *executor)
    assert v[f"c1-{what}"] == {"verdict": "missing", "reason": "system_error"}
    assert v["c0-ok"] == v["c2-ok"] == {"verdict": "pass"}
    assert ("SystemExit" if what == "exit" else "KeyboardInterrupt") in outputs(p)[f"c1-{what}"]["error"]
    assert r.exit_code == 0


@pytest.mark.parametrize("code", ["import sys\nsys.exit(0)\n", "raise KeyboardInterrupt\n"])
def test_a_module_that_exits_on_import_is_a_config_error(tmp_path, code):
    p = make(tmp_path, ["ok"], app=code + APP)
    r = subprocess.run([sys.executable, "-m", "oloproof", "run"], cwd=p, capture_output=True, text=True, timeout=60)
    raised = "KeyboardInterrupt" if "KeyboardInterrupt" in code else "SystemExit"
    assert r.returncode == 2 and raised in r.stderr and "oloproof.yaml:1" in r.stderr, r.stderr
    assert not (p / ".oloproof" / "log.db").exists() or sqlite3.connect(p / ".oloproof" / "log.db").execute(
        "SELECT COUNT(*) FROM events").fetchone()[0] == 0


SLOW = '''\
import time
from oloproof import current_case, system

@system(name="slow", version="1", records=("agent_trajectory/v1",))
def run(case):
    time.sleep(0.03)
    current_case().finish("success")
    return {"answer": "ok"}
'''


@pytest.mark.parametrize("executor", [[], ["--workers", "2"], ["--concurrency", "3"]])
@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_run_resumes(tmp_path, executor):
    write(tmp_path / "app.py", SLOW)
    write(tmp_path / "oloproof.yaml", "system: {name: slow, version: '1', callable: app:run, "
                                      "records: [agent_trajectory/v1]}\nevaluators:\n"
                                      "  - {type: contains, criterion: answer_correct, field: answer, "
                                      "expected_field: answer}\n")
    write(tmp_path / "cases.jsonl", "".join(json.dumps({"id": f"c{i:03d}", "input": {}, "expected": {"answer": "ok"}})
                                            + "\n" for i in range(200)))
    proc = subprocess.Popen([sys.executable, "-m", "oloproof", "run", *executor], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db = tmp_path / ".oloproof" / "log.db"

    def committed():
        try:
            conn = sqlite3.connect(db, timeout=5)
            n = conn.execute("SELECT COUNT(DISTINCT stream) FROM events WHERE stream LIKE '%/%'").fetchone()[0]
            conn.close()
            return n
        except sqlite3.DatabaseError:
            return 0

    deadline = time.time() + 60
    while committed() < 10 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: committed cases are safe" in err and "Traceback" not in err, err
    before = committed()
    assert 10 <= before < 200, (before, err)
    runs = json.loads(subprocess.run([sys.executable, "-m", "oloproof", "runs", "--json"], cwd=tmp_path,
                                     capture_output=True, text=True).stdout)
    assert runs[0]["status"] == "incomplete"
    assert f"oloproof run --resume {runs[0]['run_id']}" in err  # the message names the run to resume
    conn = sqlite3.connect(db)
    errored = conn.execute("SELECT COUNT(*) FROM events WHERE type = 'case_finished.v2' "
                           "AND payload LIKE '%error%'").fetchone()[0]
    conn.close()
    assert errored == 0, err  # the Ctrl-C was nobody's case error
    done = subprocess.run([sys.executable, "-m", "oloproof", "run", "--resume", runs[0]["run_id"], "--json", "r.json",
                           "--concurrency", "8"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["criteria"][0]["passed"] == 200 and committed() == 200
    assert subprocess.run([sys.executable, "-m", "oloproof", "audit", "verify"], cwd=tmp_path).returncode == 0


STATEFUL_OBJECT = APP + "\n\nbox = Box()\n\n\ndef new_box():\n    return Box()\n"


def test_one_stateful_object_is_not_shared_by_concurrent_slots(cli, tmp_path):
    p = make(tmp_path, ["ok"] * 6, app=STATEFUL_OBJECT)
    cfg = p / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("callable: app:Box", "callable: app:box"))
    r = cli("run", "--concurrency", "3", cwd=p)
    assert r.exit_code == 2 and "one Stateful object" in r.output and "factory" in r.output
    assert not (p / ".oloproof").exists()
    r, v = results(cli, p, "--workers", "2")  # one slot a process: each has its own copy
    assert r.exit_code == 0 and all(x == {"verdict": "pass"} for x in v.values())
    # cases that wait for each other, three at a time: three slots must be in use at once (a
    # slot is made when a case finds none free; instant cases could all reuse the first one)
    make(tmp_path, ["meet3"] * 6, app=STATEFUL_OBJECT)
    cfg.write_text(cfg.read_text().replace("callable: app:Box", "callable: app:box, factory: app:new_box"))
    r, v = results(cli, p, "--concurrency", "3")
    assert r.exit_code == 0 and len(v) == 6 and all(x == {"verdict": "pass"} for x in v.values()), r.output
    boxes = {o["output"]["box"] for c, o in outputs(p).items() if c.endswith("-meet3") and o.get("output")}
    assert len(boxes) == 3  # three slots, three sandboxes


@pytest.mark.parametrize("args,needle", [
    (["--concurrency", "0"], "--concurrency 0"),
    (["--concurrency", "1000000"], "between 1 and 10000"),
    (["--workers", "-1"], "--workers -1"),
    (["--concurrency", "2", "--workers", "2"], "choose one of"),
    (["--executor", "serial", "--workers", "2"], "serial"),
    (["--scheduler", "localhost:8786"], "tcp://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "its own workers"),
    (["--executor", "threads"], "threads"),
])
def test_bad_executor_options_exit_2_nothing_written(cli, tmp_path, args, needle):
    p = make(tmp_path, ["ok"])
    r = cli("run", *args, cwd=p)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert not (p / ".oloproof").exists()


@pytest.mark.slow
def test_an_unreachable_scheduler_exits_2_nothing_written(cli, tmp_path):
    pytest.importorskip("distributed")
    p = make(tmp_path, ["ok"])
    r = cli("run", "--scheduler", "tcp://127.0.0.1:9", cwd=p)
    assert r.exit_code == 2 and "cannot reach a Dask scheduler" in r.output, r.output
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0


def _silent_server(seconds):
    """A TCP server on 127.0.0.1 that accepts connections and never answers; it stops itself
    after ``seconds``. Its port."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    end = time.monotonic() + seconds

    def serve():
        held = []
        while time.monotonic() < end:
            try:
                held.append(server.accept()[0])
            except OSError:  # the accept timeout: look at the clock again
                pass
        for conn in held:
            conn.close()
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def test_a_scheduler_that_never_answers_exits_2_in_bounded_time(cli, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setenv("OLOPROOF_DASK_TIMEOUT", "1")
    p = make(tmp_path, ["ok"])
    port = _silent_server(30)
    t0 = time.monotonic()
    r = cli("run", "--scheduler", f"tcp://127.0.0.1:{port}", cwd=p)
    assert r.exit_code == 2 and "cannot reach a Dask scheduler" in r.output and "no answer within 1 s" in r.output, \
        r.output
    assert time.monotonic() - t0 < 15
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0


@pytest.mark.parametrize("value", ["0", "soon", "nan", "-3"])
def test_a_bad_dask_timeout_exits_2(cli, tmp_path, monkeypatch, value):
    pytest.importorskip("distributed")
    monkeypatch.setenv("OLOPROOF_DASK_TIMEOUT", value)
    r = cli("run", "--executor", "dask", cwd=make(tmp_path, ["ok"]))
    assert r.exit_code == 2 and "OLOPROOF_DASK_TIMEOUT" in r.output, r.output


KILLER = """\
import os


def dask_setup(worker):  # a Dask worker preload: runs in the worker process as it starts
    if ALL:
        os._exit(9)
    try:  # only the first worker to start dies
        os.close(os.open(MARK, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    os._exit(9)
"""


@pytest.mark.parametrize("all_die", [False, True])
def test_a_dask_worker_that_dies_while_the_cluster_starts(cli, tmp_path, monkeypatch, all_die):
    pytest.importorskip("distributed")
    import dask

    monkeypatch.setenv("OLOPROOF_DASK_TIMEOUT", "20")
    p = make(tmp_path / "project", ["ok", "ok", "ok"])
    mark = tmp_path / "died"
    preload = write(tmp_path / "killer.py", KILLER.replace("ALL", repr(all_die)).replace("MARK", repr(str(mark))))
    t0 = time.monotonic()
    with dask.config.set({"distributed.worker.preload": [str(preload)]}):
        if all_die:
            r = cli("run", "--executor", "dask", "--workers", "2", cwd=p)
        else:
            r, v = results(cli, p, "--executor", "dask", "--workers", "2")
    assert time.monotonic() - t0 < 60
    if all_die:  # no cluster at all: refused, nothing written
        assert r.exit_code == 2 and "could not start a Dask cluster: 2 of its 2 worker processes died" in r.output, \
            r.output
        conn = sqlite3.connect(p / ".oloproof" / "log.db")
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    else:  # one worker died before it had a case: the other one runs them all
        assert mark.exists()
        assert r.exit_code == 0, r.output
        assert v == {f"c{i}-ok": {"verdict": "pass"} for i in range(3)}
        conn = sqlite3.connect(p / ".oloproof" / "log.db")
        rows = conn.execute("SELECT payload FROM events WHERE type LIKE 'case_finished.%'").fetchall()
        assert len({json.loads(x)["output"]["pid"] for x, in rows}) == 1  # the one worker that started


def _processes_in(folder):
    """Live processes whose working folder is ``folder`` (a run's driver and its workers)."""
    import os

    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(folder):
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().split(")")[-1].split()[0] != "Z":  # zombies hold nothing
                        found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow
def test_a_killed_driver_leaves_no_worker_behind_and_the_run_resumes(tmp_path):
    write(tmp_path / "app.py", SLOW)
    write(tmp_path / "oloproof.yaml", "system: {name: slow, version: '1', callable: app:run, "
                                      "records: [agent_trajectory/v1]}\nevaluators:\n"
                                      "  - {type: contains, criterion: answer_correct, field: answer, "
                                      "expected_field: answer}\n")
    write(tmp_path / "cases.jsonl", "".join(json.dumps({"id": f"c{i:03d}", "input": {}, "expected": {"answer": "ok"}})
                                            + "\n" for i in range(120)))
    proc = subprocess.Popen([sys.executable, "-m", "oloproof", "run", "--workers", "2"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / ".oloproof" / "log.db"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            conn = sqlite3.connect(db, timeout=5)
            n = conn.execute("SELECT COUNT(DISTINCT stream) FROM events WHERE stream LIKE '%/%'").fetchone()[0]
            conn.close()
            if n >= 10:
                break
        except sqlite3.DatabaseError:
            pass
        time.sleep(0.05)
    assert len(_processes_in(tmp_path)) >= 3  # the driver and its two workers
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while _processes_in(tmp_path) and time.time() < deadline:
        time.sleep(0.1)
    assert _processes_in(tmp_path) == []  # the workers saw their pipe close and left
    run_id = json.loads(subprocess.run([sys.executable, "-m", "oloproof", "runs", "--json"], cwd=tmp_path,
                                       capture_output=True, text=True).stdout)[0]["run_id"]
    done = subprocess.run([sys.executable, "-m", "oloproof", "run", "--resume", run_id, "--workers", "2",
                           "--json", "r.json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["criteria"][0]["passed"] == 120
    assert subprocess.run([sys.executable, "-m", "oloproof", "audit", "verify"], cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("value,needle", [(".inf", "finite"), ("-1", "greater than 0"), ("0", "greater than 0"),
                                          ("soon", "number"), (".nan", "finite")])
def test_a_bad_timeout_is_a_located_config_error(cli, tmp_path, value, needle):
    p = make(tmp_path, ["ok"], timeout=value)
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and "oloproof.yaml:3" in r.output and "timeout" in r.output, r.output
    assert needle in r.output.lower(), r.output
    assert not (p / ".oloproof").exists()


def test_slots_are_made_when_needed(cli, tmp_path):
    app = APP.replace('return {"answer": "ok", "box": self.number, "pid": os.getpid()}',
                      'return {"answer": "ok", "box": self.number, "made": len(MADE)}')
    p = make(tmp_path, ["ok"] * 3, app=app)
    r, v = results(cli, p, "--concurrency", "500")
    assert r.exit_code == 0 and len(v) == 3
    assert max(o["output"]["made"] for o in outputs(p).values()) <= 4  # not 500 system objects for 3 cases


UNPICKLABLE = '''\
import threading

from oloproof import current_case


class Agent:
    def __init__(self):
        self.lock = threading.Lock()  # a lock cannot travel to a worker process

    def __call__(self, case):
        current_case().finish("success")
        return {"answer": "ok"}


agent = Agent()


def new_agent():
    return Agent()
'''


def test_a_system_that_cannot_travel_to_workers_is_a_config_error(cli, tmp_path):
    write(tmp_path / "app.py", UNPICKLABLE)
    config = ("system: {name: a, version: '1', callable: app:agent, records: [agent_trajectory/v1]}\n"
              "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}\n")
    write(tmp_path / "oloproof.yaml", config)
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}, "expected": {"answer": "ok"}}\n')
    r = cli("run", "--workers", "2", cwd=tmp_path)
    assert r.exit_code == 2 and "cannot be sent to worker processes" in r.output and "factory" in r.output
    assert sqlite3.connect(tmp_path / ".oloproof" / "log.db").execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    write(tmp_path / "oloproof.yaml",
          config.replace("callable: app:agent", "callable: app:agent, factory: app:new_agent"))
    r, v = results(cli, tmp_path, "--workers", "2")
    assert r.exit_code == 0 and v == {"a": {"verdict": "pass"}}


TASKS_APP = '''\
import asyncio
import sys

from oloproof import Stateful, current_case, tool


class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    async def lookup(self, i):
        await asyncio.sleep(0.001)
        return {"i": i}

    async def late_write(self):
        await asyncio.sleep(0.2)
        self.state["late"] = True  # would land in the next case's sandbox

    async def __call__(self, case):
        what = case.input["what"]
        await self.lookup(1)
        if what == "cancel":  # the agent cancels a task it started, then awaits it
            task = asyncio.ensure_future(self.lookup(99))
            task.cancel()
            await task
        elif what == "child_exit":
            async def quit():
                sys.exit(0)
            await asyncio.gather(self.lookup(2), quit())
        elif what == "child_interrupt":
            async def stop():
                raise KeyboardInterrupt
            await asyncio.gather(stop())
        elif what == "background":
            asyncio.create_task(self.late_write())
        elif what == "slow":
            await asyncio.sleep(0.5)
        current_case().finish("success")
        return {"answer": "ok"}
'''


@pytest.mark.parametrize("executor", [[], ["--concurrency", "1"], ["--workers", "1"]])
def test_what_an_async_agents_tasks_do_stays_in_their_case(cli, tmp_path, executor):
    """CancelledError raised by the agent, SystemExit or KeyboardInterrupt in one of its
    tasks: that case's error only. A task the case leaves running is cancelled when it ends."""
    whats = ["ok", "cancel", "child_exit", "child_interrupt", "background", "slow", "ok"]
    p = make(tmp_path, whats, app=TASKS_APP)
    cfg = p / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("callable: app:Box", "callable: app:Desk")
                   .replace("box", "desk").replace("  - {type: state_matches, mode: subset}\n", ""))
    r, v = results(cli, p, *executor)
    assert r.exit_code == 0, r.output
    errors = {c for c, x in v.items() if x != {"verdict": "pass"}}
    assert errors == {"c1-cancel", "c2-child_exit", "c3-child_interrupt"}
    assert all(v[c] == {"verdict": "missing", "reason": "system_error"} for c in errors)
    out = outputs(p)
    assert "CancelledError" in out["c1-cancel"]["error"]
    assert "SystemExit raised in a task of the case" in out["c2-child_exit"]["error"]
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    states = {s.split("/", 1)[1]: json.loads(x)["state"] for s, x in conn.execute(
        "SELECT stream, payload FROM events WHERE type = 'environment_state.v1'")}
    conn.close()
    # the background task of case 4 was cancelled with its case: the slow case after it (same
    # slot, one at a time) starts from its own initial state and is left untouched
    assert states["c5-slow"] == {"n": 5} and "late" not in states["c4-background"]


def test_two_faults_on_one_call_share_its_control_replay(cli, tmp_path):
    from tests.conftest import copy_example

    p = tmp_path / "desk"
    copy_example("stateful_agent", p)
    cfg = p / "oloproof.yaml"
    line = "  - {type: fault_recovery, tool: issue_refund, fault: error, escalate_tools: [escalate_to_human]}\n"
    cfg.write_text(cfg.read_text().replace(line, line + line.replace("fault: error", "fault: timeout")))
    for executor in ([], ["--workers", "2"]):
        r = cli("run", "--json", "r.json", *executor, cwd=p)
        assert r.exit_code == 1, r.output  # the example's gate blocks; the run itself is sound
        crit = {c["criterion"]: c for c in json.loads((p / "r.json").read_text())["criteria"]}
        assert crit["recovers_from_timeout_at_issue_refund"]["observed"] \
            == crit["recovers_from_error_at_issue_refund"]["observed"] > 0
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    kinds = conn.execute("SELECT json_extract(payload, '$.kind'), COUNT(*) FROM events WHERE stream LIKE 'replay/%' "
                         "AND seq = 0 GROUP BY 1").fetchall()
    conn.close()
    controls, faults = dict(kinds)["control"], dict(kinds)["fault"]
    assert faults == 2 * controls  # one control replay per checkpoint, a fault replay per fault


KILLERS = '''\
import os
from oloproof import current_case

def run(case):
    if case.input["i"] % 10 == 3:
        os._exit(3)
    current_case().finish("success")
    return {"answer": "ok"}
'''


@pytest.mark.parametrize("executor", [["--workers", "2"], ["--workers", "3"], ["--executor", "dask", "--workers", "2"]])
@pytest.mark.slow
def test_only_the_cases_that_kill_their_worker_are_worker_died(cli, tmp_path, executor):
    if "dask" in executor:
        pytest.importorskip("distributed")
    n = 30 if "dask" in executor else 120
    write(tmp_path / "app.py", KILLERS)
    write(tmp_path / "oloproof.yaml", "system: {name: k, version: '1', callable: app:run, "
                                      "records: [agent_trajectory/v1]}\n"
                                      "evaluators:\n  - {type: contains, criterion: answer_correct, field: answer, "
                                      "expected_field: answer}\n")
    write(tmp_path / "cases.jsonl", "".join(json.dumps({"id": f"c{i:03d}", "input": {"i": i},
                                                        "expected": {"answer": "ok"}})
                                            + "\n" for i in range(n)))
    r, v = results(cli, tmp_path, *executor)
    died = sorted(c for c, x in v.items() if x == {"verdict": "missing", "reason": "worker_died"})
    assert died == [f"c{i:03d}" for i in range(n) if i % 10 == 3]
    assert len(v) == n and all(x == {"verdict": "pass"} for c, x in v.items() if c not in died)


@pytest.mark.parametrize("address", ["tcp://", "tcp://127.0.0.1", "tcp://h:abc", "tcp://[::1", "inproc://",
                                     "ucx://h:1", "tcp://h:1/x"])
def test_a_malformed_scheduler_address_exits_2(cli, tmp_path, address):
    p = make(tmp_path, ["ok"])
    r = cli("run", "--scheduler", address, cwd=p)
    assert r.exit_code == 2 and "tcp://HOST:PORT" in r.output and not (p / ".oloproof").exists()


def test_json_output_problems_are_found_before_the_run(cli, tmp_path):
    p = make(tmp_path, ["ok"])
    (p / "afolder").mkdir()
    for target, needle in (("missing/r.json", "does not exist"), ("afolder", "is a folder")):
        r = cli("run", "--json", target, cwd=p)
        assert r.exit_code == 2 and needle in r.output, r.output
        assert not (p / ".oloproof").exists()
    r = cli("run", "--json", "-", cwd=p)  # stdout holds the JSON alone (the table goes to stderr)
    assert r.exit_code == 0
    assert json.loads(r.stdout)["cases"][0]["case_id"] == "c0-ok"


@pytest.mark.parametrize("value,needle", [("true", "boolean"), ("1e10", "less than or equal")])
def test_timeouts_that_cannot_be_meant(cli, tmp_path, value, needle):
    p = make(tmp_path, ["ok"], timeout=value)
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and needle in r.output and "oloproof.yaml:3" in r.output, r.output


def test_a_case_nested_too_deeply_is_a_located_case_error(cli, tmp_path):
    p = make(tmp_path, ["ok"])
    deep = "[" * 20000 + "]" * 20000
    with open(p / "cases.jsonl", "a") as fh:
        fh.write('{"id": "deep", "input": {"x": ' + deep + '}}\n')
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and "cases.jsonl:2" in r.output, r.output
    assert not (p / ".oloproof").exists()


FACTORIES = APP + '''

ONE = Box()
CALLS = []


def same_box():
    return ONE


def two_boxes_at_most():
    CALLS.append(1)
    if len(CALLS) > 2:
        raise RuntimeError("no more sandboxes")
    return Box()
'''


@pytest.mark.parametrize("factory,needle", [("same_box", "returned an object it had returned before"),
                                            ("two_boxes_at_most", "no more sandboxes")])
def test_a_factory_that_does_not_make_fresh_sandboxes_stops_the_run_with_exit_2(cli, tmp_path, factory, needle):
    # three cases at a time: the run needs a second and a third sandbox (instant cases could all
    # run on the first, the factory never asked again)
    p = make(tmp_path, ["meet3"] * 8, app=FACTORIES)
    cfg = p / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("callable: app:Box", f"callable: app:Box, factory: app:{factory}"))
    r = cli("run", "--concurrency", "5", cwd=p)
    assert r.exit_code == 2 and needle in r.output, r.output


def test_a_slot_thread_finishing_after_the_run_stopped_stays_quiet():
    """Ctrl-C under --concurrency closes the event loop while sync cases still run on their
    threads: a case finishing then must not print a traceback (a flaky Ctrl-C test found it)."""
    import asyncio
    import threading

    from oloproof.recorder.executors import _DaemonPool

    raised = []
    previous = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:
        pool = _DaemonPool(1)
        loop = asyncio.new_event_loop()
        pool.submit(loop, time.sleep, 0.2)
        loop.close()
        time.sleep(0.5)
    finally:
        threading.excepthook = previous
    assert raised == []
