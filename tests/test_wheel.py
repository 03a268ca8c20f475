"""The examples ship inside the wheel: build it, install it in a fresh virtual environment
(dependencies borrowed from this one, nothing from this checkout) and run an example."""

import json
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_runs_an_example(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(ROOT)], check=True, capture_output=True)
    wheel = next(dist.glob("oloproof-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "oloproof/_examples/support_agent/cases.jsonl" in names
    assert "oloproof/_examples/stateful_agent/labels/injected.jsonl" in names
    assert "oloproof/_examples/triage_agents/app.py" in names
    assert "oloproof/report/assets/view.js" in names and "oloproof/report/assets/view.css" in names
    assert not any("__pycache__" in n for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # third-party dependencies from this environment; a .pth line adds a path but does not
    # process the .pth files there, so this checkout's editable install stays invisible.
    deps = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    Path(purelib, "borrowed_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)

    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run([str(py), "-c", "import oloproof; print(oloproof.__file__)"], cwd=work,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(venv)), where
    exe = venv / "bin" / "oloproof"
    subprocess.run([str(exe), "init", "--example", "support-agent", "demo"], cwd=work, check=True,
                   capture_output=True)
    run = subprocess.run([str(exe), "run", "--json", "r.json"], cwd=work / "demo", capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    data = json.loads((work / "demo" / "r.json").read_text())
    assert data["gate"]["decision"] == "FAIL"
    assert data["criteria"][0]["passed"] == 33
