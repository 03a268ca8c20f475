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

The mapping is the importer's (docs/otel.md, :class:`~oloproof.config.otlp.StepMapper`): a
tool span → its ``tool_call`` and ``tool_result``; a model span → a ``decision`` (and its token
usage); an agent taking control (``gen_ai.agent.name``, OpenInference's ``agent.name``, a
LangGraph subgraph's node) → a ``handoff``, and so is a handoff span or transfer tool (the
OpenAI Agents SDK's, ADK's ``transfer_to_agent``, a LangGraph ``transfer_to_X`` returning a
``Command``); the outermost invocation's answer → the ``final`` step, and its end → the
terminal status. A span's steps are recorded once the outermost span of the case around it has
ended, from the spans as the importer reads them, in the order they started: the live and the
imported recordings of the same spans have the same steps in the same order. A span outside
any case is ignored, and so is one ended in a thread the case did not hand its context to (a
``ThreadPoolExecutor`` does not: run such work with ``contextvars.copy_context().run``). Needs
the ``otel`` extra (``pip install 'oloproof[otel]'``). Do not also wrap the same tools with
``@tool``: each call would be recorded twice.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import StatusCode

from oloproof.config.otlp import Span, StepMapper, exception_of, named_steps
from oloproof.recorder.case import ROUTED
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
    if not _PLAIN.issuperset(map(type, a.values())):  # a tuple (finish reasons), a subclass: those made plain
        a = {k: v if type(v) in _PLAIN else _plain(v) for k, v in a.items()}
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
    """What the processor knows of one case: the spans started in it and not yet ended (id →
    its parent's id); the spans ended whose outermost open span has not (parent id → them,
    as the importer's :class:`~oloproof.config.otlp.Span`); the ids of the spans already
    ended, so that a processor registered twice, or two of them, record each span once; the
    agent in control after the steps recorded so far; and whether steps name their agent
    (decided by the first steps recorded: every step names one, or none does)."""

    __slots__ = ("control", "done", "ended", "named", "open")

    def __init__(self) -> None:
        self.open: dict[int, int | None] = {}
        self.ended: dict[int, list[Span]] = {}
        self.done: set[int] = set()
        self.control: str | None = None
        self.named: bool | None = None


def _span(span: Any, a: dict[str, Any]) -> Span:
    """A ReadableSpan as the importer reads one from a file."""
    ctx = span.context
    parent = span.parent
    status = span.status
    error = (status.description or "") if status is not None and status.status_code == StatusCode.ERROR else None
    events = span.events
    return Span(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"),
                format(parent.span_id, "016x") if parent is not None else "", span.name,
                span.start_time or 0, span.end_time or 0, a, error, span.name,
                exception=exception_of((e.name, _attributes(e)) for e in events if e.name == "exception")
                if events else None)


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
        if span_id in state.open or span_id in state.done:
            return  # seen by another registration (the same processor added twice, or a second one)
        parent = span.parent
        state.open[span_id] = parent.span_id if parent is not None else None

    def on_end(self, span: ReadableSpan) -> None:
        rec = _CURRENT.get()
        if rec is None:
            return
        state = self._state(rec)
        span_id = span.context.span_id
        if span_id in state.done:
            return  # recorded by another registration
        state.done.add(span_id)
        state.open.pop(span_id, None)
        mine = _span(span, _attributes(span))
        parent = span.parent
        if parent is not None and parent.span_id in state.open:
            # a span inside one still open: mapped with it, once all of it has ended, in the
            # order the spans started (an ADK model call ends after the tool call it asked for)
            state.ended.setdefault(parent.span_id, []).append(mine)
            return
        self._record(rec, state, mine)

    @staticmethod
    def _record(rec: Any, state: _CaseState, top: Span) -> None:
        """Record the steps of ``top`` (an ended span with no open span of the case around it)
        and of the spans below it, with the importer's mapping — unless a framework integration
        (``oloproof.integrations``) routed this case's calls through the recorder: it records
        them itself, and the same calls seen again as spans would be recorded twice."""
        if rec.has_extra(ROUTED):
            state.ended.clear()
            return
        children: dict[str, list[Span]] = {}
        todo = [top]
        while todo:
            span = todo.pop()
            kids = state.ended.pop(int(span.span_id, 16), None)
            if kids:
                kids.sort(key=lambda s: (s.start, s.end, s.span_id))
                children[span.span_id] = kids
                todo.extend(kids)
        m = StepMapper(control=state.control)
        m.walk([top], children)
        if not m.raw:
            return
        if state.named is None:
            state.named = any(r.get("agent") for r in m.raw)
        usage = {u.step_index: u for u in m.usage}
        for i, r in enumerate(named_steps(m.raw, state.named), start=1):
            rec.step(r["kind"], tool_name=r.get("tool_name"), arguments=r.get("arguments"), result=r.get("result"),
                     agent=r.get("agent"), to_agent=r.get("to_agent"), raised=bool(r.get("raised")))
            u = usage.get(i)
            if u is not None:
                rec.usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens, latency_ms=u.latency_ms,
                          model=u.model)
        state.control = m.control
        if m.status != "unknown":
            rec.finish(m.status)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
