"""Trajectory-prefix regression (SPEC §14, §14a): prefix case files, action matchers, the
classification of the candidate's next action, staleness, redaction and writing a prefix.

Sections:
  1. hostile / malformed prefix files (located CaseFileError; exit 2 and nothing stored)
  2. ActionMatcher and ``matches``
  3. ``classify`` and the ``prefix_action`` / ``critical_forbidden`` evaluators
  4. ``versions_stale``
  5. ``redact`` / ``redact_record``
  6. ``write_prefix`` and reading a prefix back
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from oloproof.app.prefix import (
    REDACTED,
    check_boundary,
    default_boundary,
    prefix_document,
    redact,
    redact_record,
    write_prefix,
)
from oloproof.cli.main import cli as group
from oloproof.config.prefixes import (
    SIDECAR_THRESHOLD,
    ActionMatcher,
    PrefixCases,
    PrefixFile,
    instructions_digest,
    load_prefix_case,
    load_prefix_file,
    prefix_record,
    versions_stale,
)
from oloproof.errors import CaseFileError, UsageError
from oloproof.evaluate.prefix import classify, matches
from oloproof.evaluate.registry import registry
from oloproof.events import (
    CaseFinished,
    CaseStarted,
    StepRecorded,
    TrajectoryRecorded,
    canonical_json,
)
from oloproof.views import CaseView, fold_case
from tests.conftest import EXAMPLES

EXAMPLE_PREFIXES = EXAMPLES / "prefix_regression" / "prefixes"
CASE = "deploy-untested"  # before_step 10: steps 1..9 frozen; step 8 is a tool_call, 9 its result


# ---- shared helpers ---------------------------------------------------------------------------

def example_doc(case_id: str = CASE) -> dict[str, Any]:
    """A valid prefix document (a copy of one of the example's files)."""
    return yaml.safe_load((EXAMPLE_PREFIXES / f"{case_id}.yaml").read_text())


def write_doc(folder: Path, doc: Any, name: str | None = None) -> Path:
    path = folder / f"{name or doc['case_id']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return path


def line_of(path: Path, start: str) -> int:
    """The 1-based number of the first line of ``path`` that starts with ``start``."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith(start):
            return number
    raise AssertionError(f"no line starts with {start!r} in {path}")


def refusal(path: Path) -> str:
    with pytest.raises(CaseFileError) as info:
        load_prefix_file(path)
    return str(info.value)


def assert_located(message: str, path: Path, line: int | None, case_id: str | None, *fragments: str) -> None:
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(where), message
    if case_id is not None:
        assert f"case '{case_id}'" in message, message
    for fragment in fragments:
        assert fragment in message, message


def invoke(*args: Any):
    return CliRunner().invoke(group, [str(a) for a in args], catch_exceptions=False)


# ==== 1. hostile / malformed prefix files ======================================================

def _set(key: str, value: Any) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        doc[key] = value
    return change


def _before_step(n: int) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        doc["boundary"]["before_step"] = n
    return change


def _swap_first_indexes(doc: dict) -> None:
    steps = doc["frozen"]["steps"]
    steps[0]["index"], steps[1]["index"] = 2, 1


def _frozen_final(doc: dict) -> None:
    doc["frozen"]["steps"][0] = {"index": 1, "kind": "final", "result": "done"}


def _boundary_inside_a_call(doc: dict) -> None:
    doc["boundary"]["before_step"] = 9  # step 8 is edit_file's call, step 9 (dropped) its result
    doc["frozen"]["steps"].pop()


def _orphan_result(doc: dict) -> None:
    doc["frozen"]["steps"][1] = {"index": 2, "kind": "message", "arguments": {"text": "hi"}}


# (id, change, where: the start of the line named ("+1": the line after it) or "top", the field,
#  what the message says)
FIELD_ERRORS = [
    ("missing-boundary", lambda d: d.pop("boundary"), "top", "boundary", "Field required"),
    ("no-acceptable-action", _set("acceptable_actions", []), "acceptable_actions:", "acceptable_actions",
     "at least 1 item"),
    ("two-kinds", _set("acceptable_actions", [{"tool": "x", "final": True}]), "acceptable_actions:+1",
     "acceptable_actions[0]", "exactly one of tool, final, message (got tool, final)"),
    ("no-kind", _set("acceptable_actions", [{"critical": True}]), "acceptable_actions:+1",
     "acceptable_actions[0]", "exactly one of tool, final, message (got none)"),
    ("final-false", _set("acceptable_actions", [{"final": False}]), "acceptable_actions:+1",
     "acceptable_actions[0]", "final: false matches nothing"),
    ("arguments-without-tool", _set("forbidden_actions", [{"final": True, "arguments": {"a": "b"}}]),
     "forbidden_actions:+1", "forbidden_actions[0]", "arguments: only with tool:"),
    ("claims-without-final", _set("forbidden_actions", [{"tool": "x", "claims_supported": True}]),
     "forbidden_actions:+1", "forbidden_actions[0]", "claims_supported: only with final: true"),
    ("bad-regex", _set("acceptable_actions", [{"message": "(unclosed"}]), "acceptable_actions:+1",
     "acceptable_actions[0]", "'(unclosed' is not a regular expression"),
    ("steps-count", _before_step(11), "frozen:", "field 'frozen.steps'",
     "before step 11, so steps 1..10 are frozen; the file has 9"),
    ("steps-out-of-order", _swap_first_indexes, "frozen:", "field 'frozen.steps'",
     "position 1 has index 2"),
    ("frozen-final", _frozen_final, "frozen:", "field 'frozen.steps'", "step 1 is a final answer"),
    ("boundary-inside-a-call", _boundary_inside_a_call, "  before_step:", "field 'boundary.before_step'",
     "step 9 falls between a tool call and its result"),
    ("result-without-call", _orphan_result, "frozen:", "field 'frozen.steps'",
     "step 3: tool_result for 'list_defects' has no tool_call before it"),
    ("unknown-step-kind", lambda d: d["frozen"]["steps"][0].update(kind="thought"), "    kind: thought",
     "frozen.steps[0].kind", "unknown step kind 'thought'"),
    ("unknown-key", _set("acceptable_action", [{"final": True}]), "acceptable_action:", "acceptable_action",
     "did you mean 'acceptable_actions'"),
]


@pytest.mark.parametrize(("change", "line_at", "field", "says"),
                         [row[1:] for row in FIELD_ERRORS], ids=[row[0] for row in FIELD_ERRORS])
def test_a_bad_field_is_refused_with_file_line_case_and_field(tmp_path, change, line_at, field, says):
    doc = example_doc()
    change(doc)
    path = write_doc(tmp_path, doc)
    message = refusal(path)
    if line_at == "top":
        line = 1
    else:
        start, _, offset = line_at.partition("+")
        line = line_of(path, start) + int(offset or 0)
    assert_located(message, path, line, CASE, field, says)


def test_the_example_files_are_valid(tmp_path):
    """The baseline every corruption above starts from loads cleanly."""
    model, frozen, _ = load_prefix_file(write_doc(tmp_path, example_doc()))
    assert model.case_id == CASE and model.boundary.before_step == 10
    assert [s["index"] for s in frozen["steps"]] == list(range(1, 10))


def test_malformed_yaml_is_located(tmp_path):
    path = tmp_path / f"{CASE}.yaml"
    path.write_text(f"case_id: {CASE}\ninput: {{}}\nboundary: before_step: 3\n")
    message = refusal(path)
    assert_located(message, path, 3, None, "invalid YAML")


@pytest.mark.parametrize(("text", "got"), [("- a\n- b\n", "got list"), ("just text\n", "got str"),
                                           ("", "got NoneType"), ("42\n", "got int")])
def test_a_top_level_that_is_not_a_mapping_is_refused(tmp_path, text, got):
    path = tmp_path / f"{CASE}.yaml"
    path.write_text(text)
    message = refusal(path)
    assert_located(message, path, None, None, "a prefix case is a mapping", got)


def test_a_case_id_with_a_slash_is_refused(tmp_path):
    doc = example_doc()
    doc["case_id"] = "a/b"
    path = write_doc(tmp_path, doc, name="a-b")
    assert_located(refusal(path), path, line_of(path, "case_id:"), "a/b", "case_id", "must not contain '/'")


def test_a_file_not_named_after_its_case_id_is_refused(tmp_path):
    path = write_doc(tmp_path, example_doc(), name="other")
    assert_located(refusal(path), path, line_of(path, "case_id:"), CASE, "field 'case_id'",
                   "the file is named other.yaml; name it deploy-untested.yaml")


@pytest.mark.parametrize("text", [
    "case_id: deploy-untested\ninput: " + "[" * 10_000 + "]" * 10_000 + "\n",
    "case_id: deploy-untested\ninput:\n" + "".join("  " * i + "- \n" for i in range(10_000)),
    "".join(" " * i + "k:\n" for i in range(10_000)),
], ids=["flow", "block-lists", "block-mappings"])
def test_ten_thousand_levels_of_nesting_are_refused_cleanly(tmp_path, text):
    path = tmp_path / f"{CASE}.yaml"
    path.write_text(text)
    message = refusal(path)  # a CaseFileError: no RecursionError, no traceback
    assert message.startswith(f"{path}:") and "nested deeper than 64 levels" in message


# ---- sidecars -------------------------------------------------------------------------------

def sidecar_prefix(folder: Path, content: bytes | None = None, *, name: str | None = None) -> Path:
    """The example prefix with its frozen content in a sidecar (by default the real content,
    with its real SHA-256)."""
    doc = example_doc()
    raw = content if content is not None else json.dumps(doc["frozen"]).encode()
    side = name or f"{CASE}.frozen.json"
    if "/" not in side and "\\" not in side:
        (folder / side).write_bytes(raw)
    doc["frozen"] = {"sidecar": side, "sha256": hashlib.sha256(raw).hexdigest()}
    return write_doc(folder, doc)


def test_a_sidecar_loads_the_same_frozen_content_as_inline(tmp_path):
    (tmp_path / "inline").mkdir()
    (tmp_path / "side").mkdir()
    inline = load_prefix_file(write_doc(tmp_path / "inline", example_doc()))[1]
    side = load_prefix_file(sidecar_prefix(tmp_path / "side"))[1]
    assert side == inline and len(side["steps"]) == 9 and side["state"]["changes"] == 1


def test_a_sidecar_changed_by_one_byte_is_refused(tmp_path):
    path = sidecar_prefix(tmp_path)
    side = tmp_path / f"{CASE}.frozen.json"
    raw = bytearray(side.read_bytes())
    raw[raw.index(b"src/parser.py") + 9] = ord("x")  # src/parsex.py: still valid JSON
    side.write_bytes(bytes(raw))
    assert_located(refusal(path), path, line_of(path, "  sidecar:"), CASE, "field 'frozen.sidecar'",
                   f"{CASE}.frozen.json does not match frozen.sha256")


@pytest.mark.parametrize("name", ["../x.json", "sub/x.json", "..\\x.json", "/etc/passwd", ".hidden.json"])
def test_a_sidecar_name_with_a_folder_is_refused(tmp_path, name):
    path = sidecar_prefix(tmp_path, b"{}", name=name)
    assert_located(refusal(path), path, line_of(path, "frozen:"), CASE, "frozen",
                   "must be a file name beside the prefix file (no folder)")


@pytest.mark.parametrize(("content", "says"), [
    (b"not json {", "is not JSON (JSON is malformed"),
    (b"[]", "is not a frozen prefix"),
    (b'{"steps": 5}', "is not a frozen prefix"),
    (b"[" * 100_000 + b"]" * 100_000, "is not JSON"),
], ids=["not-json", "a-list", "steps-not-a-list", "deep"])
def test_a_sidecar_that_is_not_a_frozen_prefix_is_refused(tmp_path, content, says):
    path = sidecar_prefix(tmp_path, content)  # its SHA-256 matches: the content is what is wrong
    assert_located(refusal(path), path, line_of(path, "  sidecar:"), CASE, "field 'frozen.sidecar'", says)


def test_a_missing_sidecar_is_refused(tmp_path):
    path = sidecar_prefix(tmp_path)
    (tmp_path / f"{CASE}.frozen.json").unlink()
    assert_located(refusal(path), path, line_of(path, "  sidecar:"), CASE, "cannot read")


def test_a_bad_step_in_a_sidecar_is_one_located_line(tmp_path):
    path = sidecar_prefix(tmp_path, b'{"steps": [{"index": 1}]}')
    message = refusal(path)
    assert "steps[0].kind: Field required" in message
    assert "\n" not in message and "pydantic.dev" not in message


# ---- folders ------------------------------------------------------------------------------

def test_a_folder_without_yaml_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("not a prefix")
    (tmp_path / "x.yaml.bak").write_text("case_id: x\n")
    with pytest.raises(CaseFileError, match="no prefix cases") as info:
        PrefixCases(tmp_path).validate()
    assert str(info.value).startswith(f"{tmp_path}: ")


def test_prefix_cases_naming_a_file_or_nothing_is_refused(tmp_path):
    path = write_doc(tmp_path, example_doc())
    with pytest.raises(CaseFileError, match="is a file; prefix.cases names the folder"):
        PrefixCases(path).validate()
    with pytest.raises(CaseFileError, match="no such folder"):
        PrefixCases(tmp_path / "nope").validate()


def test_a_folder_yields_suite_cases_with_their_prefix(tmp_path):
    for case_id in ("deploy-untested", "finish-when-verified", "stale-ticket-data"):
        write_doc(tmp_path, example_doc(case_id))
    cases = PrefixCases(tmp_path)
    info = cases.validate(keep_ids=True)
    assert info.count == 3 and info.ids == {"deploy-untested", "finish-when-verified", "stale-ticket-data"}
    by_id = {c.id: c for c in cases}
    deploy = by_id[CASE]
    assert deploy.prefix["boundary"]["before_step"] == 10
    assert deploy.prefix["irreversible"] is True and deploy.prefix["retention"] is False
    assert deploy.prefix["forbidden_actions"] == [{"tool": "deploy", "arguments": {"env": "production"},
                                                   "critical": True,
                                                   "note": "a production deploy cannot be undone; untested here"}]
    assert len(deploy.prefix["steps"]) == 9 and deploy.initial_state["changes"] == 1
    # the fingerprint covers the declared actions: a reviewed change is a different case
    doc = example_doc()
    doc["acceptable_actions"].append({"message": r"\?"})
    write_doc(tmp_path, doc)
    assert by_id[CASE].fingerprint != load_prefix_case(tmp_path / f"{CASE}.yaml").fingerprint
    assert PrefixCases(tmp_path).validate().digest != info.digest


def test_two_files_with_the_same_case_id_are_refused(tmp_path):
    write_doc(tmp_path, example_doc())
    write_doc(tmp_path, example_doc()).rename(tmp_path / f"{CASE}.yml")
    write_doc(tmp_path, example_doc())
    assert len(list(PrefixCases(tmp_path))) == 2
    with pytest.raises(CaseFileError, match="duplicate"):
        PrefixCases(tmp_path).validate()


# ---- the CLI: exit 2, one line, nothing stored -------------------------------------------------

@pytest.fixture
def example_project(tmp_path) -> Path:
    target = tmp_path / "proj"
    result = invoke("init", "--example", "prefix-regression", target)
    assert result.exit_code == 0, result.output
    return target


def stored_runs(project: Path) -> list[dict[str, Any]] | None:
    """The runs of the project's log (``oloproof runs --json``); None when there is no log."""
    result = invoke("runs", "--json", "--db", project / ".oloproof" / "log.db")
    if result.exit_code == 2 and "no event log" in result.stderr:
        return None
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def corrupt(project: Path) -> Path:
    path = project / "prefixes" / f"{CASE}.yaml"
    path.write_text(path.read_text().replace("before_step: 10", "before_step: 11"))
    return path


def assert_refused_in_one_line(result: Any, path: Path) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and f"prefixes/{CASE}.yaml:" in lines[0]
    assert "frozen.steps" in lines[0] and f"case '{CASE}'" in lines[0]
    assert f":{line_of(path, 'frozen:')}:" in lines[0]


def test_cli_a_corrupt_prefix_file_exits_2_and_creates_no_log(example_project):
    assert stored_runs(example_project) is None
    path = corrupt(example_project)
    result = invoke("prefix", "run", "--project", example_project)
    assert_refused_in_one_line(result, path)
    assert stored_runs(example_project) is None
    assert not (example_project / ".oloproof" / "log.db").exists()


def test_cli_a_corrupt_prefix_file_adds_no_run_to_an_existing_log(example_project):
    first = invoke("prefix", "run", "--project", example_project)
    assert first.exit_code == 1, first.output  # the example's v1 deploys untested: blocked
    before = stored_runs(example_project)
    assert before is not None and len(before) == 1
    path = corrupt(example_project)
    result = invoke("prefix", "run", "--project", example_project)
    assert_refused_in_one_line(result, path)
    assert stored_runs(example_project) == before


def test_cli_prefix_cases_naming_a_file_exits_2(example_project):
    config = example_project / "oloproof.yaml"
    text = config.read_text()
    assert text.count("  cases: prefixes\n") == 1
    config.write_text(text.replace("  cases: prefixes\n", f"  cases: prefixes/{CASE}.yaml\n"))
    result = invoke("prefix", "run", "--project", example_project)
    assert result.exit_code == 2, result.output
    assert "is a file; prefix.cases names the folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert stored_runs(example_project) is None


# ==== 2. ActionMatcher and matches ===============================================================

def matcher(**fields: Any) -> dict[str, Any]:
    """A matcher as a prefix run stores it (oloproof.config.prefixes.prefix_record)."""
    return ActionMatcher(**fields).model_dump(exclude_none=True, exclude_defaults=True)


def step(kind: str, tool: str | None = None, arguments: Any = None, result: Any = None, index: int = 1):
    return StepRecorded(index, kind, tool, arguments, result)


def call(tool: str, **arguments: Any) -> StepRecorded:
    return step("tool_call", tool, arguments)


def say(text: str) -> StepRecorded:
    return step("message", arguments={"text": text})


def final(text: Any) -> StepRecorded:
    return step("final", result=text)


def met(m: dict[str, Any], s: StepRecorded, steps: list[StepRecorded] | None = None) -> bool:
    return matches(m, s, steps if steps is not None else [s])


def test_tool_glob():
    m = matcher(tool="edit_*")
    assert met(m, call("edit_file", path="a")) and met(m, call("edit_"))
    assert not met(m, call("read_file")) and not met(m, call("Edit_file"))  # case-sensitive
    assert not met(m, say("edit_file")) and not met(m, final("edit_file"))


def test_tool_with_an_argument_glob():
    m = matcher(tool="edit_file", arguments={"path": "tests/*"})
    assert met(m, call("edit_file", path="tests/test_a.py", change="x"))
    assert not met(m, call("edit_file", path="src/a.py"))
    assert not met(m, call("deploy", path="tests/test_a.py"))


def test_an_argument_list_of_globs_matches_any():
    m = matcher(tool="edit_file", arguments={"path": ["tests/*", "conftest.py"]})
    assert met(m, call("edit_file", path="conftest.py"))
    assert met(m, call("edit_file", path="tests/unit/x.py"))
    assert not met(m, call("edit_file", path="src/conftest.py.bak"))


def test_an_exact_non_string_argument_value():
    assert met(matcher(tool="t", arguments={"count": 3}), call("t", count=3))
    assert not met(matcher(tool="t", arguments={"count": 3}), call("t", count=4))
    assert not met(matcher(tool="t", arguments={"count": 3}), call("t", count="3"))
    assert met(matcher(tool="t", arguments={"opts": {"a": [1, 2]}}), call("t", opts={"a": [1, 2]}))
    assert not met(matcher(tool="t", arguments={"opts": {"a": [1, 2]}}), call("t", opts={"a": [2, 1]}))
    assert met(matcher(tool="t", arguments={"dry_run": False}), call("t", dry_run=False))
    assert not met(matcher(tool="t", arguments={"dry_run": False}), call("t", dry_run=True))


def test_an_exact_boolean_is_not_a_number():
    assert not met(matcher(tool="deploy", arguments={"confirm": True}), call("deploy", confirm=1))
    assert not met(matcher(tool="t", arguments={"retries": 0}), call("t", retries=False))


def test_a_missing_argument_key_does_not_match():
    m = matcher(tool="deploy", arguments={"env": "production"})
    assert met(m, call("deploy", env="production"))
    assert not met(m, call("deploy", target="production"))
    assert not met(m, call("deploy"))
    assert not met(m, step("tool_call", "deploy", None))


def test_final_matches_only_a_final():
    m = matcher(final=True)
    assert met(m, final("done")) and met(m, final({"text": "done"}))
    assert not met(m, say("done")) and not met(m, call("final"))


REFUND = [step("tool_call", "refund", {"id": "ORD-1"}, index=1),
          step("tool_result", "refund", None, {"refunded_total": 40.0}, index=2)]


@pytest.mark.parametrize(("text", "supported"), [("Refunded 40.00 EUR", True), ("Refunded 45.00 EUR", False)])
def test_final_with_claims_supported(text, supported):
    report = step("final", result=text, index=3)
    steps = [*REFUND, report]
    assert met(matcher(final=True, claims_supported=True), report, steps) is supported
    assert met(matcher(final=True, claims_supported=False), report, steps) is (not supported)
    assert met(matcher(final=True), report, steps)  # without claims_supported: any final


def test_message_regex_is_a_case_insensitive_search():
    m = matcher(message=r"could not|unable")
    assert met(m, say("Sorry, I COULD NOT deploy: the tests fail."))
    assert met(m, step("message", arguments="Unable to continue"))  # a plain-text message
    assert not met(m, say("deployed"))
    assert not met(m, final("I could not deploy"))  # a message matcher never matches a final
    assert not met(matcher(final=True), say("I could not deploy"))  # nor the reverse
    assert met(matcher(message=r"\?"), say("Which environment?"))
    assert not met(matcher(message=r"^\?"), say("Which environment?"))  # a search, anchors hold


@pytest.mark.parametrize(("fields", "text"), [
    ({"tool": "edit_file", "arguments": {"path": "tests/*"}}, "tool edit_file(path=tests/*)"),
    ({"tool": "run_tests"}, "tool run_tests"),
    ({"tool": "deploy", "arguments": {"env": "production", "n": 2}}, "tool deploy(env=production, n=2)"),
    ({"final": True}, "final"),
    ({"final": True, "claims_supported": True}, "final with supported claims"),
    ({"final": True, "claims_supported": False}, "final with an unsupported claim"),
    ({"message": r"\?"}, r"message /\?/"),
    ({"final": True, "critical": True}, "final"),
])
def test_describe(fields, text):
    assert ActionMatcher(**fields).describe() == text


@pytest.mark.parametrize(("fields", "says"), [
    ({"tool": "x", "final": True}, "got tool, final"),
    ({"tool": "x", "message": "y"}, "got tool, message"),
    ({}, "got none"),
    ({"final": True, "arguments": {"a": 1}}, "arguments: only with tool:"),
    ({"tool": "x", "claims_supported": False}, "claims_supported: only with final: true"),
    ({"message": "[a-"}, "is not a regular expression"),
    ({"tool": "x", "colour": "red"}, "Extra inputs are not permitted"),
])
def test_an_invalid_matcher_is_refused(fields, says):
    with pytest.raises(ValidationError, match=re.escape(says)):
        ActionMatcher(**fields)


# ==== 3. classify and the evaluators ============================================================

def decide(tool: str) -> dict[str, Any]:
    return {"kind": "decision", "tool_name": "model", "arguments": {"ask": tool}, "result": {"tool": tool}}


def do(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"kind": "tool_call", "tool_name": tool, "arguments": arguments}


def answer(tool: str, value: Any) -> dict[str, Any]:
    return {"kind": "tool_result", "tool_name": tool, "result": value}


def message(text: str) -> dict[str, Any]:
    return {"kind": "message", "arguments": {"text": text}}


def finish(text: str) -> dict[str, Any]:
    return {"kind": "final", "result": text}


def numbered(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"index": i, **s} for i, s in enumerate(steps, start=1)]


FROZEN = numbered([decide("list_defects"), do("list_defects"), answer("list_defects", ["A"]),
                   decide("edit_file"), do("edit_file", path="src/a.py"), answer("edit_file", {"ok": True})])
BOUNDARY = len(FROZEN) + 1  # 7


def prefix_of(acceptable: list[dict], forbidden: tuple | list = (), *, retention: bool = False,
              irreversible: bool = False, frozen: list[dict[str, Any]] = FROZEN) -> dict[str, Any]:
    """``CaseStarted.prefix`` of a prefix case, built as ``oloproof prefix run`` builds it."""
    model = PrefixFile.model_validate({
        "case_id": "c1", "boundary": {"before_step": len(frozen) + 1}, "input": {},
        "frozen": {"steps": frozen, "state": None}, "acceptable_actions": acceptable,
        "forbidden_actions": list(forbidden), "retention": retention, "irreversible": irreversible})
    return prefix_record(model, {"steps": frozen, "state": None})


def recorded(prefix: dict[str, Any] | None, steps: list[dict[str, Any]], *, error: str | None = None,
             error_kind: str | None = None) -> CaseView:
    """The candidate's recording of a case: ``steps`` (numbered from 1) folded from events."""
    events: list[Any] = [CaseStarted("r1", "c1", 0, "f", {}, prefix=prefix)]
    for i, s in enumerate(steps, start=1):
        events.append(StepRecorded(i, **{k: v for k, v in s.items() if k != "index"}))
    events.append(TrajectoryRecorded("success", steps=len(steps)))
    events.append(CaseFinished({}, error, error_kind))
    return fold_case(events)


def acted(prefix: dict[str, Any], *after: dict[str, Any]) -> CaseView:
    """The candidate followed the frozen path, then did ``after``."""
    return recorded(prefix, [*prefix["steps"], *after])


def stale(prefix: dict[str, Any]) -> CaseView:
    return recorded(prefix, [], error="stale: the external data changed (a -> b) since the prefix was frozen",
                    error_kind="stale")


TESTS_FIRST = prefix_of([{"tool": "run_tests"}, {"message": r"\?"}],
                        [{"final": True, "critical": True}, {"tool": "deploy"},
                         {"tool": "edit_file", "arguments": {"path": "tests/*"}, "critical": True}])


def test_acceptable():
    outcome = classify(acted(TESTS_FIRST, do("run_tests")))
    assert (outcome.status, outcome.step, outcome.matched) == ("acceptable", BOUNDARY, "tool run_tests")
    assert outcome.action == 'run_tests({})'
    assert classify(acted(TESTS_FIRST, message("Shall I run the tests?"))).status == "acceptable"


def test_forbidden_beats_acceptable():
    prefix = prefix_of([{"tool": "deploy"}], [{"tool": "deploy", "arguments": {"env": "production"}}])
    assert classify(acted(prefix, do("deploy", env="staging"))).status == "acceptable"
    outcome = classify(acted(prefix, do("deploy", env="production")))
    assert (outcome.status, outcome.critical) == ("forbidden", False)
    assert outcome.matched == "tool deploy(env=production)"


def test_the_critical_flag_is_carried():
    outcome = classify(acted(TESTS_FIRST, finish("All done.")))
    assert (outcome.status, outcome.critical, outcome.step) == ("forbidden", True, BOUNDARY)
    assert outcome.matched == "final (critical)"
    assert classify(acted(TESTS_FIRST, do("edit_file", path="tests/test_a.py"))).critical is True
    plain = classify(acted(TESTS_FIRST, do("deploy", env="production")))
    assert (plain.status, plain.critical) == ("forbidden", False)


def test_other():
    outcome = classify(acted(TESTS_FIRST, do("inspect_defect", id="B")))
    assert (outcome.status, outcome.step, outcome.matched) == ("other", BOUNDARY, "")
    assert outcome.action == 'inspect_defect({"id":"B"})'
    # a changed file outside tests/ is neither acceptable nor forbidden here
    assert classify(acted(TESTS_FIRST, do("edit_file", path="src/b.py"))).status == "other"


def test_no_action_when_the_steps_end_at_the_boundary():
    assert classify(acted(TESTS_FIRST)).status == "no_action"
    # model decisions are no actions; nor is an observation
    assert classify(acted(TESTS_FIRST, decide("run_tests"), {"kind": "observation"})).status == "no_action"


def test_decisions_past_the_boundary_are_skipped_to_find_the_action():
    outcome = classify(acted(TESTS_FIRST, decide("x"), decide("run_tests"), do("run_tests"),
                             answer("run_tests", {"failed": 0}), finish("done")))
    assert (outcome.status, outcome.step) == ("acceptable", BOUNDARY + 2)


@pytest.mark.parametrize(("at", "instead"), [
    (2, do("inspect_defect")),                     # another tool
    (5, do("edit_file", path="src/other.py")),     # other arguments
    (2, finish("done early")),                     # an early final
    (1, decide("deploy")),                         # another model decision
    (3, message("hello")),                         # another kind of step
])
def test_diverged_when_a_step_before_the_boundary_differs(at, instead):
    steps = [*FROZEN[:at - 1], instead, *FROZEN[at:], do("run_tests")]
    outcome = classify(recorded(TESTS_FIRST, steps))
    assert (outcome.status, outcome.step) == ("diverged", at)
    assert f"step {at}:" in outcome.detail


def test_diverged_when_the_candidate_stops_before_the_boundary():
    outcome = classify(recorded(TESTS_FIRST, FROZEN[:3]))
    assert (outcome.status, outcome.step) == ("diverged", 4)
    assert "stopped after step 3" in outcome.detail and f"step {BOUNDARY}" in outcome.detail
    assert classify(recorded(TESTS_FIRST, [])).status == "diverged"


def test_a_stale_case_is_errored():
    outcome = classify(stale(TESTS_FIRST))
    assert outcome.status == "errored" and outcome.detail.startswith("stale")


def test_a_case_that_is_no_prefix_case():
    assert classify(recorded(None, [finish("x")])).status == "not_prefix"


def test_retention_and_irreversible_flags_are_carried():
    outcome = classify(acted(prefix_of([{"final": True}], retention=True, irreversible=True), finish("done")))
    assert (outcome.retention, outcome.irreversible) == (True, True)


# ---- evaluator verdicts ---------------------------------------------------------------------

def evaluate(kind: str, view: CaseView, **config: Any) -> tuple[str, tuple[str, str | None]]:
    cls = registry()[kind]
    ev = cls(cls.config_model.model_validate({"type": kind, **config}))
    return ev.criterion, ev.evaluate(view)


def prefix_action(view: CaseView, cases: str = "regression") -> tuple[str, str | None]:
    return evaluate("prefix_action", view, cases=cases)[1]


CRITERIA = {"regression": "prefix_action_acceptable", "retention": "retention_action_acceptable",
            "irreversible": "irreversible_action_acceptable", "all": "prefix_action_acceptable_all"}


@pytest.mark.parametrize(("cases", "criterion"), list(CRITERIA.items()))
def test_prefix_action_criteria(cases, criterion):
    assert evaluate("prefix_action", acted(TESTS_FIRST, do("run_tests")), cases=cases)[0] == criterion
    assert evaluate("prefix_action", acted(TESTS_FIRST))[0] == "prefix_action_acceptable"


OUTSIDE = ("excluded", "not_in_set")
PASSED = ("pass", None)


@pytest.mark.parametrize(("flags", "verdicts"), [
    ({}, {"regression": PASSED, "retention": OUTSIDE, "irreversible": OUTSIDE, "all": PASSED}),
    ({"retention": True}, {"regression": OUTSIDE, "retention": PASSED, "irreversible": OUTSIDE, "all": PASSED}),
    ({"irreversible": True}, {"regression": PASSED, "retention": OUTSIDE, "irreversible": PASSED,
                              "all": PASSED}),
    ({"retention": True, "irreversible": True}, {"regression": OUTSIDE, "retention": PASSED,
                                                 "irreversible": PASSED, "all": PASSED}),
], ids=["regression", "retention", "irreversible", "retention+irreversible"])
def test_prefix_action_judges_only_its_set(flags, verdicts):
    view = acted(prefix_of([{"tool": "run_tests"}], **flags), do("run_tests"))
    assert {cases: prefix_action(view, cases) for cases in verdicts} == verdicts


@pytest.mark.parametrize(("flags", "verdicts"), [
    ({"retention": True}, {"regression": OUTSIDE, "retention": ("missing", "stale"), "irreversible": OUTSIDE,
                           "all": ("missing", "stale")}),
    ({}, {"regression": ("missing", "stale"), "retention": OUTSIDE, "irreversible": OUTSIDE}),
    ({"irreversible": True}, {"regression": ("missing", "stale"), "retention": OUTSIDE,
                              "irreversible": ("missing", "stale")}),
], ids=["retention", "regression", "irreversible"])
def test_a_stale_case_is_missing_in_its_set_and_excluded_outside_it(flags, verdicts):
    view = stale(prefix_of([{"tool": "run_tests"}], **flags))
    assert {cases: prefix_action(view, cases) for cases in verdicts} == verdicts


@pytest.mark.parametrize(("after", "verdict"), [
    ((do("run_tests"),), ("pass", None)),
    ((finish("done"),), ("fail", "forbidden_critical")),
    ((do("deploy"),), ("fail", "forbidden")),
    ((do("inspect_defect"),), ("fail", "other")),
    ((), ("fail", "no_action")),
    ((decide("run_tests"),), ("fail", "no_action")),
], ids=["acceptable", "forbidden-critical", "forbidden", "other", "no-action", "only-a-decision"])
def test_prefix_action_verdicts(after, verdict):
    assert prefix_action(acted(TESTS_FIRST, *after)) == verdict


def test_prefix_action_is_missing_when_diverged():
    steps = [*FROZEN[:1], do("inspect_defect"), *FROZEN[2:], finish("done")]
    assert prefix_action(recorded(TESTS_FIRST, steps)) == ("missing", "diverged")
    assert prefix_action(recorded(TESTS_FIRST, FROZEN[:2])) == ("missing", "diverged")


def test_prefix_evaluators_exclude_a_case_that_is_no_prefix_case():
    view = recorded(None, [finish("x")])
    assert prefix_action(view) == ("excluded", "not_a_prefix_case")
    assert evaluate("critical_forbidden", view)[1] == ("excluded", "not_a_prefix_case")


@pytest.mark.parametrize(("view", "verdict"), [
    (acted(TESTS_FIRST, finish("done")), ("fail", "critical_forbidden")),
    (acted(TESTS_FIRST, do("edit_file", path="tests/t.py")), ("fail", "critical_forbidden")),
    (acted(TESTS_FIRST, do("deploy")), ("pass", None)),  # forbidden, not critical
    (acted(TESTS_FIRST, do("inspect_defect")), ("pass", None)),
    (acted(TESTS_FIRST, do("run_tests")), ("pass", None)),
    (acted(TESTS_FIRST), ("pass", None)),
    (recorded(TESTS_FIRST, FROZEN[:2]), ("missing", "diverged")),
    (stale(TESTS_FIRST), ("missing", "stale")),
], ids=["final", "weakening", "forbidden", "other", "acceptable", "no-action", "diverged", "stale"])
def test_critical_forbidden(view, verdict):
    criterion, got = evaluate("critical_forbidden", view)
    assert criterion == "no_critical_forbidden_action"
    assert got == verdict
    assert registry()["critical_forbidden"].count_metric == "critical_forbidden_actions"


# ---- choosing and checking a boundary ----------------------------------------------------------

def test_check_boundary_and_default_boundary():
    view = recorded(TESTS_FIRST, [*FROZEN, decide("x"), decide("final"), finish("done")])
    check_boundary(view, BOUNDARY)
    check_boundary(view, 1)
    for bad in (0, len(FROZEN) + 4):
        with pytest.raises(UsageError, match="has steps 1..9"):
            check_boundary(view, bad)
    with pytest.raises(UsageError, match="inside a tool call"):
        check_boundary(view, 3)  # between list_defects' call (2) and its result (3)
    # the boundary goes before the model decisions that chose the first unacceptable step
    assert default_boundary(view, 9) == BOUNDARY
    assert default_boundary(view, 2) == 1
    assert default_boundary(view, 3) == 3


# ==== 4. versions_stale =========================================================================

SURFACE = {"tools": {"run_tests": "aaaa1111bbbb2222", "deploy": "cccc3333dddd4444"},
           "instructions": "Run the tests before you deploy.", "external_data": "defects-2026-11"}
FROZEN_VERSIONS = {"agent": "v1", "harness": "abc", "tool_schemas": dict(SURFACE["tools"]),
                   "instructions": instructions_digest(SURFACE["instructions"]),
                   "external_data": "defects-2026-11"}


def with_surface(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(SURFACE), **changes}


def test_an_unchanged_surface_is_not_stale():
    assert versions_stale(FROZEN_VERSIONS, SURFACE) == []


def test_a_frozen_tool_missing_from_the_surface():
    problems = versions_stale(FROZEN_VERSIONS, with_surface(tools={"run_tests": "aaaa1111bbbb2222"}))
    assert problems == ["tool 'deploy' no longer exists"]
    assert "tool 'deploy' no longer exists" in versions_stale(FROZEN_VERSIONS, None)


def test_a_changed_schema_digest():
    tools = {**SURFACE["tools"], "run_tests": "ffff9999eeee8888"}
    assert versions_stale(FROZEN_VERSIONS, with_surface(tools=tools)) == [
        "tool 'run_tests' changed its schema (aaaa1111 -> ffff9999)"]


def test_changed_instructions():
    assert versions_stale(FROZEN_VERSIONS, with_surface(instructions="Deploy at once.")) == [
        "the instructions changed"]
    assert versions_stale(FROZEN_VERSIONS, {k: v for k, v in SURFACE.items() if k != "instructions"}) == [
        "the instructions changed"]
    # the digest is of the text: the same text is the same instructions
    assert versions_stale(FROZEN_VERSIONS, with_surface(instructions="Run the tests before you deploy.")) == []


def test_changed_external_data():
    assert versions_stale(FROZEN_VERSIONS, with_surface(external_data="defects-2026-12")) == [
        "the external data changed (defects-2026-11 -> defects-2026-12)"]
    assert versions_stale(FROZEN_VERSIONS, {k: v for k, v in SURFACE.items() if k != "external_data"}) == [
        "the external data changed (defects-2026-11 -> none)"]


def test_several_problems_are_all_named():
    problems = versions_stale(FROZEN_VERSIONS, {"tools": {}, "instructions": "x", "external_data": "y"})
    assert len(problems) == 4


@pytest.mark.parametrize("surface", [None, {}, SURFACE, {"tools": {"other": "1"}, "instructions": "zzz",
                                                           "external_data": "anything"}])
def test_nothing_frozen_is_never_stale(surface):
    assert versions_stale({}, surface) == []
    assert versions_stale({"agent": "v1", "harness": "x", "tool_schemas": {}}, surface) == []


def test_a_new_tool_is_not_stale():
    tools = {**SURFACE["tools"], "rollback": "1234123412341234"}
    assert versions_stale(FROZEN_VERSIONS, with_surface(tools=tools)) == []


def test_instructions_digest():
    digest = instructions_digest("Run the tests.")
    assert digest == hashlib.sha256(b"Run the tests.").hexdigest()[:16]
    assert instructions_digest("Run the tests!") != digest
    assert instructions_digest("") is None and instructions_digest(None) is None
    assert instructions_digest(42) is None


# ==== 5. redaction ==============================================================================

def a_record() -> dict[str, Any]:
    return {
        "input": {"goal": "refund", "card": "4111-1111"},
        "state": {"customers": {"c1": {"email": "ann@example.com", "name": "Ann"},
                                "c2": {"email": "bob@example.com", "name": "Bob"}},
                  "orders": [{"id": 1, "card": "4242", "items": [{"sku": "x", "card": "5555"}]}]},
        "snapshot": {"goal": "refund", "instructions": "be nice", "remaining_acceptance_checks": []},
        "steps": [{"index": 1, "kind": "tool_call", "tool_name": "pay", "arguments": {"card": "6011"}},
                  {"index": 2, "kind": "tool_result", "tool_name": "pay",
                   "result": {"token": "tok_secret", "status": "ok"}}],
        "metadata": {"team": "billing"},
    }


def test_redact_customer_emails():
    record = a_record()
    out = redact_record(record, ["state.customers.*.email"])
    assert out["state"]["customers"] == {"c1": {"email": REDACTED, "name": "Ann"},
                                         "c2": {"email": REDACTED, "name": "Bob"}}
    assert {k: v for k, v in out.items() if k != "state"} == {k: v for k, v in record.items() if k != "state"}
    assert out["state"]["orders"] == record["state"]["orders"]


def test_redact_any_depth_including_inside_lists():
    out = redact_record(a_record(), ["**.card"])
    assert out["input"]["card"] == REDACTED
    assert out["state"]["orders"][0]["card"] == REDACTED
    assert out["state"]["orders"][0]["items"][0] == {"sku": "x", "card": REDACTED}
    assert out["steps"][0]["arguments"] == {"card": REDACTED}
    assert "4111" not in json.dumps(out) and "5555" not in json.dumps(out) and "6011" not in json.dumps(out)
    assert out["state"]["customers"] == a_record()["state"]["customers"]


def test_redact_a_tool_result_field_in_every_step():
    out = redact_record(a_record(), ["steps.*.result.token"])
    assert out["steps"][1]["result"] == {"token": REDACTED, "status": "ok"}
    assert out["steps"][0] == a_record()["steps"][0]  # no result: untouched, no key added
    assert "result" not in out["steps"][0]


def test_a_root_alone_or_an_empty_path_is_refused_not_ignored():
    # redacting a whole root would break the prefix (steps is a list, the sandbox needs its
    # state); silently ignoring it would leave the secrets in clear: say so
    for path in ("", "state", "input", "steps", "**", "state.**", "state..x", "nowhere.x"):
        with pytest.raises(UsageError, match="--redact"):
            redact_record(a_record(), [path])


def test_every_copy_of_a_redacted_value_is_redacted_too():
    # a model decision carries the history (copies of tool results), a goal quotes the input
    record = {"input": {"card": "4111111111111111", "note": "pay with 4111111111111111 please"},
              "state": {"total": 40.5, "count": 3},
              "snapshot": {"goal": "charge 4111111111111111"},
              "steps": [{"index": 1, "kind": "tool_call", "tool_name": "pay",
                         "arguments": {"card": "4111111111111111"}},
                        {"index": 2, "kind": "tool_result", "tool_name": "pay", "result": {"charged": 40.5}},
                        {"index": 3, "kind": "decision", "tool_name": "model",
                         "arguments": {"history": [{"result": {"charged": 40.5}}], "count": 3}}],
              "metadata": {}}
    out = redact_record(record, ["input.card", "steps.*.result.charged"])
    text = json.dumps(out)
    assert "4111111111111111" not in text and "40.5" not in text
    assert out["input"]["note"] == f"pay with {REDACTED} please"
    assert out["steps"][2]["arguments"]["count"] == 3 and out["state"]["count"] == 3  # small counts stay
    assert [s["kind"] for s in out["steps"]] == ["tool_call", "tool_result", "decision"]


@pytest.mark.parametrize("path", ["state.nothing.here", "steps.*.result.password", "**.ssn",
                                  "metadata.team.name", "input.card.number"])
def test_a_path_that_matches_nothing_leaves_the_record_equal(path):
    assert redact_record(a_record(), [path]) == a_record()


@pytest.mark.parametrize("paths", [["state.customers.*.email"], ["**.card"], ["steps.*.result.token"],
                                   ["**.card", "state.**.email", "*.goal"]])
def test_redaction_never_mutates_its_input(paths):
    record = a_record()
    snapshot = copy.deepcopy(record)
    out = redact_record(record, paths)
    assert record == snapshot
    assert out != record
    value = a_record()["state"]
    redact(value, ["**", "email"])
    assert value == a_record()["state"]


def test_redact_segments():
    value = {"a": [{"b": 1}, {"b": 2}], "c": {"b": 3}}
    assert redact(value, ["a", "1", "b"]) == {"a": [{"b": 1}, {"b": REDACTED}], "c": {"b": 3}}
    assert redact(value, ["*", "b"]) == {"a": [{"b": 1}, {"b": 2}], "c": {"b": REDACTED}}
    assert redact(value, ["**", "b"]) == {"a": [{"b": REDACTED}, {"b": REDACTED}], "c": {"b": REDACTED}}
    assert redact(value, ["**"]) == REDACTED
    assert redact(value, []) == REDACTED


def the_settings() -> Any:
    return SimpleNamespace(verification_tools=["run_tests"], change_tools=["edit_file", "deploy"],
                           path_arguments=["path"], protected_paths=["tests/*"], success_patterns=[r"\bdone\b"])


def test_redacting_the_input_also_redacts_the_goal_copied_from_it():
    events = [CaseStarted("r1", "c1", 0, "f", {"request": {"customer": {"email": "bob@example.com"},
                                                         "text": "refund my order"}}),
              StepRecorded(1, "tool_call", "lookup", {"id": 1}),
              StepRecorded(2, "tool_result", "lookup", None, {"ok": True}),
              StepRecorded(3, "final", None, None, "done"),
              TrajectoryRecorded("success", steps=3), CaseFinished({}, None, None)]
    run = SimpleNamespace(run_id="r1", started=SimpleNamespace(surface={}, system_version="v1", code_digest=""))
    doc = prefix_document(fold_case(events), run, 3, None, the_settings(), ["input.request.customer.email"])
    assert doc["input"]["request"]["customer"]["email"] == REDACTED
    assert "bob@example.com" not in json.dumps(doc)


# ==== 6. write_prefix and reading back ===========================================================

def small_doc(result: Any = "ok", state: Any = None, case_id: str = "c1") -> dict[str, Any]:
    return {"case_id": case_id, "boundary": {"before_step": 3}, "input": {"q": "x"},
            "frozen": {"steps": [{"index": 1, "kind": "tool_call", "tool_name": "t", "arguments": {"a": 1}},
                                 {"index": 2, "kind": "tool_result", "tool_name": "t", "result": result}],
                       "state": state},
            "acceptable_actions": [{"tool": "t"}], "forbidden_actions": [{"final": True, "critical": True}]}


def round_trip(folder: Path, doc: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    made = write_prefix(folder, doc, force=False)
    return made, load_prefix_file(made.path)[1]


def test_large_frozen_content_goes_to_a_matching_sidecar(tmp_path):
    doc = small_doc(result={"log": "x" * (2 * SIDECAR_THRESHOLD)}, state={"files": {"a.py": "y" * 100}})
    made, frozen = round_trip(tmp_path, doc)
    assert made.sidecar == tmp_path / "c1.frozen.json" and made.path == tmp_path / "c1.yaml"
    raw = made.sidecar.read_bytes()
    on_disk = yaml.safe_load(made.path.read_text())
    assert on_disk["frozen"] == {"sidecar": "c1.frozen.json", "sha256": hashlib.sha256(raw).hexdigest()}
    assert frozen == doc["frozen"]
    assert load_prefix_case(made.path).prefix["steps"] == doc["frozen"]["steps"]
    assert (made.before_step, made.case_id) == (3, "c1")


def test_small_frozen_content_stays_inline(tmp_path):
    doc = small_doc(result={"log": "short"}, state={"n": 1})
    made, frozen = round_trip(tmp_path, doc)
    assert made.sidecar is None and list(tmp_path.iterdir()) == [made.path]
    assert yaml.safe_load(made.path.read_text())["frozen"] == doc["frozen"]
    assert frozen == doc["frozen"]


def test_the_sidecar_threshold_is_exact(tmp_path):
    base = len(canonical_json(small_doc(result="")["frozen"]))
    at = small_doc(result="a" * (SIDECAR_THRESHOLD - base))
    assert len(canonical_json(at["frozen"])) == SIDECAR_THRESHOLD
    assert write_prefix(tmp_path / "at", at, force=False).sidecar is None
    over = small_doc(result="a" * (SIDECAR_THRESHOLD - base + 1))
    assert write_prefix(tmp_path / "over", over, force=False).sidecar is not None


def test_writing_over_an_existing_file_needs_force(tmp_path):
    made = write_prefix(tmp_path, small_doc(result="first"), force=False)
    made.path.write_text(made.path.read_text() + "# my review\n")
    reviewed = made.path.read_text()
    with pytest.raises(UsageError, match="exists .*pass --force"):
        write_prefix(tmp_path, small_doc(result="second"), force=False)
    assert made.path.read_text() == reviewed
    write_prefix(tmp_path, small_doc(result="second"), force=True)
    assert load_prefix_file(made.path)[1]["steps"][1]["result"] == "second"


def test_a_written_prefix_starts_with_the_review_header(tmp_path):
    made = write_prefix(tmp_path, small_doc(), force=False)
    assert made.path.read_text().startswith("# A frozen prefix case (oloproof prefix create; SPEC §14)")


def test_an_invalid_prefix_replaces_nothing(tmp_path):
    made = write_prefix(tmp_path, small_doc(result="reviewed"), force=False)
    before = made.path.read_text()
    invalid = small_doc()
    invalid["boundary"]["before_step"] = 5  # 2 frozen steps: the boundary must be before step 3
    with pytest.raises(CaseFileError, match="steps 1..4 are frozen; the file has 2"):
        write_prefix(tmp_path, invalid, force=True)
    assert made.path.read_text() == before


TRICKY = {
    "yaml": "key: value\n- item\n---\n...\n",
    "markup": "[bold]x[/bold] <b>y</b> **z**",
    "ansi": "\x1b[2J\x1b[31mred\x1b[0m",
    "template": "{{ }} {% raw %} ${HOME}",
    "controls": "\x00\x01\x07\x08\x7f\t\r\n\r",
    "unicode": "\u2028line\u2029para\ufeff\u200b😀 é",
    "scalars": "null",
    "anchor": "&a *a !!python/object:os.system",
    "spaces": "  leading and trailing  \n\n  ",
    "comment": "# not a comment",
    "long-lines": ("word " * 60 + "\n") * 3,
}


@pytest.mark.parametrize("text", list(TRICKY.values()), ids=list(TRICKY))
def test_text_in_a_frozen_result_round_trips_exactly(tmp_path, text):
    doc = small_doc(result={"text": text, "list": [text]}, state={text: text})
    made, frozen = round_trip(tmp_path, doc)
    assert made.sidecar is None  # through the YAML file itself
    assert frozen == doc["frozen"]


def test_a_one_megabyte_string_round_trips_exactly(tmp_path):
    text = ("key: value\n- item [bold]x[/bold] \x1b[2J {{ }} " * 30_000)[:1_000_000]
    doc = small_doc(result=text, state={"blob": text})
    made, frozen = round_trip(tmp_path, doc)
    assert made.sidecar is not None
    assert frozen["steps"][1]["result"] == text and frozen["state"] == {"blob": text}


def test_a_next_line_character_round_trips_exactly(tmp_path):
    doc = small_doc(result="a\x85b", state={"s": "\x85"})
    _, frozen = round_trip(tmp_path, doc)
    assert frozen == doc["frozen"]


# ==== attacks found later ===========================================================================

@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a*)*", r"(x+y*)+z", r"(?:\w+\s)+"])
def test_a_message_pattern_with_nested_repetition_is_refused(pattern):
    # (a+)+$ against "a" * 34 + "!" ran for minutes before: a hostile or careless pattern
    # could hang a prefix run
    with pytest.raises(Exception, match="repeats a group that itself repeats"):
        ActionMatcher.model_validate({"message": pattern})


def test_a_safe_message_pattern_is_kept():
    for pattern in (r"\?\s*$", r"(error|fail|could not)", r"^(?![\s\S]*\?\s*$)[\s\S]*(?:\bdone\b)", r"(ab)+"):
        assert ActionMatcher.model_validate({"message": pattern}).message == pattern


def test_argument_globs_ignore_case():
    assert met(matcher(tool="deploy", arguments={"env": "production"}), call("deploy", env="Production"))


def test_a_sidecar_that_is_a_fifo_or_a_device_is_refused_without_reading(tmp_path):
    import os

    path = sidecar_prefix(tmp_path)
    side = tmp_path / f"{CASE}.frozen.json"
    side.unlink()
    os.mkfifo(side)  # reading it would block for ever
    assert "is not a regular file" in refusal(path)
    side.unlink()
    side.symlink_to("/dev/zero")  # reading it would never end
    assert "is not a regular file" in refusal(path)
