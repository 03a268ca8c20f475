"""The OpenAI Agents SDK integration (issue 25, SPEC §18.4): ``instrument(agent)`` routes a real
SDK agent's function tools and model calls through the recorder — on the SDK's own offline
``agents.testing.ScriptedModel`` here, and on the openai-agents-team example's offline policy
model through the CLI: agent names and handoffs from the SDK, the final output and status from
the outermost run, model responses rebuilt from the tape, every fault kind on a tool."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    AgentHooks,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
)
from agents.exceptions import MaxTurnsExceeded
from agents.testing import ScriptedModel, assistant_message, function_call

from oloproof.events import StepRecorded, TrajectoryRecorded
from oloproof.integrations.openai_agents import RESPONSE_CODEC, instrument
from oloproof.recorder.case import CaseRecorder
from oloproof.records import Case
from oloproof.replay.tape import TapeRecorder
from oloproof.system import _CURRENT
from tests.conftest import copy_example, copy_recorded, edit, run_in

QUIET = RunConfig(tracing_disabled=True)  # nothing is exported to OpenAI


# ---- a small team on the SDK's ScriptedModel --------------------------------------------------

def refund(order_id: str) -> dict:
    """Refund the order."""
    return {"status": "refunded", "order_id": order_id}  # not in sorted order, on purpose


def team(triage_steps: list | None = None, billing_steps: list | None = None,
         tool: Any = refund) -> tuple[Agent, Agent, ScriptedModel, ScriptedModel]:
    triage_model = ScriptedModel(triage_steps if triage_steps is not None else
                                 [[function_call("transfer_to_billing", {}, call_id="h1")]])
    billing_model = ScriptedModel(billing_steps if billing_steps is not None else
                                  [[function_call(tool.__name__, {"order_id": "o1"}, call_id="c1")],
                                   [assistant_message("Refunded o1.")]])
    billing = Agent(name="billing", model=billing_model, instructions="Refund.", tools=[function_tool(tool)])
    triage = Agent(name="triage", model=triage_model, instructions="Route.", handoffs=[billing])
    return triage, billing, triage_model, billing_model


def in_case(run: Any, rec: CaseRecorder | None = None) -> tuple[Any, CaseRecorder]:
    """``run()`` as the system of one case; what it returned (or raised) and the recorder."""
    rec = rec or CaseRecorder(Case("c1", {}))
    token = _CURRENT.set(rec)
    try:
        out = run()
    except Exception as e:  # noqa: BLE001 - the test looks at it
        out = e
    finally:
        _CURRENT.reset(token)
    return out, rec


def steps_of(rec: CaseRecorder) -> tuple[list[StepRecorded], TrajectoryRecorded]:
    """The recorded steps, their values decoded as the log gives them back, and the end."""
    events = rec.trajectory_events()
    end = events[-1]
    assert isinstance(end, TrajectoryRecorded)
    steps = [msgspec.structs.replace(e, arguments=plain(e.arguments), result=plain(e.result))
             for e in events if isinstance(e, StepRecorded)]
    return steps, end


def plain(value: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value))


def rows(steps: list[StepRecorded]) -> list[tuple]:
    return [(s.kind, s.tool_name, s.agent, s.to_agent) for s in steps]


RECORDED = [("decision", "ScriptedModel", "triage", None), ("handoff", None, "triage", "billing"),
            ("decision", "ScriptedModel", "billing", None), ("tool_call", "refund", "billing", None),
            ("tool_result", "refund", "billing", None), ("decision", "ScriptedModel", "billing", None),
            ("final", None, "billing", None)]


def test_a_run_records_agents_a_handoff_step_the_final_output_and_success():
    triage, _, _, _ = team()
    instrument(triage)
    result, rec = in_case(lambda: Runner.run_sync(triage, "refund o1", run_config=QUIET))
    assert result.final_output == "Refunded o1."
    steps, end = steps_of(rec)
    # the handoff is a handoff step, not a tool call named transfer_to_billing
    assert rows(steps) == RECORDED
    assert end.terminal_status == "success" and not end.truncated
    first = steps[0].arguments
    assert first["input"] == [{"content": "refund o1", "role": "user"}]
    assert first["system_instructions"] == "Route." and first["tools"] == []
    assert [h["tool_name"] for h in first["handoffs"]] == ["transfer_to_billing"]
    assert steps[0].result["output"][0]["name"] == "transfer_to_billing"
    assert steps[3].arguments == {"order_id": "o1"}
    assert steps[4].result == {"order_id": "o1", "status": "refunded"}
    assert steps[6].result == "Refunded o1."


def test_the_tape_answers_every_model_call_with_the_sdks_own_objects():
    triage, _, _, _ = team()
    instrument(triage)
    _, rec = in_case(lambda: Runner.run_sync(triage, "refund o1", run_config=QUIET))
    recorded, _ = steps_of(rec)
    # replayed with models that have nothing left to say: any live model call would raise
    again, _, empty_triage, empty_billing = team([], [])
    instrument(again)
    tape = TapeRecorder(Case("c1", {}), recorded, resume_at=len(recorded) + 1, change=None)
    result, _ = in_case(lambda: Runner.run_sync(again, "refund o1", run_config=QUIET), tape)
    assert not isinstance(result, Exception), result
    assert tape.diverged is None and result.final_output == "Refunded o1."
    assert empty_triage.calls == () and empty_billing.calls == ()
    replayed, end = steps_of(tape)
    assert rows(replayed) == RECORDED and end.terminal_status == "success"


def test_a_streamed_run_is_one_decision_per_model_call_and_replays_from_the_tape():
    async def stream(agent: Agent) -> Any:
        result = Runner.run_streamed(agent, "refund o1", run_config=QUIET)
        async for _ in result.stream_events():
            pass
        return result

    triage, _, _, _ = team()
    instrument(triage)
    result, rec = in_case(lambda: asyncio.run(stream(triage)))
    assert result.final_output == "Refunded o1."
    recorded, _ = steps_of(rec)
    assert rows(recorded) == RECORDED
    assert recorded[0].arguments["stream"] is True
    again, _, _, _ = team([], [])
    instrument(again)
    tape = TapeRecorder(Case("c1", {}), recorded, resume_at=len(recorded) + 1, change=None)
    result, _ = in_case(lambda: asyncio.run(stream(again)), tape)
    assert tape.diverged is None and result.final_output == "Refunded o1."


def test_outside_a_case_the_agent_runs_as_before():
    bare, _, bare_triage, bare_billing = team()
    routed, _, routed_triage, routed_billing = team()
    instrument(routed)
    assert Runner.run_sync(routed, "refund o1", run_config=QUIET).final_output == \
        Runner.run_sync(bare, "refund o1", run_config=QUIET).final_output == "Refunded o1."
    # the models saw the same requests: the tool's result in its own key order (in a case,
    # the SDK gets the recorded form: the same text live and replayed)
    assert [c.input for c in routed_billing.calls] == [c.input for c in bare_billing.calls]
    assert "{'status': 'refunded', 'order_id': 'o1'}" in json.dumps(routed_billing.calls[-1].input)
    assert [c.input for c in routed_triage.calls] == [c.input for c in bare_triage.calls]


def test_instrument_is_idempotent_and_reaches_the_agents_handed_off_to():
    triage, billing, triage_model, _ = team()
    assert instrument(triage) is triage
    instrument(triage)
    instrument(billing)  # reached by the handoff already
    assert type(triage.model).__name__ == "_RoutedModel" and triage.model._inner is triage_model
    _, rec = in_case(lambda: Runner.run_sync(triage, "refund o1", run_config=QUIET))
    steps, _ = steps_of(rec)
    assert rows(steps) == RECORDED  # each call once
    # the routed tools are declared on the agents: the tool-name check sees them
    assert set(triage.__oloproof_tools__) == {"refund", "ScriptedModel"}
    assert triage.__oloproof_tools__["refund"].__oloproof_tool__["schema"]["required"] == ["order_id"]


def test_the_users_hooks_still_run():
    seen: list[str] = []

    class Mine(AgentHooks):
        async def on_start(self, context: Any, agent: Any) -> None:
            seen.append(f"start {agent.name}")

        async def on_end(self, context: Any, agent: Any, output: Any) -> None:
            seen.append(f"end {output}")

    triage, billing, _, _ = team()
    billing.hooks = Mine()
    instrument(triage)
    _, rec = in_case(lambda: Runner.run_sync(triage, "refund o1", run_config=QUIET))
    assert seen == ["start billing", "end Refunded o1."]
    assert rows(steps_of(rec)[0]) == RECORDED


def test_a_tool_that_raises_is_recorded_as_its_error_and_the_model_is_told_as_the_sdk_tells_it():
    def flaky(order_id: str) -> dict:
        """Refund, badly."""
        raise ConnectionError(f"payments down for {order_id}")

    triage, _, _, billing_model = team(tool=flaky, billing_steps=[
        [function_call("flaky", {"order_id": "o1"}, call_id="c1")], [assistant_message("Sorry.")]])
    instrument(triage)
    _, rec = in_case(lambda: Runner.run_sync(triage, "refund o1", run_config=QUIET))
    steps, end = steps_of(rec)
    error = next(s for s in steps if s.kind == "tool_result")
    assert error.raised and error.result == {"error": {"type": "ConnectionError",
                                                              "message": "payments down for o1"}}
    told = billing_model.calls[-1].input[-1]
    assert told["output"] == "An error occurred while running the tool. Please try again."
    assert end.terminal_status == "success"


def test_max_turns_exceeded_ends_the_case_in_failure_at_its_step_limit():
    loop = [[function_call("refund", {"order_id": "o1"}, call_id=f"c{i}")] for i in range(5)]
    triage, _, _, _ = team(billing_steps=loop)
    instrument(triage)
    out, rec = in_case(lambda: Runner.run_sync(triage, "refund o1", max_turns=3, run_config=QUIET))
    assert isinstance(out, MaxTurnsExceeded)
    steps, end = steps_of(rec)
    assert end.terminal_status == "failure" and end.truncated
    assert not any(s.kind == "final" for s in steps)


def test_an_agent_used_as_a_tool_runs_inside_the_call_and_its_output_is_not_the_final():
    expert_model = ScriptedModel([[assistant_message("It is o1.")]])
    expert = Agent(name="expert", model=expert_model, instructions="Know orders.")
    boss_model = ScriptedModel([[function_call("ask_expert", {"input": "which order?"}, call_id="a1")],
                                [assistant_message("Done: o1.")]])
    boss = Agent(name="boss", model=boss_model, tools=[expert.as_tool("ask_expert", "Ask the expert.")])
    instrument(boss)
    result, rec = in_case(lambda: Runner.run_sync(boss, "go", run_config=QUIET))
    assert result.final_output == "Done: o1."
    steps, end = steps_of(rec)
    assert rows(steps) == [
        ("decision", "ScriptedModel", "boss", None), ("tool_call", "ask_expert", "boss", None),
        ("handoff", None, "boss", "expert"), ("decision", "ScriptedModel", "expert", None),
        ("handoff", None, "expert", "boss"), ("tool_result", "ask_expert", "boss", None),
        ("decision", "ScriptedModel", "boss", None), ("final", None, "boss", None)]
    assert steps[-1].result == "Done: o1." and end.terminal_status == "success"


def test_an_async_system_in_oloproofs_loop_records_the_same_steps():
    # the case's loop orders the steps of the tasks the run loop creates (hooks, tools)
    from oloproof.recorder.case import install_task_factory

    triage, _, _, _ = team()
    instrument(triage)
    loop = asyncio.new_event_loop()
    install_task_factory(loop)
    try:
        result, rec = in_case(lambda: loop.run_until_complete(Runner.run(triage, "refund o1", run_config=QUIET)))
    finally:
        loop.close()
    assert result.final_output == "Refunded o1."
    steps, end = steps_of(rec)
    assert rows(steps) == RECORDED and end.terminal_status == "success"


def test_the_target_of_a_custom_handoff_is_instrumented_when_it_is_handed_control():
    from agents import Handoff

    billing_model = ScriptedModel([[assistant_message("Billing here.")]])
    billing = Agent(name="billing", model=billing_model)

    async def to_billing(ctx: Any, arguments: str) -> Agent:
        return billing  # known only when invoked

    custom = Handoff(tool_name="ask_billing", tool_description="Billing.", input_json_schema={},
                     on_invoke_handoff=to_billing, agent_name="billing")
    triage = instrument(Agent(name="triage", model=ScriptedModel(
        [[function_call("ask_billing", {}, call_id="h1")]]), handoffs=[custom]))
    assert billing.hooks is None  # not reachable before the handoff
    result, rec = in_case(lambda: Runner.run_sync(triage, "hi", run_config=QUIET))
    assert result.final_output == "Billing here."
    assert rows(steps_of(rec)[0]) == [("decision", "ScriptedModel", "triage", None),
                                      ("handoff", None, "triage", "billing"),
                                      ("decision", "ScriptedModel", "billing", None), ("final", None, "billing", None)]


def test_the_codec_round_trips_a_response_with_tool_calls_and_text():
    response = ModelResponse(
        output=[function_call("refund", {"order_id": "o1"}, call_id="c1"), assistant_message("On it.")],
        usage=Usage(requests=1, input_tokens=12, output_tokens=5, total_tokens=17), response_id="resp-1")
    import msgspec

    raw = RESPONSE_CODEC.encode(response)  # JSON bytes, stored as they are
    data = msgspec.json.decode(raw)
    assert plain(data) == data
    rebuilt = RESPONSE_CODEC.decode(data)
    assert isinstance(rebuilt, ModelResponse)
    assert rebuilt.output == response.output and type(rebuilt.output[0]) is type(response.output[0])
    assert rebuilt.usage == response.usage and rebuilt.response_id == "resp-1"
    assert rebuilt.output[1].content[0].text == "On it."


def test_a_model_given_by_name_is_resolved_only_when_called(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = instrument(Agent(name="solo", model="gpt-4.1"))  # no key needed to instrument
    assert agent.model.call_name == "gpt-4.1" and agent.model._inner is None


def test_instrument_refuses_what_is_not_an_agent():
    with pytest.raises(TypeError, match=r"instrument\(\) takes an agents\.Agent, got ScriptedModel"):
        instrument(ScriptedModel())


# ---- the openai-agents-team example through the CLI -------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The example recorded once (its fault_recovery replays included)."""
    r = run_in(copy_example("openai_agents_team", tmp_path_factory.mktemp("oa") / "team"),
               "run", "--json", "r.json")
    assert r.exit_code == 0, r.output
    return r.folder


@pytest.fixture
def project(recorded, tmp_path) -> Path:
    return copy_recorded(recorded, tmp_path / "team")


def verdicts(path: Path) -> dict[str, dict[str, str]]:
    data = json.loads(path.read_text())
    return {c["case_id"]: {k: v["verdict"] + (f":{v['reason']}" if "reason" in v else "")
                           for k, v in c["verdicts"].items()} for c in data["cases"]}


def case_steps(project: Path, case_id: str) -> tuple[list[Any], str]:
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(project / ".oloproof" / "log.db", readonly=True)
    try:
        view = case_view(store, latest_run_id(store), case_id)
    finally:
        store.close()
    assert view.trajectory is not None
    return list(view.trajectory.steps), view.trajectory.terminal_status


def test_the_example_passes_every_criterion(project):
    data = json.loads((project / "r.json").read_text())
    rows_ = {c["criterion"]: (c["passed"], c["observed"], c["excluded"]) for c in data["criteria"]}
    assert rows_ == {"agent_route": (10, 10, 0), "agent_tool_permissions": (10, 10, 0),
                     "world_correct": (10, 10, 0), "recovers_from_error_at_issue_refund": (4, 4, 6)}
    assert data["gate"]["decision"] == "PASS"
    steps, status = case_steps(project, "refund-broken")
    assert [(s.kind, s.tool_name, s.agent, s.to_agent) for s in steps] == [
        ("decision", "offline-policy", "triage", None), ("handoff", None, "triage", "billing"),
        ("decision", "offline-policy", "billing", None),
        ("tool_call", "lookup_order", "billing", None), ("tool_result", "lookup_order", "billing", None),
        ("decision", "offline-policy", "billing", None),
        ("tool_call", "issue_refund", "billing", None), ("tool_result", "issue_refund", "billing", None),
        ("decision", "offline-policy", "billing", None), ("final", None, "billing", None)]
    assert steps[-1].result == "Refunded 40.0 EUR for ord-001." and status == "success"
    # the case with a declared fault: the refund fails, billing escalates
    steps, _ = case_steps(project, "refund-fails")
    assert [s.tool_name for s in steps if s.kind == "tool_call"] == ["lookup_order", "issue_refund", "escalate"]
    assert next(s for s in steps if s.kind == "tool_result" and s.tool_name == "issue_refund").fault == "error"


def test_the_planted_faults_are_caught_by_the_criteria_meant_for_them(project):
    edit(project / "oloproof.yaml", 'version: "1.0"\n  callable: app:TeamDesk',
         'version: "1.1-sloppy"\n  callable: app:SloppyTeamDesk')
    r = run_in(project, "run", "--json", "s.json")
    assert r.exit_code == 1, r.output
    got = verdicts(project / "s.json")
    # tech was handed a refund and issued it: the route and the permissions say so, there only
    assert [c for c, v in got.items() if v["agent_route"] != "pass"] == ["refund-after-crash"]
    assert [c for c, v in got.items() if v["agent_tool_permissions"] != "pass"] == ["refund-after-crash"]
    # billing ignores a failed refund: every fault replay, and the case whose refund fails
    assert {c: v["recovers_from_error_at_issue_refund"] for c, v in got.items()
            if not v["recovers_from_error_at_issue_refund"].startswith("excluded")} == {
        c: "fail:state_contradicts_claim" for c in ("refund-broken", "refund-charged-twice",
                                                    "refund-after-crash", "refund-fails")}
    assert [c for c, v in got.items() if v["world_correct"] != "pass"] == ["refund-fails"]


@pytest.mark.parametrize("kind", ["error", "timeout", "malformed", "timeout_after_effect", "denied"])
def test_a_fault_replay_of_every_kind_has_a_faithful_control_and_a_verdict(project, kind):
    r = run_in(project, "replay", "--fault", f"issue_refund:{kind}", "--case", "refund-broken",
               "--json", "replay.json")
    assert r.exit_code == 0, r.output
    [case] = json.loads((project / "replay.json").read_text())["cases"]
    assert case["control"]["faithful"] is True, case
    assert case["verdict"] == "pass", case  # billing escalates whatever came back
    after = case["after_fault"]
    assert after[0] == 'issue_refund({"order_id":"ord-001"})' and "(injected)" in after[1]
    assert 'escalate({"order_id":"ord-001","reason":"the refund failed"})' in after


def test_a_prefix_run_answers_the_frozen_calls_from_the_tape_and_the_model_decides_at_the_boundary(project):
    r = run_in(project, "prefix", "create", "latest", "refund-broken", "--before-step", "6")
    assert r.exit_code == 0, r.output
    r = run_in(project, "prefix", "run", "--json", "p.json")
    data = json.loads((project / "p.json").read_text())
    [case] = data["cases"]
    steps, _ = case_steps(project, "refund-broken")
    # steps 1-5 (two decisions, a handoff, a tool call) came from the frozen tape; the model
    # chose the refund at the boundary, recorded and not executed
    assert [(s.kind, s.tool_name) for s in steps][:5] == [
        ("decision", "offline-policy"), ("handoff", None), ("decision", "offline-policy"),
        ("tool_call", "lookup_order"), ("tool_result", "lookup_order")]
    assert (steps[5].kind, steps[6].kind, steps[6].tool_name) == ("decision", "tool_call", "issue_refund")
    assert len(steps) == 7, case


def test_a_misnamed_tool_in_the_configuration_is_named_before_anything_runs(project):
    edit(project / "oloproof.yaml", "tech: [search_kb, open_ticket]", "tech: [search_kb, open_tiket]")
    r = run_in(project, "run")
    assert r.exit_code == 2, r.output
    assert "the system has no tool 'open_tiket'; did you mean 'open_ticket'?" in r.output


def test_the_span_path_gives_the_same_route_and_permission_verdicts(project):
    pytest.importorskip("openinference.instrumentation.openai_agents")
    pytest.importorskip("opentelemetry.sdk.trace")
    edit(project / "oloproof.yaml", 'version: "1.0"\n  callable: app:TeamDesk',
         'version: "1.0-spans"\n  callable: app:TracedTeamDesk')
    r = run_in(project, "run", "--json", "t.json")
    assert r.exit_code == 1, r.output  # no fault can be injected through spans: refund-fails refunds
    traced, direct = verdicts(project / "t.json"), verdicts(project / "r.json")
    for criterion in ("agent_route", "agent_tool_permissions"):
        assert {c: v[criterion] for c, v in traced.items()} == {c: v[criterion] for c, v in direct.items()}
    steps, status = case_steps(project, "refund-broken")
    assert [(s.kind, s.agent, s.to_agent) for s in steps if s.kind in ("handoff", "final")] == [
        ("handoff", "triage", "billing"), ("final", "billing", None)]
    assert steps[-1].result == "Refunded 40.0 EUR for ord-001." and status == "success"


def test_the_example_is_registered():
    from oloproof.app.examples import EXAMPLES, EXTRAS

    assert EXAMPLES["openai-agents-team"] == "openai_agents_team"
    assert EXTRAS["openai-agents-team"] == "pip install 'oloproof[openai-agents]'"
