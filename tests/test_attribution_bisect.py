"""A silent failure (no error, no rule fires) localised by bisection (SPEC §14; seed: "bisecting
the trajectory helps localise a silent failure that has no error"): the last recoverable prefix
becomes the boundary, category ``silent_failure``, layer unknown, the probes as evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_recorded, run_in, write

APP = '''\
from oloproof import Stateful, current_case, system, tool

RATES = {"v1": 0.25, "v2": 0.2}  # v1 reads last year's tax rate: nothing errors


class Billing(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def set_rate(self, rate):
        """Set the tax rate."""
        self.state["rate"] = rate
        return {"rate": rate}

    @tool
    def charge(self, amount):
        """Charge the amount with tax."""
        self.state["charged"] = round(amount * (1 + self.state["rate"]), 2)
        return {"charged": self.state["charged"]}


def agent(version):
    @system(name="billing", version=version, records=["agent_trajectory/v1", "environment_state/v1"])
    class Agent(Billing):
        def run(self, case):
            self.set_rate(RATES[version])
            self.charge(case.input["amount"])
            current_case().final("Charged.")
            return {"answer": "charged"}
    return Agent


AgentV1, AgentV2 = agent("v1"), agent("v2")
'''

CONFIG = '''\
system: {name: billing, version: v1, callable: app:AgentV1, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: state_matches, criterion: charged_right, mode: subset}
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    p = tmp_path_factory.mktemp("bisect") / "billing"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    case = {"id": "charge", "input": {"amount": 100}, "initial_state": {"rate": 0.0},
            "expected": {"state": {"charged": 120.0}}}
    write(p / "cases.jsonl", json.dumps(case) + "\n")
    assert run_in(p, "run").exit_code == 0
    return p


def test_without_bisection_a_silent_failure_is_unattributed(recorded, tmp_path, cli):
    p = copy_recorded(recorded, tmp_path / "p")
    r = cli("attribute", "latest", "charge", "--json", "a.json", cwd=p)
    assert r.exit_code == 0, r.output
    a = json.loads((p / "a.json").read_text())["attribution"]
    assert (a["status"], a["first_unacceptable_step"], a["failed_criteria"]) == ("unattributed", None,
                                                                                 ["charged_right"])


def test_the_bisection_boundary_attributes_a_silent_failure(recorded, tmp_path, cli):
    p = copy_recorded(recorded, tmp_path / "p")
    r = cli("attribute", "latest", "charge", "--bisect", "--control", "app:AgentV2", "--json", "a.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "a.json").read_text())
    a = data["attribution"]
    assert [(pr["before_step"], pr["recovers"]) for pr in data["probes"]] == [(1, True), (3, False)]
    assert (a["status"], a["category"], a["layer"], a["source"]) == ("attributed", "silent_failure", "unknown",
                                                                      "bisection")
    assert (a["first_unacceptable_step"], a["before_step"], a["primary"]["window"]) == (1, 1, [1, 2])
    assert (a["confidence"], a["needs_review"]) == ("medium", True)
    basis = a["confidence_basis"]
    assert basis.startswith("bisection:") and "from before step 1 and not from before step 3" in basis
    assert "steps 1..2" in basis
    assert [e["step"] for e in a["evidence"]] == [1, 3]
    assert "finishes correctly" in a["evidence"][0]["text"] and "does not" in a["evidence"][1]["text"]
    assert a["recoverability"]["status"] == "recoverable" and a["recoverability"]["last_recoverable_prefix"] == 1
    text = " ".join(r.output.split())
    assert "silent_failure" in text and "boundary │ before step 1" in text and "confidence basis" in text
    # prefix create freezes before the boundary the bisection found
    r = cli("prefix", "create", "latest", "charge", cwd=p)
    assert r.exit_code == 0, r.output
    assert "boundary before step 1, silent_failure" in r.output
    doc = yaml.safe_load((Path(p) / "prefixes" / "charge.yaml").read_text())
    assert doc["boundary"] == {"before_step": 1, "first_unacceptable_step": 1, "category": "silent_failure"}
    assert doc["frozen"]["steps"] == [] and doc["frozen"]["state"] == {"rate": 0.0}


def test_a_control_that_never_recovers_leaves_it_unattributed(recorded, tmp_path, cli):
    p = copy_recorded(recorded, tmp_path / "p")
    r = cli("attribute", "latest", "charge", "--bisect", "--control", "app:AgentV1", "--json", "a.json", cwd=p)
    assert r.exit_code == 0, r.output
    a = json.loads((p / "a.json").read_text())["attribution"]
    assert a["status"] == "unattributed" and a["recoverability"]["status"] == "unrecoverable"
