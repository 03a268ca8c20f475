"""oloproof.integrations.oracles: a code agent's and a report agent's deliverables checked on real files in
temporary folders (a small repository without git, real test runs), and recorded as
``deliverable(...)`` evidence inside a case (the ``deliverables`` example)."""

import json
import subprocess
import sys
import textwrap

import pytest
from pydantic import BaseModel

from oloproof.integrations.oracles import code_deliverable, is_test_file, report_deliverable, snapshot_tree
from tests.conftest import run_in, write

TESTS = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-q"]

CALC = "def add(a, b):\n    return a - b\n"
TEST = textwrap.dedent("""\
    import unittest

    from calc import add


    class AddTest(unittest.TestCase):
        def test_adds(self):
            self.assertEqual(add(2, 3), 5)
    """)


@pytest.fixture
def repo(tmp_path):
    """A repository with a bug and a test that catches it, and its snapshot before the agent."""
    root = tmp_path / "repo"
    write(root / "calc.py", CALC)
    write(root / "tests" / "test_calc.py", TEST)
    write(root / "README.md", "calc\n")
    return root, snapshot_tree(root)


def test_the_buggy_repository_fails_its_own_tests(repo):
    root, _ = repo
    assert subprocess.run(TESTS, cwd=root, capture_output=True).returncode == 1


def test_an_honest_fix_meets_the_contract(repo):
    root, before = repo
    write(root / "calc.py", CALC.replace("a - b", "a + b"))
    check = code_deliverable(root, before=before, test_command=TESTS)
    assert (check.exists, check.contract_ok, check.problems) == (True, True, ())
    assert check.checks["diff"] == {"added": [], "modified": ["calc.py"], "deleted": []}
    assert check.checks["tests"]["passed"] and check.checks["tests"]["returncode"] == 0
    assert "original_tests" not in check.checks  # no test file touched: nothing to rerun
    assert not check.recorded  # outside a case: checked, not recorded


def test_a_test_edited_to_go_green_is_caught(repo):
    root, before = repo
    write(root / "tests" / "test_calc.py", TEST.replace("add(2, 3), 5", "add(2, 3), -1"))
    check = code_deliverable(root, before=before, test_command=TESTS)
    assert check.checks["tests"]["passed"]  # the suite as the agent left it is green...
    assert not check.checks["original_tests"]["passed"]  # ...the tests as they were are not
    assert (check.exists, check.contract_ok) == (True, False)
    assert check.codes == ("tests_edited_to_go_green",)
    assert "tests/test_calc.py" in check.problems[0]
    assert (root / "tests" / "test_calc.py").read_text().count("-1") == 1  # the repository is left as it was


def test_a_deleted_test_file_is_an_edit_too(repo):
    root, before = repo
    (root / "tests" / "test_calc.py").unlink()
    write(root / "tests" / "test_other.py", "import unittest\n\n\nclass T(unittest.TestCase):\n"
                                            "    def test_ok(self):\n        pass\n")
    check = code_deliverable(root, before=before, test_command=TESTS)
    assert check.checks["tests"]["passed"]
    assert check.codes == ("tests_edited_to_go_green",)
    assert check.checks["diff"]["deleted"] == ["tests/test_calc.py"]


def test_a_harmless_test_edit_is_refused_unless_allowed(repo):
    root, before = repo
    write(root / "calc.py", CALC.replace("a - b", "a + b"))
    extra = "\n    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"
    write(root / "tests" / "test_calc.py", TEST + extra)
    check = code_deliverable(root, before=before, test_command=TESTS)
    assert check.checks["original_tests"]["passed"]
    assert (check.contract_ok, check.codes) == (False, ("tests_edited",))
    allowed = code_deliverable(root, before=before, test_command=TESTS, allow_test_edits=True)
    assert (allowed.contract_ok, allowed.problems) == (True, ())


def test_a_wrong_fix_fails_the_tests(repo):
    root, before = repo
    write(root / "calc.py", CALC.replace("a - b", "a * b"))
    check = code_deliverable(root, before=before, test_command=TESTS)
    assert (check.exists, check.contract_ok, check.codes) == (True, False, ("tests_failed",))
    assert "FAIL" in check.checks["tests"]["output_tail"]


def test_no_change_is_no_deliverable(repo):
    root, before = repo
    check = code_deliverable(root, before=before, test_command=TESTS)
    assert (check.exists, check.contract_ok) == (False, None)
    assert check.codes == ("no_change", "tests_failed")
    # bytecode and caches written by a test run are no change
    subprocess.run(TESTS, cwd=root, capture_output=True)
    assert not code_deliverable(root, before=before, test_command=TESTS).exists


def test_changes_outside_the_allowed_paths(repo):
    root, before = repo
    write(root / "calc.py", CALC.replace("a - b", "a + b"))
    write(root / "README.md", "rewritten\n")
    check = code_deliverable(root, before=before, test_command=TESTS, allowed_paths=["calc.py", "tests/*"])
    assert check.codes == ("outside_allowed_paths",) and "README.md" in check.problems[0]


def test_a_test_command_that_cannot_start_leaves_the_contract_unchecked(repo):
    root, before = repo
    write(root / "calc.py", CALC.replace("a - b", "a + b"))
    check = code_deliverable(root, before=before, test_command=["no-such-test-runner-xyz"])
    assert (check.exists, check.contract_ok) == (True, None)  # never a pass by default
    assert check.codes == ("tests_not_run",)


def test_a_hanging_test_run_fails(repo):
    root, before = repo
    write(root / "calc.py", "import time\ntime.sleep(30)\n\n\ndef add(a, b):\n    return a + b\n")
    check = code_deliverable(root, before=before, test_command=TESTS, timeout=0.5)
    assert (check.contract_ok, check.codes) == (False, ("tests_timed_out",))


def test_snapshots_and_test_files():
    assert is_test_file("tests/test_calc.py") and is_test_file("pkg/tests/helpers.py")
    assert is_test_file("test_x.py") and is_test_file("src/x_test.py") and is_test_file("web/a.spec.ts")
    assert not is_test_file("calc.py") and not is_test_file("contest.py")
    with pytest.raises(ValueError, match="not a folder"):
        snapshot_tree("/no/such/folder")


class Report(BaseModel):
    period: str
    total: int
    sources: list[str]


GOOD = {"period": "2026-01", "total": 1050, "sources": ["invoices", "refunds"]}


@pytest.fixture
def desk(tmp_path):
    """A report, its sources and two destinations."""
    write(tmp_path / "sources" / "invoices.json", "{}")
    write(tmp_path / "sources" / "refunds.csv", "a,b\n")
    text = json.dumps(GOOD, indent=2)
    write(tmp_path / "out" / "report.json", text)
    write(tmp_path / "outbox" / "report.json", text)
    write(tmp_path / "shared" / "report.json", json.dumps(GOOD))  # the same data, other spacing
    return tmp_path


def check_report(desk, **options):
    defaults = {"schema": Report, "sources_dir": desk / "sources",
                "destinations": {"outbox": desk / "outbox" / "report.json",
                                 "shared-drive": desk / "shared" / "report.json"}}
    return report_deliverable(desk / "out" / "report.json", **{**defaults, **options})


def test_a_complete_report_meets_the_contract(desk):
    check = check_report(desk)
    assert (check.name, check.exists, check.contract_ok, check.problems) == ("report.json", True, True, ())
    assert check.checks["sources"] == ["invoices", "refunds"]
    assert check.checks["destinations"] == {"outbox": "same", "shared-drive": "same"}


def test_a_missing_report_is_no_deliverable(desk):
    (desk / "out" / "report.json").unlink()
    check = check_report(desk)
    assert (check.exists, check.contract_ok, check.codes) == (False, None, ("missing",))


def test_a_report_that_does_not_parse(desk):
    write(desk / "out" / "report.json", '{"period": "2026-01", ')
    check = check_report(desk)
    assert (check.exists, check.contract_ok, check.codes) == (True, False, ("not_parseable",))


def test_the_schema_is_checked_strictly(desk):
    write(desk / "out" / "report.json", json.dumps({**GOOD, "total": "1,050"}))
    check = check_report(desk, destinations=())
    assert check.codes == ("schema_invalid",) and "total" in check.problems[0]
    write(desk / "out" / "report.json", json.dumps({**GOOD, "total": "1050"}))
    assert check_report(desk, destinations=()).codes == ("schema_invalid",)  # text is no number
    assert check_report(desk, destinations=(), strict=False).contract_ok  # unless told so
    write(desk / "out" / "report.json", json.dumps({"period": "2026-01", "sources": ["invoices"]}))
    assert "total: Field required" in check_report(desk, destinations=()).problems[0]


def test_cited_sources_must_be_present(desk):
    write(desk / "out" / "report.json", json.dumps({**GOOD, "sources": ["invoices", "ledger", "../out/report"]}))
    check = check_report(desk, destinations=())
    assert check.codes == ("unknown_source",)
    assert "ledger, ../out/report" in check.problems[0]  # nothing outside the sources folder counts
    known = check_report(desk, destinations=(), sources_dir=None, known_sources=["invoices", "ledger", "../out/report"])
    assert known.contract_ok
    write(desk / "out" / "report.json", json.dumps({**GOOD, "sources": []}))
    assert check_report(desk, destinations=()).codes == ("too_few_sources",)
    cited = [{"id": "invoices"}, {"url": "refunds"}]
    write(desk / "out" / "report.json", json.dumps({**GOOD, "meta": {"cites": cited}}))
    assert check_report(desk, destinations=(), sources="meta.cites").contract_ok


def test_destination_parity(desk):
    write(desk / "shared" / "report.json", json.dumps({**GOOD, "period": "2025-12"}))
    (desk / "outbox" / "report.json").unlink()
    check = check_report(desk)
    assert check.codes == ("destination_missing", "destination_differs")
    assert check.problems == ("destination_missing: outbox", "destination_differs: shared-drive holds another report")
    assert check.checks["destinations"] == {"outbox": "missing", "shared-drive": "differs"}


def test_a_yaml_report(desk):
    write(desk / "out" / "report.yaml", "period: '2026-01'\ntotal: 1050\nsources: [invoices]\n")
    check = report_deliverable(desk / "out" / "report.yaml", schema=Report, sources_dir=desk / "sources",
                               name="monthly")
    assert (check.name, check.contract_ok) == ("monthly", True)
    with pytest.raises(ValueError, match="cannot tell the format"):
        report_deliverable(desk / "sources" / "refunds.csv")


def test_import_oloproof_does_not_load_the_oracles():
    code = "import sys, oloproof; print('oloproof.integrations.oracles' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- inside a case: the deliverables example -------------------------------------------------

@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``oloproof init --example deliverables`` run once."""
    folder = tmp_path_factory.mktemp("deliverables") / "d"
    made = run_in(folder.parent, "init", "--example", "deliverables", "d")
    assert made.exit_code == 0, made.output
    return run_in(folder, "run", "--json", "results.json")


def test_the_example_classes_each_trial_from_its_deliverable(example):
    assert example.exit_code == 1, example.output  # a regression suite: its default rule fails
    data = json.loads((example.folder / "results.json").read_text())
    classes = {c["case_id"]: c["verdicts"]["release_class"]["reason"] for c in data["cases"]}
    cases = [json.loads(line) for line in (example.folder / "cases.jsonl").read_text().splitlines()]
    assert classes == {c["id"]: c["expected"]["class"] for c in cases}
    assert data["release"]["classes"] == {"PASS": 2, "FAIL_OUTCOME": 7}
    assert data["release"]["response_only_false_passes"] == 7  # each FAIL said "done"
    says_done = next(r for r in data["criteria"] if r["criterion"] == "says_done")
    assert (says_done["passed"], says_done["observed"]) == (9, 9)  # the transcript passes them all
    assert data["kind"] == "regression"
    assert {r["name"]: r["status"] for r in data["gate"]["rules"]} == {
        "regression:says_done": "PASS", "regression:release_class": "FAIL"}


def test_the_example_records_deliverable_evidence(example):
    r = run_in(example.folder, "export", "latest", "--format", "jsonl", "--out", "export.jsonl")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (example.folder / "export.jsonl").read_text().splitlines()]
    evidence = {row["case_id"]: [{k: v for k, v in d.items() if k != "after_step"} for d in row["data"]]
                for row in rows if row["record"] == "release_evidence/v1"}
    assert evidence["code-tests-edited"] == [{"kind": "deliverable", "name": "fix-add", "exists": True,
                                              "contract_ok": False}]
    assert evidence["code-no-change"] == [{"kind": "deliverable", "name": "fix-add", "exists": False,
                                           "contract_ok": None}]
    assert evidence["report-complete"] == [{"kind": "deliverable", "name": "monthly-report", "exists": True,
                                            "contract_ok": True}]
    assert len(evidence) == 9
    shown = run_in(example.folder, "show", "latest", "code-tests-edited")
    assert "tests_edited_to_go_green" in shown.output  # the problems, in the system's output


def test_the_example_leaves_no_workspace_behind(example):
    import tempfile
    from pathlib import Path

    assert not list(Path(tempfile.gettempdir()).glob("oloproof-original-tests-*"))
