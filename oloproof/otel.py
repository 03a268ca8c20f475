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
``final`` step. A span outside any case is ignored, and so is one ended in a thread the case
did not hand its context to (a ``ThreadPoolExecutor`` does not: run such work with
``contextvars.copy_context().run``). Needs the ``otel`` extra
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

class _CaseState:
    """What the processor knows of one case: the agents invoked and not yet returned
    (innermost last), the last agent seen, and whether steps name their agent (decided by the
    first step: every step names one, or none does)."""

    __slots__ = ("agents", "last", "named")

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.last: str | None = None
        self.named: bool | None = None

    def agent(self) -> str | None:
        current = self.agents[-1] if self.agents else self.last
        if self.named is None:
            self.named = current is not None
        return current if self.named else None


class OloproofSpanProcessor(SpanProcessor):
    """Turns the GenAI spans that end inside a case into its steps (see the module)."""

    @staticmethod
    def _state(rec: Any) -> _CaseState:
        return rec.extra("oloproof.otel", _CaseState)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        rec = _CURRENT.get()
        if rec is None:
            return
        a = span.attributes or {}
        if operation_of(span.name, a) not in AGENT_OPS:
            return
        state = self._state(rec)
        name = a.get("gen_ai.agent.name")
        name = name if isinstance(name, str) and name else (state.agents[-1] if state.agents else "agent")
        if state.agents and name != state.agents[-1]:
            rec.step("handoff", agent=state.agent(), to_agent=name)
        state.agents.append(name)
        state.last = name

    def on_end(self, span: ReadableSpan) -> None:
        rec = _CURRENT.get()
        if rec is None:
            return
        a = dict(span.attributes or {})
        op = operation_of(span.name, a)
        state = self._state(rec)
        if op in TOOL_OPS:
            error = None
            if span.status is not None and span.status.status_code == StatusCode.ERROR:
                error = span.status.description or ""
            agent = state.agent()
            rec.step(**tool_call_step(span.name, a), agent=agent)
            rec.step(**tool_result_step(span.name, a, error), agent=agent)
        elif op in MODEL_OPS:
            rec.step(**model_step(a), agent=state.agent())
            usage = model_usage(a, span.start_time or 0, span.end_time or 0, 0)
            if usage is not None:
                rec.usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                          latency_ms=usage.latency_ms, model=usage.model)
        elif op in AGENT_OPS and state.agents:
            agent = state.agent()
            child = state.agents.pop()
            if state.agents:
                if child != state.agents[-1]:
                    rec.step("handoff", agent=agent, to_agent=state.agents[-1])
                return
            final = first_of(a, *FINAL_KEYS)
            if final is not None:
                rec.final(message_text(json_or_text(final)), agent=agent)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
