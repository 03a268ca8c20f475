import msgspec
import pytest

from oloproof import (
    AgentConstraintCheck,
    AgentStep,
    AgentTrajectory,
    Case,
    current_case,
    tool,
)
from oloproof.errors import RecordError
from oloproof.events import encode
from oloproof.recorder.case import CaseRecorder
from oloproof.system import _CURRENT


def in_case(fn, case_id="c1"):
    rec = CaseRecorder(Case(case_id, {}))
    token = _CURRENT.set(rec)
    try:
        fn()
    finally:
        _CURRENT.reset(token)
    return rec


@tool
def lookup_order(order_id, verbose=False):
    return {"order_id": order_id, "status": "delivered"}


@tool(name="refund")
def issue_refund(order_id):
    raise RuntimeError("payment service down")


def payloads(rec):
    return [encode(e) for e in rec.trajectory_events()]


def test_tool_and_hand_built_give_identical_events():
    def with_tools():
        lookup_order("ord-1")
        lookup_order(order_id="ord-2", verbose=True)
        current_case().constraint("no_deletion", True)
        current_case().finish("success")

    def by_hand():
        steps = (
            AgentStep(1, "tool_call", tool_name="lookup_order", arguments={"order_id": "ord-1"}),
            AgentStep(2, "tool_result", tool_name="lookup_order",
                      result={"order_id": "ord-1", "status": "delivered"}),
            AgentStep(3, "tool_call", tool_name="lookup_order",
                      arguments={"verbose": True, "order_id": "ord-2"}),
            AgentStep(4, "tool_result", tool_name="lookup_order",
                      result={"status": "delivered", "order_id": "ord-2"}),
        )
        current_case().agent_trajectory(AgentTrajectory(
            steps, "success", constraints=(AgentConstraintCheck("no_deletion", True, 4),)))

    a, b = payloads(in_case(with_tools)), payloads(in_case(by_hand))
    assert a == b
    assert len(a) == 6  # four steps, one constraint, the trajectory end


def test_outside_a_case_a_tool_is_the_bare_function():
    assert lookup_order("x") == {"order_id": "x", "status": "delivered"}
    assert lookup_order.__name__ == "lookup_order"
    with pytest.raises(RuntimeError):
        issue_refund("x")


def test_exception_is_recorded_as_error_result_and_reraised():
    def body():
        with pytest.raises(RuntimeError):
            issue_refund("ord-1")

    events = in_case(body).trajectory_events()
    assert events[0].tool_name == "refund" and events[0].kind == "tool_call"
    assert msgspec.json.decode(encode(events[1]))["result"] == {
        "error": {"type": "RuntimeError", "message": "payment service down"}}


def test_methods_are_recorded_without_self():
    class Desk:
        @tool
        def escalate(self, order_id, reason="policy"):
            return {"ticket": 7}

    def body():
        Desk().escalate("ord-3")

    ev = in_case(body).trajectory_events()[0]
    assert msgspec.json.decode(encode(ev))["arguments"] == {"order_id": "ord-3"}


def test_a_later_mutation_does_not_rewrite_the_record():
    store = {"status": "delivered"}

    @tool
    def get():
        return store

    def body():
        got = get()
        got["status"] = "refunded"

    ev = in_case(body).trajectory_events()[1]
    assert msgspec.json.decode(encode(ev))["result"] == {"status": "delivered"}


def test_one_way_of_recording_per_case():
    def body():
        lookup_order("a")
        current_case().agent_trajectory(AgentTrajectory((), "success"))

    with pytest.raises(RecordError, match="one way of recording"):
        in_case(body)


def test_current_case_outside_a_case():
    with pytest.raises(RecordError, match="outside a case"):
        current_case()


def test_helpers_add_steps_and_checkpoints():
    def body():
        rec = current_case()
        rec.message("hello")
        rec.checkpoint(state={"orders": {}})
        lookup_order("o")
        rec.final("done")
        rec.finish("failure", truncated=True, step_limit=4)

    events = in_case(body).trajectory_events()
    kinds = [getattr(e, "kind", type(e).__name__) for e in events]
    assert kinds == ["message", "tool_call", "tool_result", "final", "CheckpointRecorded",
                     "TrajectoryRecorded"]
    assert events[4].step_index == 2
    assert (events[5].terminal_status, events[5].truncated, events[5].step_limit) == ("failure", True, 4)


def test_constraint_needs_a_step():
    with pytest.raises(RecordError, match="does not exist"):
        in_case(lambda: current_case().constraint("x", True))


def test_recorder_overhead_smoke():
    # Not a timing assertion (see bench/): only that many calls record contiguous steps.
    def body():
        for i in range(1000):
            lookup_order(f"o{i}")

    events = in_case(body).trajectory_events()
    assert [e.index for e in events[:-1]] == list(range(1, 2001))


@pytest.mark.parametrize("kwargs, field", [
    ({"input_tokens": -1}, "input_tokens"), ({"output_tokens": True}, "output_tokens"),
    ({"input_tokens": 1.0}, "input_tokens"), ({"cost": float("nan")}, "cost"), ({"cost": float("inf")}, "cost"),
    ({"cost": -0.5}, "cost"), ({"cost": True}, "cost"), ({"latency_ms": float("nan")}, "latency_ms"),
    ({"model": 3}, "model"),
])
def test_usage_refuses_what_is_not_a_count_or_a_finite_number(kwargs, field):
    rec = CaseRecorder(Case("c1", {}))
    with pytest.raises(RecordError, match=rf"case 'c1': usage\({field}=\.\.\.\)"):
        rec.usage(**kwargs)
    assert rec.usage_events() == []


def test_usage_records_each_report_as_given():
    rec = CaseRecorder(Case("c1", {}))
    rec.usage(input_tokens=12, output_tokens=3, model="m")  # the integrations' report
    rec.usage(input_tokens=1, output_tokens=2, cost=0.25, latency_ms=40, model=None)
    rec.usage(cost=1)  # an int cost is a number
    got = [(u.input_tokens, u.output_tokens, u.cost, u.latency_ms, u.model) for u in rec.usage_events()]
    assert got == [(12, 3, 0.0, None, "m"), (1, 2, 0.25, 40.0, None), (0, 0, 1.0, None, None)]
    assert all(type(u.cost) is float for u in rec.usage_events())
