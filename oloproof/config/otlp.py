"""OpenTelemetry traces as Oloproof trajectories: reading OTLP JSON (SPEC §17, issue 15).

The input is the OpenTelemetry Collector's file exporter format: one
``ExportTraceServiceRequest`` as JSON per line (``{"resourceSpans": [...]}``). Ids may be hex
(the OTLP/JSON encoding) or base64 (protobuf's JSON mapping); integers may be JSON numbers or
strings. Every problem is located (``traces.jsonl:3: resourceSpans[0].scopeSpans[0].spans[2]
.attributes[1]: …``) and raised as :class:`~oloproof.errors.CaseFileError` (exit code 2).

**The mapping** (docs/otel.md has the table; :class:`StepMapper` is the one mapping, the live
span processor's too). A trace holds one case per agent invocation — an ``invoke_agent`` span
with no ``invoke_agent`` above it, an ADK workflow run (``invoke_workflow``), or the trace's
outermost span when it is an OpenInference ``CHAIN`` (a LangGraph graph's run) — or is one case
when it has none; invocations of one ``gen_ai.conversation.id`` are one case, and so are the
turns of an ADK conversation, a trace each (:func:`iter_cases`). The spans under it become
steps, depth first in start order:

* ``execute_tool`` (GenAI: ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments``,
  ``gen_ai.tool.call.result``; OpenInference: ``openinference.span.kind: TOOL``, ``tool.name``,
  ``input.value``, ``output.value``) → a ``tool_call`` and its ``tool_result``; ``error.type``
  or an error status → the error result ``{"error": {"type", "message"}}``, from the span's
  ``exception`` event when it has one;
* a handoff span or transfer tool (:func:`handoff_target`) → a ``handoff`` step;
* ``chat``, ``text_completion``, ``generate_content`` (OpenInference ``LLM``) → a model
  ``decision`` (tool ``gen_ai.request.model``; arguments: the input messages; result: the
  output messages), and its ``gen_ai.usage.*`` → the case's model usage;
* every step names its agent (:func:`step_agent`, :func:`agent_name`); another agent taking
  control → a ``handoff`` to it;
* the invocation's answer (else the last model decision's text) → the ``final`` step; its end →
  the terminal status;
* any other span is kept, by name and attributes, in the case's metadata
  (``otel.unmapped_spans``) — never dropped silently.

Spans written by ``oloproof export --format otlp-json`` carry ``oloproof.step.*`` attributes
and are read back exactly (export then import gives the same trajectory).
"""

from __future__ import annotations

import ast
import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec

from oloproof.config.cases import nonblank_lines
from oloproof.config.limits import MAX_NESTING, MAX_RECORDED_NESTING, json_nests_deeper, quoted
from oloproof.errors import CaseFileError
from oloproof.events import ConstraintRecorded, StepRecorded, TerminalStatus, UsageRecorded

TOOL_OPS = ("execute_tool",)
MODEL_OPS = ("chat", "text_completion", "generate_content")
AGENT_OPS = ("invoke_agent",)
#: Google ADK's run of its agent tree for one turn of a conversation: it opens a case, and names
#: no agent (its ``gen_ai.workflow.name`` is the root agent's, not the one acting)
WORKFLOW_OPS = ("invoke_workflow",)
_OI_KIND = "openinference.span.kind"


class Span:
    """One span, validated. ``where`` (its location in the files) is formatted only when an
    error needs it."""

    __slots__ = ("trace_id", "span_id", "parent_id", "name", "start", "end", "attributes", "error", "resource",
                 "operation", "exception", "_at")

    def __init__(self, trace_id: str, span_id: str, parent_id: str, name: str, start: int, end: int,
                 attributes: dict[str, Any], error: str | None, where: str | tuple[str, int, int, int, int],
                 resource: dict[str, Any] | None = None, exception: tuple[str, str] | None = None) -> None:
        self.trace_id, self.span_id, self.parent_id, self.name = trace_id, span_id, parent_id, name
        self.start, self.end, self.attributes = start, end, attributes
        self.error = error  # the status message (or "") when the span ended in error; None otherwise
        self.resource = resource if resource is not None else {}
        #: the (exception.type, exception.message) of the span's last ``exception`` event, if any
        self.exception = exception
        self._at = where
        self.operation = operation_of(name, attributes)

    @property
    def where(self) -> str:
        """Where the span is, for an error: ``file:line: resourceSpans[r].scopeSpans[s].spans[k]``."""
        at = self._at
        if isinstance(at, str):
            return at
        label, line, r, s, k = at
        return f"{label}:{line}: resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"


def operation_of(name: str, attributes: Any) -> str:
    """A span's GenAI operation: ``gen_ai.operation.name``, else the OpenInference span kind
    (TOOL, LLM, AGENT), else the first word of its name when that is an operation."""
    op = attributes.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    kind = attributes.get(_OI_KIND)
    if isinstance(kind, str):
        return {"TOOL": "execute_tool", "LLM": "chat", "AGENT": "invoke_agent"}.get(kind.upper(), kind.lower())
    head = name.split(" ", 1)[0]
    return head if head in TOOL_OPS + MODEL_OPS + AGENT_OPS else ""


# ---- reading -----------------------------------------------------------------------------------

def _fail(where: str, message: str) -> CaseFileError:
    return CaseFileError(f"{where}: {message}")


def _id(value: Any, where: str, size: int, required: bool = True, field: str = "") -> str:
    """A trace or span id as lowercase hex: given as hex (OTLP/JSON) or base64 (protobuf JSON).
    An id of zero bytes only is invalid (the OpenTelemetry specification): refused — but for a
    parent (``required=False``), where it means none, as an empty one does."""
    if type(value) is str and len(value) == 2 * size and _HEX.fullmatch(value) and value.strip("0"):
        return value.lower()  # the common case: no location string built
    if field:
        where = f"{where}.{field}"
    if value in (None, "") and not required:
        return ""
    if not isinstance(value, str) or not value:
        raise _fail(where, f"expected an id (hex or base64 text), got {quoted(value)}")
    if len(value) == 2 * size and _HEX.fullmatch(value):
        hex_ = value.lower()
    else:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != size:
            raise _fail(where, f"{quoted(value)} is not a {size}-byte id (hex or base64)")
        hex_ = raw.hex()
    if not hex_.strip("0"):
        if not required:
            return ""
        raise _fail(where, f"{quoted(value)} is all zeros: an invalid {'trace' if size == 16 else 'span'} id "
                           "(OpenTelemetry's specification)")
    return hex_


def _time(value: Any, where: str, field: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str and _INT.fullmatch(value):
        return int(value)
    return _int(value, f"{where}.{field}")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise _fail(where, "expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT.fullmatch(value):
        return int(value)
    raise _fail(where, f"expected an integer, got {quoted(value)}")


_INT = re.compile(r"-?[0-9]{1,25}")
_HEX = re.compile(r"[0-9a-fA-F]+")


def any_value(v: Any, where: str, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` as a plain value."""
    if depth > 32:
        raise _fail(where, "attribute value nested deeper than 32 levels")
    if not isinstance(v, dict):
        raise _fail(where, f"expected an AnyValue object, got {quoted(v)}")
    if not v:
        return None
    if len(v) != 1:
        raise _fail(where, f"an AnyValue holds one field, got {', '.join(sorted(map(str, v)))}")
    kind, value = next(iter(v.items()))
    if kind == "stringValue":
        if not isinstance(value, str):
            raise _fail(where, f"stringValue must be text, got {quoted(value)}")
        return value
    if kind == "boolValue":
        if not isinstance(value, bool):
            raise _fail(where, f"boolValue must be true or false, got {quoted(value)}")
        return value
    if kind == "intValue":
        return _int(value, where)
    if kind == "doubleValue":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _fail(where, f"doubleValue must be a number, got {quoted(value)}")
        try:
            number = float(value)
        except ValueError:
            raise _fail(where, f"doubleValue must be a number, got {quoted(value)}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise _fail(where, "doubleValue is not finite (JSON has no NaN or Infinity)")
        return number
    if kind == "arrayValue":
        values = value.get("values", []) if isinstance(value, dict) else None
        if not isinstance(values, list):
            raise _fail(where, "arrayValue must hold a values list")
        return [any_value(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(values)]
    if kind == "kvlistValue":
        values = value.get("values", []) if isinstance(value, dict) else None
        if not isinstance(values, list):
            raise _fail(where, "kvlistValue must hold a values list")
        return attributes(values, where, depth + 1)
    if kind == "bytesValue":
        return value
    raise _fail(where, f"unknown AnyValue field {quoted(kind)}")


def attributes(items: Any, where: str, depth: int = 0) -> dict[str, Any]:
    """An OTLP attribute list (``[{key, value: AnyValue}]``) as a plain dict (none: ``{}``).

    Raises:
        CaseFileError: not a list, an item without a text key, or a bad value, located at
            ``where[i]``.
    """
    if items is None:
        return {}
    if not isinstance(items, list):
        raise _fail(where, f"attributes must be a list of {{key, value}}, got {quoted(items)}")
    out: dict[str, Any] = {}
    for i, kv in enumerate(items):
        key = kv.get("key") if type(kv) is dict else None
        if type(key) is not str:
            raise _fail(f"{where}[{i}]", f"an attribute is {{key, value}} with a text key, got {quoted(kv)}")
        value = kv.get("value")
        # the common case first, with no location string built: one text, one boolean
        if type(value) is dict and len(value) == 1:
            text = value.get("stringValue")
            if type(text) is str:
                out[key] = text
                continue
            flag = value.get("boolValue")
            if type(flag) is bool:
                out[key] = flag
                continue
        out[key] = any_value(value if value is not None else {}, f"{where}[{i}].value", depth)
    return out


def _status_error(status: Any, where: str) -> str | None:
    if status is None:
        return None
    if not isinstance(status, dict):
        raise _fail(where, f"status must be an object, got {quoted(status)}")
    code = status.get("code", 0)
    if code in (2, "STATUS_CODE_ERROR", "2"):
        message = status.get("message", "")
        return message if isinstance(message, str) else str(message)
    return None


def exception_of(events: Iterable[tuple[Any, Any]]) -> tuple[str, str] | None:
    """The ``(exception.type, exception.message)`` of the last ``exception`` event of
    ``events`` (``(name, attributes)`` pairs), or None when there is none. The type is the
    class's own name (``ValueError``; an SDK may write it with its module,
    ``smolagents.utils.AgentToolExecutionError``), as Oloproof records an exception's."""
    found = None
    for name, a in events:
        if name == "exception" and isinstance(a, dict):
            kind, message = a.get("exception.type"), a.get("exception.message")
            if isinstance(kind, str) or isinstance(message, str):
                found = (kind.rsplit(".", 1)[-1] if isinstance(kind, str) and kind else "Error",
                         message if isinstance(message, str) else "")
    return found


def _events(raw: Any, where: str) -> tuple[str, str] | None:
    """The exception a span's ``events`` record (see :func:`exception_of`); other events are
    not read beyond their name."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise _fail(where, f"events must be a list of events, got {quoted(raw)}")
    pairs = []
    for i, event in enumerate(raw):
        if not isinstance(event, dict):
            raise _fail(f"{where}[{i}]", f"an event is an object, got {quoted(event)}")
        if event.get("name") == "exception":
            pairs.append(("exception", attributes(event.get("attributes"), f"{where}[{i}].attributes")))
    return exception_of(pairs)


def _span(raw: Any, where: str, resource: dict[str, Any]) -> Span:
    if not isinstance(raw, dict):
        raise _fail(where, f"a span is an object, got {quoted(raw)}")
    name = raw.get("name", "")
    if not isinstance(name, str):
        raise _fail(f"{where}.name", f"expected text, got {quoted(name)}")
    return Span(
        trace_id=_id(raw.get("traceId"), where, 16, field="traceId"),
        span_id=_id(raw.get("spanId"), where, 8, field="spanId"),
        parent_id=_id(raw.get("parentSpanId"), where, 8, required=False, field="parentSpanId"),
        name=name,
        start=_time(raw.get("startTimeUnixNano", 0), where, "startTimeUnixNano"),
        end=_time(raw.get("endTimeUnixNano", 0), where, "endTimeUnixNano"),
        attributes=attributes(raw.get("attributes"), f"{where}.attributes") if raw.get("attributes") else {},
        error=_status_error(raw.get("status"), f"{where}.status") if raw.get("status") else None,
        where=where,
        resource=resource,
        exception=_events(raw.get("events"), f"{where}.events") if raw.get("events") else None,
    )


def _list(obj: Any, key: str, where: str) -> list[Any]:
    value = obj.get(key, []) if isinstance(obj, dict) else None
    if not isinstance(value, list):
        raise _fail(where, f"{key} must be a list, got {quoted(value)}")
    return value


_DECODE = msgspec.json.Decoder()


def _slow_line(line: bytes, at: str) -> list[Span]:
    """Every span of one line, each field checked with its location in the message."""
    if json_nests_deeper(line, 4 * MAX_NESTING):
        where, attribute = _deep_place(line, 4 * MAX_NESTING)
        raise _fail(at, f"nested deeper than {4 * MAX_NESTING} levels of JSON" + (f" at {where}" if where else "")
                    + (f" (attribute {quoted(attribute)}: an attribute value nests at most 32 arrayValue/"
                       "kvlistValue levels)" if attribute is not None else ""))
    try:
        request = _DECODE.decode(line)
    except msgspec.DecodeError as e:
        raise _fail(at, f"malformed JSON ({e}); a trace file holds one ExportTraceServiceRequest "
                        "(OTLP JSON) per line") from None
    if not isinstance(request, dict) or "resourceSpans" not in request:
        raise _fail(at, "expected an ExportTraceServiceRequest object with resourceSpans")
    out = []
    for r, rs in enumerate(_list(request, "resourceSpans", at)):
        where_r = f"{at}: resourceSpans[{r}]"
        if not isinstance(rs, dict):
            raise _fail(where_r, f"a resourceSpans entry is an object, got {quoted(rs)}")
        res = rs.get("resource") or {}
        if not isinstance(res, dict):
            raise _fail(f"{where_r}.resource", f"expected an object, got {quoted(res)}")
        resource = attributes(res.get("attributes"), f"{where_r}.resource.attributes")
        for s, ss in enumerate(_list(rs, "scopeSpans", where_r)):
            where_s = f"{where_r}.scopeSpans[{s}]"
            for k, raw in enumerate(_list(ss, "spans", where_s)):
                out.append(_span(raw, f"{where_s}.spans[{k}]", resource))
    return out


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},]')


def _deep_place(line: bytes, limit: int) -> tuple[str, str | None]:
    """Where a line too deep to decode first nests deeper than ``limit``: the path of the
    enclosing attribute (``resourceSpans[0].scopeSpans[0].spans[2].attributes[1]``) and its
    key, or the path's first levels and None when no attribute encloses it. A scan of the
    text up to that place (no decoding, no recursion): only for the error message."""
    stack: list[list[Any]] = []  # [is an object, its key or index, the "key" field it holds]
    expect_key = False
    for m in _TOKEN.finditer(line):
        t = m.group()
        c = t[:1]
        if c == b'"':
            top = stack[-1] if stack else None
            if top is not None and top[0] and expect_key:
                top[1] = t
            elif top is not None and top[0] and top[1] == b'"key"':
                top[2] = t
            expect_key = False
        elif c in b"{[":
            stack.append([c == b"{", None if c == b"{" else 0, None])
            expect_key = c == b"{"
            if len(stack) > limit:
                break
        elif c in b"}]":
            if stack:
                stack.pop()
            expect_key = False
        else:  # ","
            if stack and not stack[-1][0]:
                stack[-1][1] += 1
            expect_key = bool(stack) and stack[-1][0]
    parts: list[str] = []
    attribute: str | None = None
    for is_object, key, _ in stack[:-1]:
        if is_object:
            try:
                name = msgspec.json.decode(key) if key is not None else "?"
            except msgspec.DecodeError:
                name = "?"
            parts.append(f".{name}" if parts else str(name))
        else:
            parts.append(f"[{key}]")
            if len(parts) >= 2 and parts[-2] == ".attributes":
                held = stack[len(parts)][2] if len(stack) > len(parts) else None
                try:
                    attribute = msgspec.json.decode(held) if held is not None else ""
                except msgspec.DecodeError:
                    attribute = ""
                break
    if attribute is None and len(parts) > 8:
        parts = [*parts[:8], "…"]
    return "".join(parts), attribute


# The fast path: the same checks, on typed structures msgspec decodes in C. Anything it does not
# accept at once (another shape, base64 ids, a bad value) is read again by the slow path, which
# gives the same spans or the located error: the fast path never decides an error itself.

class _Slow(Exception):
    pass


class _AnyValue(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    stringValue: Any = None
    boolValue: Any = None
    intValue: Any = None
    doubleValue: Any = None
    arrayValue: Any = None
    kvlistValue: Any = None
    bytesValue: Any = None


class _KeyValue(msgspec.Struct, gc=False):
    key: str
    value: _AnyValue | None = None


class _FastEvent(msgspec.Struct, gc=False):
    name: str = ""
    attributes: list[_KeyValue] | None = None


class _FastSpan(msgspec.Struct, gc=False):
    traceId: str
    spanId: str
    name: str = ""
    parentSpanId: str | None = None
    startTimeUnixNano: int | str = 0
    endTimeUnixNano: int | str = 0
    attributes: list[_KeyValue] | None = None
    status: dict[str, Any] | None = None
    events: list[_FastEvent] | None = None


class _FastScope(msgspec.Struct, gc=False):
    spans: list[_FastSpan] = []


class _FastResource(msgspec.Struct, gc=False):
    attributes: list[_KeyValue] | None = None


class _FastResourceSpans(msgspec.Struct, gc=False):
    resource: _FastResource | None = None
    scopeSpans: list[_FastScope] = []


class _FastRequest(msgspec.Struct, gc=False):
    resourceSpans: list[_FastResourceSpans]


class _IdSpan(msgspec.Struct, gc=False):
    traceId: str


class _IdScope(msgspec.Struct, gc=False):
    spans: list[_IdSpan] = []


class _IdResourceSpans(msgspec.Struct, gc=False):
    scopeSpans: list[_IdScope] = []


class _IdRequest(msgspec.Struct, gc=False):
    resourceSpans: list[_IdResourceSpans]


_FAST = msgspec.json.Decoder(_FastRequest)
_IDS = msgspec.json.Decoder(_IdRequest)
_FAST_ERRORS = (_Slow, msgspec.DecodeError, RecursionError, ValueError)


_NO_PARENT = "0" * 16  # the invalid span id: as a parent, none


def _hex(value: str, size: int) -> str:
    if len(value) != size or not value.isalnum() or not value.strip("0"):
        raise _Slow  # all zeros: a parent's means none, any other id is refused (the slow path)
    bytes.fromhex(value)  # ValueError when it is not hex: the slow path (base64?) decides
    return value.lower()


def _fast_time(value: int | str) -> int:
    if type(value) is int:
        return value
    if type(value) is str and len(value) <= 25 and value.isdigit() and value.isascii():
        return int(value)
    raise _Slow


def _fast_attributes(items: list[_KeyValue] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not items:
        return out
    for kv in items:
        v = kv.value
        if v is None:
            out[kv.key] = None
            continue
        text, flag = v.stringValue, v.boolValue
        rest = v.intValue is None and v.doubleValue is None and v.arrayValue is None \
            and v.kvlistValue is None and v.bytesValue is None
        if rest and type(text) is str and flag is None:
            out[kv.key] = text
        elif rest and type(flag) is bool and text is None:
            out[kv.key] = flag
        elif text is None and flag is None and v.doubleValue is None and v.arrayValue is None \
                and v.kvlistValue is None and v.bytesValue is None:
            number = v.intValue  # OTLP JSON writes 64-bit integers as text
            if type(number) is int:
                out[kv.key] = number
            elif type(number) is str and _INT.fullmatch(number):
                out[kv.key] = int(number)
            else:
                raise _Slow
        else:
            raise _Slow  # another kind of value (or not one value): the slow path reads it
    return out


def _fast_line(line: bytes, label: str, number: int) -> list[Span]:
    request = _FAST.decode(line)
    out = []
    traces: dict[str, str] = {}  # the spans of a line share a few trace ids: each checked once
    for r, rs in enumerate(request.resourceSpans):
        resource = _fast_attributes(rs.resource.attributes) if rs.resource is not None else {}
        for s, ss in enumerate(rs.scopeSpans):
            for k, raw in enumerate(ss.spans):
                status = raw.status
                parent = raw.parentSpanId
                trace = traces.get(raw.traceId)
                if trace is None:
                    trace = traces[raw.traceId] = _hex(raw.traceId, 32)
                out.append(Span(
                    trace, _hex(raw.spanId, 16), _hex(parent, 16) if parent and parent != _NO_PARENT else "", raw.name,
                    _fast_time(raw.startTimeUnixNano), _fast_time(raw.endTimeUnixNano),
                    _fast_attributes(raw.attributes),
                    _status_error(status, "") if status else None, (label, number, r, s, k), resource,
                    exception_of((e.name, _fast_attributes(e.attributes)) for e in raw.events
                                 if e.name == "exception") if raw.events else None))
    return out


def line_spans(line: bytes, label: str, number: int) -> list[Span]:
    """Every span of one line of an OTLP JSON file, validated (located errors)."""
    try:
        return _fast_line(line, label, number)
    except _FAST_ERRORS:
        return _slow_line(line, f"{label}:{number}")


def line_trace_ids(line: bytes, label: str, number: int) -> list[str]:
    """The trace ids of the spans of one line, each once (cheap: nothing else is decoded)."""
    try:
        traces: dict[str, str] = {}
        for rs in _IDS.decode(line).resourceSpans:
            for ss in rs.scopeSpans:
                for span in ss.spans:
                    if span.traceId not in traces:
                        traces[span.traceId] = _hex(span.traceId, 32)
        return list(traces.values())
    except _FAST_ERRORS:
        return list(dict.fromkeys(span.trace_id for span in _slow_line(line, f"{label}:{number}")))


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The numbered, non-blank lines of a trace file (errors name the file)."""
    return nonblank_lines(path, str(path), "trace file")


def iter_spans(path: Path) -> Iterator[Span]:
    """Every span of an OTLP JSON file, in file order, validated (located errors)."""
    label = str(path)
    for number, line in iter_lines(path):
        yield from line_spans(line, label, number)


def iter_traces(files: list[Path]) -> Iterator[list[Span]]:
    """Every trace of ``files`` (its spans may be spread over lines and files), each as soon as
    its last line is read — in the order the traces end. A first pass reads only the trace ids
    (where each trace ends), so only the traces still open are held in memory, never the whole
    files: a long-lived trace that ends on the last line holds back nothing but itself."""
    for path in files:  # read twice: a pipe would be empty (or hang) the second time
        if path.exists() and not path.is_file():
            raise CaseFileError(f"{path}: not a regular file (a pipe or a device?); the importer reads each file "
                                "twice, so save the traces to a file first")
    last: dict[str, tuple[int, int]] = {}
    for f, path in enumerate(files):
        label = str(path)
        for number, line in iter_lines(path):
            for trace in line_trace_ids(line, label, number):
                last[trace] = (f, number)
    ends: dict[tuple[int, int], list[str]] = {}
    for trace, at in last.items():
        ends.setdefault(at, []).append(trace)
    expected = len(last)
    del last
    open_: dict[str, list[Span]] = {}
    done = 0
    for f, path in enumerate(files):
        label = str(path)
        for number, line in iter_lines(path):
            for span in line_spans(line, label, number):
                open_.setdefault(span.trace_id, []).append(span)
            for trace in ends.pop((f, number), ()):
                if trace not in open_:
                    raise _changed(f"{label}:{number}")
                done += 1
                yield open_.pop(trace)
    if open_ or ends or done != expected:
        raise _changed(", ".join(map(str, files)))


def _changed(where: str) -> CaseFileError:
    return _fail(where, "the file changed while it was read; import it again once it is complete")


# ---- mapping -----------------------------------------------------------------------------------

@dataclass
class ImportedCase:
    """One case read from a trace (a top-level agent invocation, or the whole trace when it
    has none): its input and metadata,
    the steps and model usage mapped from its spans, how it ended and its output, and the
    resource attributes of the service that ran it."""

    case_id: str
    input: dict[str, Any]
    metadata: dict[str, Any]
    steps: list[StepRecorded]
    usage: list[UsageRecorded]
    terminal_status: TerminalStatus
    output: Any
    service: dict[str, Any]
    constraints: list[ConstraintRecorded] = field(default_factory=list)
    truncated: bool = False
    step_limit: int | None = None
    #: the conversation an ADK turn belongs to (``gen_ai.conversation.id`` of its workflow
    #: run): :func:`iter_cases` joins the turns of one conversation into one case
    conversation: str | None = None
    #: when its first span started (ns): the order of a conversation's turns
    start: int = 0
    #: how a case Oloproof exported ended when its system raised (``oloproof.error``,
    #: ``oloproof.error_kind``): read back, so that it stays missing rather than judged
    error: str | None = None
    error_kind: str | None = None


#: the deepest JSON text an attribute's value is parsed from: a recorded value may nest
#: MAX_RECORDED_NESTING levels, and the mapping puts a parsed value inside one more at most
#: (``{"messages": …}``, ``{"final": …}``)
PARSED_NESTING = MAX_RECORDED_NESTING - 1


def _too_deep(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests deeper than ``limit`` (a text with fewer brackets cannot)."""
    return (len(text) >= 2 * limit + 2 and text.count("[") + text.count("{") > limit
            and json_nests_deeper(text.encode("utf-8", "surrogatepass"), limit))


def _json_or_text(value: Any) -> Any:
    """An attribute's text parsed when it is JSON — unless it nests deeper than
    :data:`PARSED_NESTING` levels (no recorded value may, and such text may be too deep to
    decode at all): that text is kept as it is, like any text that is not JSON."""
    if isinstance(value, str) and value[:1] in ("{", "[", '"') or value in ("true", "false", "null"):
        if _too_deep(value, PARSED_NESTING):
            return value
        try:
            return msgspec.json.decode(value)
        except (msgspec.DecodeError, RecursionError):  # unbalanced, deep: not JSON
            return value
    return value


def _first(attrs: dict[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` that ``attrs`` has (GenAI names before their
    OpenInference equivalents), or None."""
    for k in keys:
        if k in attrs:
            return attrs[k]
    return None


def _is_agent(span: Span) -> bool:
    return span.operation in AGENT_OPS


def _opens(span: Span, top: bool) -> bool:
    """Whether ``span`` opens a case — an agent invocation, an ADK workflow run, or (``top``:
    it has no parent in the trace) an OpenInference ``CHAIN``, a LangGraph graph's run, whose
    nodes (LangChain makes each run with "agent" in its name an AGENT) are no cases."""
    op = span.operation
    return op in AGENT_OPS or op in WORKFLOW_OPS or (top and op == "chain")


def _conversation(span: Span) -> str | None:
    value = span.attributes.get("gen_ai.conversation.id")
    return value if isinstance(value, str) and value else None


def cases_of_trace(spans: list[Span]) -> list[ImportedCase]:
    """The cases one trace holds (see the module docstring). Two spans with one id, or parent
    links that loop, are refused (located): no span of a trace is ever dropped silently."""
    by_id: dict[str, Span] = {}
    for s in spans:
        if s.span_id in by_id:
            other = by_id[s.span_id].where
            raise _fail(s.where, f"span id {s.span_id} appears twice in trace {s.trace_id} "
                                 + ("(the same place read twice: a file given twice?)" if other == s.where
                                    else f"(also at {other})"))
        by_id[s.span_id] = s
    _refuse_loops(spans, by_id)
    children: dict[str, list[Span]] = {}
    for s in spans:
        children.setdefault(s.parent_id if s.parent_id in by_id else "", []).append(s)
    for kids in children.values():
        kids.sort(key=_start_order)

    def opens(s: Span) -> bool:
        return _opens(s, s.parent_id not in by_id)

    # the spans with an invocation above them, from the top down: each span visited once (a
    # chain of spans each the child of the previous costs its length, not its square)
    below_agent: set[str] = set()
    todo = [(s, False) for s in children.get("", [])]
    while todo:
        s, above = todo.pop()
        if above:
            below_agent.add(s.span_id)
        inner = above or opens(s)
        todo.extend((c, inner) for c in children.get(s.span_id, ()))
    roots = [s for s in sorted(spans, key=lambda s: (s.start, s.span_id)) if opens(s) and s.span_id not in below_agent]
    trace = spans[0].trace_id
    if not roots:
        return [_case(trace, [], children, trace, tops=children.get("", []))]
    # the spans outside every invocation (the app's own span around the agent, a span after
    # it...) are kept, with the first case, like any other unmapped span
    inside = {r.span_id for r in roots}
    stack = list(inside)
    while stack:
        for c in children.get(stack.pop(), ()):
            if c.span_id not in inside:
                inside.add(c.span_id)
                stack.append(c.span_id)
    outside = [s for s in spans if s.span_id not in inside]
    # the invocations of one conversation (ADK runs each agent of a turn as its own invocation,
    # side by side) are one case
    groups: list[list[Span]] = []
    talks: dict[str, list[Span]] = {}
    for root in roots:
        talk = _conversation(root)
        if talk is not None and talk in talks:
            talks[talk].append(root)
            continue
        groups.append([root])
        if talk is not None:
            talks[talk] = groups[-1]
    return [_case(trace if len(groups) == 1 else f"{trace}-{group[0].span_id}", group, children, trace,
                  outside if i == 0 else ())
            for i, group in enumerate(groups)]


def _start_order(s: Span) -> tuple[int, int, str]:
    return s.start, s.end, s.span_id


def iter_cases(traces: Iterable[list[Span]], spans: list[int] | None = None
               ) -> Iterator[tuple[list[Span], list[ImportedCase]]]:
    """The cases of each of ``traces`` (:func:`iter_traces`), with the trace's spans, as soon as
    the trace is mapped — but the turns of an ADK conversation (one trace each, one
    ``gen_ai.conversation.id``), joined into one case (given with its first turn's trace) once
    the last trace is read: a conversation's turns may be anywhere in the files, so their
    traces are held until then. ``spans[0]``, when given, counts the spans read."""
    held: dict[str, list[tuple[list[Span], ImportedCase]]] = {}
    for trace in traces:
        if spans is not None:
            spans[0] += len(trace)
        cases = []
        for case in cases_of_trace(trace):
            if case.conversation is None:
                cases.append(case)
            else:
                held.setdefault(case.conversation, []).append((trace, case))
        if cases:
            yield trace, cases
    for parts in held.values():
        parts.sort(key=lambda part: part[1].start)
        yield parts[0][0], [_joined([case for _, case in parts])]


def _joined(parts: list[ImportedCase]) -> ImportedCase:
    """One case of a conversation's turns (in the order they started): their steps in turn (a
    ``handoff`` where the agent in control at the end of one turn is not the one that starts
    the next), model usage and unmapped spans; its id and input the first turn's, its end the
    last's."""
    if len(parts) == 1:
        return parts[0]
    named = any(s.agent is not None for c in parts for s in c.steps)
    first = next((s.agent for c in parts for s in c.steps if s.agent is not None), None)
    steps: list[StepRecorded] = []
    usage: list[UsageRecorded] = []
    unmapped: list[Any] = []
    for case in parts:
        now = (case.steps[0].agent or first) if named and case.steps else None
        was = (steps[-1].to_agent if steps[-1].kind == "handoff" else steps[-1].agent) if steps else None
        if was is not None and now is not None and was != now:
            steps.append(StepRecorded(len(steps) + 1, "handoff", None, None, None, was, now))
        offset = len(steps)
        steps.extend(msgspec.structs.replace(s, index=offset + s.index, agent=(s.agent or first) if named else None)
                     for s in case.steps)
        usage.extend(msgspec.structs.replace(u, step_index=u.step_index + offset) for u in case.usage)
        unmapped.extend(case.metadata.get("otel.unmapped_spans", ()))
    head, last = parts[0], parts[-1]
    metadata = {k: v for k, v in head.metadata.items() if k != "otel.unmapped_spans"}
    metadata["otel.trace_ids"] = [c.metadata.get("otel.trace_id") for c in parts]
    if unmapped:
        metadata["otel.unmapped_spans"] = unmapped
    return ImportedCase(head.case_id, head.input, metadata, steps, usage, last.terminal_status, last.output,
                        head.service, conversation=head.conversation, start=head.start)


def _refuse_loops(spans: list[Span], by_id: dict[str, Span]) -> None:
    """Refuse parent links that loop (located at the first span found on the loop). Linear:
    each span's chain of parents is followed only as far as the first span already cleared
    (in a chain of spans each the child of the previous, every link is followed once)."""
    cleared: set[str] = set()  # spans whose parent links reach the top of the trace
    for s in spans:
        path: list[str] = []
        on_path: set[str] = set()
        p: Span | None = s
        while p is not None and p.span_id not in cleared:
            if p.span_id in on_path:
                raise _fail(p.where, f"span {p.span_id}: its parent links loop back to it (trace {p.trace_id})")
            on_path.add(p.span_id)
            path.append(p.span_id)
            p = by_id.get(p.parent_id) if p.parent_id else None
        cleared.update(path)


#: where an agent invocation's answer is: GenAI's output messages, OpenInference's output,
#: Pydantic AI's final_result
FINAL_KEYS = ("gen_ai.output.messages", "output.value", "final_result")


def tool_call_step(name: str, a: dict[str, Any], calls: list[tuple[str, dict[str, Any]]] | None = None
                   ) -> dict[str, Any]:
    """The ``tool_call`` step of a tool span (GenAI or OpenInference attributes).

    ``calls``: the tool calls the case's last model decision asked for (:func:`tool_calls_of`).
    OpenInference's LangChain spans give a one-argument tool's ``input.value`` as the bare value
    (``ord-0``, not ``{"order_id": "ord-0"}``), and older LangChain gives Python's text of the
    arguments (``{'order_id': 'ord-0'}``): the call the model asked for with those arguments
    gives them back as JSON (and is used up)."""
    tool = str(_first(a, "gen_ai.tool.name", "tool.name") or name.split(" ", 1)[-1])
    args = _json_or_text(_first(a, "gen_ai.tool.call.arguments", "input.value", "tool.parameters"))
    if isinstance(args, dict) and "kwargs" in args and args.keys() <= _SMOLAGENTS_CALL and not args.get("args") \
            and isinstance(args["kwargs"], dict) and "gen_ai.tool.call.arguments" not in a:
        args = args["kwargs"]  # smolagents' (OpenInference) input.value: how Tool.__call__ was called
    if calls and args is not None and not isinstance(args, dict) and "gen_ai.tool.call.arguments" not in a:
        given = _python_literal(args)
        for i, (called, full) in enumerate(calls):
            if called == tool and (given == full or len(full) == 1 and _bare(args, next(iter(full.values())))):
                args = full
                del calls[i]
                break
    return {"kind": "tool_call", "tool_name": tool, "arguments": args if args is not None else {}}


_SMOLAGENTS_CALL = frozenset(("args", "kwargs", "sanitize_inputs_outputs"))


def _bare(given: Any, value: Any) -> bool:
    """Whether ``given`` (a parsed ``input.value``) is ``value`` written bare."""
    if given == value:
        return True
    try:
        return isinstance(given, str) and msgspec.json.decode(given) == value
    except msgspec.DecodeError:
        return False


def _python_literal(text: Any) -> Any:
    """Python's text of a dict (``str(arguments)``) as the dict; None for anything else."""
    if isinstance(text, str) and text[:1] == "{":
        try:
            return ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return None


def tool_calls_of(messages: Any) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls (name, arguments) of a model decision's output messages, as
    :func:`model_step` reads OpenInference's (``tool_calls: [{function: {name, arguments}}]``)."""
    calls = []
    for m in messages if isinstance(messages, list) else ():
        for c in m.get("tool_calls", ()) if isinstance(m, dict) and isinstance(m.get("tool_calls"), list) else ():
            f = c.get("function") if isinstance(c, dict) else None
            if isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("arguments"), dict):
                calls.append((f["name"], f["arguments"]))
    return calls


def tool_result_step(name: str, a: dict[str, Any], error: str | None,
                     exception: tuple[str, str] | None = None) -> dict[str, Any]:
    """The ``tool_result`` step of a tool span: its result, or its error — ``exception``: the
    span's ``exception`` event (:func:`exception_of`), the error's type and message when there
    is one; else ``error.type`` and the status message."""
    tool = str(_first(a, "gen_ai.tool.name", "tool.name") or name.split(" ", 1)[-1])
    error_type = a.get("error.type")
    if error_type is not None or error is not None:
        kind, message = exception if exception is not None else _status_text(error or "", error_type)
        return {"kind": "tool_result", "tool_name": tool, "raised": True,
                "result": {"error": {"type": kind, "message": message}}}
    return {"kind": "tool_result", "tool_name": tool,
            "result": _lc_content(_json_or_text(_first(a, "gen_ai.tool.call.result", "output.value")))}


_SDK_ERROR = re.compile(r"[^{]*: (\{.*\})", re.DOTALL)


def _status_text(message: str, error_type: Any) -> tuple[str, str]:
    """An error's (type, message) from a span's status message (and ``error.type``)."""
    kind = str(error_type or "Error")
    head, traceback, _ = message.partition("Traceback (most recent call last):")
    if traceback:  # LangChain's run error: the exception's repr, then its traceback (paths)
        return _repr_error(head.strip(), error_type)
    sdk = _SDK_ERROR.fullmatch(message)
    if sdk is not None:  # the OpenAI Agents SDK's (OpenInference): "Error running tool: {..., 'error': ...}"
        data = _python_literal(sdk.group(1))
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return kind, data["error"]
    if error_type is not None and message.startswith(f"{error_type}: "):  # "ValueError: ..." (Google ADK)
        return kind, message[len(str(error_type)) + 2:]
    return kind, message


def _repr_error(text: str, error_type: Any) -> tuple[str, str]:
    """``ValueError('not delivered')`` as (``ValueError``, ``not delivered``); ``error.type``,
    when given, names the type."""
    m = re.fullmatch(r"([A-Za-z_][\w.]*)\((.*)\)", text, re.DOTALL)
    if m is None:
        return str(error_type or "Error"), text
    try:
        args: Any = ast.literal_eval(f"({m.group(2)},)") if m.group(2) else ()
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        args = None
    message = args[0] if args is not None and len(args) == 1 and isinstance(args[0], str) else text
    return str(error_type or m.group(1)), message


def _lc_content(value: Any, parse: bool = True) -> Any:
    """A LangChain message serialised as JSON — ``{"type": "tool", "data": {…}}`` (its
    ``messages_to_dict``) or ``{"lc": 1, "type": "constructor", "kwargs": {…}}`` (its ``dumpd``) —
    as its content (``parse``: parsed when it is JSON, as LangGraph's ToolNode writes a dict
    result); any other value as it is."""
    if isinstance(value, dict):
        fields = value.get("kwargs") if value.get("lc") == 1 and value.get("type") == "constructor" else (
            value.get("data") if value.keys() == {"type", "data"} and isinstance(value["type"], str) else None)
        if isinstance(fields, dict) and "content" in fields:
            content = fields["content"]
            if isinstance(content, list):  # content blocks: their text
                texts = [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
                content = "\n".join(texts) if texts else content
            return _json_or_text(content) if parse else content
    return value


def model_step(a: dict[str, Any]) -> dict[str, Any]:
    """The ``decision`` step of a model span."""
    model = _first(a, "gen_ai.request.model", "gen_ai.response.model", "llm.model_name") or "model"
    messages = _messages(a, "gen_ai.input.messages", "llm.input_messages.", "input.value")
    return {"kind": "decision", "tool_name": str(model),
            "arguments": {"messages": messages} if messages is not None else {},
            "result": _messages(a, "gen_ai.output.messages", "llm.output_messages.", "output.value")}


def _messages(a: dict[str, Any], genai: str, openinference: str, value: str) -> Any:
    """A model span's messages: GenAI's, else OpenInference's flattened ones
    (``llm.input_messages.0.message.role`` … as ``[{"role", "content", "tool_calls": [{"id",
    "function": {"name", "arguments"}}]}]``, arguments parsed), else its ``input.value`` /
    ``output.value`` (for LangChain an envelope with run ids: the flattened ones come first)."""
    if genai in a:
        return _json_or_text(a[genai])
    tree: dict[str, Any] = {}
    for key, v in a.items():
        if key.startswith(openinference):
            node: Any = tree
            # at most _MAX_PATH levels (OpenInference's have a handful): the rest of a longer key is one name
            *path, leaf = key[len(openinference):].split(".", _MAX_PATH)
            for part in path:
                node = node.setdefault(part, {}) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node[leaf] = _json_or_text(v) if leaf == "arguments" else v
    if tree:
        return _unflat(tree)
    return _json_or_text(a.get(value))


_OI_WRAPPERS = ("message", "tool_call", "message_content")
_MAX_PATH = 32


def _unflat(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isascii() and k.isdigit() for k in node):
        return [_unflat(node[k]) for k in sorted(node, key=int)]
    if len(node) == 1 and next(iter(node)) in _OI_WRAPPERS:
        return _unflat(next(iter(node.values())))
    return {k: _unflat(v) for k, v in node.items()}


def model_usage(a: dict[str, Any], start: int, end: int, after: int) -> UsageRecorded | None:
    """The usage a model span reports (``gen_ai.usage.*`` or OpenInference token counts), or
    None when it reports no token count.

    Args:
        a: the span's attributes.
        start: the span's start, in nanoseconds.
        end: its end, in nanoseconds: latency is ``end - start`` in ms (None when unknown).
        after: the number of steps recorded before it (the usage's ``step_index``).

    Returns:
        A :class:`UsageRecorded` with cost 0 (traces carry none), or None.
    """
    tokens_in = _count(_first(a, "gen_ai.usage.input_tokens", "llm.token_count.prompt"))
    tokens_out = _count(_first(a, "gen_ai.usage.output_tokens", "llm.token_count.completion"))
    if tokens_in is None and tokens_out is None:
        return None  # none reported (or not as counts: kept in the span's attributes only)
    latency = (end - start) / 1e6 if end >= start > 0 else None
    model = _first(a, "gen_ai.request.model", "gen_ai.response.model", "llm.model_name") or "model"
    return UsageRecorded(int(tokens_in or 0), int(tokens_out or 0), 0.0, latency, str(model), after)


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value < 10**15:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value < 1e15:
        return int(value)
    return None


def message_text(messages: Any) -> Any:
    """The text of the last message of GenAI output messages (``content`` text, or the text
    ``parts``) — or of a LangGraph state's ``messages`` (LangChain's serialised messages); the
    value itself when it is no such list."""
    state = messages.get("messages") if isinstance(messages, dict) else None
    listed = state if isinstance(state, list) else messages  # a LangGraph state: its messages
    if isinstance(listed, list) and listed and isinstance(listed[-1], dict):
        last = listed[-1]
        text = _lc_content(last, parse=False)
        if text is not last:
            return text
        if isinstance(last.get("content"), str):
            return last["content"]
        parts = last.get("parts")
        if isinstance(parts, list):
            texts = [p["content"] for p in parts if isinstance(p, dict) and isinstance(p.get("content"), str)]
            if texts:
                return "\n".join(texts)
    return messages


def _own_steps(span: Span) -> bool:
    return "oloproof.step.kind" in span.attributes


def step_agent(a: dict[str, Any]) -> str | None:
    """The agent a span says it acts for: ``gen_ai.agent.name`` (GenAI: Pydantic AI and Google
    ADK put it on every span of an agent), OpenInference's ``agent.name``, or — LangGraph,
    whose nodes run one graph inside another — the node that runs the graph the span's node is
    in (LangChain's metadata ``langgraph_checkpoint_ns``, the path of nodes to the span's
    ``langgraph_node``: ``billing:…|tools:…`` is the ``tools`` node of the graph that node
    ``billing`` runs). None when it says none (a node of a graph run directly)."""
    for key in ("gen_ai.agent.name", "agent.name"):
        name = a.get(key)
        if isinstance(name, str) and name:
            return name
    path = a.get("metadata.langgraph_checkpoint_ns")  # LangChain metadata flattened
    if path is None:
        metadata = a.get("metadata")  # OpenInference: one JSON text
        if isinstance(metadata, str) and "langgraph_checkpoint_ns" in metadata:
            metadata = _json_or_text(metadata)
        path = metadata.get("langgraph_checkpoint_ns") if isinstance(metadata, dict) else None
    if isinstance(path, str) and "|" in path:
        return path.split("|")[-2].split(":", 1)[0] or None
    return None


def agent_name(span: Span) -> str | None:
    """The name of the agent an agent span invokes (:func:`step_agent`; else OpenInference's
    ``graph.node.id``; else smolagents' span name, ``triage.run``), or None: an agent span
    without one (the OpenAI Agents SDK's whole run, a LangGraph node named "agent") is no
    agent of its own."""
    a = span.attributes
    name = step_agent(a)
    if name is not None:
        return name
    node = a.get("graph.node.id")
    if isinstance(node, str) and node:
        return node
    if span.name.endswith(".run") and any(k.startswith("smolagents.") for k in a):
        return span.name[:-4] or None
    return None


def handoff_target(span: Span) -> str | None:
    """The agent a tool span hands control to, when it is a handoff, not a tool call: the
    OpenAI Agents SDK's handoff span (OpenInference: a TOOL span ``handoff to X`` without a
    tool name, its ``output.value`` the agent), Google ADK's ``transfer_to_agent`` (its
    ``agent_name`` argument) and a LangGraph ``transfer_to_X`` / ``transfer_back_to_X`` tool
    whose result is a ``Command`` (its ``goto``). ``""`` for a handoff that does not say to
    whom (ADK without its content captured: the next agent to act says); None for any other
    span, and for a handoff that failed."""
    if span.error is not None:
        return None
    a = span.attributes
    tool = _first(a, "gen_ai.tool.name", "tool.name")
    if tool is None:
        if span.name == "handoff" or span.name.startswith("handoff to "):
            to = a.get("output.value")
            return to if isinstance(to, str) and to else span.name[len("handoff to "):]
        return None
    if tool == "transfer_to_agent":
        args = _json_or_text(_first(a, "gen_ai.tool.call.arguments", "input.value"))
        to = args.get("agent_name") if isinstance(args, dict) else None
        if isinstance(to, str) and to:
            return to
        return "" if a.get("gen_ai.tool.type") == "TransferToAgentTool" else None
    if isinstance(tool, str) and tool.startswith(("transfer_to_", "transfer_back_to_")):
        command = _json_or_text(_first(a, "gen_ai.tool.call.result", "output.value"))
        goto = command.get("goto") if isinstance(command, dict) and "update" in command else None
        if isinstance(goto, list) and len(goto) == 1:
            goto = goto[0]
        if isinstance(goto, str) and goto:
            return goto
    return None


def _no_step(span: Span) -> bool:
    """A tool span that is no call of the agent's: smolagents' ``final_answer`` (how its agent
    says its answer, which is the agent span's output)."""
    return span.name == "FinalAnswerTool" and span.attributes.get("tool.name") == "final_answer"


def answer_of(messages: Any) -> Any:
    """The text of a model decision's output messages when the model answered (text, no tool
    call), else None."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    parts = last.get("parts")
    if last.get("tool_calls") or isinstance(parts, list) and any(
            isinstance(p, dict) and p.get("type") == "tool_call" for p in parts):
        return None
    text = message_text(messages)
    return text if isinstance(text, str) and text else None


class StepMapper:
    """Spans to steps: THE mapping (docs/otel.md), the importer's and the live processor's, so
    that the same spans give the same steps in the same order either way.

    :meth:`walk` goes through spans depth first, in start order (never in the order they
    ended: Google ADK ends a model call after the tool call it asked for). Each step names the
    agent its span says (:func:`step_agent`), else the innermost agent span around it that
    names one, else the agent that had control last. A step by another agent than the one in
    control is preceded by a ``handoff`` to it; entering a named agent span is one to it (from
    ``graph.node.parent_id`` when nothing acted before), leaving a nested one gives control
    back to the agent around it, and a handoff span or transfer tool (:func:`handoff_target`)
    is a ``handoff`` step, never a tool call. A case's root (an agent invocation, an ADK
    workflow run, an outermost LangChain chain) gives the ``final`` step — its answer
    (:data:`FINAL_KEYS`), else the last model decision's text when it answered — and the
    terminal status: ``failure`` when it ended in error, ``success`` when it answered.

    Attributes:
        raw: the steps, as dicts of StepRecorded's fields (``agent`` None when unknown).
        usage: the model usage of the decisions.
        unmapped: the spans no step was mapped from (name, span id, attributes).
        control: the agent in control after the last step.
        status: the last root's terminal status.
        output: the last root's answer as its span gives it (parsed), or None.
        error: the last root's error ``{"type", "message"}`` when it ended in error.
    """

    def __init__(self, control: str | None = None, own: bool = False) -> None:
        self.raw: list[dict[str, Any]] = []
        self.usage: list[UsageRecorded] = []
        self.unmapped: list[dict[str, Any]] = []
        self.control = control
        self.status: TerminalStatus = "unknown"
        self.output: Any = None
        self.error: dict[str, Any] | None = None
        self._own = own  # an Oloproof export's case: its final step is one of its own steps
        self._scopes: list[str | None] = []  # the agent spans entered, innermost last (None: unnamed)
        self._calls: list[tuple[str, dict[str, Any]]] = []  # the tool calls of the last decision
        self._answer: Any = None  # the last decision's text, when it asked for no tool call
        self._root: Span | None = None

    def walk(self, tops: list[Span], children: dict[str, list[Span]]) -> None:
        """Map ``tops`` and every span below them (``children``: span id → its child spans,
        in start order). No recursion: a chain of spans of any depth costs its length."""
        stack: list[tuple[Span, bool, bool]] = [(s, True, True) for s in reversed(tops)]
        while stack:
            span, entering, top = stack.pop()
            if not entering:
                self._leave(span)
                continue
            if _own_steps(span):
                _own_step(span, self.raw)
                continue
            if self._root is None and _opens(span, top):
                self._root = span
            if self._enter(span) or span is self._root:
                stack.append((span, False, top))
            stack.extend((c, True, False) for c in reversed(children.get(span.span_id, ())))

    def _enter(self, span: Span) -> bool:
        """Map a span entered; True when it needs leaving too (a tool's result, an agent's end)."""
        a, op = span.attributes, span.operation
        if op in TOOL_OPS:
            target = handoff_target(span)
            if target is not None:
                if target:
                    self._handoff(self._agent_of(span), target)
                return False
            if _no_step(span):
                self._unmapped(span)
                return False
            self._add(self._agent_of(span), tool_call_step(span.name, a, self._calls))
            return True
        if op in MODEL_OPS:
            self._add(self._agent_of(span), model_step(a))
            result = self.raw[-1]["result"]
            self._calls, self._answer = tool_calls_of(result), answer_of(result)
            u = model_usage(a, span.start, span.end, len(self.raw))
            if u is not None:
                self.usage.append(u)
            return False
        if op in AGENT_OPS:
            name = agent_name(span)
            self._scopes.append(name)
            if name is not None:
                parent = a.get("graph.node.parent_id") if self.control is None else self.control
                if isinstance(parent, str) and parent and parent != name:
                    self.raw.append({"kind": "handoff", "agent": parent, "to_agent": name})
                self.control = name
            return True
        if span is not self._root:
            self._unmapped(span)
        return False

    def _leave(self, span: Span) -> None:
        op = span.operation
        if op in TOOL_OPS:  # the result, after what the tool itself did
            self._add(self._agent_of(span), tool_result_step(span.name, span.attributes, span.error, span.exception))
        elif op in AGENT_OPS and self._scopes:
            name = self._scopes.pop()
            outer = next((n for n in reversed(self._scopes) if n is not None), None)
            if name is not None and outer is not None and self.control is not None and self.control != outer:
                # a nested agent returned: control comes back to its caller
                self.raw.append({"kind": "handoff", "agent": self.control, "to_agent": outer})
                self.control = outer
        if span is self._root:
            self._root = None
            self._finish(span)

    def _finish(self, root: Span) -> None:
        """A root ended: its answer is the final step, and its end the terminal status."""
        answer = _first(root.attributes, *FINAL_KEYS)
        final = None
        if answer is not None:
            final = message_text(_json_or_text(answer))
            self.output = _json_or_text(answer)
        elif root.error is None and root.operation != "chain" and self._answer is not None:
            final = self.output = self._answer  # the OpenAI Agents SDK's and ADK's spans carry no answer
        else:
            self.output = None
        if final is not None and not self._own:
            agent = self.control if self.control is not None else agent_name(root)
            self._add(agent, {"kind": "final", "result": final})
        if root.error is not None:
            kind, message = root.exception if root.exception is not None else _status_text(
                root.error, root.attributes.get("error.type"))
            self.status, self.error = "failure", {"type": kind, "message": message}
        else:
            self.status, self.error = ("success" if final is not None else "unknown"), None

    def _agent_of(self, span: Span) -> str | None:
        own = step_agent(span.attributes)
        if own is not None:
            return own
        return next((n for n in reversed(self._scopes) if n is not None), self.control)

    def _add(self, agent: str | None, step: dict[str, Any]) -> None:
        if agent is not None and self.control is not None and agent != self.control:
            self.raw.append({"kind": "handoff", "agent": self.control, "to_agent": agent})
        step["agent"] = agent
        self.raw.append(step)
        if agent is not None:
            self.control = agent

    def _handoff(self, agent: str | None, to: str) -> None:
        if agent is not None and self.control is not None and agent != self.control:
            self.raw.append({"kind": "handoff", "agent": self.control, "to_agent": agent})
        if (agent if agent is not None else self.control) != to:
            self.raw.append({"kind": "handoff", "agent": agent if agent is not None else self.control, "to_agent": to})
        self.control = to

    def _unmapped(self, span: Span) -> None:
        self.unmapped.append({"name": span.name, "span_id": span.span_id, "attributes": span.attributes})


def named_steps(raw: list[dict[str, Any]], named: bool | None = None) -> list[dict[str, Any]]:
    """``raw`` with every step naming an agent, or none (a trajectory names the agent of every
    step or of none): when some name one (``named`` None) or ``named``, the steps before the
    first agent known name that agent; otherwise none names any."""
    if named is None:
        named = any(r.get("agent") for r in raw)
    if not named:
        return [{**r, "agent": None} for r in raw]
    first = next((r["agent"] for r in raw if r.get("agent")), None)
    return [r if r.get("agent") or first is None else {**r, "agent": first} for r in raw]


def _case(case_id: str, roots: list[Span], children: dict[str, list[Span]], trace: str,
          outside: Iterable[Span] = (), tops: list[Span] | None = None) -> ImportedCase:
    """The case of ``roots`` (the invocations of one conversation; none: the trace's ``tops``)."""
    root = roots[0] if roots else None
    attrs = root.attributes if root is not None else {}
    own = root is not None and "oloproof.case_id" in attrs
    m = StepMapper(own=own)
    m.walk(children.get(root.span_id, []) if own and root is not None else roots or tops or [], children)
    truncated, step_limit = False, None
    talk = None
    error = error_kind = None
    if own and root is not None:  # own: root is not None
        output = _strict(attrs, "oloproof.output", root.where)
        status = attrs.get("oloproof.terminal_status", "unknown")
        input_ = _strict(attrs, "oloproof.input", root.where)
        metadata = _strict(attrs, "oloproof.metadata", root.where) or {}
        if not isinstance(metadata, dict):
            raise _fail(root.where, f"attribute oloproof.metadata: expected a JSON object, got {quoted(metadata)}")
        truncated = attrs.get("oloproof.truncated") is True
        limit = attrs.get("oloproof.step_limit")
        step_limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else None
        # a trial's or a derived case's id (c/2, c~t) is no plain case id: one character changes
        case_id = str(attrs["oloproof.case_id"]).replace("/", "-").replace("~", "-")
        for key in ("oloproof.error", "oloproof.error_kind"):
            if key in attrs and not isinstance(attrs[key], str):
                raise _fail(root.where, f"attribute {key}: expected text, got {quoted(attrs[key])}")
        error, error_kind = attrs.get("oloproof.error"), attrs.get("oloproof.error_kind")
    else:
        status = m.status if root is not None else "unknown"
        output = {"final": m.output} if m.output is not None else (
            {"error": m.error} if m.error is not None else None)
        messages = _first(attrs, "gen_ai.input.messages", "input.value") if root is not None else None
        input_ = {"trace_id": trace, **({"messages": _json_or_text(messages)} if messages is not None else {})}
        metadata = {"otel.trace_id": trace}
        if root is not None:
            metadata["otel.span_id"] = root.span_id
            talk = _conversation(root)
            if talk is not None:
                metadata["otel.conversation_id"] = talk
    unmapped = m.unmapped
    unmapped.extend({"name": span.name, "span_id": span.span_id, "attributes": span.attributes} for span in outside)
    if unmapped:
        metadata = {**metadata, "otel.unmapped_spans": unmapped}
    steps = [StepRecorded(i, r["kind"], r.get("tool_name"), r.get("arguments"), r.get("result"), r.get("agent"),
                          r.get("to_agent"), raised=bool(r.get("raised")), fault=r.get("fault"))
             for i, r in enumerate(named_steps(m.raw), start=1)]
    top = root or (tops[0] if tops else None)
    service = top.resource if top is not None else {}
    constraints = []
    if own and root is not None:
        for item in _strict(attrs, "oloproof.constraints", root.where) or []:
            if isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], bool) \
                    and isinstance(item[2], int) and 1 <= item[2] <= len(steps):
                constraints.append(ConstraintRecorded(item[0], item[1], item[2]))
    ended = cast(TerminalStatus, status) if status in ("success", "failure", "unknown") else "unknown"
    return ImportedCase(case_id, input_ if isinstance(input_, dict) else {"input": input_}, metadata, steps,
                        usage=m.usage, terminal_status=ended, output=output, service=service,
                        constraints=constraints, truncated=truncated, step_limit=step_limit,
                        # only an ADK turn is joined with the others of its conversation (iter_cases)
                        conversation=talk if root is not None and root.operation in WORKFLOW_OPS else None,
                        start=top.start if top is not None else 0, error=error, error_kind=error_kind)


def _strict(attrs: dict[str, Any], key: str, where: str) -> Any:
    """The value of attribute ``key``, which Oloproof exported as canonical JSON text. No value
    Oloproof records nests deeper than MAX_RECORDED_NESTING levels: deeper JSON text is refused
    (located at ``where``), never decoded."""
    value = attrs.get(key)
    if not isinstance(value, str):
        return value
    if _too_deep(value, MAX_RECORDED_NESTING):
        raise _fail(where, f"attribute {key}: JSON nested deeper than {MAX_RECORDED_NESTING} levels "
                           "(the limit for a recorded value; Oloproof never exports one)")
    try:
        return msgspec.json.decode(value)
    except (msgspec.DecodeError, RecursionError):  # unbalanced, deep: not JSON
        return value


def _own_step(span: Span, raw: list[dict[str, Any]]) -> None:
    """A step Oloproof exported (``oloproof.step.*``): read back exactly; a tool call whose
    result came next carries that result too (``oloproof.result*``)."""
    a = span.attributes
    for key in ("oloproof.step.kind", "oloproof.step.tool_name", "oloproof.step.agent", "oloproof.step.to_agent",
                "oloproof.step.fault", "oloproof.result.agent", "oloproof.result.fault"):
        if key in a and not isinstance(a[key], str):
            raise _fail(span.where, f"attribute {key}: expected text, got {quoted(a[key])}")
    raw.append({"kind": a["oloproof.step.kind"], "tool_name": a.get("oloproof.step.tool_name"),
                "arguments": _strict(a, "oloproof.step.arguments", span.where),
                "result": _strict(a, "oloproof.step.result", span.where), "agent": a.get("oloproof.step.agent"),
                "to_agent": a.get("oloproof.step.to_agent"), "raised": bool(a.get("oloproof.step.raised")),
                "fault": a.get("oloproof.step.fault")})
    if a.get("oloproof.result.paired"):
        raw.append({"kind": "tool_result", "tool_name": a.get("oloproof.step.tool_name"),
                    "result": _strict(a, "oloproof.result", span.where), "agent": a.get("oloproof.result.agent"),
                    "raised": bool(a.get("oloproof.result.raised")), "fault": a.get("oloproof.result.fault")})


#: the span helpers the live span processor (oloproof.otel) shares with the importer
first_of = _first
json_or_text = _json_or_text
