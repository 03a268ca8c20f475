"""``pytest --oloproof [PROJECT]``: an Oloproof project collected as tests (issue 15).

One item per case of the suite (each trial under ``trials: k``) and one for the release gate.
The first item that runs records the whole suite — exactly as ``oloproof run`` does, into the
same log (``PROJECT/.oloproof/log.db``, or ``--oloproof-db``), sealed — and every item then
reads its own verdicts: a case fails when a criterion failed *or is missing* (missing is never
passed), with its failed criteria and the ``oloproof show RUN CASE`` command in the message;
the gate item fails unless the gate passed. Registered through the ``pytest11`` entry point;
inert unless ``--oloproof`` is given.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    """Add ``--oloproof [PROJECT]`` and ``--oloproof-db PATH`` to pytest's options."""
    group = parser.getgroup("oloproof")
    group.addoption("--oloproof", action="store", nargs="?", const=".", default=None, metavar="PROJECT",
                    help="Collect the Oloproof project in PROJECT (default: here) as tests: one per case, "
                         "one for the release gate.")
    group.addoption("--oloproof-db", action="store", default=None, metavar="PATH",
                    help="The event log, a path or a URL (default: OLOPROOF_DB, else PROJECT/.oloproof/log.db).")


class CaseFailure(Exception):
    """A case or the gate did not pass: the message says why (no traceback)."""


class Suite:
    """The project's run, made once when the first item needs it."""

    def __init__(self, project_dir: str, db: str | None):
        self.project_dir = project_dir
        self.db = db or str(Path(project_dir) / ".oloproof" / "log.db")
        self.outcome: Any = None
        self.results: dict[str, Any] = {}
        self.criteria: list[str] = []
        self.error: BaseException | None = None
        #: case id -> (error, traceback) of the cases whose system raised
        self.raised: dict[str, tuple[str, str | None]] = {}

    @property
    def where(self) -> str:
        """What a printed hint needs to run where pytest printed it: ``--db`` of this log."""
        from oloproof.cli.common import log_args

        return log_args(self.db)

    def ids(self) -> list[str]:
        """The item ids: every case of the suite (derived cases included) after validating
        it, each trial (``c/1`` … ``c/k``) under ``trials: k`` > 1. Nothing runs yet."""
        from oloproof.app.project import load_project
        from oloproof.config.limits import trial_case_id

        project = load_project(self.project_dir)
        project.prepare()
        k = project.trials
        return [trial_case_id(sc.id, t) for sc in project.suite_cases for t in (range(1, k + 1) if k > 1 else (None,))]

    def run(self) -> None:
        """Record the whole suite once, as ``oloproof run`` does, into the log; later calls do
        nothing. Any error is kept in ``error`` for every item to report, never raised."""
        if self.outcome is not None or self.error is not None:
            return
        from oloproof.app.project import load_project, load_system
        from oloproof.app.run import run_suite
        from oloproof.store import open_store

        try:
            project = load_project(self.project_dir)
            info = project.prepare()
            system = load_system(project)
            Path(self.db).parent.mkdir(parents=True, exist_ok=True)
            store = open_store(self.db)
            try:
                self.outcome = run_suite(project, system, store, info, keep_cases=True)
                if self.outcome.errors:
                    from oloproof.app.runs import iter_case_views

                    self.raised = {v.case_id: (v.error, v.traceback)
                                   for v in iter_case_views(store, self.outcome.run_id) if v.error is not None}
            finally:
                store.close()
            self.criteria = project.suite.criteria
            self.results = {r.case_id: r for r in self.outcome.summary.cases}
        except BaseException as e:  # noqa: BLE001 - every item reports it
            self.error = e


class OloproofItem(pytest.Item):
    """One case (``case_id``) or, with ``case_id`` None, the release gate. A case fails when a
    criterion failed or is missing — missing is never passed; the gate item fails unless the
    gate passed (no gate configured: it passes)."""

    def __init__(self, *, suite: Suite, case_id: str | None, **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite
        self.case_id = case_id

    def runtest(self) -> None:
        self.suite.run()
        if self.suite.error is not None:
            raise CaseFailure(f"the suite could not run: {type(self.suite.error).__name__}: {self.suite.error}")
        outcome = self.suite.outcome
        if self.case_id is None:
            gate = outcome.summary.gate
            if gate is not None and gate.decision != "PASS":
                rules = "; ".join(f"{r.name}: {r.status}" + (f" ({r.reason})" if r.reason else "")
                                  for r in gate.rules if r.status != "PASS")
                raise CaseFailure(f"gate {gate.decision} for run {outcome.run_id}: {rules} "
                                  f"(oloproof gate {outcome.run_id}{self.suite.where})")
            return
        result = self.suite.results.get(self.case_id)
        if result is None:
            raise CaseFailure(f"case {self.case_id!r} was not recorded "
                              f"(oloproof show {outcome.run_id}{self.suite.where})")
        bad = [(c, v) for c, v in zip(self.suite.criteria, result.verdicts) if v[0] in ("fail", "missing")]
        if bad:
            from oloproof.report.terminal import case_argument

            shown = ", ".join(f"{c}: {v[0]}" + (f" ({v[1]})" if v[1] else "") for c, v in bad)
            message = (f"case {self.case_id!r}: {shown} — see "
                       f"'oloproof show {outcome.run_id}{self.suite.where} {case_argument(self.case_id)}'")
            raised = self.suite.raised.get(self.case_id)
            if raised is not None:  # where the system raised, as pytest shows a test's own error
                from oloproof.report.terminal import indented_traceback, one_line

                error, tb = raised  # recorded text: escapes and \r shown, never obeyed
                message += "\nerror: " + one_line(error)
                if tb:
                    message += "\n" + indented_traceback(tb)
            raise CaseFailure(message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"oloproof: {self.case_id or 'release gate'}"


class OloproofCollector(pytest.Collector):
    """The project as a pytest collector: an item per case (or trial), then the gate item."""

    def __init__(self, *, suite: Suite, **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite

    def collect(self) -> list[pytest.Item]:
        items: list[pytest.Item] = [OloproofItem.from_parent(self, name=case_id, suite=self.suite, case_id=case_id)
                                    for case_id in self.suite.ids()]
        items.append(OloproofItem.from_parent(self, name="release-gate", suite=self.suite, case_id=None))
        return items


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """With ``--oloproof``, append the project's items to the collected tests; without it,
    do nothing.

    Raises:
        pytest.UsageError: the project does not load (one located error, no traceback).
    """
    project = config.getoption("--oloproof")
    if project is None:
        return  # inert
    root = Path(project).resolve()
    db = config.getoption("--oloproof-db") or os.environ.get("OLOPROOF_DB", "").strip() or None
    suite = Suite(str(root), db)
    collector = OloproofCollector.from_parent(session, name=f"oloproof[{root.name}]", path=root / "oloproof.yaml",
                                              nodeid=f"oloproof[{root.name}]", suite=suite)
    try:
        items.extend(collector.collect())
    except Exception as e:  # a project that does not load: one located error, not a traceback
        raise pytest.UsageError(f"--oloproof {project}: {e}") from e
