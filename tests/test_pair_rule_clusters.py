"""Pair rules follow the cluster rule of clustered rates (seeds/stateful-agents: "each case
shares a cluster with its pairs, so set allow_approximate_methods: true and have at least 20
source cases"): a rule on the interval or the rate of a metamorphic relation is
INSUFFICIENT_EVIDENCE with the reasons of clustered rates until both hold; a count
(max_failures) needs neither."""

import json

import pytest

from oloproof.config.models import ReleaseConfig
from oloproof.evaluate.gate import GateContext, judge_gate
from oloproof.stats.intervals import rate_interval
from tests.conftest import write

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
        self.refund(case.input["order_id"])
        current_case().finish("success")
        return {"answer": "done"}
'''

CONFIG = '''\
system: {name: desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: metamorphic_relation, relation: same_state, transform: shout}
metamorphic:
  transforms:
    - {name: shout, field: message, template: "{value} OVERRIDE", validity_labels: labels.jsonl}
release: release.yaml
'''

RULES = '''\
rules:
  - {name: injection, criterion: same_state_under_shout, min_lower_bound: 0.5}
  - {name: injection-rate, criterion: same_state_under_shout, min_rate: 0.9}
  - {name: injection-count, criterion: same_state_under_shout, max_failures: 0}
'''


def project(folder, n):
    rows = [{"id": f"c{i:02d}", "input": {"order_id": f"o{i}", "message": "refund"}, "initial_state": {}}
            for i in range(n)]
    write(folder / "cases.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(folder / "labels.jsonl", "".join(json.dumps({"case_id": f"c{i:02d}~shout", "valid": True}) + "\n"
                                           for i in range(n)))
    write(folder / "app.py", APP)
    write(folder / "oloproof.yaml", CONFIG)
    write(folder / "release.yaml", RULES)
    return folder


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two projects run once: 12 source cases and 20 (every pair holds its state)."""
    from tests.conftest import run_in

    out = {}
    for n in (12, 20):
        folder = project(tmp_path_factory.mktemp(f"pairs{n}"), n)
        r = run_in(folder, "run", "--json", "r.json")
        assert r.exit_code == 1, r.output  # allow_approximate_methods is not set
        out[n] = folder
    return out


def rules_of(folder):
    data = json.loads((folder / "r.json").read_text())
    return data, {r["name"]: (r["status"], r["reason"]) for r in data["gate"]["rules"]}


def reevaluate(cli, folder, release):
    write(folder / "release.yaml", release)
    r = cli("eval", "--json", "e.json", cwd=folder)
    data = json.loads((folder / "e.json").read_text())
    return r, {x["name"]: (x["status"], x["reason"]) for x in data["gate"]["rules"]}


def test_twelve_sources_without_approximate_methods_is_insufficient_evidence(recorded):
    data, rules = rules_of(recorded[12])
    row = next(c for c in data["criteria"] if c["criterion"] == "same_state_under_shout")
    assert (row["passed"], row["observed"], row["method"]) == (12, 12, "clopper_pearson")  # one pair a cluster
    assert rules["injection"] == ("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed")
    assert rules["injection-rate"] == ("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed")
    assert rules["injection-count"] == ("PASS", None)  # a count needs no interval
    assert data["gate"]["decision"] == "INSUFFICIENT_EVIDENCE"
    detail = next(r["detail"] for r in data["gate"]["rules"] if r["name"] == "injection")
    assert "allow_approximate_methods: true" in detail


def test_twelve_sources_with_approximate_methods_are_too_few_clusters(cli, recorded, tmp_path):
    import shutil

    folder = shutil.copytree(recorded[12], tmp_path / "p")
    r, rules = reevaluate(cli, folder, "allow_approximate_methods: true\n" + RULES)
    assert r.exit_code == 1, r.output
    assert rules["injection"] == ("INSUFFICIENT_EVIDENCE", "too_few_clusters")
    assert rules["injection-rate"] == ("INSUFFICIENT_EVIDENCE", "too_few_clusters")
    assert rules["injection-count"] == ("PASS", None)
    assert "12 source clusters < 20 needed" in r.output


def test_twenty_sources_with_approximate_methods_decide(cli, recorded, tmp_path):
    import shutil

    folder = shutil.copytree(recorded[20], tmp_path / "p")
    r, rules = reevaluate(cli, folder, "allow_approximate_methods: true\n" + RULES)
    assert r.exit_code == 0, r.output
    assert set(rules.values()) == {("PASS", None)}
    # and a threshold the pairs miss fails, as any rate rule does
    strict = "  - {name: injection, criterion: same_state_under_shout, min_lower_bound: 0.99}\n"
    r, rules = reevaluate(cli, folder, "allow_approximate_methods: true\nrules:\n" + strict)
    assert r.exit_code == 1
    assert rules["injection"] == ("FAIL", "lower_bound_below_threshold")


def test_judge_gate_holds_pair_rules_to_the_cluster_rule():
    exact = rate_interval(12, 12, 0, 0)
    assert not exact.approximate
    release = ReleaseConfig.model_validate({"allow_approximate_methods": True, "rules": [
        {"name": "a", "criterion": "same_state_under_x", "min_lower_bound": 0.5},
        {"name": "b", "criterion": "answer_correct", "min_lower_bound": 0.5}]})
    rows = {"same_state_under_x": exact, "answer_correct": exact}
    g = judge_gate(release, rows, GateContext(source_clusters=12, paired={"same_state_under_x"}))
    assert [(r.status, r.reason) for r in g.rules] == [("INSUFFICIENT_EVIDENCE", "too_few_clusters"), ("PASS", None)]
    g = judge_gate(release, rows, GateContext(source_clusters=20, paired={"same_state_under_x"}))
    assert [r.status for r in g.rules] == ["PASS", "PASS"]
