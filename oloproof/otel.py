"""Live recording of agents traced with OpenTelemetry (issue 15): a span processor.

Register it on the ``TracerProvider`` your framework's instrumentation uses, and the GenAI
(or OpenInference) spans that end inside a case become that case's trajectory steps — an
agent instrumented with OpenTelemetry is recorded without any ``@tool``::

    from opentelemetry.sdk.trace import TracerProvider
    from oloproof.otel import OloproofSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(OloproofSpanProcessor())
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))   # Pydantic AI
    LangChainInstrumentor().instrument(tracer_provider=provider)              # LangGraph (OpenInference)

The mapping is the importer's (docs/otel.md): a tool span → its ``tool_call`` and
``tool_result`` when it ends; a model span → a ``decision`` (and its token usage); a nested
agent invocation → a ``handoff`` to it and back; the outermost invocation's answer → the
``final`` step (for LangChain, whose spans get their kind only when they end: the answer of the
case's outermost run, a LangGraph graph's). A span outside any case is ignored, and so is one
ended in a thread the case did not hand its context to (a ``ThreadPoolExecutor`` does not: run
such work with ``contextvars.copy_context().run``). Needs the ``otel`` extra
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
    model_usage,
    operation_of,
    tool_call_step,
    tool_calls_of,
    tool_result_step,
)
from oloproof.system import _CURRENT

__all__ = ["OloproofSpanProcessor"]


def _attributes(span: Any) -> Any:
    """A span's attributes as a plain dict. The SDK's ``span.attributes`` is a read-only view
    of its ``BoundedAttributes``: ``dict()`` of it, or ``.get()`` of a missing key, goes key by
    key through Python methods (a few µs a span); its ``copy()`` is the C dict copy."""
    a = span.attributes
    if a is None:
        return {}
    try:
        a = a.copy()
    except AttributeError:  # a mapping without copy()
        pass
    a = a if type(a) is dict else dict(a)
    if not _PLAIN.issuperset(map(type, a.values())):
        a = {k: _plain(v) for k, v in a.items()}
    return a


_PLAIN = frozenset((str, bool, int, float))


def _plain(value: Any) -> Any:
    """An attribute's value as its plain type: the SDK keeps a ``str`` or ``int`` subclass (an
    enum's member...) as it was given, and the log's encoder takes only the plain types. The
    base type's own method, so that a subclass's ``__str__`` cannot change the text."""
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, bool):  # bool has no subclass
        return value
    if isinstance(value, int):
        return value if type(value) is int else int.__index__(value)
    if isinstance(value, float):
        return value if type(value) is float else float.__float__(value)
    return value


class _CaseState:
    """What the processor knows of one case: the agents invoked and not yet returned
    (innermost last), the last agent seen, and whether steps name their agent (decided by the
    first step: every step names one, or none does); the spans started in the case and not
    yet ended (id → whether it was an agent invocation entered); the tool calls the last model
    decision asked for; the spans already ended (their ids), so that a processor registered
    twice, or two of them, record each span once."""

    __slots__ = ("agents", "calls", "ended", "last", "named", "open")

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.last: str | None = None
        self.named: bool | None = None
        self.open: dict[int, bool] = {}
        self.ended: set[int] = set()
        self.calls: list[tuple[str, dict[str, Any]]] = []

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
        state = self._state(rec)
        span_id = span.context.span_id
        if span_id in state.open or span_id in state.ended:
            return  # seen by another registration (the same processor added twice, or a second one)
        a = _attributes(span)
        entered = operation_of(span.name, a) in AGENT_OPS
        state.open[span_id] = entered
        if not entered:
            return
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
        state = self._state(rec)
        span_id = span.context.span_id
        if span_id in state.ended:
            return  # recorded by another registration
        state.ended.add(span_id)
        a = _attributes(span)
        op = operation_of(span.name, a)
        entered = state.open.pop(span_id, False)
        if op in TOOL_OPS:
            error = None
            if span.status is not None and span.status.status_code == StatusCode.ERROR:
                error = span.status.description or ""
            agent = state.agent()
            rec.step(**tool_call_step(span.name, a, state.calls), agent=agent)
            rec.step(**tool_result_step(span.name, a, error), agent=agent)
        elif op in MODEL_OPS:
            step = model_step(a)
            rec.step(**step, agent=state.agent())
            state.calls = tool_calls_of(step["result"])
            usage = model_usage(a, span.start_time or 0, span.end_time or 0, 0)
            if usage is not None:
                rec.usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                          latency_ms=usage.latency_ms, model=usage.model)
        elif op in AGENT_OPS and entered and state.agents:
            agent = state.agent()
            child = state.agents.pop()
            if state.agents:
                if child != state.agents[-1]:
                    rec.step("handoff", agent=agent, to_agent=state.agents[-1])
                return
            final = first_of(a, *FINAL_KEYS)
            if final is not None:
                rec.final(message_text(json_or_text(final)), agent=agent)
        elif op in AGENT_OPS + ("chain",) and not state.agents and (
                span.parent is None or span.parent.span_id not in state.open):
            # the outermost run of the case, its kind known only when it ended (OpenInference's
            # LangChain spans: a LangGraph graph is a CHAIN): its answer is the final step; the
            # graph's nodes (an ``agent`` node is an AGENT by its name) are no invocations
            final = first_of(a, *FINAL_KEYS)
            if final is not None:
                rec.final(message_text(json_or_text(final)), agent=state.agent())

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
