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
