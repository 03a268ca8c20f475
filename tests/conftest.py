from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def _isolate_imports():
    """Projects import their own ``app``/``tools`` modules; forget them after each test."""
    modules = set(sys.modules)
    path = list(sys.path)
    yield
    installed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT)})
    for name in set(sys.modules) - modules:
        mod = sys.modules.get(name)
        file = str(getattr(mod, "__file__", "") or "")
        # only the projects' own modules (under a test's tmp folder): never the standard
        # library or installed packages, whose classes other modules hold on to
        if not name.startswith("oloproof") and file and not file.startswith(installed):
            del sys.modules[name]
    sys.path[:] = path


@pytest.fixture
def support_project(tmp_path: Path) -> Path:
    target = tmp_path / "support"
    shutil.copytree(EXAMPLES / "support_agent", target,
                    ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    return target


@pytest.fixture
def cli(monkeypatch):
    from oloproof.cli.main import cli as group

    def invoke(*args: str, cwd: Path | None = None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        return CliRunner().invoke(group, list(args), catch_exceptions=False)

    return invoke


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _no_log_key(monkeypatch):
    """A developer's OLOPROOF_LOG_KEY must not key the tests' logs (tests that need one set it)."""
    monkeypatch.delenv("OLOPROOF_LOG_KEY", raising=False)


@pytest.fixture
def blank(cli, tmp_path):
    """A project made by `oloproof init --blank` (three cases, two evaluators, a gate)."""
    p = tmp_path / "blank"
    assert cli("init", "--blank", str(p)).exit_code == 0
    return p


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) by ``new`` in a file."""
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def one_function_project(p: Path, body: str, cases: str = '{"id": "c1", "input": {}, "expected": {"a": "b"}}\n',
                         name: str = "x") -> Path:
    """A project whose system is one function (``body`` its lines, returning or raising) and
    whose one evaluator checks ``output.a`` contains ``expected.a``."""
    write(p / "app.py", f"from oloproof import system\n\n@system(name='{name}', version='1')\ndef run(case):\n{body}")
    write(p / "oloproof.yaml", f"system:\n  name: {name}\n  version: '1'\n  callable: app:run\ncases: cases.jsonl\n"
                               "evaluators:\n  - {type: contains, criterion: ok, field: a, expected_field: a}\n")
    write(p / "cases.jsonl", cases)
    return p
