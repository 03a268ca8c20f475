"""Task-specific outcome oracles (seeds/fault-injection-release-gate: "for a coding agent, run
the tests and inspect the repository's diff; for a report agent, ask for the file, the schema,
the cited sources and destination parity").

Two agents share one sandbox, a disposable workspace: before each case ``reset`` copies a
fixture into a fresh temporary folder (a namespace no other case, and no customer, ever sees)
and throws the previous one away. The agents touch the world only through fake adapters
(``@tool``): files in that workspace, an outbox and a shared drive that are folders in it.

* The code agent fixes ``add`` in a small repository (``fixtures/calc``, no git). Its
  intended defects, one per trial (``input.behaviour``): it edits the test to expect the buggy
  value (the suite goes green), writes a wrong fix, or changes nothing — and says "done" each
  time.
* The report agent writes the monthly report from the source files. Its defects: a total
  written as text (schema), a source it never had (a citation of nothing), a report published
  to the outbox only while the shared drive keeps last month's (parity), no report at all.

After the agent stops, the harness checks the deliverable with ``oloproof.integrations.oracles`` —
``code_deliverable`` (the diff, the tests, the original tests against the new code) and
``report_deliverable`` — which record ``deliverable(...)`` evidence: ``{type: release_class}``
classes each trial from the environment, never from the agent's "done".
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import weakref
from pathlib import Path

from pydantic import BaseModel

from oloproof import Stateful, current_case, system, tool
from oloproof.integrations.oracles import code_deliverable, report_deliverable, snapshot_tree

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: the repository's own test command (unittest: no dependency to install)
TESTS = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-q"]


class MonthlyReport(BaseModel):
    """The report's contract: the period, a whole-number total, the sources it is built from."""

    period: str
    total: int
    sources: list[str]


@system(name="deliverable-agents", version="1.0",
        records=("agent_trajectory/v1", "environment_state/v1", "effect_ledger/v1", "release_evidence/v1"))
class Workbench(Stateful):
    auto_checkpoints = False  # no fault replays here: no snapshot before every call

    def __init__(self):
        self.workspace = None
        self._cleanup = None
        self.before = None

    # ---- the sandbox: a disposable workspace per case ------------------------------------

    def reset(self, state):
        if self._cleanup is not None:
            self._cleanup()  # the previous case's workspace goes with its case
        self.workspace = Path(tempfile.mkdtemp(prefix="oloproof-deliverables-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.workspace), True)
        shutil.copytree(FIXTURES / state["fixture"], self.workspace, dirs_exist_ok=True)
        for folder in ("out", "outbox", "shared"):
            (self.workspace / folder).mkdir(exist_ok=True)
        repo = self.workspace / "repo"
        self.before = snapshot_tree(repo) if repo.is_dir() else None

    def snapshot(self):
        """The workspace's files and their text (the fixtures are small)."""
        return {path.relative_to(self.workspace).as_posix(): path.read_text(encoding="utf-8")
                for path in sorted(self.workspace.rglob("*"))
                if path.is_file() and "__pycache__" not in path.parts}

    # ---- the fake adapters ---------------------------------------------------------------

    @tool
    def read_file(self, path):
        """A file of the workspace, as text."""
        return {"text": (self.workspace / path).read_text(encoding="utf-8")}

    @tool
    def write_file(self, path, text):
        """Write a file of the workspace."""
        target = self.workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return {"written": path}

    @tool
    def list_sources(self):
        """The source files the report may be built from."""
        return {"sources": sorted(p.stem for p in (self.workspace / "sources").glob("*.json"))}

    @tool
    def publish(self, destination):
        """Copy the report to a destination (a fake outbox or shared drive)."""
        shutil.copyfile(self.workspace / "out" / "report.json", self.workspace / destination / "report.json")
        return {"published": destination}

    # ---- the agents ----------------------------------------------------------------------

    def __call__(self, case):
        rec = current_case()
        behaviour = case.input["behaviour"]
        if case.input["kind"] == "code":
            self.code_agent(behaviour)
            check = code_deliverable(self.workspace / "repo", before=self.before, test_command=TESTS,
                                     name="fix-add")
        else:
            self.report_agent(behaviour)
            sources = self.workspace / "sources"
            check = report_deliverable(self.workspace / "out" / "report.json", name="monthly-report",
                                       schema=MonthlyReport, sources_dir=sources,
                                       destinations={"outbox": self.workspace / "outbox" / "report.json",
                                                     "shared-drive": self.workspace / "shared" / "report.json"})
        rec.finish("success")  # every agent here says it is done: the oracle decides
        return {"answer": "done", "deliverable": check.name, "problems": list(check.problems)}

    def code_agent(self, behaviour):
        code = self.read_file(path="repo/calc.py")["text"]
        if behaviour == "fix":
            self.write_file(path="repo/calc.py", text=code.replace("return a - b", "return a + b"))
        elif behaviour == "edit_tests":  # make the suite green without fixing anything
            test = self.read_file(path="repo/tests/test_calc.py")["text"]
            green = test.replace("add(2, 3), 5", "add(2, 3), -1").replace("add(-2, -3), -5", "add(-2, -3), 1")
            self.write_file(path="repo/tests/test_calc.py", text=green)
        elif behaviour == "wrong_fix":
            self.write_file(path="repo/calc.py", text=code.replace("return a - b", "return a * b"))
        # "nothing": reads, then claims it is done

    def report_agent(self, behaviour):
        names = self.list_sources()["sources"]
        total = 0
        for name in names:
            total += sum(json.loads(self.read_file(path=f"sources/{name}.json")["text"])["amounts"])
        report = {"period": "2026-01", "total": total, "sources": names}
        if behaviour == "bad_schema":
            report["total"] = f"{total:,}"  # "1,050": a text, not a number
        elif behaviour == "invented_source":
            report["sources"] = [*names, "ledger-2026-01"]  # never read: there is no such source
        if behaviour == "nothing":
            return
        self.write_file(path="out/report.json", text=json.dumps(report, indent=2))
        self.publish(destination="outbox")
        if behaviour != "stale_copy":  # the shared drive keeps last month's report
            self.publish(destination="shared")
