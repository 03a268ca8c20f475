"""SIGKILL the runner at random points, resume, and prove nothing is lost or doubled."""

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from oloproof.store import SQLiteStore

SLOW_APP = """\
import time
import app
from oloproof import system

@system(name="support-agent", version="slice-e-example", records=("agent_trajectory/v1",))
def run(case):
    time.sleep(0.004)
    out = app.run(case)
    time.sleep(0.004)
    return out
"""


def oloproof(project, *args, wait=True):
    cmd = [sys.executable, "-m", "oloproof", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=120)


def committed(project):
    db = project / ".oloproof" / "log.db"
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(db, timeout=5)
        n = conn.execute("SELECT COUNT(DISTINCT stream) FROM events WHERE stream LIKE '%/%'").fetchone()[0]
        conn.close()
        return n
    except sqlite3.DatabaseError:
        return 0


def kill_mid_run(project, args, rng, target_cases):
    proc = oloproof(project, *args, wait=False)
    deadline = time.time() + 60
    while committed(project) < target_cases and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.012))  # land anywhere: between cases or inside one
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow
def test_sigkill_and_resume(support_project, tmp_path, seed):
    rng = random.Random(seed)
    (support_project / "app_slow.py").write_text(SLOW_APP)
    cfg = support_project / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("callable: app:run", "callable: app_slow:run"))

    # the reference: an uninterrupted run in a copy of the project
    reference = tmp_path / "reference"
    import shutil

    shutil.copytree(support_project, reference)
    ref = oloproof(reference, "run", "--json", "ref.json")
    assert ref.returncode == 1, ref.stderr
    expected = json.loads((reference / "ref.json").read_text())

    kill_mid_run(support_project, ["run"], rng, rng.randint(1, 6))
    runs = json.loads(oloproof(support_project, "runs", "--json").stdout)
    assert len(runs) == 1 and runs[0]["status"] == "incomplete"
    run_id = runs[0]["run_id"]
    progress = [runs[0]["cases_committed"]]
    for _ in range(3):
        kill_mid_run(support_project, ["run", "--resume", run_id], rng, progress[-1] + rng.randint(1, 5))
        runs = json.loads(oloproof(support_project, "runs", "--json").stdout)
        progress.append(runs[0]["cases_committed"])
        # after every kill: the log is sound and holds only whole cases
        store = SQLiteStore(support_project / ".oloproof" / "log.db")
        assert store.integrity_check() == "ok"
        assert store.verify().ok
        for stream in {e.stream for e in store.read_prefix(run_id + "/")}:
            types = [e.type for e in store.read_stream(stream)]
            assert types[0] == "case_started.v1" and types[-1] == "case_finished.v2"
        store.close()
    assert progress == sorted(progress) and progress[-1] < 40, progress

    done = oloproof(support_project, "run", "--resume", run_id, "--json", "resumed.json")
    assert done.returncode == 1, done.stderr
    resumed = json.loads((support_project / "resumed.json").read_text())
    assert oloproof(support_project, "audit", "verify").returncode == 0
    runs = json.loads(oloproof(support_project, "runs", "--json").stdout)
    assert [(r["cases_committed"], r["status"]) for r in runs] == [(40, "complete")]

    conn = sqlite3.connect(support_project / ".oloproof" / "log.db")
    per_case = conn.execute(
        "SELECT stream, COUNT(*) FROM events WHERE stream LIKE ? AND seq = 0 GROUP BY stream",
        (run_id + "/%",)).fetchall()
    conn.close()
    assert len(per_case) == 40 and all(n == 1 for _, n in per_case)
    for key in ("criteria", "metrics", "slices", "cases", "gate"):
        assert resumed[key] == expected[key], key
    assert oloproof(support_project, "run", "--resume", run_id).returncode == 2  # already complete


# ---- a resume whose system's inputs changed is refused ------------------------------------

DATA_APP = """\
import json
import os
import signal
from pathlib import Path

import app
import helper  # a module on PYTHONPATH, outside the project
from oloproof import system

PRICES = Path(__file__).parent / "data" / "prices.json"


@system(name="support-agent", version="slice-e-example", records=("agent_trajectory/v1",))
def run(case):
    if case.id == os.environ.get("KILL_AT"):  # the run dies here, as under SIGKILL
        os.kill(os.getpid(), signal.SIGKILL)
    json.loads(PRICES.read_text())
    helper.rate()
    return app.run(case)
"""


def killed_run(project, tmp_path, *args):
    """``oloproof run`` killed (SIGKILL) at its 5th case, with a data file the agent reads and
    a module it imports from PYTHONPATH; the environment to resume with, and the run id."""
    (project / "app_data.py").write_text(DATA_APP)
    (project / "data").mkdir()
    (project / "data" / "prices.json").write_text('{"refund": 1}')
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper.py").write_text("def rate():\n    return 1\n")
    cfg = project / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("callable: app:run", "callable: app_data:run"))
    import os

    env = {**os.environ, "PYTHONPATH": str(lib)}
    cmd = [sys.executable, "-m", "oloproof", "run", *args]
    r = subprocess.run(cmd, cwd=project, env={**env, "KILL_AT": "case_005"}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    runs = json.loads(subprocess.run([sys.executable, "-m", "oloproof", "runs", "--json", *args[:2]], cwd=project,
                                     env=env, capture_output=True, text=True, timeout=120).stdout)
    assert len(runs) == 1 and runs[0]["status"] == "incomplete" and runs[0]["cases_committed"] == 4, runs
    return env, runs[0]["run_id"], lib


def resume(project, env, run_id, *args):
    return subprocess.run([sys.executable, "-m", "oloproof", "run", "--resume", run_id, *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_resume_after_a_data_file_changed_is_refused_naming_it(support_project, tmp_path):
    env, run_id, _ = killed_run(support_project, tmp_path)
    (support_project / "data" / "prices.json").write_text('{"refund": 2}')
    r = resume(support_project, env, run_id)
    assert r.returncode == 2, r.stderr
    assert "cannot resume run" in r.stderr and "data/prices.json" in r.stderr, r.stderr
    (support_project / "data" / "prices.json").write_text('{"refund": 1}')  # put back: it resumes
    assert resume(support_project, env, run_id).returncode == 1


def test_a_resume_after_a_module_on_pythonpath_changed_is_refused_naming_it(support_project, tmp_path):
    env, run_id, lib = killed_run(support_project, tmp_path)
    (lib / "helper.py").write_text("def rate():\n    return 2\n")
    r = resume(support_project, env, run_id)
    assert r.returncode == 2 and str((lib / "helper.py").resolve()) in r.stderr, r.stderr


def test_a_new_module_in_the_project_folder_refuses_the_resume(support_project, tmp_path):
    env, run_id, _ = killed_run(support_project, tmp_path)
    (support_project / "data" / "discounts.py").write_text("RATE = 2\n")
    r = resume(support_project, env, run_id)
    assert r.returncode == 2 and "data/discounts.py (new)" in r.stderr, r.stderr


def test_a_new_data_file_does_not_refuse_the_resume(support_project, tmp_path):
    """A file that appeared is most often one the system wrote while it ran (a report, a log):
    it could not have changed the cases already recorded."""
    env, run_id, _ = killed_run(support_project, tmp_path)
    (support_project / "report.md").write_text("written by the agent")
    assert resume(support_project, env, run_id).returncode == 1  # it finished (the example's gate fails)


def test_an_unchanged_project_resumes_its_own_outputs_aside(support_project, tmp_path):
    """The run's log and --json file in the project folder, and caches, are not inputs."""
    env, run_id, _ = killed_run(support_project, tmp_path, "--db", "mylog.db", "--json", "out.json")
    (support_project / "__pycache__").mkdir(exist_ok=True)
    (support_project / "__pycache__" / "junk.pyc").write_bytes(b"x")
    (support_project / ".oloproof").mkdir(exist_ok=True)
    (support_project / ".oloproof" / "notes").write_text("x")
    r = resume(support_project, env, run_id, "--db", "mylog.db", "--json", "out.json")
    assert r.returncode == 1, r.stderr  # the example's gate blocks: the run finished
    runs = json.loads(subprocess.run([sys.executable, "-m", "oloproof", "runs", "--json", "--db", "mylog.db"],
                                     cwd=support_project, env=env, capture_output=True, text=True).stdout)
    assert [(r["cases_committed"], r["status"]) for r in runs] == [(40, "complete")]


def test_system_code_names_more_inputs(support_project, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "rules.txt").write_text("v1")
    cfg = support_project / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("  records: [agent_trajectory/v1]",
                                           f"  records: [agent_trajectory/v1]\n  code: [{shared}]"))
    env, run_id, _ = killed_run(support_project, tmp_path)
    (shared / "rules.txt").write_text("v2")
    r = resume(support_project, env, run_id)
    assert r.returncode == 2 and str((shared / "rules.txt").resolve()) in r.stderr, r.stderr


def test_system_code_that_does_not_exist_is_a_located_error(support_project):
    cfg = support_project / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("  records: [agent_trajectory/v1]",
                                           "  records: [agent_trajectory/v1]\n  code: [nowhere/]"))
    r = subprocess.run([sys.executable, "-m", "oloproof", "run"], cwd=support_project, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "oloproof.yaml:" in r.stderr and "system.code 'nowhere/'" in r.stderr, r.stderr
    assert "no such file or folder" in r.stderr


def test_a_log_without_the_file_map_resumes_as_before(support_project, tmp_path, monkeypatch):
    """Logs written before RunStarted.files: a data file that changed does not refuse them."""
    from oloproof.app import run as run_module
    from oloproof.app.project import load_project, load_system
    from oloproof.app.run import run_suite
    from oloproof.errors import Interrupted

    (support_project / "prices.json").write_text("1")
    project = load_project(support_project)
    info = project.prepare()
    system = load_system(project)
    store = SQLiteStore(tmp_path / "log.db")
    monkeypatch.setattr(run_module, "input_files", lambda *a, **k: {})  # what an older version stored

    def stop(done, total):
        if done == 3:
            raise Interrupted()

    with pytest.raises(Interrupted) as e:
        run_suite(project, system, store, info, progress=stop)
    run_id = e.value.run_id
    assert "files" not in json.loads(store.read_stream(run_id)[0].payload)
    (support_project / "prices.json").write_text("2")
    outcome = run_suite(project, system, store, info, resume=run_id)
    assert outcome.resumed and outcome.run_id == run_id and outcome.log_digest
    store.close()
