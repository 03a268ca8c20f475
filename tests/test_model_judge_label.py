"""``oloproof label RUN --criterion C`` (issue 27): scripted labels, the prompt, no TTY, and
labels that calibrate the judge without asking it again."""

from __future__ import annotations

import json

import pytest
from conftest import copy_example, copy_recorded, run_in, write


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    p = copy_example("judged_agent", tmp_path_factory.mktemp("label") / "j")
    write(p / "labels/polite.jsonl", "")
    assert run_in(p, "run").exit_code == 1
    return p


@pytest.fixture
def project(recorded, tmp_path):
    return copy_recorded(recorded, tmp_path / "j")


def lines(p):
    return [json.loads(x) for x in (p / "labels/polite.jsonl").read_text().splitlines()]


def test_scripted_labels_append_whole_lines_with_the_judged_prompt(project, cli):
    r = cli("label", "latest", "--criterion", "polite", "--case", "msg_003", "--label", "fail", cwd=project)
    assert r.exit_code == 0, r.output
    (line,) = lines(project)
    assert line["case_id"] == "msg_003" and line["label"] == "fail" and len(line["prompt_digest"]) == 64
    r = cli("label", "latest", "--criterion", "polite", "--case", "msg_003", "--label", "pass", cwd=project)
    assert r.exit_code == 2 and "labelled already" in r.output
    r = cli("label", "latest", "--criterion", "polite", "--case", "nope", "--label", "pass", cwd=project)
    assert r.exit_code == 2 and "no committed case 'nope'" in r.output
    r = cli("label", "latest", "--criterion", "polite", "--case", "msg_004", cwd=project)
    assert r.exit_code == 2 and "--case and --label go together" in r.output


def test_no_terminal_is_a_clear_exit_2(project, cli):
    r = cli("label", "latest", "--criterion", "polite", cwd=project)
    assert r.exit_code == 2 and "needs a terminal" in r.output and "--case ID --label" in r.output


def test_a_file_without_a_final_newline_gets_a_whole_new_line(project, cli):
    write(project / "labels/polite.jsonl", '{"case_id": "msg_001", "label": "pass"}')
    assert cli("label", "latest", "--criterion", "polite", "--case", "msg_002", "--label", "pass",
               cwd=project).exit_code == 0
    assert [x["case_id"] for x in lines(project)] == ["msg_001", "msg_002"]


def test_the_prompt_shows_each_case_and_writes_as_it_goes(project, cli, monkeypatch):
    from oloproof.cli import label

    monkeypatch.setattr(label, "_has_tty", lambda: True)
    # two labels, a skip, then the input ends (the labeller went away): both labels are kept
    from click.testing import CliRunner

    from oloproof.cli.main import cli as group

    monkeypatch.chdir(project)
    r = CliRunner().invoke(group, ["label", "latest", "--criterion", "polite"], input="p\nf\ns\nq\n")
    assert r.exit_code == 0, r.output
    assert "input:" in r.output and "output:" in r.output and "judge:  " in r.output
    got = lines(project)
    assert [x["label"] for x in got] == ["pass", "fail"]
    # the order is a fixed shuffle, the same every time, and labelled cases are not asked again
    r = CliRunner().invoke(group, ["label", "latest", "--criterion", "polite"], input="q\n")
    shown = [line for line in r.output.splitlines() if line.startswith("─") or "case msg_" in line]
    assert got[0]["case_id"] not in " ".join(shown) and got[1]["case_id"] not in " ".join(shown)


def test_labels_written_by_label_calibrate_the_judge(project, cli):
    truth = {x["case_id"]: x["label"] for x in map(json.loads, (project / "labels/polite-all.jsonl").read_text()
                                                   .splitlines())}
    for case_id, label in list(truth.items())[:40]:
        assert cli("label", "latest", "--criterion", "polite", "--case", case_id, "--label", label,
                   cwd=project).exit_code == 0
    cli("eval", "latest", "--json", "e.json", cwd=project)
    doc = json.loads((project / "e.json").read_text())
    j = next(c for c in doc["criteria"] if c["criterion"] == "polite")["judge"]
    assert j["labels"] == 40 and j["stale"] == 0
