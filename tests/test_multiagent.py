"""Multi-agent trajectories: route, permissions, handoffs, the route slice, the triage example."""

import json

from oloproof.evaluate.multiagent import handoffs, route
from oloproof.evaluate.registry import registry
from oloproof.evaluate.slices import Slice
from oloproof.events import StepRecorded
from oloproof.views import TrajectoryView
from tests.conftest import copy_example, write
from tests.helpers import view


def traj(*spec, truncated=False, named=True):
    """spec: ("say", agent) | ("handoff", agent, to) | ("call", agent, tool)"""
    steps = []
    for item in spec:
        agent = item[1] if named else None
        if item[0] == "say":
            steps.append(StepRecorded(len(steps) + 1, "message", agent=agent))
        elif item[0] == "handoff":
            steps.append(StepRecorded(len(steps) + 1, "handoff", agent=agent, to_agent=item[2]))
        else:
            steps.append(StepRecorded(len(steps) + 1, "tool_call", item[2], {}, agent=agent))
            steps.append(StepRecorded(len(steps) + 1, "tool_result", item[2], None, {}, agent=agent))
    return TrajectoryView(steps, "success", truncated, None, [], [])


def make(type_name, **cfg):
    cls = registry()[type_name]
    return cls(cls.config_model.model_validate({"type": type_name, **cfg}))


BILLING = [("say", "triage"), ("handoff", "triage", "billing"), ("call", "billing", "lookup_order")]


def test_route_collapses_repeats_and_counts_handoff_receivers():
    t = traj(*BILLING, ("handoff", "billing", "person"))
    assert route(t) == ["triage", "billing", "person"] and handoffs(t) == 2
    # control changes hands without a handoff step when another agent takes the next step
    t = traj(("say", "triage"), ("say", "billing"), ("say", "billing"))
    assert route(t) == ["triage", "billing"]
    assert route(traj(*BILLING, named=False)) is None


def test_agent_route():
    ev = make("agent_route")
    exp = {"route": ["triage", "billing"]}
    assert ev.evaluate(view(traj(*BILLING), expected=exp))[0] == "pass"
    assert ev.evaluate(view(traj(*BILLING, ("handoff", "billing", "person")), expected=exp))[0] == "fail"
    assert ev.evaluate(view(traj(*BILLING), expected={})) == ("excluded", "no_expected_route")
    assert ev.evaluate(view(traj(*BILLING, named=False), expected=exp)) == ("missing", "no_agents_recorded")
    # truncated: a prefix of the expected route may still get there; a detour cannot
    assert ev.evaluate(view(traj(("say", "triage"), truncated=True), expected=exp)) == ("missing", "truncated")
    bounce = traj(*BILLING, ("handoff", "billing", "tech"), truncated=True)
    assert ev.evaluate(view(bounce, expected=exp))[0] == "fail"


def test_agent_tool_permissions():
    ev = make("agent_tool_permissions", permissions={"triage": [], "billing": ["lookup_order"], "tech": ["search_kb"]})
    assert ev.evaluate(view(traj(*BILLING)))[0] == "pass"
    assert ev.evaluate(view(traj(("call", "tech", "lookup_order"))))[0] == "fail"
    assert ev.evaluate(view(traj(("call", "intern", "search_kb"))))[0] == "fail"  # closed map
    assert ev.evaluate(view(traj(*BILLING, truncated=True))) == ("missing", "truncated")
    assert ev.evaluate(view(traj(("call", "tech", "lookup_order"), truncated=True)))[0] == "fail"
    assert ev.evaluate(view(traj(*BILLING, named=False))) == ("missing", "no_agents_recorded")


def test_agent_max_handoffs():
    ev = make("agent_max_handoffs", max_handoffs=2)
    assert ev.criterion == "agent_handoffs_le_2"
    assert ev.evaluate(view(traj(*BILLING, ("handoff", "billing", "person"))))[0] == "pass"
    three = traj(("say", "triage"), ("handoff", "triage", "tech"), ("handoff", "tech", "billing"),
                 ("handoff", "billing", "person"))
    assert ev.evaluate(view(three))[0] == "fail"
    assert ev.evaluate(view(traj(*BILLING, truncated=True))) == ("missing", "truncated")
    long_bounce = traj(*BILLING, ("handoff", "billing", "tech"), ("handoff", "tech", "billing"), truncated=True)
    assert ev.evaluate(view(long_bounce))[0] == "fail"


def test_route_slice_and_prefix_rule():
    s = Slice.parse("route")
    assert s.group(view(traj(*BILLING))) == "route=triage>billing"
    assert s.group(view(traj(*BILLING, truncated=True))) is None
    assert s.group(view(traj(*BILLING, named=False))) is None


def test_bad_permissions_and_routes(cli, tmp_path):
    cfg = ("system: {name: s, version: '1', callable: app:run, records: [agent_trajectory/v1]}\n"
           "evaluators:\n  - type: agent_tool_permissions\n    permissions:\n      billing: lookup_order\n")
    write(tmp_path / "oloproof.yaml", cfg)
    write(tmp_path / "app.py", "def run(case):\n    return {}\n")
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}}\n')
    r = cli("run", cwd=tmp_path)
    assert r.exit_code == 2 and "oloproof.yaml:5" in r.output and "permissions.billing" in r.output
    write(tmp_path / "oloproof.yaml", cfg.replace("billing: lookup_order", "billing: [lookup_order, 3]"))
    assert cli("run", cwd=tmp_path).exit_code == 2
    write(tmp_path / "oloproof.yaml", cfg.replace("billing: lookup_order", "billing: [lookup_order]"))
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}, "expected": {"route": "triage>billing"}}\n')
    r = cli("run", cwd=tmp_path)
    assert r.exit_code == 2 and "case 'a'" in r.output and "expected.route" in r.output
    assert not (tmp_path / ".oloproof").exists()


def test_handoff_without_receiver_is_rejected_when_recorded(cli, tmp_path):
    app = ("from oloproof import AgentStep, AgentTrajectory, current_case\n"
           "def run(case):\n"
           "    current_case().agent_trajectory(AgentTrajectory((AgentStep(1, 'handoff', agent='triage'),), "
           "'success'))\n"
           "    return {}\n")
    write(tmp_path / "app.py", app)
    write(tmp_path / "oloproof.yaml", "system: {name: s, version: '1', callable: app:run, "
                                      "records: [agent_trajectory/v1]}\n"
                                      "evaluators:\n  - {type: agent_route}\n")
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}, "expected": {"route": ["triage"]}}\n')
    r = cli("run", "--json", "r.json", cwd=tmp_path)
    assert "case 'a'" in r.output and "to_agent" in r.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["cases"][0]["verdicts"]["agent_route"] == {"verdict": "missing", "reason": "invalid_record"}


SEED = """\
│ answer_correct         │ 96.7%    │ [82.7%, 100.0%] │ 29 / 30 observed · 0 missing · 0 excluded │
│ agent_route            │ 86.7%    │ [69.2%, 96.3%]  │ 26 / 30 observed · 0 missing · 0 excluded │
│ agent_tool_permissions │ 93.1%    │ [73.4%, 99.2%]  │ 27 / 29 observed · 1 missing · 0 excluded │
│ agent_handoffs_le_2    │ 86.7%    │ [69.2%, 96.3%]  │ 26 / 30 observed · 0 missing · 0 excluded │
"""


def cells(line):
    return [c.strip() for c in line.strip().strip("│").split("│")]


def test_triage_example_reproduces_the_seed(cli, tmp_path):
    target = tmp_path / "triage"
    copy_example("triage_agents", target)
    r = cli("run", "--json", "r.json", cwd=target)
    lines = [cells(line) for line in r.output.splitlines() if line.startswith("│")]
    for expected in SEED.splitlines():
        assert cells(expected) in lines, expected
    data = json.loads((target / "r.json").read_text())
    by = {c["case_id"]: c for c in data["cases"]}
    cases = [json.loads(line) for line in (target / "cases.jsonl").read_text().splitlines()]
    tech_refunds = [c["id"] for c in cases if c["input"]["behaviour"] == "tech_refund"]
    assert len(tech_refunds) == 2
    for cid in tech_refunds:  # the right answer from a system that broke its own permissions
        assert by[cid]["verdicts"]["answer_correct"] == {"verdict": "pass"}
        assert by[cid]["verdicts"]["agent_tool_permissions"] == {"verdict": "fail"}
    bounce = next(c["id"] for c in cases if c["input"]["behaviour"] == "bounce")
    assert by[bounce]["verdicts"]["agent_route"] == {"verdict": "fail"}
    assert by[bounce]["verdicts"]["agent_handoffs_le_2"] == {"verdict": "fail"}
    assert by[bounce]["verdicts"]["agent_tool_permissions"] == {"verdict": "missing", "reason": "truncated"}
    slices = {s["slice"] for s in data["slices"]}
    assert "route=triage>billing" in slices and not any("tech>billing>tech" in s for s in slices)
    shown = cli("show", "latest", "case_012", cwd=target)
    assert "route: triage > billing > person · 2 handoffs" in shown.output
    assert "handoff → person" in shown.output and "billing" in shown.output
