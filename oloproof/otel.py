"""Live recording of agents traced with OpenTelemetry (issue 15): a span processor.

Register it on the ``TracerProvider`` your framework's instrumentation uses, and the GenAI
(or OpenInference) spans that end inside a case become that case's trajectory steps — an
agent instrumented with OpenTelemetry is recorded without any ``@tool``::

    from opentelemetry.sdk.trace import TracerProvider
    from oloproof.otel import OloproofSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(OloproofSpanProcessor())
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))   # Pydantic AI

The mapping is the importer's (docs/otel.md): a tool span → its ``tool_call`` and
``tool_result`` when it ends; a model span → a ``decision`` (and its token usage); a nested
agent invocation → a ``handoff`` to it and back; the outermost invocation's answer → the
``final`` step. A span outside any case is ignored. Needs the ``otel`` extra
(``pip install 'oloproof[otel]'``). Do not also wrap the same tools with ``@tool``: each call
would be recorded twice.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import StatusCode

from oloproof.config.otlp import (
    AGENT_OPS,
    FINAL_KEYS,
    MODEL_OPS,
    TOOL_OPS,
    first_of,
    json_or_text,
    message_text,
    model_step,
    operation_of,
    model_usage,
    tool_call_step,
    tool_result_step,
)
from oloproof.system import _CURRENT

__all__ = ["OloproofSpanProcessor"]

class OloproofSpanProcessor(SpanProcessor):
    """Turns the GenAI spans that end inside a case into its steps (see the module)."""

    def __init__(self) -> None:
        #: per case recorder: the agents invoked and not yet returned (innermost last)
        self._agents: dict[int, list[str]] = {}

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        rec = _CURRENT.get()
        if rec is None:
            return
        a = span.attributes or {}
        if operation_of(span.name, a) not in AGENT_OPS:
            return
        stack = self._agents.setdefault(id(rec), [])
        name = a.get("gen_ai.agent.name")
        name = name if isinstance(name, str) and name else (stack[-1] if stack else "agent")
        if stack and name != stack[-1]:
            rec.step("handoff", agent=stack[-1], to_agent=name)
        stack.append(name)

    def on_end(self, span: ReadableSpan) -> None:
        rec = _CURRENT.get()
        if rec is None:
            return
        a = dict(span.attributes or {})
        op = operation_of(span.name, a)
        stack = self._agents.get(id(rec), [])
        agent = stack[-1] if stack else None
        if op in TOOL_OPS:
            error = None
            if span.status is not None and span.status.status_code == StatusCode.ERROR:
                error = span.status.description or ""
            rec.step(**tool_call_step(span.name, a), agent=agent)
            rec.step(**tool_result_step(span.name, a, error), agent=agent)
        elif op in MODEL_OPS:
            rec.step(**model_step(a), agent=agent)
            usage = model_usage(a, span.start_time or 0, span.end_time or 0, 0)
            if usage is not None:
                rec.usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                          latency_ms=usage.latency_ms, model=usage.model)
        elif op in AGENT_OPS and stack:
            child = stack.pop()
            if stack:
                if child != stack[-1]:
                    rec.step("handoff", agent=child, to_agent=stack[-1])
                return
            del self._agents[id(rec)]
            final = first_of(a, *FINAL_KEYS)
            if final is not None:
                rec.final(message_text(json_or_text(final)), agent=child)

    def shutdown(self) -> None:
        self._agents.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
