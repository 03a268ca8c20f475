"""Attribution that finds the cause (SPEC §14; seed: the first unacceptable step that *explains*
the later failures, not the last error nor the loudest symptom): the dependency trace, the
symptoms it locates, the primary finding chosen by what it explains, rival causes kept with
their evidence, and the "guessing when a clarification is mandatory" rule."""

from __future__ import annotations

from typing import Any

import pytest

from oloproof.evaluate.attribution import (
    AttributionSettings,
    Symptom,
    acted_without_clarification,
    attribute,
    irreversible_without_verification,
    symptoms_of,
)
from oloproof.evaluate.state import PathCheck
from oloproof.evaluate.trace import Trace, changed_paths, describe_chain
from oloproof.events import (
    CaseFinished,
    CaseStarted,
    CheckpointRecorded,
    EnvironmentStateRecorded,
    StepRecorded,
    TrajectoryRecorded,
)
from oloproof.views import CaseView, fold_case

SETTINGS = AttributionSettings()


def decide(args: Any, out: Any) -> tuple:
    return ("decision", "model", args, out)


def call(tool: str, args: Any = None) -> tuple:
    return ("tool_call", tool, args or {}, None)


def result(tool: str, value: Any) -> tuple:
    return ("tool_result", tool, None, value)


def final(text: str) -> tuple:
    return ("final", None, None, text)


def say(text: str) -> tuple:
    return ("message", None, {"text": text}, None)


def steps_of(spec: list[tuple]) -> list[StepRecorded]:
    return [StepRecorded(i, kind, tool, args, res) for i, (kind, tool, args, res) in enumerate(spec, start=1)]


def case(spec: list[tuple], states: dict[int, Any] | None = None, final_state: Any = None,
         initial: Any = None, metadata: dict | None = None) -> CaseView:
    events: list[Any] = [CaseStarted("r1", "c1", 0, "f", {}, initial, {}, metadata or {})]
    events += steps_of(spec)
    events += [CheckpointRecorded(i, state) for i, state in sorted((states or {}).items())]
    events.append(TrajectoryRecorded("success"))
    if final_state is not None:
        events.append(EnvironmentStateRecorded(final_state))  # as the log hands it back: decoded
    events.append(CaseFinished({}))
    return fold_case(events)


# ---- a shipping agent: its decisions record what they read ---------------------------------------

FILES = {"app": "bug", "tests": "the tests"}  # src/app.py and tests/test_x.py (a path's dots are its own)


def ship(*, edit_tests: bool = False, history: bool = False) -> tuple[list[tuple], dict[int, Any], Any]:
    """Fix src/app.py, deploy untested, report done; optionally first edit the tests. With
    ``history`` every decision carries everything returned before it (a chat agent's context);
    without, each carries only the last result."""
    spec: list[tuple] = []
    states: dict[int, Any] = {}
    files = dict(FILES)
    seen: list[Any] = []

    def context(last: Any) -> Any:
        return {"goal": "ship the fix", "history": list(seen)} if history else {"goal": "ship the fix", "last": last}

    last: Any = None
    if edit_tests:
        spec.append(decide(context(last), {"tool": "edit_file", "arguments": {"path": "tests/test_x.py"}}))
        states[len(spec) + 1] = {"files": dict(files), "deploys": []}
        spec.append(call("edit_file", {"path": "tests/test_x.py", "change": "skip the flaky test"}))
        files["tests"] = "skip the flaky test"
        spec.append(result("edit_file", {"ok": True, "path": "tests/test_x.py"}))
        seen.append(spec[-1][3])
        last = None  # the next decision does not read it (without history)
    spec.append(decide(context(last), {"tool": "edit_file", "arguments": {"path": "src/app.py"}}))
    states[len(spec) + 1] = {"files": dict(files), "deploys": []}
    spec.append(call("edit_file", {"path": "src/app.py", "change": "fixed"}))
    files["app"] = "fixed"
    spec.append(result("edit_file", {"ok": True, "path": "src/app.py"}))
    seen.append(spec[-1][3])
    last = spec[-1][3]
    spec.append(decide(context(last), {"tool": "deploy", "arguments": {"env": "production"}}))
    states[len(spec) + 1] = {"files": dict(files), "deploys": []}
    spec.append(call("deploy", {"env": "production"}))
    spec.append(result("deploy", {"deployed": "production", "build": "build-20261"}))
    seen.append(spec[-1][3])
    last = spec[-1][3]
    spec.append(decide(context(last), {"final": "Shipped, all done."}))
    spec.append(final("Shipped, all done."))
    end_state = {"files": files, "deploys": [{"env": "production", "tested": False}]}
    return spec, states, end_state


DEPLOY_SYMPTOM = [Symptom("world_correct", path="deploys[0].tested", note="expected true, recorded false")]


def test_the_trace_links_calls_decisions_reads_and_writes():
    spec, states, end = ship()
    trace = Trace(steps_of(spec), [(1, {"files": FILES, "deploys": []}), *states.items(), (len(spec) + 1, end)])
    links = {(link.source, link.target, link.how) for link in trace.links()}
    assert {(5, 6, "returned"), (4, 5, "decided"), (7, 8, "decided")} <= links
    assert (6, 7, "read") in links  # decision 7's request holds result 6
    assert (3, 4, "read") in links
    assert not trace.assumed_control and trace.state_known
    assert trace.writers_of(("deploys", "0", "tested")) == ((5,), "written")
    assert trace.writers_of(("files", "app")) == ((2,), "written")
    assert trace.writers_of(("files", "readme")) == ((), "never")
    reach = trace.reach(5)
    assert 8 in reach and reach.observed(8)
    assert describe_chain(reach.chain(8)) == "5 → 6 (returned) → 7 (read) → 8 (decided)"
    assert 2 not in trace.reach(5) and 5 not in trace.reach(6)  # links only go forward


def test_a_parent_write_did_not_write_a_place_its_value_never_held():
    # refunded = ["o0"] written at step 2: refunded[1] was never there (an omission, not a write)
    spec = [call("refund", {"order": "o0"}), result("refund", {"ok": True})]
    trace = Trace(steps_of(spec), [(1, {}), (3, {"refunded": ["o0"]})])
    assert trace.writers_of(("refunded", "1")) == ((), "never")
    assert trace.writers_of(("refunded", "0")) == ((1,), "written")
    assert trace.writers_of(("refunded",)) == ((1,), "written")
    # a place removed was written
    trace = Trace(steps_of(spec), [(1, {"refunded": ["o0", "o1"]}), (3, {"refunded": ["o0"]})])
    assert trace.writers_of(("refunded", "1")) == ((1,), "written")


def test_without_states_the_writes_are_unknown_and_without_decisions_control_is_assumed():
    trace = Trace(steps_of([call("a"), result("a", {"x": "long enough"}), final("done")]))
    assert trace.writers_of(("x",)) == ((), "unknown") and not trace.state_known
    assert trace.assumed_control
    assert trace.reach(1).chain(3)[-1].how == "assumed" and not trace.reach(1).observed(3)


def test_a_result_read_as_text_is_a_read():
    spec = [call("fetch"), result("fetch", {"body": "the invoice total is 1,050.00 EUR"}),
            decide({"messages": [{"role": "tool", "content": 'fetch said {"body": "the invoice total is 1,050.00 '
                                                             'EUR"}'}]}, {"final": "1,050"}),
            final("1,050")]
    trace = Trace(steps_of(spec))
    assert (2, 3, "read") in {(k.source, k.target, k.how) for k in trace.links()}


def test_changed_paths():
    assert changed_paths({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1], "c": {"d": 2}}) == [
        changed_paths({"b": [1, 2]}, {"b": [1]})[0], changed_paths({}, {"c": {"d": 2}})[0]]
    assert changed_paths({"a": 1}, {"a": 1.0})[0].path == ("a",)  # 1 and 1.0 differ in kind
    assert changed_paths({"a": list(range(500))}, {"a": list(range(1, 501))}) is None  # too many: all changed


# ---- what explains what ----------------------------------------------------------------------

def test_the_symptom_is_last_and_the_cause_earlier():
    """The untested deploy (step 8) wrote the wrong state; the "done" at the end (step 10) is
    the last error and the loudest symptom, and only a consequence."""
    spec, states, end = ship()
    c = case(spec, states, end, initial={"files": FILES, "deploys": []})
    a = attribute(c, ["world_correct"], SETTINGS, symptoms=DEPLOY_SYMPTOM)
    assert (a.first_unacceptable_step, a.category, a.primary["rule"]) == (
        5, "irreversible_without_verification", "irreversible_without_verification")
    assert [(s["rule"], s["step"], s["role"], s["traced"]) for s in a.secondary] == [
        ("declared_complete_without_verification", 8, "consequence", "observed")]
    assert a.secondary[0]["via"] == "5 → 6 (returned) → 7 (read) → 8 (decided)"
    assert (a.confidence, a.needs_review) == ("high", False)
    assert a.primary["explains"] == ["world_correct at deploys[0].tested"]
    [symptom] = a.symptoms
    assert symptom["at"] == [5] and symptom["explained_by"] == [5]  # the "done" cannot explain a write before it
    assert any(e["step"] == 5 and "deploys[0].tested was last changed at step 5" in e["text"] for e in a.evidence)
    # without the located path, the failure is the outcome at the end: still step 5, the earliest that explains it
    a = attribute(c, ["world_correct"], SETTINGS)
    assert a.first_unacceptable_step == 5 and a.confidence == "high"


def test_two_candidate_causes_compete():
    """A test edit at step 2 the later decisions never read, and the untested deploy: the
    deploy explains the failure, the edit is kept as a rival cause with its evidence."""
    spec, states, end = ship(edit_tests=True)
    c = case(spec, states, end, initial={"files": FILES, "deploys": []})
    a = attribute(c, ["world_correct"], SETTINGS, symptoms=DEPLOY_SYMPTOM)
    assert [s.index for s in c.trajectory.steps if s.kind == "tool_call"] == [2, 5, 8]
    assert (a.first_unacceptable_step, a.category) == (8, "irreversible_without_verification")
    roles = {(s["rule"], s["step"]): s["role"] for s in a.secondary}
    assert roles == {("acceptance_weakened", 2): "independent",
                     ("declared_complete_without_verification", 11): "consequence"}
    assert (a.confidence, a.needs_review) == ("medium", True)
    assert "rival cause" in a.confidence_basis
    [rival] = [x for x in a.alternatives if x.get("step") == 2]
    assert rival["rule"] == "acceptance_weakened" and "not traced to step 8" in rival["hypothesis"]
    assert "tests/test_x.py" in rival["evidence"][0]["text"]
    # a second failure only the edit explains: neither explains both; they tie, the earlier is primary
    tests_changed = Symptom("tests_untouched", path="files.tests")
    a = attribute(c, ["world_correct", "tests_untouched"], SETTINGS, symptoms=[*DEPLOY_SYMPTOM, tests_changed])
    assert a.first_unacceptable_step == 2 and a.primary["explains"] == ["tests_untouched at files.tests"]
    deploy = next(s for s in a.secondary if s["step"] == 8)
    assert deploy["role"] == "independent" and deploy["explains"] == ["world_correct at deploys[0].tested"]
    assert {s["criterion"]: s["explained_by"] for s in a.symptoms} == {"world_correct": [8],
                                                                       "tests_untouched": [2]}
    assert a.confidence == "medium"


def test_when_the_decisions_read_everything_the_earliest_explains_the_rest():
    """A chat agent's decisions carry the whole history: the test edit's result reaches every
    later decision, so it explains the deploy and the report — through recorded reads."""
    spec, states, end = ship(edit_tests=True, history=True)
    c = case(spec, states, end, initial={"files": FILES, "deploys": []})
    a = attribute(c, ["world_correct"], SETTINGS, symptoms=DEPLOY_SYMPTOM)
    assert (a.first_unacceptable_step, a.category) == (2, "weakened_acceptance")
    assert [(s["step"], s["role"], s["traced"]) for s in a.secondary] == [
        (8, "consequence", "observed"), (11, "consequence", "observed")]
    assert (a.confidence, a.needs_review) == ("high", False)


def test_work_left_undone_is_explained_by_the_step_that_stopped():
    spec = [decide({"goal": "fix A and B"}, {"tool": "edit_file", "arguments": {"path": "src/a.py"}}),
            call("edit_file", {"path": "src/a.py"}), result("edit_file", {"ok": True, "path": "src/a.py"}),
            decide({"last": {"ok": True, "path": "src/a.py"}}, {"final": "Fixed, done."}), final("Fixed, done.")]
    c = case(spec, {2: {"fixed": []}}, {"fixed": ["A"]}, initial={"fixed": []})
    a = attribute(c, ["world_correct"], SETTINGS, symptoms=[Symptom("world_correct", path="fixed[1]")])
    assert (a.first_unacceptable_step, a.category, a.confidence) == (5, "stopping_too_early", "high")
    assert a.symptoms[0]["how"] == "fixed[1] never changed: the work ended at step 5"


def test_a_failure_no_finding_explains_lowers_the_confidence():
    spec, states, end = ship()
    c = case(spec, states, end, initial={"files": FILES, "deploys": []})
    # files.app was written at step 2, before any finding: nothing explains it
    a = attribute(c, ["world_correct"], SETTINGS,
                  symptoms=[*DEPLOY_SYMPTOM, Symptom("world_correct", path="files.app")])
    assert a.first_unacceptable_step == 5 and (a.confidence, a.needs_review) == ("medium", True)
    assert any("files.app" in x["hypothesis"] and x["layer"] == "unknown" for x in a.alternatives)


def test_symptoms_of_path_checks():
    checks = [PathCheck("world_correct", "deploys[0].tested", "fail", expected=True, recorded=False),
              PathCheck("world_correct", "defects.A.fixed", "pass", expected=True, recorded=True),
              PathCheck("calls", "step 4", "fail", note="unexpected call"),
              PathCheck("calls", "tool_calls[0]", "fail"),
              PathCheck("other", "x", "fail")]
    got = symptoms_of(["world_correct", "calls", "report"], checks, {"world_correct"})
    assert got == [Symptom("world_correct", path="deploys[0].tested", note="expected true, recorded false"),
                   Symptom("calls", step=4, note="unexpected call"), Symptom("report")]


def test_a_long_trace_stays_linear():
    import time

    spec: list[tuple] = []
    for i in range(5_000):
        spec += [decide({"last": i}, {"tool": "edit_file", "arguments": {"path": f"src/m{i}.py"}}),
                 call("edit_file", {"path": f"src/m{i}.py"}), result("edit_file", {"ok": True, "n": 1000 + i})]
    spec += [call("deploy", {"env": "production"}), result("deploy", {"deployed": "production-7"}),
             final("Deployed, all done.")]
    c = case(spec)
    started = time.perf_counter()
    a = attribute(c, ["x"], SETTINGS)
    assert time.perf_counter() - started < 10
    assert a.first_unacceptable_step == 15_001 and a.category == "irreversible_without_verification"


# ---- the irreversible rule ------------------------------------------------------------------------

def test_irreversible_without_verification():
    fired = irreversible_without_verification(
        steps_of([call("edit_file"), result("edit_file", {"ok": True}), call("deploy", {"env": "prod"})]), SETTINGS)
    assert [(f.step, f.category) for f in fired] == [(3, "irreversible_without_verification")]
    assert fired[0].evidence[0].step == 1
    # verified in between, nothing changed before, or the check failed
    assert irreversible_without_verification(steps_of([call("edit_file"), result("edit_file", {"ok": True}),
                                                       call("run_tests"), result("run_tests", {"failed": 0}),
                                                       call("deploy")]), SETTINGS) == []
    assert irreversible_without_verification(steps_of([call("read_file"), call("deploy")]), SETTINGS) == []
    failed = irreversible_without_verification(steps_of([call("edit_file"), call("run_tests"),
                                                         result("run_tests", {"error": "boom"}), call("deploy")]),
                                               SETTINGS)
    assert [f.step for f in failed] == [4] and "verified nothing" in failed[0].evidence[1].text
    custom = AttributionSettings(irreversible_tools=["push_live"], change_tools=["save"])
    assert [f.step for f in irreversible_without_verification(steps_of([call("save"), call("deploy"),
                                                                        call("push_live")]), custom)] == [3]


# ---- guessing when a clarification is mandatory ---------------------------------------------------

AMBIGUOUS = {"clarification_required": "two customers are named Ana Lima"}


@pytest.mark.parametrize("spec, step", [
    ([call("search_customers"), result("search_customers", {"hits": 2}), call("refund_order", {"order": "o1"})], 3),
    ([call("read_rules"), final("Refunded Ana Lima's order.")], 2),
    ([say("All done, refunded.")], 1),
    ([call("deploy", {"env": "production"})], 1),
])
def test_acting_before_asking_is_a_guess(spec, step):
    found = acted_without_clarification(steps_of(spec), SETTINGS, AMBIGUOUS["clarification_required"])
    assert [(f.step, f.category, f.layer) for f in found] == [(step, "guessed_instead_of_clarifying", "model")]
    assert "two customers are named Ana Lima" in found[0].evidence[0].text
    assert [x.layer for x in found[0].alternatives] == ["harness", "task_spec"]


@pytest.mark.parametrize("spec, required", [
    ([say("Which Ana Lima do you mean?"), call("refund_order")], True),           # asked first
    ([call("ask_user", {"question": "which one"}), call("refund_order")], True),  # a clarification tool
    ([call("search_customers"), call("read_rules")], True),                       # reading commits to nothing
    ([call("refund_order")], None), ([call("refund_order")], False), ([call("refund_order")], "  "),  # not required
])
def test_no_guess(spec, required):
    assert acted_without_clarification(steps_of(spec), SETTINGS, required) == []


def test_the_clarification_rule_reads_the_case_metadata():
    spec = [call("search_customers"), result("search_customers", {"hits": ["Ana Lima (c-17)", "Ana Lima (c-42)"]}),
            call("refund_order", {"order": "o-17"}), result("refund_order", {"ok": True}), final("Refunded.")]
    a = attribute(case(spec, metadata=AMBIGUOUS), ["refund_right_customer"], SETTINGS)
    assert (a.first_unacceptable_step, a.category, a.primary["rule"]) == (
        3, "guessed_instead_of_clarifying", "acted_without_clarification")
    assert attribute(case(spec), ["refund_right_customer"], SETTINGS).category == "stopping_too_early"
    custom = AttributionSettings(clarification_key="ambiguous")
    assert attribute(case(spec, metadata={"ambiguous": True}), ["x"], custom).first_unacceptable_step == 3


def test_the_proposed_actions_after_a_guess():
    from oloproof.app.prefix import default_actions

    spec = [call("search_customers"), result("search_customers", {"hits": 2}), call("ask_user"),
            call("refund_order", {"order": "o-17"}), final("Refunded.")]
    c = case(spec, metadata=AMBIGUOUS)
    tools = ["ask_user", "refund_order", "search_customers"]
    acceptable, forbidden = default_actions("guessed_instead_of_clarifying", c, tools, SETTINGS, 3)
    assert {"tool": "ask_user"} in [{"tool": m.get("tool")} for m in acceptable if m.get("tool")]
    assert any(m.get("message") == r"\?\s*$" for m in acceptable)
    assert {"tool": "search_customers"} in [{"tool": m.get("tool")} for m in acceptable if m.get("tool")]
    guesses = [m for m in forbidden if m.get("critical")]
    assert {"final": True, "critical": True}.items() <= guesses[0].items()
    assert any(m.get("tool") == "refund_order" and "guess" in m["note"] for m in guesses)
    assert not any(m.get("tool") == "refund_order" for m in acceptable)
