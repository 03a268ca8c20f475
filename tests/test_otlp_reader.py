"""The OTLP JSON reader (issue 15's performance work): the fast path (typed msgspec decoding)
reads exactly what the slow, fully located path reads — or hands the line to it — and traces
spread over lines and files come out whole, in the order of their first span, while only the
traces still open are held."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oloproof.config import otlp
from oloproof.errors import CaseFileError

TRACE = "0af7651916cd43dd8448eb211c80319c"


def span(k: int, trace: str = TRACE, parent: str | None = None, **extra) -> dict:
    out = {"traceId": trace, "spanId": f"{k:016x}", "name": f"execute_tool t{k}", "kind": 1,
           "startTimeUnixNano": str(1000 + k), "endTimeUnixNano": 2000 + k,
           "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                          {"key": "gen_ai.tool.name", "value": {"stringValue": f"t{k}"}}]}
    if parent:
        out["parentSpanId"] = parent
    out.update(extra)
    return out


def line(*spans: dict, resource: object = None) -> bytes:
    rs: dict = {"scopeSpans": [{"scope": {"name": "x"}, "spans": list(spans)}]}
    if resource is not None:
        rs["resource"] = resource
    return json.dumps({"resourceSpans": [rs]}).encode()


def fields(spans: list) -> list[tuple]:
    return [(s.trace_id, s.span_id, s.parent_id, s.name, s.start, s.end, s.attributes, s.error, s.where,
             s.resource, s.operation) for s in spans]


def both(raw: bytes) -> tuple[object, object]:
    """What the public reader and the slow path each make of a line (spans, or the error)."""
    def run(f):
        try:
            return fields(f())
        except CaseFileError as e:
            return ("error", str(e))
    return run(lambda: otlp.line_spans(raw, "t.jsonl", 3)), run(lambda: otlp._slow_line(raw, "t.jsonl:3"))


VALUES = [
    {"stringValue": "text"}, {"boolValue": True}, {"intValue": "42"}, {"intValue": 42}, {"intValue": "-7"},
    {"intValue": "4x"}, {"intValue": True}, {"intValue": 1.5}, {"doubleValue": 0.5}, {"doubleValue": "NaN"},
    {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}},
    {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}},
    {"bytesValue": "AAEC"}, {}, None, {"stringValue": "a", "boolValue": True}, {"stringValue": "a", "other": 1},
    {"stringValue": None}, {"stringValue": 5}, {"unknownValue": 1}, {"intValue": "1_000"}, {"intValue": " 5"},
]
IDS = [TRACE, TRACE.upper(), "CvdlGRbNQ92ESOshHICZnA==", "zz" * 16, TRACE[:-2], 17, None, "", "0a" * 15 + " 0"]
SPAN_IDS = ["00f067aa0ba902b7", "00F067AA0BA902B7", "APBnqguqArc=", "00f067aa0ba902b", "xyz", None, 5]
TIMES = ["123", 123, "-1", "12.5", 12.5, True, None, "", "1" * 30, "٣"]
STATUSES = [None, {}, {"code": 2, "message": "boom"}, {"code": "STATUS_CODE_ERROR"}, {"code": 1}, "bad", [],
            {"code": 2, "message": 7}]


@settings(max_examples=300, deadline=None)
@given(value=st.sampled_from(VALUES), trace=st.sampled_from(IDS), span_id=st.sampled_from(SPAN_IDS),
       start=st.sampled_from(TIMES), status=st.sampled_from(STATUSES), parent=st.sampled_from(SPAN_IDS + [""]),
       name=st.sampled_from(["chat m", "", None, 3]), resource=st.sampled_from(
           [None, {}, [], {"attributes": [{"key": "service.name", "value": {"stringValue": "s"}}]},
            {"attributes": [{"key": "n", "value": {"intValue": "x"}}]}, "r"]))
def test_the_fast_path_reads_every_line_as_the_located_path_does(value, trace, span_id, start, status, parent,
                                                                  name, resource):
    raw = span(1, trace=trace)
    raw.update(spanId=span_id, startTimeUnixNano=start, name=name)
    raw["attributes"].append({"key": "x", "value": value} if value is not None else {"key": "x"})
    if status is not None:
        raw["status"] = status
    if parent:
        raw["parentSpanId"] = parent
    fast, slow = both(line(raw, resource=resource))
    assert fast == slow


def test_the_fast_path_takes_the_common_shapes_itself(monkeypatch):
    """Hex ids, text/bool/int values, times as text or numbers, an error status: no slow path."""
    def slow(*args):
        raise AssertionError("the slow path was used")

    raw = line(span(1, status={"code": 2, "message": "boom"}),
               span(2, parent=f"{1:016x}", attributes=[{"key": "n", "value": {"intValue": "12"}},
                                                       {"key": "b", "value": {"boolValue": False}}]),
               resource={"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]})
    expected = fields(otlp._slow_line(raw, "t.jsonl:3"))
    monkeypatch.setattr(otlp, "_slow_line", slow)
    got = otlp.line_spans(raw, "t.jsonl", 3)
    assert fields(got) == expected
    assert got[0].error == "boom" and got[1].attributes == {"n": 12, "b": False}
    assert got[1].resource == {"service.name": "svc"}
    assert got[1].where == "t.jsonl:3: resourceSpans[0].scopeSpans[0].spans[1]"


def test_deeply_nested_values_are_refused_with_their_location(tmp_path):
    deep = '{"arrayValue": {"values": [' * 3000 + '{"stringValue": "x"}' + "]}}" * 3000
    raw = span(1)
    raw["attributes"].append({"key": "deep", "value": "DEEP"})
    (tmp_path / "deep.jsonl").write_bytes(line(raw).replace(b'"DEEP"', deep.encode()) + b"\n")
    with pytest.raises(CaseFileError, match=r"deep\.jsonl:1: nested deeper than"):
        list(otlp.iter_spans(tmp_path / "deep.jsonl"))


def trace_id(n: int) -> str:
    return f"{n:032x}"


def test_traces_spread_over_lines_and_files_come_out_whole_in_the_order_they_end(tmp_path):
    a, b, c = trace_id(1), trace_id(2), trace_id(3)
    (tmp_path / "1.jsonl").write_bytes(b"\n".join([
        line(span(1, a), span(2, b)),          # a and b open
        b"   ",
        line(span(3, b)),                      # b goes on
        line(span(4, c)),                      # c starts and ends here
    ]) + b"\n")
    (tmp_path / "2.jsonl").write_bytes(line(span(5, a), span(6, b)) + b"\n")  # a and b end in the next file
    out = [[s.span_id[-1] for s in t] for t in otlp.iter_traces([tmp_path / "1.jsonl", tmp_path / "2.jsonl"])]
    assert out == [["4"], ["1", "5"], ["2", "3", "6"]]  # c, then a and b: the order they end in


def lines_read(monkeypatch) -> list[int]:
    """The numbers of the lines the second pass has read so far, as it reads them."""
    read: list[int] = []
    real = otlp.line_spans

    def spy(raw, label, number):
        read.append(number)
        return real(raw, label, number)

    monkeypatch.setattr(otlp, "line_spans", spy)
    return read


def test_a_trace_ended_is_handed_on_before_the_next_lines_are_read(tmp_path, monkeypatch):
    """Only the traces still open are held: a trace whose last line was read (and every trace
    before it) is yielded before the reader goes on."""
    lines = [line(*(span(k * 10 + j, trace_id(k)) for j in range(3))) for k in range(1, 6)]
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    read = lines_read(monkeypatch)
    for k, trace in enumerate(otlp.iter_traces([tmp_path / "t.jsonl"]), start=1):
        assert read[-1] == k and len(trace) == 3  # yielded right after its own line


def test_a_trace_open_from_first_line_to_last_holds_back_no_other(tmp_path, monkeypatch):
    """A long-lived trace (its root on the first line, its end on the last) is the only one held:
    every other trace is handed on right after its own line."""
    long_trace = trace_id(99)
    lines = [line(span(990, long_trace), *(span(10 + j, trace_id(1)) for j in range(3)))]
    lines += [line(*(span(k * 10 + j, trace_id(k)) for j in range(3))) for k in range(2, 6)]
    lines += [line(span(991, long_trace))]
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    read = lines_read(monkeypatch)
    got = []
    for trace in otlp.iter_traces([tmp_path / "t.jsonl"]):
        got.append((trace[0].trace_id, read[-1]))
    assert got[:5] == [(trace_id(k), k) for k in range(1, 6)]  # each right after its own line
    assert got[5] == (long_trace, 6) and len(got) == 6


def test_a_file_that_changes_between_the_two_passes_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(line(span(1, trace_id(1))) + b"\n")
    real = otlp.line_spans

    def grown(raw, label, number):  # the file was appended to between the passes
        return real(line(span(1, trace_id(1)), span(2, trace_id(9))), label, number)

    monkeypatch.setattr(otlp, "line_spans", grown)
    with pytest.raises(CaseFileError, match="changed while it was read"):
        list(otlp.iter_traces([path]))


def test_base64_ids_on_a_line_are_grouped_with_their_hex_spelling(tmp_path):
    import base64

    b64 = base64.b64encode(bytes.fromhex(TRACE)).decode()
    (tmp_path / "t.jsonl").write_bytes(line(span(1, TRACE)) + b"\n" + line(span(2, b64)) + b"\n")
    [trace] = list(otlp.iter_traces([tmp_path / "t.jsonl"]))
    assert [s.trace_id for s in trace] == [TRACE, TRACE]
