import pytest

from oloproof import AgentCheckpoint, AgentConstraintCheck, AgentStep, AgentTrajectory
from oloproof.errors import RecordError
from oloproof.records import validate_trajectory


def call(i, name="lookup_order", **kw):
    return AgentStep(i, "tool_call", tool_name=name, arguments={"order_id": "o1"}, **kw)


def result(i, name="lookup_order", **kw):
    return AgentStep(i, "tool_result", tool_name=name, result={"ok": True}, **kw)


def check(traj, match):
    with pytest.raises(RecordError, match=match) as e:
        validate_trajectory(traj, "case_9")
    assert "case 'case_9'" in str(e.value)


def test_valid_trajectory_passes():
    validate_trajectory(
        AgentTrajectory((call(1), result(2)), "success",
                        constraints=(AgentConstraintCheck("no_deletion", True, 2),),
                        checkpoints=(AgentCheckpoint(1, {}), AgentCheckpoint(3, {}))),
        "c",
    )


def test_non_contiguous_indexes():
    check(AgentTrajectory((call(1), result(3)), "success"), r"steps\[1\]\.index.*expected 2, got 3")


def test_index_must_start_at_one():
    check(AgentTrajectory((call(0),), "success"), r"steps\[0\]\.index")


def test_unknown_kind():
    check(AgentTrajectory((AgentStep(1, "thought"),), "success"), r"steps\[0\]\.kind.*'thought'")


def test_tool_result_without_call():
    check(AgentTrajectory((result(1),), "success"), "no matching tool_call")
    check(AgentTrajectory((call(1, "a"), result(2, "b")), "success"), "no matching tool_call")


def test_tool_call_needs_name():
    check(AgentTrajectory((AgentStep(1, "tool_call"),), "success"), "needs a tool_name")


def test_some_steps_name_an_agent():
    check(AgentTrajectory((call(1, agent="triage"), result(2)), "success"),
          "some steps name an agent.*first unnamed: step 2")


def test_handoff_needs_to_agent():
    check(AgentTrajectory((AgentStep(1, "handoff", agent="triage"),), "success"), "no to_agent")


def test_constraint_pointing_nowhere():
    check(AgentTrajectory((call(1), result(2)), "success",
                          constraints=(AgentConstraintCheck("no_deletion", True, 3),)),
          r"constraints\[0\]\.step_index.*step 3")


def test_checkpoint_outside():
    check(AgentTrajectory((call(1), result(2)), "success", checkpoints=(AgentCheckpoint(4, {}),)),
          r"checkpoints\[0\]")


def test_terminal_status():
    check(AgentTrajectory((), "done"), "terminal_status")
