from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.hookimpl(trylast=True)  # after pytest-xdist's, which registers its session
def pytest_configure(config):
    # the judgement cache's key (oloproof.app.judged) lives in the user's cache folder: the
    # tests make theirs in a folder of their own, removed when they end
    import atexit
    import tempfile

    cache_home = tempfile.mkdtemp(prefix="oloproof-tests-cache-")
    os.environ["XDG_CACHE_HOME"] = cache_home
    atexit.register(shutil.rmtree, cache_home, True)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: it sets COLUMNS=80 LINES=24
        os.environ.pop("COLUMNS", None)  # (see _no_terminal_size), also for module fixtures
        os.environ.pop("LINES", None)
    elif config.pluginmanager.has_plugin("dsession") and config.get_verbosity() <= 0:
        config.pluginmanager.register(FileLines(config), "oloproof-file-lines")


class FileLines:
    """Under pytest-xdist (the tests' ``-n``), one line per test file — its name, a letter a
    test, the run's progress — written when the file's last test ends, as a serial run writes
    it: a run of minutes shows what it has done, without a line for each of 1,300 tests.
    (xdist alone writes dots only; ``-v`` writes a line a test.)"""

    def __init__(self, config):
        self.config = config
        self.total: dict[str, int] = {}
        self.letters: dict[str, list[str]] = {}
        self.done: dict[str, int] = {}
        self.finished = 0
        self.printed: set[str] = set()
        self.reporter = None

    def pytest_sessionstart(self, session):
        self.reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.reporter is not None and hasattr(self.reporter, "_show_progress_info"):
            self.reporter._show_progress_info = False  # each file line ends with the progress

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        if not self.total:
            for nodeid in ids:
                file = nodeid.split("::", 1)[0]
                self.total[file] = self.total.get(file, 0) + 1

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report, config):
        category, letter, word = result = yield
        if letter and isinstance(letter, str) and getattr(report, "when", None) in ("setup", "call", "teardown"):
            self.letters.setdefault(report.nodeid.split("::", 1)[0], []).append(letter)
            return category, "", word  # the letter goes on the file's line
        return result

    def pytest_runtest_logreport(self, report):
        if report.when in ("setup", "call"):
            return
        file = report.nodeid.split("::", 1)[0]  # its teardown, or the report of a crashed worker
        self.finished += 1
        self.done[file] = self.done.get(file, 0) + 1
        if self.done[file] >= self.total.get(file, 0):
            self.line(file)

    @pytest.hookimpl(tryfirst=True)  # before the summary
    def pytest_sessionfinish(self, session):
        for file in sorted(set(self.letters) - self.printed):  # interrupted, or a worker lost
            self.line(file)

    def line(self, file):
        if self.reporter is None or file in self.printed:
            return
        self.printed.add(file)
        total = sum(self.total.values()) or 1
        progress = f" [{min(100, self.finished * 100 // total):3d}%]"
        letters = "".join(self.letters.get(file, []))
        width = max(20, shutil.get_terminal_size().columns - len(file) - len(progress) - 2)
        chunks = [letters[i:i + width] for i in range(0, len(letters), width)] or [""]
        for i, chunk in enumerate(chunks):
            self.reporter.write_line(f"{file if i == 0 else ' ' * len(file)} {chunk}"
                                     f"{progress if i == len(chunks) - 1 else ''}")


@contextlib.contextmanager
def forgetting_imports():
    """Projects import their own ``app``/``tools`` modules: forget those imported inside."""
    modules = set(sys.modules)
    path = list(sys.path)
    try:
        yield
    finally:
        installed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT)})
        for name in set(sys.modules) - modules:
            mod = sys.modules.get(name)
            file = str(getattr(mod, "__file__", "") or "")
            # only the projects' own modules (under a test's tmp folder): never the standard
            # library or installed packages, whose classes other modules hold on to
            if not name.startswith("oloproof") and file and not file.startswith(installed):
                del sys.modules[name]
        sys.path[:] = path


@pytest.fixture(autouse=True)
def _isolate_imports():
    """Projects import their own ``app``/``tools`` modules; forget them after each test."""
    with forgetting_imports():
        yield


def copy_example(name: str, target: Path) -> Path:
    """A fresh copy of ``examples/<name>`` at ``target``: its files, no log, no bytecode."""
    shutil.copytree(EXAMPLES / name, target, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    return target


@pytest.fixture
def support_project(tmp_path: Path) -> Path:
    return copy_example("support_agent", tmp_path / "support")


class Recording(NamedTuple):
    """An example project run once: its folder (log in ``.oloproof/log.db``, ``--json`` in
    ``results.json``), and what ``oloproof run`` printed and exited with."""
    folder: Path
    exit_code: int
    output: str


def run_in(folder: Path, *args: str) -> Recording:
    """``oloproof ARGS`` in ``folder``, in this process, as the ``cli`` fixture runs it, with
    the environment the autouse fixtures give a test: for fixtures wider than one test, which
    record a project once for the tests that then copy it."""
    from oloproof.cli.main import cli as group

    with pytest.MonkeyPatch.context() as mp, forgetting_imports():
        for name in ("OLOPROOF_LOG_KEY", "COLUMNS", "LINES"):  # as _no_log_key, _no_terminal_size
            mp.delenv(name, raising=False)
        mp.chdir(folder)
        r = CliRunner().invoke(group, list(args), catch_exceptions=False)
    return Recording(folder, r.exit_code, r.output)


def copy_recorded(recorded: Path, target: Path) -> Path:
    """A copy of a recorded project folder (its log too) for one test to read or change; no
    bytecode (a test that edits a module within the second it was written must not get the old
    one from a stale .pyc)."""
    return Path(shutil.copytree(recorded, target, ignore=shutil.ignore_patterns("__pycache__")))


@pytest.fixture(scope="session")
def support_recording(tmp_path_factory) -> Recording:
    """The support-agent example run once per test process, in it, as `oloproof run --json
    results.json` in its folder: tests that start from that recorded log copy it
    (``support_run``) rather than record the same forty cases again."""
    return run_in(copy_example("support_agent", tmp_path_factory.mktemp("recorded") / "support"),
                  "run", "--json", "results.json")


@pytest.fixture
def support_run(support_recording, tmp_path) -> Path:
    """A copy of ``support_recording``'s folder in this test's: the example, its log with one
    complete run (exit 1: its gate fails on purpose, ``no-deletion``) and ``results.json``."""
    assert support_recording.exit_code == 1, support_recording.output
    return copy_recorded(support_recording.folder, tmp_path / "support")


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


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch):
    """The CLI wraps its tables at $COLUMNS (200 without it): a shell's exported COLUMNS, or
    the COLUMNS=80 LINES=24 that pytest-xdist gives its workers, must not rewrap what the
    tests read (tests that need a width set it)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


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


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster on 127.0.0.1 for this test process (tests/postgres_server.py):
    skipped when PostgreSQL (or psycopg) is not installed, failed instead under
    ``OLOPROOF_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it)."""
    import postgres_server as pg

    missing = None
    if pg.find_bin() is None:
        missing = "PostgreSQL is not installed (apt-get install postgresql)"
    else:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            missing = "psycopg is not installed (pip install 'oloproof[postgres]')"
    if missing is not None:
        if pg.required():
            pytest.fail(f"{pg.REQUIRE}=1 and {missing}")
        pytest.skip(missing)
    with pg.cluster() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server):
    """The URL of a new, empty database on ``postgres_server``, for one test."""
    return postgres_server.new_database()
