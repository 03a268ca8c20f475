"""Hostile values (issue 11): a located one-line error and exit code 2 before anything runs, or
— for what a system records — an errored case, never a traceback, a hang or a silent null.
The limits are in docs/input-limits.md."""

from __future__ import annotations

import json
import re
import time
import tracemalloc
import typing
from pathlib import Path

import msgspec
import pytest

from oloproof.config.cases import CaseFile
from oloproof.config.limits import MAX_ID_LENGTH, MAX_NESTING
from oloproof.config.locate import load_yaml, validate_model
from oloproof.config.models import ProjectConfig, ReleaseConfig
from oloproof.errors import CaseFileError, ConfigError
from oloproof.events import decode
from oloproof.records import MAX_RECORDED_NESTING, UnfitValue, encode_recorded, quoted
from oloproof.views import NO_STATE
from tests.conftest import write

LOG = Path(".oloproof") / "log.db"


# ---- helpers --------------------------------------------------------------------------------

def refused(cli, project: Path, *args: str) -> str:
    """Run the project: exit code 2, no log written; the output."""
    r = cli("run", *args, cwd=project)
    assert r.exit_code == 2, r.output
    assert not (project / LOG).exists()
    return r.output


def edit(path: Path, old: str, new: str) -> int:
    """Replace ``old`` by ``new`` in ``path``; the 1-based line where ``new`` starts."""
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text(text)
    return text[: text.index(new)].count("\n") + 1


def append(path: Path, text: str) -> int:
    before = path.read_text()
    path.write_text(before + text)
    return before.count("\n") + 1


def cases_file(tmp_path: Path, *lines: str) -> CaseFile:
    return CaseFile(write(tmp_path / "cases.jsonl", "".join(line + "\n" for line in lines)))


def case_error(tmp_path: Path, *lines: str) -> str:
    with pytest.raises(CaseFileError) as e:
        cases_file(tmp_path, *lines).validate()
    return str(e.value)


def nested(depth: int, inner: str = "1") -> str:
    """JSON text of ``depth`` nested lists around ``inner``."""
    return "[" * depth + inner + "]" * depth


# ---- 1. non-finite numbers in configuration ---------------------------------------------

NON_FINITE = [
    # (file, old, new, field named in the message)
    ("oloproof.yaml", "quantile: 0.95", "quantile: .nan", "metrics[0].quantile"),
    ("oloproof.yaml", "quantile: 0.5", "quantile: -.inf", "metrics[1].quantile"),
    ("oloproof.yaml", "min_slice_support: 3", "min_slice_support: .inf", "min_slice_support"),
    ("oloproof.yaml", "min_slice_support: 3", "min_slice_support: 3\ntimeout: .Inf", "timeout"),
    ("oloproof.yaml", "max_steps: 10", "max_steps: .NaN", "evaluators[5].max_steps"),
    ("oloproof.yaml", "max_repeats: 2", "max_repeats: 1.0e+999", "evaluators[2].max_repeats"),
    ("release.yaml", "max_failures: 0", "max_failures: .nan", "rules[0].max_failures"),
    ("release.yaml", "max_failures: 0", "min_rate: -.inf", "rules[0].min_rate"),
    # the text forms pydantic would parse as a float
    ("oloproof.yaml", "quantile: 0.95", "quantile: inf", "metrics[0].quantile"),
    ("oloproof.yaml", "min_slice_support: 3", "min_slice_support: 3\ntimeout: NaN", "timeout"),
    ("oloproof.yaml", "quantile: 0.95", "quantile: 1e999", "metrics[0].quantile"),
]


@pytest.mark.parametrize("file,old,new,field", NON_FINITE)
def test_non_finite_numbers_in_config_are_refused(cli, support_project, file, old, new, field):
    line = edit(support_project / file, old, new) + new.count("\n")
    out = refused(cli, support_project)
    assert f"{file}:{line}: {field}: " in out and "not a finite number" in out


def test_non_finite_tolerance_is_refused(cli, support_project):
    """The finding as reported: ``tolerance: .inf`` was stored as null."""
    path = support_project / "oloproof.yaml"
    edit(path, "records: [agent_trajectory/v1]", "records: [agent_trajectory/v1, environment_state/v1]")
    line = edit(path, "  - {type: agent_tool_sequence}\n",
                "  - {type: agent_tool_sequence}\n  - {type: state_matches, tolerance: .inf}\n") + 1
    out = refused(cli, support_project)
    assert f"oloproof.yaml:{line}: evaluators[4].tolerance: inf is not a finite number" in out


# ---- 2. alias bombs and nesting ---------------------------------------------------------------

def billion_laughs(levels: int = 9) -> str:
    names = "abcdefghijklmnop"
    text = f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, levels):
        text += f"{names[i]}: &{names[i]} [" + ", ".join([f"*{names[i - 1]}"] * 9) + "]\n"
    return text


def test_yaml_alias_bomb_is_refused_fast_and_small(cli, support_project, tmp_path):
    bomb = billion_laughs(9)
    assert len(bomb) < 1500  # ~1.3 KB: 9**9 (387 million) leaves once expanded
    line = append(support_project / "oloproof.yaml", bomb)
    t0 = time.perf_counter()
    out = refused(cli, support_project)
    assert time.perf_counter() - t0 < 2
    assert re.search(r"oloproof\.yaml:(\d+): YAML aliases expand to more than 10,000 nodes", out)
    assert int(re.search(r"oloproof\.yaml:(\d+)", out).group(1)) >= line
    # and in memory: the document is never expanded
    path = write(tmp_path / "bomb.yaml", bomb)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError):
            load_yaml(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20


def test_too_many_aliases_and_recursive_aliases(tmp_path):
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n"
    with pytest.raises(ConfigError, match=r"many\.yaml:2: more than 100 YAML aliases"):
        load_yaml(write(tmp_path / "many.yaml", many))
    with pytest.raises(ConfigError, match=r"self\.yaml:2: alias \*r refers to a node that contains it"):
        load_yaml(write(tmp_path / "self.yaml", "a: 1\nb: &r [1, *r]\n"))
    # a few aliases are fine (a merge key included)
    data, _ = load_yaml(write(tmp_path / "ok.yaml", "base: &b {x: 1}\nc: {<<: *b, y: 2}\nd: [*b, *b]\n"))
    assert data["c"] == {"x": 1, "y": 2} and data["d"] == [{"x": 1}, {"x": 1}]


def test_merged_evaluators_still_load(cli, support_project):
    edit(support_project / "oloproof.yaml", "  - {type: agent_max_steps, max_steps: 10}",
         "  - &steps {type: agent_max_steps, max_steps: 10}\n"
         "  - {<<: *steps, criterion: steps_again}")
    r = cli("run", cwd=support_project)
    assert r.exit_code == 1, r.output  # the example's gate fails on purpose
    assert "steps_again" in r.output


@pytest.mark.parametrize("style", ["flow", "block"])
def test_yaml_nesting_is_limited(cli, support_project, tmp_path, style):
    depth = 1000
    if style == "flow":
        deep = "deep: " + nested(depth) + "\n"
    else:
        deep = "deep:\n" + "".join("  " * i + "- \n" for i in range(depth))
    append(support_project / "oloproof.yaml", deep)
    out = refused(cli, support_project)
    assert re.search(r"oloproof\.yaml:\d+: nested deeper than 64 levels", out)
    assert "RecursionError" not in out
    # the limit itself: 64 levels load (the top-level mapping is level 1), 65 do not
    data, _ = load_yaml(write(tmp_path / "ok.yaml", "x: " + nested(MAX_NESTING - 1) + "\n"))
    assert data["x"]
    with pytest.raises(ConfigError, match="nested deeper than 64 levels"):
        load_yaml(write(tmp_path / "no.yaml", "x: " + nested(MAX_NESTING) + "\n"))


def test_json_case_nesting_is_limited(cli, support_project, tmp_path):
    path = support_project / "cases.jsonl"
    lines = path.read_text().splitlines()
    lines[3] = '{"id": "deep", "input": {"order_id": "x", "behaviour": "clean", "q": ' + nested(100_000) + '}}'
    path.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    out = refused(cli, support_project)
    assert time.perf_counter() - t0 < 5
    assert "cases.jsonl:4: case 'deep': field 'input': nested deeper than 64 levels" in out
    assert "RecursionError" not in out
    # the limit itself: the line's object is level 1
    ok = '{"id": "a", "input": {"q": ' + nested(MAX_NESTING - 2, "0") + "}}"
    assert cases_file(tmp_path, ok).validate().count == 1
    too = '{"id": "a", "input": {"q": ' + nested(MAX_NESTING - 1, "0") + "}}"
    assert "case 'a': field 'input': nested deeper than 64 levels" in case_error(tmp_path, too)
    # brackets inside strings do not count
    assert cases_file(tmp_path, '{"id": "s", "input": {"q": "' + "[" * 500 + '"}}').validate().count == 1


def test_deep_label_line_is_located(cli, support_project):
    config = support_project / "oloproof.yaml"
    append(config, "metamorphic:\n  transforms:\n"
                   "    - {name: polite, field: order_id, template: 'please {value}', validity_labels: labels.jsonl}\n")
    write(support_project / "labels.jsonl",
          '{"case_id": "case_001~polite", "valid": true}\n{"case_id": "x", "valid": ' + nested(50_000, "true") + "}\n")
    out = refused(cli, support_project)
    assert "labels.jsonl:2: case 'x': field 'valid': nested deeper than 64 levels" in out


# ---- 3. duplicate keys --------------------------------------------------------------------

def test_duplicate_yaml_keys_are_refused(cli, support_project):
    line = append(support_project / "oloproof.yaml", "min_slice_support: 4\n")
    out = refused(cli, support_project)
    assert f"oloproof.yaml:{line}: duplicate key 'min_slice_support' (first on line 19)" in out


def test_duplicate_keys_inside_a_flow_mapping_and_in_release(cli, support_project):
    line = edit(support_project / "oloproof.yaml", "max_steps: 10", "max_steps: 10, max_steps: 12")
    assert f"oloproof.yaml:{line}: duplicate key 'max_steps'" in refused(cli, support_project)
    edit(support_project / "oloproof.yaml", "max_steps: 10, max_steps: 12", "max_steps: 10")
    edit(support_project / "release.yaml", "max_failures: 0", "max_failures: 0, name: again")
    assert "release.yaml:2: duplicate key 'name' (first on line 2)" in refused(cli, support_project)


# ---- 4. booleans are not numbers ----------------------------------------------------------

BOOLEANS = [
    # (file, old, new, field) — every number of the config models
    ("oloproof.yaml", "min_slice_support: 3", "min_slice_support: true", "min_slice_support"),
    ("oloproof.yaml", "min_slice_support: 3", "min_slice_support: 3\ntimeout: true", "timeout"),
    ("oloproof.yaml", "quantile: 0.95", "quantile: false", "metrics[0].quantile"),
    ("oloproof.yaml", "release: release.yaml",
     ("release: release.yaml\nmetamorphic:\n  transforms:\n"
      "    - {name: p, field: order_id, template: '{value}', minimum_validity: true}"),
     "metamorphic.transforms[0].minimum_validity"),
    ("release.yaml", "max_failures: 0", "max_failures: false", "rules[0].max_failures"),
    ("release.yaml", "max_failures: 0", "min_lower_bound: true", "rules[0].min_lower_bound"),
    ("release.yaml", "max_failures: 0", "min_rate: true", "rules[0].min_rate"),
    ("release.yaml", "max_failures: 0", "no_regression: {baseline: 'version:v1', max_regressions: true}",
     "rules[0].no_regression.max_regressions"),
    ("release.yaml", "max_failures: 0", "no_regression: {baseline: 'version:v1', max_p: true}",
     "rules[0].no_regression.max_p"),
    ("release.yaml", "max_failures: 0", "no_regression: {baseline: 'version:v1', max_p: 0.05, min_paired: true}",
     "rules[0].no_regression.min_paired"),
    ("oloproof.yaml", "min_slice_support: 3", "min_slice_support: 3\nretries: {max: true, on: [worker_died]}",
     "retries.max"),
]
COVERED = {"min_slice_support", "timeout", "trials", "quantile", "minimum_validity", "max_failures", "max",
           "min_lower_bound", "min_rate", "max_regressions", "max_p", "min_paired", "min_pass_hat_k"}


@pytest.mark.parametrize("file,old,new,field", BOOLEANS)
def test_booleans_are_not_numbers(cli, support_project, file, old, new, field):
    line = edit(support_project / file, old, new) + new.count("\n")
    out = refused(cli, support_project)
    assert f"{file}:{line}: {field}: expected a number, got " in out


def _numeric_fields(model, seen=None) -> set[str]:
    seen = set() if seen is None else seen
    out = set()
    for name, info in model.model_fields.items():
        for arg in [info.annotation, *typing.get_args(info.annotation)]:
            if arg in (int, float):
                out.add(name)
            for inner in [arg, *typing.get_args(arg)]:
                if hasattr(inner, "model_fields") and inner not in seen:
                    seen.add(inner)
                    out |= _numeric_fields(inner, seen)
    return out


def test_every_numeric_config_field_is_covered():
    assert _numeric_fields(ProjectConfig) | _numeric_fields(ReleaseConfig) == COVERED


def test_numbers_are_not_booleans_and_text_numbers_still_read(cli, support_project):
    with pytest.raises(ConfigError, match="release.yaml:1: allow_approximate_methods: expected true or false, got 1"):
        validate_model(ReleaseConfig, {"allow_approximate_methods": 1}, lambda loc: "release.yaml:1")
    # YAML 1.1 reads 5e-1 as a text: it is still the number it says
    edit(support_project / "oloproof.yaml", "quantile: 0.95", "quantile: 5e-1")
    r = cli("run", cwd=support_project)
    assert r.exit_code == 1, r.output  # ran; the example's gate fails on purpose


def test_the_check_covers_any_model_evaluator_configs_included():
    """validate_model refuses booleans for any pydantic model's numbers — the evaluators'
    config models too (build_suite has to call it; see the report of issue 11)."""
    from oloproof.evaluate.registry import registry

    checked = 0
    for family in registry().values():
        model = family.config_model
        for name, info in model.model_fields.items():
            options = typing.get_args(info.annotation) or (info.annotation,)
            if bool in options or not any(o in (int, float) for o in options):
                continue
            with pytest.raises(ConfigError, match=rf"cfg:1: evaluators\[0\]\.{name}: expected a number, got true"):
                validate_model(model, {"type": family.type_name, name: True}, lambda loc: "cfg:1",
                               prefix=("evaluators", 0))
            checked += 1
    assert checked >= 5  # max_steps, max_repeats, min_calls, max_handoffs, tolerance...


def test_boolean_evaluator_option_is_refused(cli, support_project):
    line = edit(support_project / "oloproof.yaml", "max_steps: 10", "max_steps: true")
    out = refused(cli, support_project)
    assert f"oloproof.yaml:{line}: evaluators[5].max_steps: expected a number, got true" in out


# ---- 5. an evaluator type that is not a name --------------------------------------------------

@pytest.mark.parametrize("value,shown", [("[agent_tool_sequence]", "got a list"), ("{a: 1}", "got a dict"),
                                         ("12", "got a int"), ("''", "got ''")])
def test_evaluator_type_must_be_a_name(cli, support_project, value, shown):
    line = edit(support_project / "oloproof.yaml", "type: agent_tool_sequence", f"type: {value}")
    out = refused(cli, support_project)
    assert f"oloproof.yaml:{line}: evaluators[3]: " in out and "'type' must be the name of an evaluator type" in out
    assert shown in out and "Traceback" not in out


# ---- 6. a labels path that is a folder ----------------------------------------------------------

def test_labels_path_that_is_a_folder(cli, support_project):
    line = append(support_project / "oloproof.yaml",
                  "metamorphic:\n  transforms:\n"
                  "    - {name: polite, field: order_id, template: 'please {value}', validity_labels: labels}\n") + 2
    (support_project / "labels").mkdir()
    out = refused(cli, support_project)
    assert f"oloproof.yaml:{line}: labels file " in out and "is a folder, not a file" in out


def test_cases_path_that_is_a_folder(cli, support_project):
    edit(support_project / "oloproof.yaml", "cases: cases.jsonl", "cases: somewhere")
    (support_project / "somewhere").mkdir()
    assert "somewhere: is a folder, not a case file" in refused(cli, support_project)


# ---- 7. case ids ------------------------------------------------------------------------------

BAD_IDS = [
    ("a\nb", "a control character (U+000A"),
    ("a\tb", "a control character (U+0009"),
    ("a\x00b", "a control character (U+0000"),
    ("a\x1bb", "a control character (U+001B"),
    ("a\x7fb", "a control character (U+007F"),
    ("a\x85b", "a control character (U+0085"),
    ("a\u2028b", "a line or paragraph separator"),
    ("a\ufffe", "a Unicode non-character (U+FFFE"),
    ("a\uffff", "a Unicode non-character (U+FFFF"),
    ("a\ufdd0", "a Unicode non-character (U+FDD0"),
    ("a\U0001fffe", "a Unicode non-character (U+1FFFE"),
    ("a\U0010ffff", "a Unicode non-character (U+10FFFF"),
    ("x" * (MAX_ID_LENGTH + 1), "is 201 characters long; a case id has at most 200"),
    ("run/case", "must not contain '/'"),
    ("a~b", "reserved for derived cases"),
    (" a", "must not start or end with white space"),
]


@pytest.mark.parametrize("case_id,problem", BAD_IDS)
def test_bad_case_ids_are_refused(tmp_path, case_id, problem):
    good = '{"id": "ok", "input": {}}'
    msg = case_error(tmp_path, good, json.dumps({"id": case_id, "input": {}}))
    assert msg.startswith(f"{tmp_path / 'cases.jsonl'}:2: case {quoted(case_id)}: field 'id': ")
    assert problem in msg


def test_bad_case_id_stops_the_run(cli, support_project):
    path = support_project / "cases.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"case_002"', '"case\\t002"')
    path.write_text("\n".join(lines) + "\n")
    out = refused(cli, support_project)
    assert "cases.jsonl:2: case 'case\\t002': field 'id': must not contain a control character" in out


def test_a_surrogate_id_is_located_malformed_json(tmp_path):
    msg = case_error(tmp_path, '{"id": "ok", "input": {}}', '{"id": "a\\ud800", "input": {}}')
    assert msg.startswith(f"{tmp_path / 'cases.jsonl'}:2: malformed JSON")


def test_plain_ids_within_the_limits_are_fine(tmp_path):
    ids = ["x" * MAX_ID_LENGTH, "café-ü 1", "ünïcödé/".rstrip("/"), "a.b:c-d_e", "日本"]
    info = cases_file(tmp_path, *(json.dumps({"id": i, "input": {}}) for i in ids)).validate(keep_ids=True)
    assert info.ids == set(ids)


# ---- 8. a huge value is never echoed whole ------------------------------------------------------

@pytest.mark.slow
def test_a_50_mb_value_is_quoted_short(tmp_path):
    big = "v" * 50_000_000
    for line in ('{"id": "' + big + '", "input": {}}',
                 '{"id": "x", "input": {}, "expected": {"tools": "' + big + '"}}',
                 '{"id": "x", "input": "' + big + '"}',
                 '{"id": "x", "input": {}, "' + big[:1_000_000] + '": 1}'):
        msg = case_error(tmp_path, line)
        assert len(msg) < 400, msg[:500]
        assert "…" in msg and "characters)" in msg


def test_a_huge_config_value_is_quoted_short(cli, support_project):
    big = "r" * 2_000_000
    edit(support_project / "oloproof.yaml", "records: [agent_trajectory/v1]", f"records: [{big}]")
    out = refused(cli, support_project)
    assert "unknown record 'rrrr" in out and "(2,000,000 characters)" in out
    assert len(out) < 600
    # names the evaluation would echo (a rule's criterion...) stop at 200 characters
    edit(support_project / "oloproof.yaml", f"records: [{big}]", "records: [agent_trajectory/v1]")
    edit(support_project / "release.yaml", "criterion: agent_constraints_satisfied", f"criterion: c{big}")
    out = refused(cli, support_project)
    assert "release.yaml:2: rules[0].criterion: String should have at most 200 characters" in out
    assert len(out) < 600


def test_many_errors_are_counted_not_listed(cli, support_project):
    edit(support_project / "oloproof.yaml", "slices: [", "slices: [" + "1, " * 5000)
    out = refused(cli, support_project)
    assert out.count("Input should be a valid string") == 10
    assert "… and 4990 more error(s)" in out


def test_quoted():
    assert quoted("abc") == "'abc'"
    assert quoted("a" * 1000) == "'" + "a" * 60 + "…' (1,000 characters)"
    assert quoted(b"b" * 100).endswith("…' (100 bytes)")
    assert "digits" in quoted(10 ** 10_000)
    assert len(quoted(list(range(100_000)))) < 100


# ---- 9. did-you-mean for case field typos --------------------------------------------------------

@pytest.mark.parametrize("typo,right", [("inputs", "input"), ("initial-state", "initial_state"),
                                        ("expect", "expected"), ("metdata", "metadata")])
def test_case_field_typos_get_a_did_you_mean(tmp_path, typo, right):
    row = {"id": "a", "input": {}}
    if typo == "inputs":
        del row["input"]  # the misspelt field is missing too: the typo is what to report
    row[typo] = {}
    msg = case_error(tmp_path, json.dumps(row))
    assert f"cases.jsonl:1: case 'a': field '{typo}': unknown field; did you mean '{right}'?" in msg


# ---- 10/11. what a system records -----------------------------------------------------------------

HOSTILE_APP = """\
import pathlib

import app
from oloproof import current_case, system
from oloproof.errors import Interrupted

HERE = pathlib.Path(__file__).parent / ".run"  # hidden: not one of the files a resume checks
HERE.mkdir(exist_ok=True)


@system(name="support-agent", version="slice-e-example", records=("agent_trajectory/v1",))
def run(case):
    with (HERE / "calls.txt").open("a") as f:
        f.write(case.id + "\\n")
    if case.id == "case_005" and (HERE / "STOP").exists():
        raise Interrupted()  # as if the operator pressed Ctrl-C here
    out = app.run(case)
    if case.id == "case_001":
        out["items"] = [{"price": 1.5}, {"price": None}, {"price": float("nan")}]
    elif case.id == "case_002":
        out["self"] = out
    elif case.id == "case_003":
        deep = []
        for _ in range(10_000):
            deep = [deep]
        out["deep"] = deep
    elif case.id == "case_004":
        out["big"] = float("-inf")
    return out
"""


def test_hostile_outputs_error_their_case_and_resume_does_not_retry_them(cli, support_project):
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    write(support_project / "hostile.py", HOSTILE_APP)
    edit(support_project / "oloproof.yaml", "callable: app:run", "callable: hostile:run")
    (support_project / ".run").mkdir()
    (support_project / ".run" / "STOP").touch()
    r = cli("run", cwd=support_project)
    assert r.exit_code == 130, r.output
    assert (support_project / ".run" / "calls.txt").read_text().split() == [f"case_00{i}" for i in range(1, 6)]
    (support_project / ".run" / "STOP").unlink()
    store = SQLiteStore(support_project / LOG)
    run_id = latest_run_id(store)
    store.close()
    r = cli("run", "--resume", run_id, cwd=support_project)
    assert r.exit_code == 1, r.output  # the example's gate fails on purpose; the run finished
    calls = (support_project / ".run" / "calls.txt").read_text().split()
    assert calls.count("case_001") == calls.count("case_002") == calls.count("case_003") == 1
    assert len(calls) == 5 + 36  # the resumed run ran case_005 again and the 35 after it
    assert "case 'case_001': output.items[2].price: NaN is not allowed (JSON has no NaN)" in r.output

    store = SQLiteStore(support_project / LOG)
    views = {c: case_view(store, run_id, c) for c in ("case_001", "case_002", "case_003", "case_004", "case_006")}
    store.close()
    assert views["case_001"].error == "case 'case_001': output.items[2].price: NaN is not allowed (JSON has no NaN)"
    assert views["case_002"].error == ("case 'case_002': output.self: the value contains itself "
                                       "(a self-reference cannot be stored as JSON)")
    assert views["case_003"].error.startswith("case 'case_003': output.deep[0][0][0]")
    assert "nested deeper than 128 levels" in views["case_003"].error
    assert views["case_004"].error == ("case 'case_004': output.big: -Infinity is not allowed "
                                       "(JSON has no Infinity)")
    for c in ("case_001", "case_002", "case_003", "case_004"):
        assert views[c].error_kind == "invalid_record" and views[c].output is None
        assert views[c].trajectory is not None  # what the agent did is kept
    assert views["case_006"].error is None and views["case_006"].output == {"answer": "refunded"}


STATE_CONFIG = """\
system:
  name: box
  version: "1"
  callable: app:Box
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: state_matches, mode: subset}
"""

STATE_APP = """\
from oloproof import Stateful, current_case, tool


class Box(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def put(self, key, value):
        self.state[key] = value
        return {"ok": True}

    def __call__(self, case):
        self.put("y", 1)
        if case.input.get("nan"):
            self.state["x"] = float("nan")
        if case.input.get("loop"):
            self.state["me"] = self.state
        current_case().finish("success")
        return {"done": True}
"""


def test_non_finite_or_self_referencing_state_errors_its_case(cli, tmp_path):
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    write(tmp_path / "oloproof.yaml", STATE_CONFIG)
    write(tmp_path / "app.py", STATE_APP)
    rows = [{"id": "ok", "input": {}, "initial_state": {"a": 1}, "expected": {"state": {"a": 1}}},
            {"id": "nan", "input": {"nan": True}, "initial_state": {"a": 1}},
            {"id": "loop", "input": {"loop": True}, "initial_state": {"a": 1}}]
    write(tmp_path / "cases.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    r = cli("run", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    store = SQLiteStore(tmp_path / LOG)
    run_id = latest_run_id(store)
    views = {c: case_view(store, run_id, c) for c in ("ok", "nan", "loop")}
    store.close()
    assert views["ok"].error is None and views["ok"].state == {"a": 1, "y": 1}
    assert views["nan"].error_kind == "snapshot_error" and views["nan"].state is NO_STATE
    assert "state.x: NaN is not allowed (JSON has no NaN)" in views["nan"].error
    assert "state.me: the value contains itself" in views["loop"].error


TOOL_APP = """\
from oloproof import current_case, system, tool


@tool
def price_of(order_id):
    return {"order_id": order_id, "price": float("inf")}


@system(name="s", version="1", records=("agent_trajectory/v1",))
def run(case):
    price_of("o1")
    current_case().finish("success")
    return {"ok": True}
"""


HAND_BUILT_APP = """\
from oloproof import AgentStep, AgentTrajectory, current_case, system


@system(name="s", version="1", records=("agent_trajectory/v1",))
def run(case):
    bad = case.input["bad"]
    result = {"price": float(bad)} if bad else {"price": 1.0}
    steps = (AgentStep(1, "tool_call", tool_name="lookup", arguments={"id": 1}),
             AgentStep(2, "tool_result", tool_name="lookup", result=result))
    current_case().agent_trajectory(AgentTrajectory(steps, "success"))
    return {"ok": True}
"""


def tool_project(tmp_path: Path, app: str, rows: list) -> Path:
    write(tmp_path / "oloproof.yaml", "system: {name: s, version: '1', callable: app:run, "
                                      "records: [agent_trajectory/v1]}\ncases: cases.jsonl\n")
    write(tmp_path / "app.py", app)
    write(tmp_path / "cases.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def stored_views(project: Path, *ids: str) -> dict:
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(project / LOG)
    try:
        run_id = latest_run_id(store)
        return {c: case_view(store, run_id, c) for c in ids}
    finally:
        store.close()


def test_non_finite_hand_built_step_errors_its_case(cli, tmp_path):
    p = tool_project(tmp_path, HAND_BUILT_APP, [{"id": "ok", "input": {"bad": ""}},
                                                {"id": "nan", "input": {"bad": "nan"}}])
    assert cli("run", cwd=p).exit_code == 0
    views = stored_views(p, "ok", "nan")
    assert views["ok"].error is None and views["ok"].trajectory.steps[1].result == {"price": 1.0}
    assert views["nan"].error == ("case 'nan': step 2 (tool_result lookup).result.price: "
                                  "NaN is not allowed (JSON has no NaN)")
    assert views["nan"].error_kind == "invalid_record"


def test_a_tool_result_flagged_when_recorded_is_reported_with_its_step(cli, tmp_path, monkeypatch):
    """What record.py does with a value ``_frozen`` (recorder/case.py) could not freeze: with
    the change proposed for ``_frozen`` in place, the message names the step."""
    import oloproof.recorder.case as case_module
    from oloproof.records import UnfitValue

    def frozen(value):
        try:
            return msgspec.Raw(encode_recorded(value))
        except UnfitValue as e:
            return e
        except (TypeError, ValueError, OverflowError):
            return value

    monkeypatch.setattr(case_module, "_frozen", frozen)
    p = tool_project(tmp_path, TOOL_APP, [{"id": "a", "input": {}}])
    assert cli("run", cwd=p).exit_code == 0
    assert stored_views(p, "a")["a"].error == ("case 'a': step 2 (tool_result price_of).result.price: "
                                               "Infinity is not allowed (JSON has no Infinity)")


def test_non_finite_tool_result_errors_its_case(cli, tmp_path):
    p = tool_project(tmp_path, TOOL_APP, [{"id": "a", "input": {}}])
    cli("run", cwd=p)
    assert stored_views(p, "a")["a"].error == ("case 'a': step 2 (tool_result price_of).result.price: "
                                               "Infinity is not allowed (JSON has no Infinity)")


def test_encode_recorded_names_the_path():
    def problem(value):
        with pytest.raises(UnfitValue) as e:
            encode_recorded(value, "output")
        return str(e.value)

    assert problem({"items": [1, None, {"price": float("nan")}]}) == \
        "output.items[2].price: NaN is not allowed (JSON has no NaN)"
    assert problem({"weird key": [float("inf")]}) == \
        "output['weird key'][0]: Infinity is not allowed (JSON has no Infinity)"
    loop: list = [1]
    loop.append({"back": loop})
    assert problem(loop) == "output[1].back: the value contains itself (a self-reference cannot be stored as JSON)"
    deep: list = []
    for _ in range(MAX_RECORDED_NESTING):
        deep = [deep]
    assert "nested deeper than 128 levels" in problem(deep)
    assert encode_recorded(deep[0]) == b"[" * 128 + b"]" * 128  # the limit itself is fine
    # shared (not cyclic) values, nulls, floats and brackets in strings are fine
    shared = {"a": 1.5}
    value = {"x": shared, "y": [shared, None], "s": "[" * 1000, "z": -0.0, "big": 1e308}
    assert encode_recorded(value) == msgspec.json.encode(value)  # keys in their order (the tape gives them back so)


def test_legit_outputs_are_stored_byte_for_byte(tmp_path):
    """The check changes nothing for a value it accepts: the stored payload is the encoding."""
    from oloproof.config.cases import SuiteCase
    from oloproof.recorder.record import CaseArgs, record_case
    from oloproof.system import SystemFactory

    output = {"answer": "ok", "n": None, "rows": [{"v": 1.25, "w": [None, "]"]} for _ in range(200)]}

    def system(case):
        return output

    slot = SystemFactory("s", "1", (), system, "s").make_slot()
    sc = SuiteCase("c", {}, None, {}, {}, 1, "f")
    rec = record_case(slot, CaseArgs("r", 0, sc), None)
    end = decode(rec.payloads[-1])
    assert end.error is None and end.output == output
    assert rec.payloads[-1] == msgspec.json.encode({"output": output, "type": "case_finished.v2"}, order="sorted")
