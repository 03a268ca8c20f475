"""The executor registry: its by-name kinds are exactly the CLI's --executor choices, every kind
refuses a flag it does not take with a message naming the flag, a third-party executor is one
registration (chosen by make_executor and by --executor, a whole run on it), and neither
`import oloproof` nor `oloproof --help` imports Dask."""

import subprocess
import sys

import click
import pytest

from oloproof.app.run import make_executor
from oloproof.errors import UsageError
from oloproof.recorder.executors import ConcurrentExecutor, SerialExecutor
from oloproof.recorder.processes import ProcessExecutor
from oloproof.recorder.registry import FLAGS, REGISTRY, ExecutorFlags, executor_names, register_executor
from tests.test_isolation import make, results

VALUES = {"concurrency": 2, "workers": 2, "scheduler": "tcp://127.0.0.1:8786"}


def executor_params():
    """Every --executor option of the CLI (run, prefix run, replay …), with its command path."""
    from oloproof.cli.main import cli

    def walk(command, path):
        for p in command.params:
            if "--executor" in p.opts:
                yield path, p
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    return list(walk(cli, "oloproof"))


def test_the_cli_choices_are_the_registry_names():
    params = executor_params()
    assert {path for path, _ in params} >= {"oloproof run", "oloproof replay"}
    for path, p in params:
        assert isinstance(p.type, click.Choice), path
        assert list(p.type.choices) == executor_names() == ["serial", "dask"], path


@pytest.mark.parametrize("name,flag", [(n, f) for n in ("serial", "concurrent", "processes", "dask") for f in FLAGS
                                       if f not in REGISTRY[n].takes])
def test_each_kind_refuses_a_flag_it_does_not_take_naming_it(name, flag):
    with pytest.raises(UsageError, match=f"--{flag}"):
        REGISTRY[name].make(ExecutorFlags(**{flag: VALUES[flag]}))


@pytest.mark.parametrize("kwargs,expected", [
    ({}, SerialExecutor), ({"concurrency": 1}, SerialExecutor), ({"executor": "serial"}, SerialExecutor),
    ({"executor": "serial", "concurrency": 1}, SerialExecutor), ({"concurrency": 4}, ConcurrentExecutor),
    ({"workers": 2}, ProcessExecutor), ({"workers": 2, "concurrency": 1}, ProcessExecutor),
])
def test_how_the_flags_pick_a_kind(kwargs, expected):
    assert type(make_executor(**kwargs)) is expected


@pytest.mark.parametrize("kwargs,needle", [
    ({"concurrency": 0}, "--concurrency 0: must be between 1 and 10000"),
    ({"workers": 2000, "executor": "dask"}, "--workers 2000: must be between 1 and 1024"),
    ({"concurrency": 2, "workers": 2}, "choose one of --concurrency N (in this process) and --workers N"),
    ({"executor": "serial", "workers": 2}, "--executor serial runs one case at a time; drop --concurrency/--workers"),
    ({"executor": "serial", "scheduler": "tcp://h:1"}, "--executor serial runs one case at a time; drop --scheduler"),
    ({"executor": "dask", "concurrency": 2}, "--concurrency runs cases in this process; with Dask"),
    ({"scheduler": "tcp://h:1", "workers": 2}, "an existing cluster (--scheduler) has its own workers"),
    ({"scheduler": "h:1"}, "--scheduler 'h:1': expected an address like tcp://HOST:PORT"),
    ({"executor": "processes"}, "--executor 'processes': one of serial, dask"),  # not a choice by name
    ({"executor": "dsak"}, "did you mean 'dask'?"),
])
def test_bad_flags_are_usage_errors(kwargs, needle):
    with pytest.raises(UsageError) as e:
        make_executor(**kwargs)
    assert needle in str(e.value)


def test_a_registration_is_checked():
    with pytest.raises(ValueError, match="already registered"):
        register_executor("dask", lambda flags: SerialExecutor())
    with pytest.raises(ValueError, match="unknown flag"):
        register_executor("mine", lambda flags: SerialExecutor(), takes={"threads"})
    with pytest.raises(ValueError, match="lower case"):
        register_executor("Mine", lambda flags: SerialExecutor())
    assert "mine" not in REGISTRY and "Mine" not in REGISTRY


class Counting(SerialExecutor):
    """A made-up third-party executor: serial, counting the jobs it ran."""

    def __init__(self, label):
        super().__init__()
        self.label, self.ran = label, 0

    def _poll(self, timeout):
        done = super()._poll(timeout)
        self.ran += len(done)
        return done

    def describe(self):
        return f"counting ({self.label})"


@pytest.fixture
def counting():
    """The kind ``counting`` registered for one test; its executors, as built."""
    built = []

    def build(flags):
        built.append(Counting(flags.workers or "-"))
        return built[-1]

    register_executor("counting", build, takes={"workers"}, summary="serial, counting jobs")
    try:
        yield built
    finally:
        REGISTRY.pop("counting")


def test_a_registered_executor_runs_a_suite(tmp_path, counting):
    from oloproof.app.project import load_project, load_system
    from oloproof.app.run import run_suite
    from oloproof.store import SQLiteStore

    p = make(tmp_path, ["ok", "ok", "ok"])
    project = load_project(p)
    info = project.prepare()
    store = SQLiteStore(p / ".oloproof" / "log.db")
    try:
        pool = make_executor(executor="counting", workers=3)
        assert pool is counting[-1] and pool.label == 3
        outcome = run_suite(project, load_system(project), store, info, executor=pool)
    finally:
        store.close()
    assert outcome.executor == "counting (3)" and outcome.errors == 0
    assert pool.ran >= 3  # a job per case, at least
    assert [r.case_id for r in outcome.summary.cases] == ["c0-ok", "c1-ok", "c2-ok"]
    assert all(v == ("pass", None) for r in outcome.summary.cases for v in r.verdicts)
    with pytest.raises(UsageError, match="--scheduler 'tcp://h:1': the counting executor does not take it"):
        make_executor(executor="counting", scheduler="tcp://h:1")


def test_a_registered_executor_is_a_cli_choice(cli, tmp_path, counting):
    assert "counting" in executor_params()[0][1].type.choices
    p = make(tmp_path, ["ok", "ok"])
    r, verdicts = results(cli, p, "--executor", "counting")
    assert r.exit_code == 0 and verdicts == {"c0-ok": {"verdict": "pass"}, "c1-ok": {"verdict": "pass"}}, r.output
    assert len(counting) == 1 and counting[0].ran >= 2
    r = cli("run", "--executor", "counting", "--concurrency", "2", cwd=p)
    assert r.exit_code == 2 and "--concurrency 2: the counting executor does not take it" in r.output


@pytest.mark.parametrize("args", [["-c", "import oloproof"], ["-m", "oloproof", "--help"],
                                  ["-m", "oloproof", "run", "--help"]])
def test_help_and_import_never_import_dask(args):
    out = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    imported = [line.rpartition("|")[2].strip() for line in out.stderr.splitlines() if line.startswith("import time:")]
    assert "oloproof" in imported
    assert not [m for m in imported if m.split(".")[0] in ("dask", "distributed")]


def test_the_docs_example_registers_what_it_says():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    code = re.search(r"### Writing an executor.*?```python\n(.+?)```", doc, re.S).group(1)
    try:
        exec(compile(code, "docs/architecture.md", "exec"), {})
        assert make_executor(executor="inline", workers=3).describe() == "inline"
        assert "inline" in executor_names()
        for kwargs, needle in [({"workers": 9}, "--workers 9"), ({"concurrency": 2}, "--concurrency 2"),
                               ({"scheduler": "tcp://h:1"}, "--scheduler 'tcp://h:1'")]:
            with pytest.raises(UsageError, match=re.escape(needle)):
                make_executor(executor="inline", **kwargs)
    finally:
        REGISTRY.pop("inline", None)
