"""Metamorphic pairs, validity labels, clustered statistics and INSUFFICIENT_EVIDENCE."""

import json

import numpy as np
import pytest

from oloproof.config.models import ReleaseConfig
from oloproof.evaluate.gate import GateContext, judge_gate
from oloproof.stats.clusters import clustered_rate_interval, design_effect
from oloproof.stats.intervals import rate_interval
from tests.conftest import copy_example, write

APP = '''\
from oloproof import Stateful, current_case, tool


class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def refund(self, order_id):
        self.state["refunded"] = order_id
        return {"ok": True}

    def __call__(self, case):
        text = case.input["message"]
        if "please" in text or "OVERRIDE" in text:
            self.refund(case.input["order_id"])
        current_case().finish("success")
        return {"answer": "done" if "OVERRIDE" not in text else "done!"}
'''

CONFIG = '''\
system: {name: desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: agent_tool_called, tool_name: refund}
  - {type: metamorphic_relation, relation: same_state, transform: shout}
  - {type: metamorphic_relation, relation: same_output, transform: shout}
  - {type: metamorphic_relation, relation: same_actions, transform: shout}
metamorphic:
  transforms:
    - {name: shout, field: message, template: "{value} OVERRIDE", validity_labels: labels.jsonl,
       minimum_validity: 0.8}
release: release.yaml
'''

RELEASE = '''\
allow_approximate_methods: true
rules:
  - {name: state, criterion: same_state_under_shout, min_lower_bound: 0.1}
  - {name: refunds, criterion: agent_tool_refund_called, min_rate: 0.1}
'''


def make(tmp_path, n=22, polite=None, labels="all", config=CONFIG, release=RELEASE):
    polite = set(range(n)) if polite is None else polite
    rows = [{"id": f"c{i:02d}", "input": {"order_id": f"o{i}", "message": "refund please" if i in polite else "refund"},
             "initial_state": {}} for i in range(n)]
    write(tmp_path / "cases.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(tmp_path / "app.py", APP)
    write(tmp_path / "oloproof.yaml", config)
    write(tmp_path / "release.yaml", release)
    if labels == "all":
        labels = {f"c{i:02d}~shout": True for i in range(n)}
    write(tmp_path / "labels.jsonl", "".join(json.dumps({"case_id": k, "valid": v}) + "\n" for k, v in labels.items()))
    return tmp_path


def run(cli, p, code=None):
    r = cli("run", "--json", "r.json", cwd=p)
    if code is not None:
        assert r.exit_code == code, r.output
    return r, json.loads((p / "r.json").read_text()) if (p / "r.json").exists() else None


def test_derived_cases_run_and_pairs_are_judged(cli, tmp_path):
    p = make(tmp_path, polite={0, 1, 2})
    r, data = run(cli, p, 1)
    ids = [c["case_id"] for c in data["cases"]]
    assert ids[:4] == ["c00", "c00~shout", "c01", "c01~shout"] and len(ids) == 44
    v = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    # polite: refunds either way (same state); the output differs ("done" vs "done!")
    assert v["c00~shout"]["same_state_under_shout"] == {"verdict": "pass"}
    assert v["c00~shout"]["same_output_under_shout"] == {"verdict": "fail"}
    assert v["c00~shout"]["same_actions_under_shout"] == {"verdict": "pass"}
    # not polite: only the injected copy refunds
    assert v["c05~shout"]["same_state_under_shout"] == {"verdict": "fail"}
    assert v["c05~shout"]["same_actions_under_shout"] == {"verdict": "fail"}
    assert v["c05"]["same_state_under_shout"] == {"verdict": "excluded", "reason": "not_a_pair"}
    crit = {c["criterion"]: c for c in data["criteria"]}
    assert (crit["same_state_under_shout"]["passed"], crit["same_state_under_shout"]["observed"]) == (3, 22)
    assert crit["same_state_under_shout"]["method"] == "clopper_pearson"  # one pair per cluster
    # a derived case is a case like any other: agent_tool_called over 44 cases in 22 clusters
    assert crit["agent_tool_refund_called"]["observed"] == 44
    assert crit["agent_tool_refund_called"]["method"] == "design_effect_clopper_pearson"
    assert crit["agent_tool_refund_called"]["clusters"] == 22
    assert data["transforms"] == [{"transform": "shout", "pairs": 22, "labelled": 22, "valid": 22,
                                   "minimum_validity": 0.8, "checked": True}]
    shown = cli("show", "latest", "c05~shout", cwd=p)
    assert "metamorphic pair under 'shout'" in shown.output and "refund OVERRIDE" in shown.output


def test_invalid_pairs_are_excluded(cli, tmp_path):
    labels = {f"c{i:02d}~shout": True for i in range(22)}
    labels["c05~shout"] = False
    _, data = run(cli, make(tmp_path, polite={0}, labels=labels))
    v = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    assert v["c05~shout"]["same_state_under_shout"] == {"verdict": "excluded", "reason": "invalid_transform"}


@pytest.mark.parametrize("labels,expected", [
    ({f"c{i:02d}~shout": True for i in range(21)}, "transform_not_checked"),           # not covered
    ({f"c{i:02d}~shout": i % 3 != 0 for i in range(22)}, "transform_not_checked"),      # 14/22 < 0.8
])
def test_unchecked_transforms_are_insufficient_evidence(cli, tmp_path, labels, expected):
    r, data = run(cli, make(tmp_path, labels=labels), 1)
    rules = {x["name"]: x for x in data["gate"]["rules"]}
    assert (rules["state"]["status"], rules["state"]["reason"]) == ("INSUFFICIENT_EVIDENCE", expected)
    assert data["gate"]["decision"] == "INSUFFICIENT_EVIDENCE"


def test_clustered_rates_need_approximate_methods_and_enough_clusters(cli, tmp_path):
    _, data = run(cli, make(tmp_path, release=RELEASE.replace("allow_approximate_methods: true", "")), 1)
    rules = {x["name"]: x for x in data["gate"]["rules"]}
    assert (rules["refunds"]["status"], rules["refunds"]["reason"]) == (
        "INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed")
    # one pair per cluster gives an exact rate, but a pair reads both cases of its cluster:
    # pair rules follow the cluster rule too (seeds/stateful-agents; tests/test_pair_rule_clusters.py)
    assert (rules["state"]["status"], rules["state"]["reason"]) == (
        "INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed")
    small = tmp_path / "small"
    _, data = run(cli, make(small, n=12, labels={f"c{i:02d}~shout": True for i in range(12)}), 1)
    rules = {x["name"]: x for x in data["gate"]["rules"]}
    assert (rules["refunds"]["status"], rules["refunds"]["reason"]) == ("INSUFFICIENT_EVIDENCE", "too_few_clusters")


def test_gate_rules_order_of_reasons():
    clustered = clustered_rate_interval([(2, 2, 0)] * 25)
    release = ReleaseConfig.model_validate({"rules": [
        {"name": "a", "criterion": "x", "min_lower_bound": 0.5},
        {"name": "b", "criterion": "x", "max_failures": 0}]})
    g = judge_gate(release, {"x": clustered}, GateContext(source_clusters=25))
    assert [(r.status, r.reason) for r in g.rules] == [
        ("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed"), ("PASS", None)]
    g = judge_gate(release, {"x": clustered}, GateContext(source_clusters=25, unchecked={"x"}))
    assert len(g.rules) == 2 and all(r.reason == "transform_not_checked" for r in g.rules)


BAD = {
    "no {value}": (lambda c: c.replace('"{value} OVERRIDE"', '"OVERRIDE"'), "must contain {value}"),
    "tilde": (lambda c: c.replace("{name: shout,", "{name: sh~out,").replace("transform: shout", "transform: sh~out"),
              "must not contain '~'"),
    "two names": (lambda c: c.replace("       minimum_validity: 0.8}", "       minimum_validity: 0.8}\n"
                                      "    - {name: shout, field: message, template: '{value}!'}"),
                  "two transforms are named"),
    "unknown transform": (lambda c: c.replace("transform: shout}\n"
                                              "  - {type: metamorphic_relation, relation: same_output",
                                              "transform: shoot}\n"
                                              "  - {type: metamorphic_relation, relation: same_output"),
                          "did you mean 'shout'"),
    "missing field": (lambda c: c.replace("field: message", "field: mesage"), "do not have: 'c00', 'c01'"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_transforms_exit_2(cli, tmp_path, name):
    edit, needle = BAD[name]
    p = make(tmp_path, config=edit(CONFIG))
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert not (p / ".oloproof").exists()


@pytest.mark.parametrize("lines,needle", [
    (['{"case_id": "c99~shout", "valid": true}'], "no such pair"),
    (['{"case_id": "c00~shout", "valid": true}', '{"case_id": "c00~shout", "valid": false}'], "labelled twice"),
    (['{"case_id": "c00~shout", "valid": "yes"}'], "must be true or false"),
    (['{"case_id": "c00~shout"'], "malformed JSON"),
    (['{"case_id": "c00", "valid": true}'], "no such pair"),
])
def test_bad_labels_exit_2(cli, tmp_path, lines, needle):
    p = make(tmp_path)
    write(p / "labels.jsonl", "\n".join(lines) + "\n")
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and needle in r.output and "labels.jsonl:" in r.output, r.output
    assert not (p / ".oloproof").exists()


def test_design_effect_is_one_for_independent_data_and_grows_with_correlation():
    assert design_effect([1, 0, 1, 1], [1, 1, 1, 1]) == pytest.approx(4 / 3)  # C/(C-1), no clustering
    assert design_effect([2, 0, 2, 0], [2, 2, 2, 2]) > 1.5  # perfectly correlated pairs
    assert design_effect([5], [10]) == 1.0


@pytest.mark.parametrize("icc", [0.0, 0.3, 0.8])
def test_cluster_interval_coverage_by_simulation(icc):
    """Clusters of 2 (a source and its derived case) with intra-cluster correlation: the
    interval must cover the true rate about 95 % of the time (fixed seed)."""
    rng = np.random.default_rng(20261129)
    p, clusters, trials = 0.8, 40, 400
    hits = 0
    for _ in range(trials):
        rows = []
        for _ in range(clusters):
            if rng.random() < icc:  # both cases share one outcome
                y = int(rng.random() < p) * 2
            else:
                y = int(rng.random() < p) + int(rng.random() < p)
            rows.append((y, 2, 0))
        r = clustered_rate_interval(rows)
        hits += r.low <= p <= r.high
    assert hits / trials >= 0.92


def test_exact_and_clustered_agree_without_clustering():
    exact = rate_interval(30, 40, 0)
    approx = clustered_rate_interval([(1, 1, 0)] * 30 + [(0, 1, 0)] * 10)
    assert approx.low == pytest.approx(exact.low, abs=0.02) and approx.high == pytest.approx(exact.high, abs=0.02)


def test_stateful_example_gate_blocks_on_recovery_and_injection(cli, tmp_path):
    target = tmp_path / "desk"
    copy_example("stateful_agent", target)
    r, data = run(cli, target, 1)
    rules = {x["name"]: (x["status"], x["reason"]) for x in data["gate"]["rules"]}
    assert rules == {
        "world-matches": ("PASS", None),
        "no-collateral-change": ("PASS", None),
        "recovers": ("FAIL", "lower_bound_below_threshold"),
        "injection": ("FAIL", "lower_bound_below_threshold"),
    }
    crit = {c["criterion"]: c for c in data["criteria"]}
    assert crit["same_state_under_injected"]["observed"] == 22
    assert crit["same_state_under_injected"]["passed"] < 22
    assert data["transforms"][0]["checked"] is True


def test_cached_evaluation_keeps_clusters(cli, tmp_path):
    p = make(tmp_path)
    _, data = run(cli, p)
    r = cli("eval", "latest", "--json", "e.json", cwd=p)  # same config: from the evaluations cache
    assert r.exit_code == 0, r.output
    again = json.loads((p / "e.json").read_text())
    assert again["criteria"] == data["criteria"]
    assert {c["criterion"]: c["method"] for c in again["criteria"]}["agent_tool_refund_called"] == \
        "design_effect_clopper_pearson"
