import subprocess
import sys

import oloproof


def test_all_is_sorted_and_importable():
    assert list(oloproof.__all__) == sorted(oloproof.__all__)
    for name in oloproof.__all__:
        assert getattr(oloproof, name) is not None
    for name in ("system", "tool", "current_case", "Stateful", "Replayable", "AgentStep",
                 "AgentTrajectory", "AgentConstraintCheck", "AgentCheckpoint", "Case"):
        assert name in oloproof.__all__


def test_import_is_light():
    code = ("import sys, oloproof; heavy = [m for m in ('scipy', 'rich', 'pydantic', 'sqlite_utils', "
            "'click', 'numpy', 'yaml') if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_pinned_signatures():
    from oloproof import (
        AgentCheckpoint,
        AgentConstraintCheck,
        AgentStep,
        AgentTrajectory,
    )

    s = AgentStep(1, "tool_call", tool_name="t", arguments={"a": 1})
    assert (s.index, s.kind, s.tool_name, s.arguments, s.result, s.agent, s.to_agent) == \
        (1, "tool_call", "t", {"a": 1}, None, None, None)
    import pytest

    with pytest.raises(TypeError):
        AgentStep(1, "tool_call", "t")  # tool_name is keyword-only
    t = AgentTrajectory((s,), "success")
    assert (t.truncated, t.step_limit, t.constraints, t.checkpoints) == (False, None, (), ())
    c = AgentConstraintCheck("no_deletion", True, 1)
    assert (c.name, c.passed, c.step_index) == ("no_deletion", True, 1)
    cp = AgentCheckpoint(1, {"x": 1}, id="before-refund")
    assert (cp.step_index, cp.state, cp.id) == (1, {"x": 1}, "before-refund")
    with pytest.raises(TypeError):
        AgentCheckpoint(1, {}, "id")


def test_stateful_and_replayable_work_as_protocols():
    from oloproof import Replayable, Stateful

    class Sandbox:
        def reset(self, state): ...
        def snapshot(self): ...

    class Replayer:
        def replay(self, trajectory, *, checkpoint, change): ...

    assert isinstance(Sandbox(), Stateful)
    assert not isinstance(object(), Stateful)
    assert isinstance(Replayer(), Replayable)
    assert not isinstance(Sandbox(), Replayable)
