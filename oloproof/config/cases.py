"""JSONL case files: validated line by line before anything runs (SPEC §3).

Every problem is reported as ``file:line: case 'id': field 'x': message`` and raised as
:class:`~oloproof.errors.CaseFileError` (exit code 2). Reading is streaming: validation keeps
only ids and fingerprints, so a 50,000-case suite does not sit in memory.

A case may declare one fault (SPEC §13a): ``"fault": {"tool": T, "kind": K, "call": N}``
(``call`` counts from 1, default 1; ``scope``, only with ``kind: denied``, is the denial's
``required_scope``). It is validated here (one object, a known kind, a whole ``call`` ≥ 1),
stored normalised (``call`` filled in) and folded into the case's fingerprint; whether the
system has a tool of that name is checked once the system is loaded
(:func:`oloproof.app.project.check_tool_names`, with every other tool the suite names).

Limits (:mod:`oloproof.config.limits`, docs/input-limits.md): a line nests at most
``MAX_NESTING`` (64) levels (its object is level 1) — checked on the bytes before decoding;
a case id has at most ``MAX_ID_LENGTH`` (200) characters and no control character, line
separator, surrogate, Unicode non-character, ``/`` or ``~``; values quoted in an error are cut
to ``QUOTE_LIMIT`` (60) characters. A misspelt field (``inputs``, ``initial-state``,
``expect``) gets a did-you-mean.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from oloproof.config.files import open_regular
from oloproof.config.limits import (
    MAX_NESTING,
    case_id_problem,
    json_nests_deeper,
    quoted,
)
from oloproof.config.locate import did_you_mean, dotted
from oloproof.config.matchers import any_of_problem, tool_calls_problem
from oloproof.errors import CaseFileError
from oloproof.events import case_fingerprint


def plain_case_id(v: str) -> str:
    """A case id as a case file or a prefix file may hold it (config.limits.case_id_problem)."""
    problem = case_id_problem(v)
    if problem is not None:
        raise ValueError(problem)
    return v


#: a case id, validated: non-empty, no control character, no ``/`` or ``~`` …
CaseId = Annotated[str, Field(min_length=1), AfterValidator(plain_case_id)]


class CaseModel(BaseModel):
    """One line of a case file (SPEC §3), the source of truth for what a case may hold: an
    unknown field is refused (with a did-you-mean), and a line the fast path rejects is
    validated here for a located message."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # the slow path: built on first use

    id: CaseId
    input: dict[str, Any]
    initial_state: dict[str, Any] | None = None
    expected: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    #: labels an evaluator's ``when: {tags: [...]}`` selects cases by (SPEC §18.5)
    tags: list[Annotated[str, Field(min_length=1)]] = []
    fault: Any = None  # checked by _check_fault, for a located message


class _CaseLine(msgspec.Struct, forbid_unknown_fields=True):
    """The fast path: well-formed lines decode straight into this; anything it rejects goes
    through :class:`CaseModel`, the source of truth, for a located message."""

    id: str
    input: dict[str, Any]
    initial_state: dict[str, Any] | None = None
    expected: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    tags: list[str] = []
    fault: Any = None


_FAST = msgspec.json.Decoder(_CaseLine)


class SuiteCase(msgspec.Struct, frozen=True):
    """One validated case, with where it came from and its fingerprint."""

    id: str
    input: dict[str, Any]
    initial_state: dict[str, Any] | None
    expected: dict[str, Any]
    metadata: dict[str, Any]
    line: int
    fingerprint: str
    cluster: str | None = None  # a derived case's source id
    #: the case's declared fault, normalised: ``{"tool", "kind", "call"}`` (+ ``"scope"``)
    fault: dict[str, Any] | None = None
    #: a frozen prefix case (oloproof.config.prefixes): its boundary, frozen steps, versions
    #: and next-action matchers
    prefix: dict[str, Any] | None = None
    #: the case's ``tags`` (what ``when: {tags: [...]}`` selects by); not part of its question,
    #: so not of its fingerprint
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class SuiteInfo:
    """What validating a suite found: ``count`` cases (derived ones included) out of
    ``sources`` source cases, the suite digest (a SHA-256 over every case's id and
    fingerprint), the ids when asked for, and the tools its faults and ``expected`` name."""

    count: int
    digest: str
    ids: frozenset[str] = frozenset()
    sources: int = 0
    #: each tool named by a case's fault, once: (tool, "file:line", case id) where first named
    fault_tools: tuple[tuple[str, str, str], ...] = ()
    #: each tool named by a case's ``expected`` (``expected.tools``, ``expected.tool_calls[].tool``),
    #: once: (tool, "file:line", case id, field) where first named
    expected_tools: tuple[tuple[str, str, str, str], ...] = ()


#: the kinds a case's fault may declare — :data:`oloproof.system.ALL_FAULT_KINDS` (config sits
#: beside system in the layers and may not import it; a test keeps the two equal)
CASE_FAULT_KINDS = ("error", "timeout", "malformed", "timeout_after_effect", "denied")
FAULT_FIELDS = ("tool", "kind", "call", "scope")


def _suite_case(line: Any, number: int, fault: Any) -> SuiteCase:
    """The case a checked line (fast-decoded or validated) of line ``number`` stands for."""
    return SuiteCase(
        id=line.id,
        input=line.input,
        initial_state=line.initial_state,
        expected=line.expected,
        metadata=line.metadata,
        line=number,
        fingerprint=case_fingerprint(line.input, line.initial_state, line.expected, fault),
        fault=fault,
        tags=tuple(dict.fromkeys(line.tags)) if line.tags else (),
    )


def _check_fault(case: Any, where: str) -> dict[str, Any] | None:
    """The case's fault, validated and normalised (``call`` filled in), or None."""
    fault = case.fault
    if fault is None:
        return None
    label = f"{where}: case {quoted(case.id)}"
    if isinstance(fault, list):
        raise CaseFileError(
            f"{label}: field 'fault': one primary fault per trial: give one object "
            f'{{"tool", "kind", "call"}}, got a list of {len(fault)}')
    if not isinstance(fault, dict):
        raise CaseFileError(f'{label}: field \'fault\': must be an object {{"tool", "kind", "call"}}, '
                            f"got {quoted(fault)}")
    for key in fault:
        if key not in FAULT_FIELDS:
            raise CaseFileError(f"{label}: field {quoted('fault.' + str(key))}: unknown field"
                                f"{did_you_mean(key, FAULT_FIELDS)} (a fault has {', '.join(FAULT_FIELDS)})")
    tool = fault.get("tool")
    if not isinstance(tool, str) or not tool:
        shown = "it is missing" if "tool" not in fault else f"got {quoted(tool)}"
        raise CaseFileError(f"{label}: field 'fault.tool': must name the tool to fault, {shown}")
    kind = fault.get("kind")
    if kind not in CASE_FAULT_KINDS:
        shown = "it is missing" if "kind" not in fault else \
            f"unknown kind {quoted(kind)}{did_you_mean(kind, CASE_FAULT_KINDS) if isinstance(kind, str) else ''}"
        raise CaseFileError(f"{label}: field 'fault.kind': {shown} (one of {', '.join(CASE_FAULT_KINDS)})")
    call = fault.get("call", 1)
    if type(call) is not int or call < 1:  # a bool is no count
        shown = f"{str(call).lower()} (a boolean)" if isinstance(call, bool) else quoted(call)
        raise CaseFileError(f"{label}: field 'fault.call': must be a whole number >= 1 (calls of the tool "
                            f"count from 1), got {shown}")
    out: dict[str, Any] = {"tool": tool, "kind": kind, "call": call}
    if "scope" in fault:
        scope = fault["scope"]
        if kind != "denied":
            raise CaseFileError(f"{label}: field 'fault.scope': only a 'denied' fault has a required "
                                f"scope; this one is {quoted(kind)}")
        if not isinstance(scope, str) or not scope:
            raise CaseFileError(f"{label}: field 'fault.scope': must be the scope the denial requires "
                                f"(a non-empty string), got {quoted(scope)}")
        out["scope"] = scope
    return out


def json_line_hint(raw: bytes, number: int) -> str:
    """Why a line of a JSON-lines file may not parse, when its shape says so: a byte-order
    mark (an editor's "UTF-8 with BOM"), or an object spread over several lines."""
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        return "; the file starts with a UTF-8 byte-order mark (BOM): save it as UTF-8 without BOM"
    text = raw.strip()
    if text.startswith((b"{", b"[")) and text.count(b"{") + text.count(b"[") > text.count(b"}") + text.count(b"]"):
        return ("; a case is one line: this JSON object goes on past the end of the line — put each case "
                "on a line of its own (JSON lines), e.g. with `jq -c . cases.json > cases.jsonl`")
    if text in (b"}", b"]", b"},", b"],") or (text[:1] == b'"' and text.rstrip(b",")[-1:] in (b'"', b"}", b"]")):
        return ("; this looks like the middle or end of a JSON object spread over several lines: a case "
                "file holds one case a line (JSON lines)")
    return ""


def expected_tool_names(expected: Any) -> Iterator[tuple[str, str]]:
    """(field, tool) of every tool a case's ``expected`` names: ``expected.tools[i]`` and
    ``expected.tool_calls[i].tool`` (the system must declare them, SPEC §18.1)."""
    if not isinstance(expected, dict):
        return
    tools = expected.get("tools")
    if isinstance(tools, list):
        for i, t in enumerate(tools):
            if isinstance(t, str):
                yield f"expected.tools[{i}]", t
    calls = expected.get("tool_calls")
    if isinstance(calls, list):
        for i, c in enumerate(calls):
            if isinstance(c, dict) and isinstance(c.get("tool"), str):
                yield f"expected.tool_calls[{i}].tool", c["tool"]


#: the ops of ``expected.state_delta`` (SPEC §18.5), read by ``state_delta``
DELTA_OPS = ("set", "unchanged", "appended", "removed", "length_delta", "increased_by", "decreased_by")
DELTA_FIELDS = ("path", "op", "value")


def state_delta_problem(deltas: Any) -> tuple[str, str] | None:
    """The first problem of an ``expected.state_delta`` as (field, message), or None: a
    non-empty list of ``{path, op, value}`` objects, each path parsing, each op one of
    :data:`DELTA_OPS`, ``value`` present where the op needs one and of its type (``set``: any
    value; ``unchanged``: none; ``appended``/``removed``: a non-empty list of items;
    ``length_delta``: a whole number; ``increased_by``/``decreased_by``: a finite number >= 0),
    and any matcher in a ``set``, ``appended`` or ``removed`` value well formed
    (:func:`oloproof.config.matchers.check_pattern`)."""
    import math

    from oloproof.config.matchers import MatcherError, check_pattern
    from oloproof.config.paths import PathError, parse_path

    if not isinstance(deltas, list) or not deltas:
        return "expected.state_delta", f"must be a non-empty list of {{path, op, value}} objects, got {quoted(deltas)}"
    for i, d in enumerate(deltas):
        field = f"expected.state_delta[{i}]"
        if not isinstance(d, dict):
            return field, f"must be an object {{path, op, value}}, got {quoted(d)}"
        for key in d:
            if key not in DELTA_FIELDS:
                return (f"{field}.{key}", f"unknown field{did_you_mean(key, DELTA_FIELDS)} "
                        f"(a delta has {', '.join(DELTA_FIELDS)})")
        if "path" not in d:
            return f"{field}.path", "missing: the state path the delta is about (e.g. accounts.a1.balance)"
        try:
            parse_path(d["path"])
        except PathError as e:
            return f"{field}.path", str(e)
        op = d.get("op")
        if op not in DELTA_OPS:
            shown = "missing" if "op" not in d else \
                f"unknown op {quoted(op)}{did_you_mean(op, DELTA_OPS) if isinstance(op, str) else ''}"
            return f"{field}.op", f"{shown} (one of {', '.join(DELTA_OPS)})"
        where = f"{field}.value"
        if op == "unchanged":
            if "value" in d:
                return where, "op 'unchanged' takes no value (the path must hold its initial value)"
            continue
        if "value" not in d:
            return where, f"missing: op {op!r} needs a value"
        value = d["value"]
        if op in ("appended", "removed") and (not isinstance(value, list) or not value):
            return where, f"op {op!r} needs a non-empty list of items, got {quoted(value)}"
        if op == "length_delta" and type(value) is not int:  # a bool is no count
            return where, f"op 'length_delta' needs a whole number (negative: shorter), got {quoted(value)}"
        if op in ("increased_by", "decreased_by") and (
                type(value) not in (int, float) or not math.isfinite(value) or value < 0):
            return where, f"op {op!r} needs a finite number >= 0, got {quoted(value)}"
        if op in ("set", "appended", "removed"):
            try:
                check_pattern(value, where)  # its items (set: the value) may hold matchers
            except MatcherError as e:
                return e.field, e.message
    return None


def _check_expected(case: Any, where: str) -> None:
    if "state_delta" in case.expected:
        problem = state_delta_problem(case.expected["state_delta"])
        if problem is not None:
            raise CaseFileError(f"{where}: case {quoted(case.id)}: field {quoted(problem[0])}: {problem[1]}")
    if "route" in case.expected:
        route = case.expected["route"]
        if not isinstance(route, list) or not route or not all(isinstance(a, str) and a for a in route):
            raise CaseFileError(
                f"{where}: case {quoted(case.id)}: field 'expected.route': must be a list of agent names, "
                f"got {quoted(route)}"
            )
    if "tools" in case.expected:
        tools = case.expected["tools"]
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise CaseFileError(
                f"{where}: case {quoted(case.id)}: field 'expected.tools': must be a list of tool names, "
                f"got {quoted(tools)}"
            )
    # expected.tool_calls (agent_tool_calls) and {"$any_of": [...]} values (output_matches)
    problem = (tool_calls_problem(case.expected["tool_calls"]) if "tool_calls" in case.expected else None) \
        or any_of_problem(case.expected)
    if problem is not None:
        raise CaseFileError(f"{where}: case {quoted(case.id)}: field {quoted(problem[0])}: {problem[1]}")


#: case files this process validated whole, by path: the file's identity and times then
#: (:func:`_stamp`). Iterating such a file again, unchanged, skips the checks that only look
#: for mistakes (a duplicate key, a bad id): a run parses its cases once more, validates them once.
_VALIDATED: dict[Path, tuple[int, ...]] = {}


def _stamp(path: Path) -> tuple[int, ...] | None:
    """What changes when a file is written: device, inode, size, modification and change times."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class CaseFile:
    """A JSONL case file. ``validate()`` checks every line; iterating yields :class:`SuiteCase`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.label = shown_path(self.path)  # the path as messages show it

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        return nonblank_lines(self.path, self.label, "case file")

    def _parse_checked(self, number: int, raw: bytes) -> SuiteCase:
        """A line of a file validated whole and unchanged since: decoded, its fault and
        fingerprint made as :meth:`_parse` does, without looking for a duplicate key again; a
        line :meth:`_parse_line` reads through the model goes the whole way again."""
        try:
            line = _FAST.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            return self._parse(number, raw)
        tags = line.tags
        if case_id_problem(line.id) is not None or tags and not all(isinstance(t, str) and t for t in tags):
            return self._parse(number, raw)  # what _parse_line reads through the model
        return _suite_case(line, number, _check_fault(line, f"{self.label}:{number}"))

    def _parse(self, number: int, raw: bytes) -> SuiteCase:
        if json_nests_deeper(raw, MAX_NESTING):
            raise CaseFileError(too_deep(f"{self.label}:{number}", raw))
        try:
            return self._parse_line(number, raw)
        except RecursionError as e:  # not expected within the nesting limit; never a traceback
            raise CaseFileError(f"{self.label}:{number}: the case is nested too deeply to be read") from e

    def _parse_line(self, number: int, raw: bytes) -> SuiteCase:
        try:
            line = _FAST.decode(raw)
        except msgspec.DecodeError:
            line = None
        if line is not None and case_id_problem(line.id) is None and _duplicate_key(raw) is None \
                and all(isinstance(t, str) and t for t in line.tags):
            model: Any = line
        else:
            model = self._validate(number, raw)
        _check_expected(model, f"{self.label}:{number}")
        return _suite_case(model, number, _check_fault(model, f"{self.label}:{number}"))

    def _validate(self, number: int, raw: bytes) -> CaseModel:
        where = f"{self.label}:{number}"
        try:
            data = msgspec.json.decode(raw)
        except msgspec.DecodeError as e:
            raise CaseFileError(f"{where}: malformed JSON ({e}){json_line_hint(raw, number)}") from e
        if not isinstance(data, dict):
            raise CaseFileError(f"{where}: a case must be a JSON object, got {type(data).__name__}")
        duplicate = _duplicate_key(raw)
        if duplicate is not None:
            case_id = data.get("id")
            label = f"case {quoted(case_id)}" if isinstance(case_id, str) else "case (no id)"
            raise CaseFileError(f"{where}: {label}: duplicate key {quoted(duplicate)} (JSON keeps only the last "
                                "one; write it once)")
        case_id = data.get("id")
        label = f"case {quoted(case_id)}" if isinstance(case_id, str) else "case (no id)"
        try:
            model = CaseModel.model_validate(data)
        except ValidationError as e:
            errors = e.errors()
            # an unknown field first: a misspelt one ('inputs') also makes its field missing
            err = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
            loc = tuple(err["loc"])
            if err["type"] == "extra_forbidden":
                msg = f"unknown field{did_you_mean(loc[-1], CaseModel.model_fields)}"
            else:
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] != "missing":
                    msg += f", got {quoted(err.get('input'))}"
            raise CaseFileError(f"{where}: {label}: field {quoted(dotted(loc, cap=False))}: {msg}") from e
        return model

    def validate(self, keep_ids: bool = False) -> SuiteInfo:
        """Check every line; raise :class:`CaseFileError` on the first problem. The ids are
        returned only with ``keep_ids`` (validity labels need them; a plain run does not)."""
        before = _stamp(self.path)
        seen: dict[str, int] = {}
        fault_tools: dict[str, tuple[str, str, str]] = {}
        expected_tools: dict[str, tuple[str, str, str, str]] = {}
        digest = hashlib.sha256()
        for number, raw in self._lines():
            case = self._parse(number, raw)
            if case.fault is not None and case.fault["tool"] not in fault_tools:
                tool = case.fault["tool"]
                fault_tools[tool] = (tool, f"{self.label}:{number}", case.id)
            for field, tool in expected_tool_names(case.expected):
                if tool not in expected_tools:
                    expected_tools[tool] = (tool, f"{self.label}:{number}", case.id, field)
            if case.id in seen:
                raise CaseFileError(
                    f"{self.label}:{number}: case {quoted(case.id)}: field 'id': duplicate id "
                    f"(first used on line {seen[case.id]})"
                )
            seen[case.id] = number
            # tags choose what ``when:`` judges: a change of tags is a change of the suite
            tags = "\x00" + "\x00".join(case.tags) if case.tags else ""
            digest.update(f"{case.id}\x00{case.fingerprint}{tags}\n".encode())
        if not seen:
            raise CaseFileError(f"{self.label}: no cases")
        if before is not None and _stamp(self.path) == before:  # not written while it was read
            _VALIDATED[self.path] = before
        return SuiteInfo(count=len(seen), digest=digest.hexdigest(),
                         ids=frozenset(seen) if keep_ids else frozenset(), sources=len(seen),
                         fault_tools=tuple(fault_tools.values()), expected_tools=tuple(expected_tools.values()))

    def __iter__(self) -> Iterator[SuiteCase]:
        checked = _VALIDATED.get(self.path)
        parse = self._parse_checked if checked is not None and checked == _stamp(self.path) else self._parse
        for number, raw in self._lines():
            yield parse(number, raw)


def shown_path(path: Path, limit: int = 200) -> str:
    """A file path as an error message shows it (a path from a config file may be huge)."""
    text = str(path)
    return text if len(text) <= limit else quoted(text, limit)


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"\s*:?|[\[\]{}]')


def too_deep(where: str, raw: bytes, limit: int = MAX_NESTING, id_key: str = "id") -> str:
    """The message for a JSON line nested deeper than ``limit``: the line's id and the
    top-level field where it happens, read from the bytes (such a line may be too deep to be
    decoded at all), up to the point where the limit is passed. ``id_key``: the field
    holding the case id (``case_id`` in a label file)."""
    depth = 0
    key = case_id = None
    expect_id = False
    for m in _TOKEN.finditer(raw):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            if depth > limit:
                break
        elif tok in (b"]", b"}"):
            depth -= 1
        elif depth == 1 and tok.endswith(b":"):
            key = _text(tok.rstrip(b": \t\r\n"))
            expect_id = key == id_key
        elif expect_id and depth == 1:
            case_id = _text(tok)
            expect_id = False
    label = f"case {quoted(case_id)}" if isinstance(case_id, str) else "case (id not read before it)"
    field = f"field {quoted(key)}: " if isinstance(key, str) else ""
    return f"{where}: {label}: {field}nested deeper than {limit} levels (the limit)"


def _text(token: bytes) -> str | None:
    try:
        value = msgspec.json.decode(token)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, str) else None


# unrolled (a run of plain characters, then an escape and another run): one alternation a
# character made a 50 MB value take 28 s to scan
_KEY = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:')
#: past this size a line is checked by the C JSON scanner at once (faster than any regex there)
_SCAN_DIRECTLY = 1 << 16


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


def _duplicate_key(raw: bytes) -> str | None:
    """A key written twice in one JSON object of the line (msgspec, like most parsers, keeps
    the last silently), or None. Parsed again only when some key text repeats in the line."""
    if len(raw) <= _SCAN_DIRECTLY:
        keys = _KEY.findall(raw)
        if len(keys) == len(set(keys)):
            return None
    import json

    try:
        json.loads(raw, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        return str(e.args[0])
    except (ValueError, RecursionError):
        return None
    return None


def nonblank_lines(path: Path, label: str, what: str) -> Iterator[tuple[int, bytes]]:
    """The numbered, non-blank lines of a JSON-lines file (cases, traces); a file that cannot
    be opened is a :class:`CaseFileError` naming it (``what``: "case file", "trace file")."""
    try:
        fh = open_regular(path, label, CaseFileError)  # a FIFO or a device: refused, never read
    except FileNotFoundError as e:
        raise CaseFileError(f"{label}: {what} not found") from e
    except IsADirectoryError as e:
        raise CaseFileError(f"{label}: is a folder, not a {what}") from e
    except OSError as e:
        raise CaseFileError(f"{label}: cannot read ({type(e).__name__}: {e.strerror})") from e
    with fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                yield number, raw
