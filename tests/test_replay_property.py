"""Property: for a deterministic @tool agent, a control replay from any checkpoint reproduces
the recording, and a fault replay runs the agent's tape up to the fault unchanged."""

from hypothesis import given, settings
from hypothesis import strategies as st

from oloproof import Case, Stateful, current_case, tool
from oloproof.events import CaseStarted, ReplayStarted, decode_many, encode
from oloproof.recorder.case import CaseRecorder
from oloproof.replay.engine import run_replay
from oloproof.replay.fidelity import compare
from oloproof.replay.plan import Plan, change_for
from oloproof.system import _CURRENT, SystemFactory
from oloproof.views import fold_case, fold_replay


class Counter(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def add(self, key, amount):
        self.state[key] = self.state.get(key, 0) + amount
        return {"total": self.state[key]}

    @tool
    def read(self, key):
        return {"value": self.state.get(key, 0)}

    def __call__(self, case):
        for name, key, amount in case.input["plan"]:
            if name == "add":
                result = self.add(key, amount)
            else:
                result = self.read(key)
            if isinstance(result, dict) and "error" in result:
                current_case().finish("failure")
                return {"failed_at": key}
        current_case().finish("success")
        return {"state": dict(self.state)}


def events(recorded):
    from oloproof.events import decode

    return [decode(p) for p in recorded[0]]


plans = st.lists(st.tuples(st.sampled_from(["add", "read"]), st.sampled_from(["a", "b", "c"]),
                           st.integers(-5, 5)), min_size=1, max_size=8)


def record(desk, plan):
    case = Case("c", {"plan": [list(p) for p in plan]}, {"a": 1})
    rec = CaseRecorder(case, snapshot=desk.snapshot, auto_checkpoints=True)
    token = _CURRENT.set(rec)
    try:
        desk.reset({"a": 1})
        output = desk(case)
    finally:
        _CURRENT.reset(token)
    from oloproof.events import CaseFinished, EnvironmentStateRecorded

    events = [CaseStarted("r", "c", 0, "f", case.input, {"a": 1}, {}, {}), *rec.trajectory_events(),
              EnvironmentStateRecorded(desk.snapshot()), CaseFinished(output)]
    return fold_case(decode_many([encode(e) for e in events]))


@settings(max_examples=60, deadline=None)
@given(plan=plans, which=st.integers(0, 7), fault=st.sampled_from(["error", "timeout", "malformed"]))
def test_control_replay_reproduces_any_checkpoint(plan, which, fault):
    desk = Counter()
    system = SystemFactory("counter", "1", ("agent_trajectory/v1", "environment_state/v1"), desk, "desk").make_slot()
    view = record(desk, plan)
    checkpoints = view.trajectory.checkpoints
    assert len(checkpoints) == len(plan)  # one before every decorated call
    cp = checkpoints[which % len(checkpoints)]
    p = Plan(cp, cp.step_index)
    started = ReplayStarted("k", "control", "c", "r/c", "f", "counter", "1", cp.step_index)
    control = fold_replay(decode_many([encode(e) for e in [started, *events(run_replay(system, view, p, None))]]), "x")
    assert compare(view, control, cp.step_index).faithful
    tool_name = view.trajectory.steps[cp.step_index - 1].tool_name
    faulted = fold_replay(decode_many([encode(e) for e in
                                       [started,
                                        *events(run_replay(system, view, p, change_for(p, tool_name, fault)))]]),
                          "x")
    assert faulted.injected and not faulted.diverged
    # the tape before the fault is replayed step for step
    before = [s for s in view.trajectory.steps if s.index < cp.step_index]
    assert [encode(s) for s in faulted.trajectory.steps[: len(before)]] == [encode(s) for s in before]
