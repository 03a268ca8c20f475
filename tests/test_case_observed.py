"""Cost and latency of the short run (SPEC §14; seed: "стоимость и задержку короткого прогона"):
beside what the agent reports through ``usage()``, the recording driver observes each case's
wall time and the model and tool calls that ran (``case_observed.v1``, just before
``case_finished``) — outside the replayed path: replays read no clock and record no observation.
Quantile metrics read them (``wall_ms``, ``model_calls``, ``tool_calls``); ``show``, its JSON and
the prefix report print them beside the reported cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oloproof.config.models import MetricConfig
from oloproof.evaluate.metrics import QuantileMetric
from oloproof.events import CaseFinished, CaseObserved, CaseStarted
from oloproof.views import fold_case
from tests.conftest import copy_recorded, run_in, write

APP = '''\
from oloproof import Stateful, current_case, system, tool


class Shop(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order):
        """Look an order up."""
        return {"order": order, "amount": self.state["orders"][order]}

    @tool
    def refund(self, order, amount):
        """Refund an order."""
        self.state["refunded"] = self.state.get("refunded", []) + [order]
        return {"refunded": amount}

    @tool(kind="model", name="model")
    def think(self, seen):
        current_case().usage(input_tokens=100, output_tokens=10, cost=0.002, latency_ms=40.0)
        return {"next": "refund" if seen else "lookup"}


@system(name="shop", version="v1", records=["agent_trajectory/v1", "environment_state/v1"])
class Agent(Shop):
    def run(self, case):
        found = []
        for order in case.input["orders"]:
            self.think(len(found))
            found.append(self.lookup(order))
        self.think(len(found))
        for f in found:
            self.refund(f["order"], f["amount"])
        current_case().final("Refunded.")
        return {"answer": "done"}
'''

CONFIG = '''\
system: {name: shop, version: v1, callable: app:Agent, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: state_matches, criterion: refunded, mode: subset}
metrics:
  - {id: model_calls_p50, type: quantile, source: model_calls, quantile: 0.5}
  - {id: tool_calls_p50, type: quantile, source: tool_calls, quantile: 0.5}
prefix:
  cases: prefixes
  metrics:
    - {id: wall_ms_p50, type: quantile, source: wall_ms, quantile: 0.5}
    - {id: model_calls_p50, type: quantile, source: model_calls, quantile: 0.5}
    - {id: tool_calls_p50, type: quantile, source: tool_calls, quantile: 0.5}
    - {id: cost_p50, type: quantile, source: cost, quantile: 0.5}
'''


def cases(n: int = 3) -> str:
    out = []
    for i in range(n):
        orders = [f"o{j}" for j in range(i + 1)]
        out.append(json.dumps({"id": f"c{i}", "input": {"orders": orders},
                               "initial_state": {"orders": {o: 10 for o in orders}},
                               "expected": {"state": {"refunded": orders}}}))
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    p = tmp_path_factory.mktemp("observed") / "shop"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", cases())
    r = run_in(p, "run", "--json", "run.json")
    assert r.exit_code == 0, r.output
    return p


def events_of(p: Path, stream_suffix: str) -> list[dict]:
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    try:
        return [{"stream": e.stream, "type": e.type, **json.loads(e.payload)} for e in store.read_all()
                if e.stream.endswith(stream_suffix)]
    finally:
        store.close()


def test_each_case_is_observed_just_before_it_finishes(recorded):
    for i in range(3):
        events = events_of(recorded, f"/c{i}")
        assert [e["type"] for e in events[-2:]] == ["case_observed.v1", "case_finished.v2"]
        observed = events[-2]
        # c<i> looks up i+1 orders and refunds them: i+2 model calls, 2(i+1) tool calls
        assert (observed.get("model_calls", 0), observed.get("tool_calls", 0)) == (i + 2, 2 * (i + 1))
        assert observed["wall_ms"] > 0
    data = json.loads((recorded / "run.json").read_text())
    metrics = {m["id"]: m for m in data["metrics"]}
    assert (metrics["model_calls_p50"]["value"], metrics["model_calls_p50"]["observed"]) == (3, 3)
    assert metrics["tool_calls_p50"]["value"] == 4


def test_the_wall_time_is_the_driver_clock_around_the_case(recorded):
    """record_case reads its clock twice, around the recording; the time is in milliseconds."""
    from oloproof.app.project import load_project, load_system
    from oloproof.events import CODEC
    from oloproof.recorder.record import CaseArgs, record_case
    from tests.conftest import forgetting_imports

    with forgetting_imports():
        project = load_project(recorded)
        slot = load_system(project).slot
        [sc] = [c for c in project.suite_cases if c.id == "c0"]
        ticks = iter([10.0, 10.25])
        rec = record_case(slot, CaseArgs("r1", 0, sc), None, clock=lambda: next(ticks))
    observed = [CODEC.decode(p) for p, t in zip(rec.payloads, rec.types) if t == "case_observed.v1"]
    assert observed == [CaseObserved(250.0, 2, 2)]


def test_replays_read_no_clock_and_record_no_observation(recorded, tmp_path, cli, monkeypatch):
    import oloproof.recorder.record as record_module

    p = copy_recorded(recorded, tmp_path / "p")

    def no_clock() -> float:
        raise AssertionError("a replay read the recording driver's clock")

    monkeypatch.setattr(record_module, "CLOCK", no_clock)
    r = cli("replay", "--fault", "lookup:error", "--json", "rep.json", cwd=p)
    assert r.exit_code in (0, 1), r.output
    replays = [e for e in events_of(p, "") if e["stream"].startswith("replay/")]
    assert replays and not any(e["type"] == "case_observed.v1" for e in replays)


def test_metric_sources():
    def view(observed=None, error=None):
        events = [CaseStarted("r", "c", 0, "f", {})]
        if observed is not None:
            events.append(observed)
        events.append(CaseFinished({}, error, "system_error" if error else None))
        return fold_case(events)

    def metric(source):
        return QuantileMetric(MetricConfig(id=source, type="quantile", source=source, quantile=0.5))

    seen = view(CaseObserved(12.5, 3, 2))
    assert [metric(s).value(seen) for s in ("wall_ms", "model_calls", "tool_calls")] == [12.5, 3, 2]
    assert (metric("wall_ms").unit, metric("model_calls").unit) == ("ms", "calls")
    # a log written before the observation existed; an errored case
    assert metric("wall_ms").value(view()) == ("missing", "not_observed")
    assert metric("tool_calls").value(view(CaseObserved(1.0, 1, 1), error="boom")) == ("missing", "system_error")


def test_show_prints_the_observation_beside_the_reported_cost(recorded, tmp_path, cli):
    p = copy_recorded(recorded, tmp_path / "p")
    r = cli("show", "latest", "c1", "--json", "c1.json", cwd=p)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "cost and latency: reported by the agent: cost 0.006, 330 tokens, latency 120 ms; observed: wall " in text
    assert "ms, 3 model calls, 4 tool calls" in text
    cost = json.loads((p / "c1.json").read_text())["cost"]
    assert cost["reported"] == {"cost": pytest.approx(0.006), "tokens": 330, "latency_ms": 120.0, "reports": 3}
    assert (cost["observed"]["model_calls"], cost["observed"]["tool_calls"]) == (3, 4)
    assert cost["observed"]["wall_ms"] > 0


def test_a_prefix_run_counts_only_what_ran_past_the_boundary(recorded, tmp_path, cli):
    """The frozen calls are answered from the tape and the boundary action is recorded, never
    executed: a re-run candidate's short run is its live model call, and no tool call."""
    p = copy_recorded(recorded, tmp_path / "p")
    # c2: think(0) lookup o0 think(1) lookup o1 think(2) lookup o2 (steps 1-9), think(3) at 10, refunds from 11
    r = cli("prefix", "create", "latest", "c2", "--before-step", "10", cwd=p)
    assert r.exit_code == 0, r.output
    r = cli("prefix", "run", "--json", "prefix.json", cwd=p)
    assert r.exit_code in (0, 1), r.output
    data = json.loads((p / "prefix.json").read_text())
    [observed] = [e for e in events_of(p, f"{data['run_id']}/c2") if e["type"] == "case_observed.v1"]
    assert (observed.get("model_calls", 0), observed.get("tool_calls", 0)) == (1, 0)
    metrics = {m["id"]: m for m in data["metrics"]}
    assert (metrics["model_calls_p50"]["value"], metrics["tool_calls_p50"]["value"]) == (1, 0)
    assert metrics["wall_ms_p50"]["observed"] == 1 and metrics["wall_ms_p50"]["value"] > 0
    assert metrics["cost_p50"]["value"] == pytest.approx(0.002)
    text = " ".join(r.output.split())
    assert "short run, median of 1 trial: observed wall " in text
    assert "model calls 1, tool calls 0; reported by the agent: cost 0.002, latency 40 ms" in text


def test_the_golden_observed_log_loads_verifies_and_evaluates(tmp_path):
    """A log with ``case_observed.v1`` keeps loading, verifying and giving the same numbers
    (the golden log per event version, STYLE habit 3)."""
    from oloproof.app.evidence import evaluate_run
    from oloproof.app.project import suite_from_stored
    from oloproof.app.runs import iter_case_views, latest_run_id, load_run
    from tests.test_golden import GOLDEN, load_golden

    store = load_golden(GOLDEN.parent / "observed-v1.jsonl", tmp_path / "log.db")
    run_id = latest_run_id(store)
    run = load_run(store, run_id)
    summary = evaluate_run(store, run_id, suite_from_stored(run.started.config))
    assert {m.id: (m.interval.value, m.interval.observed) for m in summary.metrics} == {
        "model_calls_p50": (3, 3), "tool_calls_p50": (4, 3)}
    views = sorted(iter_case_views(store, run_id), key=lambda v: v.case_id)
    assert [(v.observed.model_calls, v.observed.tool_calls) for v in views] == [(2, 2), (3, 4), (4, 6)]
    assert all(v.observed.wall_ms > 0 for v in views)
    store.close()
