"""`when:` on every evaluator and the case field `tags` (issue 26, SPEC §18.5): a case an
evaluator does not select is excluded (`not_selected`), never passed; the selection is read
from the log, so a stored run is re-judged the same way; bad selectors and bad tags are exit 2
with the file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import edit, one_function_project

CASES = "\n".join(json.dumps(c) for c in [
    {"id": "c1", "input": {"a": "yes"}, "expected": {"a": "yes"}, "tags": ["money"], "metadata": {"lane": "chat"}},
    {"id": "c2", "input": {"a": "no"}, "expected": {"a": "yes"}, "tags": ["money", "slow"],
     "metadata": {"lane": {"deep": 1}}},
    {"id": "c3", "input": {"a": "no"}, "expected": {"a": "yes"}, "metadata": {"lane": "mail", "vip": True}},
]) + "\n"

EVALUATORS = """evaluators:
  - {type: contains, criterion: all, field: a, expected_field: a}
  - {type: contains, criterion: by_tag, field: a, expected_field: a, when: {tags: [money]}}
  - {type: contains, criterion: by_id, field: a, expected_field: a, when: {ids: [c3]}}
  - {type: contains, criterion: by_meta, field: a, expected_field: a, when: {metadata.lane: chat}}
  - {type: contains, criterion: nested, field: a, expected_field: a, when: {metadata.lane.deep: 1}}
  - {type: contains, criterion: both, field: a, expected_field: a, when: {tags: [slow], metadata.lane.deep: 1}}
  - {type: contains, criterion: bool, field: a, expected_field: a, when: {metadata.vip: 1}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = one_function_project(tmp_path, "    return {'a': case.input['a']}\n", CASES)
    edit(p / "oloproof.yaml", "evaluators:\n  - {type: contains, criterion: ok, field: a, expected_field: a}\n",
         EVALUATORS)
    return p


def verdicts(data: dict) -> dict[str, dict[str, str]]:
    return {c["case_id"]: {k: v["verdict"] + ("/" + v["reason"] if v.get("reason") else "")
                           for k, v in c["verdicts"].items()} for c in data["cases"]}


EXPECTED = {
    "c1": {"all": "pass", "by_tag": "pass", "by_id": "excluded/not_selected", "by_meta": "pass",
           "nested": "excluded/not_selected", "both": "excluded/not_selected", "bool": "excluded/not_selected"},
    "c2": {"all": "fail", "by_tag": "fail", "by_id": "excluded/not_selected", "by_meta": "excluded/not_selected",
           "nested": "fail", "both": "fail", "bool": "excluded/not_selected"},
    "c3": {"all": "fail", "by_tag": "excluded/not_selected", "by_id": "fail", "by_meta": "excluded/not_selected",
           "nested": "excluded/not_selected", "both": "excluded/not_selected", "bool": "excluded/not_selected"},
}


def test_each_selector_chooses_its_cases_and_the_rest_leave_the_denominator(cli, project):
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code == 0, r.output
    data = json.loads((project / "r.json").read_text())
    assert verdicts(data) == EXPECTED
    rows = {c["criterion"]: (c["passed"], c["observed"], c["excluded"]) for c in data["criteria"]}
    assert rows["by_tag"] == (1, 2, 1) and rows["by_id"] == (0, 1, 2) and rows["all"] == (1, 3, 0)


def test_a_stored_run_is_re_judged_from_the_tags_in_its_log(cli, project):
    assert cli("run", cwd=project).exit_code == 0
    (project / "cases.jsonl").write_text(CASES.replace('"money"', '"other"'))  # the log, not the file, decides
    r = cli("eval", "latest", "--json", "-", cwd=project)
    assert r.exit_code == 0, r.output
    assert verdicts(json.loads(r.stdout)) == EXPECTED


def test_a_derived_case_and_a_trial_are_selected_with_their_source(cli, project):
    edit(project / "oloproof.yaml", "evaluators:", "trials: 2\nevaluators:")
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code == 0, r.output
    data = json.loads((project / "r.json").read_text())
    by_id = {c["case_id"]: c["verdicts"]["by_id"]["verdict"] for c in data["cases"]}
    assert by_id == {"c1/1": "excluded", "c1/2": "excluded", "c2/1": "excluded", "c2/2": "excluded",
                     "c3/1": "fail", "c3/2": "fail"}


@pytest.mark.parametrize("when, needle", [
    ("{tag: [money]}", "unknown selector 'tag'; did you mean 'tags'?"),
    ("{metadata: chat}", "unknown selector 'metadata'"),
    ("{metadata.: chat}", "unknown selector 'metadata.'"),
    ("{}", "selects nothing"),
    ("{ids: []}", "ids"),
    ("[c1]", "when"),
])
def test_a_bad_selector_is_exit_2_naming_the_line_and_nothing_runs(cli, project, when, needle):
    edit(project / "oloproof.yaml", "when: {ids: [c3]}", f"when: {when}")
    r = cli("run", cwd=project)
    assert r.exit_code == 2, r.output
    assert "oloproof.yaml:" in r.output and needle in r.output and "Traceback" not in r.output
    assert not (project / ".oloproof" / "log.db").exists()


@pytest.mark.parametrize("tags, needle", [('"money"', "tags"), ('[""]', "'tags[0]'"), ("[1]", "'tags[0]'")])
def test_bad_tags_are_exit_2_naming_the_case_and_field(cli, project, tags, needle):
    (project / "cases.jsonl").write_text(CASES.replace('["money"]', tags, 1))
    r = cli("run", cwd=project)
    assert r.exit_code == 2, r.output
    assert "cases.jsonl:1: case 'c1': field" in r.output and needle in r.output, r.output


def test_tags_change_the_suite_digest_but_not_the_fingerprint(tmp_path):
    from oloproof.config.cases import CaseFile

    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text(CASES)
    b.write_text(CASES.replace('"slow"', '"fast"'))
    assert CaseFile(a).validate().digest != CaseFile(b).validate().digest
    assert [c.fingerprint for c in CaseFile(a)] == [c.fingerprint for c in CaseFile(b)]
    assert [c.tags for c in CaseFile(a)] == [("money",), ("money", "slow"), ()]
