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
            assert types[0] == "case_started.v1" and types[-1] == "case_finished.v1"
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
