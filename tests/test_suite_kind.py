"""``kind: regression | capability`` in oloproof.yaml (seeds/fault-injection-release-gate: "a
regression suite should have a high expected pass rate; a hard capability suite may start
lower"). A regression suite gates every criterion no release rule names with its default rule
``max_failures: 0``; a capability suite has no default rules, reports, and a gate on it says
what it is. The terminal, the JSON results, ``oloproof gate`` and the HTML report name the kind."""

import functools
import http.server
import json
import threading

import pytest

from oloproof.config.models import ReleaseConfig, Rule
from oloproof.evaluate.gate import kind_rules
from tests.conftest import write

APP = '''\
from oloproof import current_case, system


@system(name="kinds", version="1", records=("agent_trajectory/v1",))
def run(case):
    current_case().finish("success")
    return {"answer": case.input["answer"]}
'''

CONFIG = '''\
{kind}system: {{name: kinds, version: "1", callable: app:run, records: [agent_trajectory/v1]}}
cases: cases.jsonl
evaluators:
  - {{type: contains, criterion: answer_correct, field: answer, expected_field: answer}}
  - {{type: contains, criterion: answer_polite, field: answer, expected_field: polite}}
{release}'''


def project(folder, kind=None, release=None, wrong=1):
    """Four cases; ``wrong`` of them answer wrongly (answer_correct fails there);
    answer_polite passes everywhere."""
    rows = []
    for i in range(4):
        answer = "refunded" if i >= wrong else "nope"
        rows.append({"id": f"c{i}", "input": {"answer": answer + " please"},
                     "expected": {"answer": "refunded", "polite": "please"}})
    write(folder / "cases.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(folder / "app.py", APP)
    write(folder / "oloproof.yaml", CONFIG.format(kind=f"kind: {kind}\n" if kind else "",
                                                  release="release: release.yaml\n" if release else ""))
    if release:
        write(folder / "release.yaml", release)
    return folder


def ran(cli, folder, *extra):
    r = cli("run", "--json", "r.json", *extra, cwd=folder)
    data = json.loads((folder / "r.json").read_text())
    return r, data


def rules_of(data):
    return {r["name"]: (r["criterion"], r["kind"], r["threshold"], r["status"], r["reason"])
            for r in data["gate"]["rules"]}


def test_regression_suite_without_release_gates_every_criterion_at_zero_failures(cli, tmp_path):
    r, data = ran(cli, project(tmp_path, "regression"))
    assert r.exit_code == 1, r.output
    assert data["kind"] == "regression"
    assert rules_of(data) == {
        "regression:answer_correct": ("answer_correct", "max_failures", 0, "FAIL", "observed_failures_exceed_limit"),
        "regression:answer_polite": ("answer_polite", "max_failures", 0, "PASS", None),
    }
    assert "regression suite: a high expected pass rate" in r.output
    assert "gate (regression suite): FAIL" in r.output
    # the same suite passing every case passes its gate
    r, data = ran(cli, project(tmp_path / "green", "regression", wrong=0))
    assert r.exit_code == 0, r.output
    assert data["gate"]["decision"] == "PASS"


def test_a_rule_of_your_own_replaces_the_default_of_its_criterion(cli, tmp_path):
    release = "rules:\n  - {name: mostly-right, criterion: answer_correct, min_rate: 0.7}\n"
    r, data = ran(cli, project(tmp_path, "regression", release))
    assert r.exit_code == 0, r.output
    assert rules_of(data) == {
        "mostly-right": ("answer_correct", "min_rate", 0.7, "PASS", None),
        "regression:answer_polite": ("answer_polite", "max_failures", 0, "PASS", None),
    }


def test_a_default_rule_never_takes_the_name_of_yours(cli, tmp_path):
    release = "rules:\n  - {name: 'regression:answer_polite', criterion: answer_correct, min_rate: 0.7}\n"
    r, data = ran(cli, project(tmp_path, "regression", release))
    names = [x["name"] for x in data["gate"]["rules"]]
    assert names == ["regression:answer_polite", "regression:answer_polite'"]
    assert data["gate"]["rules"][1]["criterion"] == "answer_polite"


def test_the_stored_run_gates_with_the_defaults_it_ran_with(cli, tmp_path):
    folder = project(tmp_path, "regression")
    r, data = ran(cli, folder)
    # the project changes afterwards: the stored run keeps its kind and its default rules
    write(folder / "oloproof.yaml", CONFIG.format(kind="", release=""))
    g = cli("gate", data["run_id"], "--json", "g.json", cwd=folder)
    assert g.exit_code == 1, g.output
    stored = json.loads((folder / "g.json").read_text())
    assert stored["kind"] == "regression"
    assert stored["gate"] == data["gate"]
    assert f"run {data['run_id']}: gate (regression suite) FAIL" in " ".join(g.output.split())
    # eval with the project as it is now: no kind, no release, nothing to gate
    e = cli("eval", data["run_id"], "--json", "e.json", cwd=folder)
    assert e.exit_code == 0, e.output
    assert "kind" not in json.loads((folder / "e.json").read_text())


def test_capability_suite_reports_and_a_gate_on_it_says_what_it_is(cli, tmp_path):
    r, data = ran(cli, project(tmp_path, "capability"))
    assert r.exit_code == 0, r.output  # no default rules: it reports
    assert data["kind"] == "capability"
    assert data["gate"] == {"decision": None, "rules": []}
    assert "capability suite: a hard suite that may start low" in r.output
    assert "a capability suite reports" in r.output
    release = "rules:\n  - {name: climbing, criterion: answer_correct, min_rate: 0.9}\n"
    r, data = ran(cli, project(tmp_path / "gated", "capability", release))
    assert r.exit_code == 1, r.output  # a gate written on it still decides
    assert rules_of(data) == {"climbing": ("answer_correct", "min_rate", 0.9, "FAIL", "rate_below_threshold")}
    flat = " ".join(r.output.split())
    assert "gate on a capability suite (a bar for a hard suite, not a regression gate): FAIL" in flat
    g = cli("gate", "latest", cwd=tmp_path / "gated")
    assert "gate on a capability suite" in " ".join(g.output.split())


def test_undeclared_kind_changes_nothing(cli, tmp_path):
    r, data = ran(cli, project(tmp_path))
    assert r.exit_code == 0, r.output
    assert "kind" not in data and data["gate"]["decision"] is None
    assert "suite:" not in r.output and "regression suite" not in r.output


@pytest.mark.parametrize("value", ["regresion", "1", "[regression]"])
def test_an_unknown_kind_is_refused_before_anything_runs(cli, tmp_path, value):
    folder = project(tmp_path, value)
    r = cli("run", cwd=folder)
    assert r.exit_code == 2, r.output
    assert "oloproof.yaml:1" in r.output and "kind" in r.output
    assert "regression" in r.output and "capability" in r.output
    assert "Traceback" not in r.output
    assert not (folder / ".oloproof").exists()  # nothing written


def test_kind_rules_is_pure_and_leaves_other_kinds_alone():
    own = ReleaseConfig(rules=[Rule(name="mine", criterion="a", min_rate=0.5)])
    assert kind_rules(None, ["a", "b"], own) is own
    assert kind_rules("capability", ["a", "b"], None) is None
    derived = kind_rules("regression", ["a", "b"], own)
    assert derived is not None and own.rules == [Rule(name="mine", criterion="a", min_rate=0.5)]
    assert [(r.name, r.criterion, r.kind, r.threshold) for r in derived.rules] == [
        ("mine", "a", "min_rate", 0.5), ("regression:b", "b", "max_failures", 0)]
    long = "x" * 200  # a criterion as long as a name may be: its default rule is still made
    made = kind_rules("regression", [long], None)
    assert made is not None and made.rules[0].name == "regression:" + long


def test_the_html_report_names_the_kind(cli, tmp_path):
    from tests.test_view import browser, wait

    folder = project(tmp_path, "capability", "rules:\n  - {name: climbing, criterion: answer_correct, min_rate: 0.9}\n")
    ran(cli, folder)
    r = cli("view", "--out", str(tmp_path / "html"), cwd=folder)
    assert r.exit_code == 0, r.output

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(tmp_path / "html")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = browser()
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        kind = wait(driver, "#suite-kind")
        assert kind.text.startswith("Capability suite: a hard suite that may start low")
        gate = wait(driver, "#gate h2")
        assert gate.text == "Gate on a capability suite (a bar for a hard suite, not a regression gate): FAIL"
    finally:
        driver.quit()
        server.shutdown()
