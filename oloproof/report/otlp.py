"""``oloproof export RUN --format otlp-json``: a run as OpenTelemetry GenAI spans (issue 15).

One trace per case (its id derived from the run and the case, so an export is reproducible):
an ``invoke_agent`` span for the case — its verdicts as ``oloproof.verdict.<criterion>``
attributes, its input and output — and a child span per step in order: ``execute_tool`` for a
tool call (with its result when the result came next), ``chat`` for a model decision, and an
``oloproof.<kind>`` span for messages, handoffs, final answers and results that stand alone.
Every step span also carries ``oloproof.step.*`` attributes, so that ``oloproof import otel``
reads the trajectory back exactly; tracing tools show the GenAI ones. Events hold no wall
clock: span times are synthetic (one microsecond per step from 2000-01-01) and say only the
order. The file is the Collector's file exporter format (one ExportTraceServiceRequest per
line, one line per case), hex ids.

The agent span also carries what consumers match a trace to a case on (issue 25): the case's
input as the user message (``gen_ai.input.messages``, the GenAI conventions' parts shape), its
answer as the assistant message (``gen_ai.output.messages``), the id of its line in its case
file (``oloproof.case.id``; for a trial ``oloproof.case.trial``, for a derived case its source's
id and ``oloproof.case.transform``; any further attribute names given hold the same id, e.g.
``agentevals.eval.case.id``) and its recorded environment state (``oloproof.state``), which
``import otel`` reads back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from oloproof.config.limits import split_trial
from oloproof.events import canonical_json
from oloproof.views import NO_STATE, CaseView

EPOCH_NS = 946_684_800 * 10**9  # 2000-01-01T00:00:00Z
STEP_NS = 1_000


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    return {"stringValue": canonical_json(v).decode()}


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs.items() if v is not None]


def _json(v: Any) -> str:
    return canonical_json(v).decode()


def _ids(run_id: str, case_id: str) -> tuple[str, str]:
    h = hashlib.sha256(f"{run_id}/{case_id}".encode()).hexdigest()
    return h[:32], h[32:48]


def _span_id(trace: str, n: int) -> str:
    return hashlib.sha256(f"{trace}/{n}".encode()).hexdigest()[:16]


#: the input fields whose text is the user's message (the first one present), before the
#: input's canonical JSON
USER_TEXT_FIELDS = ("message", "prompt", "query", "question", "request", "input", "text")
#: the output fields whose text is the answer (the first one present), when no final step has one
ANSWER_FIELDS = ("answer", "final", "output", "response", "text", "message")


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _as_parts(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message with text ``content`` (OpenAI's shape) in the conventions' parts shape."""
    content = message.get("content")
    if "parts" in message or not isinstance(content, str):
        return message
    return {**{k: v for k, v in message.items() if k != "content"}, "parts": [_text_part(content)]}


def user_messages(input_: Any) -> list[dict[str, Any]]:
    """The case's input as GenAI input messages: the messages it holds when it holds some (an
    imported trace's, text ``content`` put in parts), else one user message whose text is the
    first of :data:`USER_TEXT_FIELDS` that is text, else the input's canonical JSON."""
    held = input_.get("messages") if isinstance(input_, dict) else None
    if isinstance(held, list) and held and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in held):
        return [_as_parts(m) for m in held]
    text = next((input_[k] for k in USER_TEXT_FIELDS if isinstance(input_.get(k), str)), None) \
        if isinstance(input_, dict) else input_ if isinstance(input_, str) else None
    return [{"role": "user", "parts": [_text_part(text if text is not None else _json(input_))]}]


def answer_messages(view: CaseView) -> list[dict[str, Any]] | None:
    """The case's answer as GenAI output messages (one assistant message), or None when it gave
    none: the text of its last ``final`` step, else the first of :data:`ANSWER_FIELDS` of its
    output that is text, else its output's canonical JSON."""
    steps = view.trajectory.steps if view.trajectory is not None else ()
    final = next((s.result for s in reversed(steps) if s.kind == "final" and s.result is not None), None)
    value = final if final is not None else view.output
    if value is None:
        return None
    if isinstance(value, dict):
        value = next((value[k] for k in ANSWER_FIELDS if isinstance(value.get(k), str)), value)
    text = value if isinstance(value, str) else _json(value)
    return [{"role": "assistant", "parts": [_text_part(text)],
             "finish_reason": "error" if view.error else "stop"}]


def case_spans(run_id: str, view: CaseView, verdicts: dict[str, tuple[str, str | None]], system: str,
               case_attributes: tuple[str, ...] = ()) -> list[dict]:
    """One case as OTLP JSON spans: the ``invoke_agent`` root (input, output, verdicts as
    ``oloproof.verdict.<criterion>`` attributes, the case's id and its messages), then a child
    span per step, a tool result folded into its call's span when it came right after. Ids and
    times are derived from the run, the case and the step order, so the same case always
    exports the same spans.

    Args:
        verdicts: criterion -> (verdict, reason) of the case under its run's rules.
        system: the agent's name for the root span when no step names one.
        case_attributes: more attribute names for the root to hold the case's id under (a
            consumer's own, e.g. ``agentevals.eval.case.id``), besides ``oloproof.case.id``.
    """
    trace, root_id = _ids(run_id, view.case_id)
    steps = list(view.trajectory.steps) if view.trajectory is not None else []
    spans: list[dict[str, Any]] = []
    i, n = 0, 0
    while i < len(steps):
        s = steps[i]
        n += 1
        start = EPOCH_NS + (i + 1) * STEP_NS
        own: dict[str, Any] = {"oloproof.step.kind": s.kind, "oloproof.step.tool_name": s.tool_name,
                               "oloproof.step.agent": s.agent, "oloproof.step.to_agent": s.to_agent,
                               "oloproof.step.arguments": _json(s.arguments) if s.arguments is not None else None,
                               "oloproof.step.result": _json(s.result) if s.result is not None else None,
                               "oloproof.step.raised": True if s.raised else None, "oloproof.step.fault": s.fault}
        genai: dict[str, Any]
        status: dict[str, Any] = {}
        if s.kind == "tool_call":
            name = f"execute_tool {s.tool_name}"
            genai = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": s.tool_name,
                     "gen_ai.tool.call.arguments": own["oloproof.step.arguments"]}
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if nxt is not None and nxt.kind == "tool_result" and nxt.tool_name == s.tool_name:
                own.update({"oloproof.result.paired": True, "oloproof.result": _json(nxt.result),
                            "oloproof.result.agent": nxt.agent, "oloproof.result.raised": True if nxt.raised else None,
                            "oloproof.result.fault": nxt.fault})
                genai["gen_ai.tool.call.result"] = _json(nxt.result)
                if nxt.raised or nxt.fault:
                    err = nxt.result.get("error", {}) if isinstance(nxt.result, dict) else {}
                    genai["error.type"] = str(err.get("type") or nxt.fault or "Error")
                    status = {"code": 2, "message": str(err.get("message", ""))}
                i += 1
        elif s.kind == "decision":
            name = f"chat {s.tool_name}"
            genai = {"gen_ai.operation.name": "chat", "gen_ai.request.model": s.tool_name}
        else:
            name = f"oloproof.{s.kind}"
            genai = {"gen_ai.agent.name": s.to_agent} if s.kind == "handoff" else {}
        spans.append({"traceId": trace, "spanId": _span_id(trace, n), "parentSpanId": root_id, "name": name,
                      "kind": 1, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + STEP_NS // 2),
                      "attributes": _attrs({**genai, **own}), "status": status})
        i += 1
    agent = next((s.agent for s in steps if s.agent), None) or system
    source, trial = split_trial(view.case_id)
    case_id, _, transform = source.partition("~")  # a derived case's line is its source's
    answer = answer_messages(view)
    root_attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                  "gen_ai.input.messages": _json(user_messages(view.input)),
                  "gen_ai.output.messages": _json(answer) if answer is not None else None,
                  "oloproof.case.id": case_id, "oloproof.case.trial": trial,
                  "oloproof.case.transform": transform or None,
                  **{name: case_id for name in case_attributes},
                  "oloproof.run_id": run_id, "oloproof.case_id": view.case_id,
                  "oloproof.input": _json(view.input), "oloproof.metadata": _json(dict(view.metadata)),
                  "oloproof.output": _json(view.output) if view.output is not None else None,
                  "oloproof.terminal_status": view.trajectory.terminal_status if view.trajectory else "unknown",
                  "oloproof.truncated": True if view.trajectory is not None and view.trajectory.truncated else None,
                  "oloproof.step_limit": view.trajectory.step_limit if view.trajectory is not None else None,
                  "oloproof.constraints": _json([[c.name, c.passed, c.step_index] for c in view.trajectory.constraints])
                  if view.trajectory is not None and view.trajectory.constraints else None,
                  "oloproof.state": _json(view.state) if view.state is not NO_STATE else None,
                  "oloproof.error": view.error, "oloproof.error_kind": view.error_kind}
    for criterion, (verdict, reason) in verdicts.items():
        root_attrs[f"oloproof.verdict.{criterion}"] = verdict
        if reason:
            root_attrs[f"oloproof.verdict.{criterion}.reason"] = reason
    root = {"traceId": trace, "spanId": root_id, "name": f"invoke_agent {agent}", "kind": 1,
            "startTimeUnixNano": str(EPOCH_NS), "endTimeUnixNano": str(EPOCH_NS + (len(steps) + 1) * STEP_NS),
            "attributes": _attrs(root_attrs), "status": {"code": 2, "message": view.error} if view.error else {}}
    return [root, *spans]


def export_otlp_lines(store: Any, run_id: str, case_attributes: tuple[str, ...] = ()) -> Iterator[str]:
    """One ExportTraceServiceRequest per case (see the module docstring); ``case_attributes``:
    more attribute names for each agent span to hold its case's id under."""
    from oloproof.app.reports import judged_cases
    from oloproof.app.runs import load_run

    run = load_run(store, run_id)
    resource = {"attributes": _attrs({"service.name": run.started.system_name,
                                      "service.version": run.started.system_version})}
    for view, verdicts in judged_cases(store, run_id):
        spans = case_spans(run_id, view, verdicts, run.started.system_name, case_attributes)
        request = {"resourceSpans": [{"resource": resource, "scopeSpans": [
            {"scope": {"name": "oloproof", "version": "1"}, "spans": spans}]}]}
        yield canonical_json(request).decode()
