"""Records that users build: steps, trajectories, constraint checks, checkpoints, cases.

The structs are plain msgspec structs so that building one costs well under a microsecond
(SPEC §2.2a pins their signatures). They are *not* validated when built: validation happens
when a record is written (:func:`validate_trajectory`), with an error naming the case and field.

**What a recorded value may hold** (a case's output, a tool's arguments and result, a
checkpoint's or the sandbox's state — :func:`encode_recorded`; docs/input-limits.md):

* no NaN, Infinity or -Infinity (JSON has none; msgspec would store them as ``null``);
* no value that contains itself (``d["self"] = d``);
* at most :data:`MAX_RECORDED_NESTING` (128) levels of nested lists and mappings.

A value that breaks one of these errors its case (``invalid_record``, the message names the
path, e.g. ``output.items[2].price: NaN is not allowed (JSON has no NaN)``); it is never
stored as something else. The check costs two byte scans of the encoded JSON in the common
case; the value itself is walked only when the JSON holds a ``null`` that a non-finite float
may have become (confirmed on its msgpack encoding first) or more brackets than the limit.

Error messages quote a user's value with :func:`quoted`: at most :data:`QUOTE_LIMIT` (60)
characters of it, then "…" and its full length — never a 50 MB value whole.
"""

from __future__ import annotations

import dataclasses
import math
import re
import reprlib
from typing import Any, get_args

import msgspec

from oloproof.errors import RecordError
from oloproof.events import EvidenceKind, StepKind, StepRecorded, TerminalStatus, enc_hook

#: the values the log's Literal-typed fields may hold (oloproof.events): one list, read by both
STEP_KINDS = frozenset(get_args(StepKind))
TERMINAL_STATUSES = frozenset(get_args(TerminalStatus))

AGENT_TRAJECTORY_V1 = "agent_trajectory/v1"
ENVIRONMENT_STATE_V1 = "environment_state/v1"
#: every attempt at an external effect, with its idempotency key (``current_case().effect``)
EFFECT_LEDGER_V1 = "effect_ledger/v1"
#: tool access, waits, continuity, deadlines and deliverables (``current_case().access`` …)
RELEASE_EVIDENCE_V1 = "release_evidence/v1"
KNOWN_RECORDS = (AGENT_TRAJECTORY_V1, ENVIRONMENT_STATE_V1, EFFECT_LEDGER_V1, RELEASE_EVIDENCE_V1)
EVIDENCE_KINDS: tuple[str, ...] = get_args(EvidenceKind)


class _StepHead(msgspec.Struct, frozen=True):
    index: int
    kind: str


class AgentStep(_StepHead, frozen=True, kw_only=True):
    """One step of an agent trajectory.

    ``AgentStep(index, kind, *, tool_name=None, arguments=None, result=None, agent=None,
    to_agent=None)``. ``index`` is 1-based and contiguous within a trajectory; ``kind`` is one
    of message, tool_call, tool_result, observation, decision, final, handoff.
    """

    tool_name: str | None = None
    arguments: Any = None
    result: Any = None
    agent: str | None = None
    to_agent: str | None = None


class AgentConstraintCheck(msgspec.Struct, frozen=True):
    """A check the environment made (``passed``) about the step ``step_index`` it observed."""

    name: str
    passed: bool
    step_index: int


class _CheckpointHead(msgspec.Struct, frozen=True):
    step_index: int
    state: Any


class AgentCheckpoint(_CheckpointHead, frozen=True, kw_only=True):
    """A resume point *before* step ``step_index``, with the environment state at that point."""

    id: str | None = None


class _TrajectoryHead(msgspec.Struct, frozen=True):
    steps: tuple[AgentStep, ...]
    terminal_status: str


class AgentTrajectory(_TrajectoryHead, frozen=True, kw_only=True):
    """An ``agent_trajectory/v1`` record.

    ``truncated=True`` means the agent hit its step limit and the steps are only a prefix of
    what it would have done: evaluators give a verdict on it only when the prefix decides it.
    """

    truncated: bool = False
    step_limit: int | None = None
    constraints: tuple[AgentConstraintCheck, ...] = ()
    checkpoints: tuple[AgentCheckpoint, ...] = ()


class Case(msgspec.Struct, frozen=True):
    """What the system under test receives. ``expected`` is withheld on purpose."""

    id: str
    input: Any
    initial_state: Any = None
    metadata: dict[str, Any] = {}


class PrefixSnapshot(msgspec.Struct, frozen=True):
    """What a :class:`~oloproof.Resumable` system receives in ``resume(snapshot)`` (SPEC §14a):
    the world of a frozen prefix case just before its boundary.

    ``goal`` (the task as the case stated it), ``instructions`` (the instructions the agent
    ran under, or None), ``steps`` (the frozen :class:`AgentStep` records before the boundary:
    messages, tool calls and their results, model decisions), ``state`` (the environment at
    the boundary; the sandbox is already reset to it) and ``metadata`` (the case's metadata,
    with ``case_id``, ``before_step`` and, when the snapshot lists them,
    ``remaining_acceptance_checks``). Nothing after the boundary is in it.
    """

    goal: Any
    instructions: str | None
    steps: tuple[AgentStep, ...]
    state: Any
    metadata: dict[str, Any] = {}


# ---- what a python check sees and returns (SPEC §18.5; docs/writing-a-check.md) ----------

#: the verdicts a check may return (oloproof.evaluate.base)
VERDICT_KINDS = ("pass", "fail", "missing", "excluded")
#: longest reason code a check may give
MAX_REASON_LENGTH = 64
_REASON_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def reason_code_problem(reason: Any) -> str | None:
    """Why ``reason`` is not a reason code, or None when it is one: a reason code is a short
    name like the built-in ones (``no_state_recorded``, ``FAIL_TOOL_ACCESS``) — a letter, then
    letters, digits and underscores, at most :data:`MAX_REASON_LENGTH` characters. A sentence
    belongs in a check's own output, not in a code that is counted and compared across runs."""
    if not isinstance(reason, str):
        return f"a reason code is text, got {type(reason).__name__} {quoted(reason)}"
    if len(reason) > MAX_REASON_LENGTH or not _REASON_CODE.fullmatch(reason):
        return (f"{quoted(reason)} is not a reason code: a letter, then letters, digits and underscores, "
                f"at most {MAX_REASON_LENGTH} characters (e.g. 'wrong_amount')")
    return None


class Verdict(msgspec.Struct, frozen=True):
    """What a python check returns (``{type: python}``, SPEC §18.5): ``pass``, ``fail``,
    ``missing`` (not observed: the case stays in the denominator) or ``excluded`` (the
    question does not apply: the case leaves it), with a reason code.

    Build one with :meth:`pass_`, :meth:`fail`, :meth:`missing` or :meth:`excluded`. ``missing``
    and ``excluded`` need a reason, ``fail`` may have one; a reason is a short code
    (:func:`reason_code_problem`), checked when the verdict is built (``ValueError``), so a
    check that builds a bad one errors — its case is ``missing`` (``evaluator_error``), never
    passed.
    """

    verdict: str
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICT_KINDS:
            raise ValueError(f"verdict {quoted(self.verdict)} is not one of {', '.join(VERDICT_KINDS)}")
        if self.reason is None:
            if self.verdict in ("missing", "excluded"):
                raise ValueError(f"a {self.verdict} verdict needs a reason code (e.g. "
                                 f"Verdict.{self.verdict}('no_answer'))")
            return
        problem = reason_code_problem(self.reason)
        if problem is not None:
            raise ValueError(problem)

    @classmethod
    def pass_(cls) -> Verdict:
        """The case passes (``pass_``: ``pass`` is a Python keyword)."""
        return _PASS

    @classmethod
    def fail(cls, reason: str | None = None) -> Verdict:
        """The case fails, optionally with a reason code (``fail("wrong_amount")``)."""
        return _FAIL if reason is None else cls("fail", reason)

    @classmethod
    def missing(cls, reason: str) -> Verdict:
        """The case could not be observed (``missing("no_answer")``): it stays in the
        denominator and is never counted as passed."""
        return cls("missing", reason)

    @classmethod
    def excluded(cls, reason: str) -> Verdict:
        """The question does not apply to the case (``excluded("no_transfer_asked")``): it
        leaves the denominator."""
        return cls("excluded", reason)


_PASS = Verdict("pass")
_FAIL = Verdict("fail")


class ReplayResult(msgspec.Struct, frozen=True, kw_only=True):
    """One replay of a case as a check sees it: its ``steps`` (:class:`AgentStep`; empty when
    it recorded no trajectory), ``terminal_status`` (None: no trajectory) and ``truncated``,
    its ``output``, its final ``state`` (None with ``state_recorded`` False when it recorded
    none) and its ``error`` (None unless the replay raised)."""

    steps: tuple[AgentStep, ...] = ()
    terminal_status: str | None = None
    truncated: bool = False
    output: Any = None
    state: Any = None
    state_recorded: bool = False
    error: str | None = None


class FaultReplay(msgspec.Struct, frozen=True, kw_only=True):
    """The replays of one fault a ``fault_recovery`` evaluator of the suite asks for (SPEC
    §7.1): the first result of ``tool`` replaced by ``fault``, from the latest checkpoint before
    that call. ``control`` is the replay with no change; ``faithful`` is True when it ran cleanly
    and reproduced the recording (same steps from the checkpoint, terminal status and state) —
    only then is the fault replayed, as ``faulted``. Either is None when it was not run."""

    tool: str
    fault: str
    faithful: bool = False
    control: ReplayResult | None = None
    faulted: ReplayResult | None = None


class CaseView(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded case, as a python check (``{type: python}``, SPEC §18.5) sees it.

    A frozen, public projection of the log, made fresh for each call (a check that changes
    the dicts inside changes nothing another evaluator sees):

    * ``id``, ``input``, ``expected`` (the case's ``expected``, ``{}`` when it has none),
      ``initial_state``, ``metadata`` and ``tags``, as the case file gave them;
    * ``output``: what the system returned;
    * ``steps``: the trajectory's steps (:class:`AgentStep`, in order; empty when the system
      recorded no ``agent_trajectory/v1``), with ``terminal_status`` (None: no trajectory) and
      ``truncated`` (the steps are a prefix: the agent hit its step limit — judge it only when
      the prefix decides, else return ``Verdict.missing("truncated")``);
    * ``state``: the environment state the case left (``environment_state/v1``);
      ``state_recorded`` is False, and ``state`` None, when the system recorded none;
    * ``error``: None when the check is called (a case whose system raised is ``missing``
      without calling it), kept for other readers of the view;
    * ``replays``: ``"TOOL:FAULT"`` -> :class:`FaultReplay`, the fault replays that the suite's
      ``fault_recovery`` evaluators run for this case (empty without them).

    Build one yourself to unit-test a check: every field but ``id`` has a default.
    """

    id: str
    input: Any = None
    expected: dict[str, Any] = {}
    output: Any = None
    steps: tuple[AgentStep, ...] = ()
    initial_state: Any = None
    state: Any = None
    state_recorded: bool = False
    metadata: dict[str, Any] = {}
    tags: tuple[str, ...] = ()
    terminal_status: str | None = None
    truncated: bool = False
    error: str | None = None
    replays: dict[str, FaultReplay] = {}


def _step_types() -> tuple[type[AgentStep] | type[StepRecorded], ...]:
    from oloproof.events import StepRecorded

    return (AgentStep, StepRecorded)


def _fail(case_id: str, field: str, message: str) -> RecordError:
    return RecordError(f"case {case_id!r}: agent_trajectory/v1 field {field}: {message}")


_STEP_TYPES: tuple[type[AgentStep] | type[StepRecorded], ...] = ()


def validate_steps(steps: Any, case_id: str) -> None:
    """Check a sequence of steps; raise :class:`RecordError` naming case and field."""
    global _STEP_TYPES
    if not _STEP_TYPES:
        _STEP_TYPES = _step_types()
    open_calls: dict[str, int] = {}
    named = 0
    first_unnamed: int | None = None
    for position, step in enumerate(steps, start=1):
        where = f"steps[{position - 1}]"
        if not isinstance(step, _STEP_TYPES):
            raise _fail(case_id, where, f"expected an AgentStep, got {type(step).__name__}")
        if step.index != position:
            raise _fail(
                case_id,
                f"{where}.index",
                f"indexes must be 1-based and contiguous: expected {position}, got {step.index!r}",
            )
        if step.kind not in STEP_KINDS:
            raise _fail(
                case_id,
                f"{where}.kind",
                f"unknown kind {step.kind!r} (one of {', '.join(sorted(STEP_KINDS))})",
            )
        if step.agent is None:
            if first_unnamed is None:
                first_unnamed = step.index
        else:
            named += 1
        if step.kind == "tool_call":
            if not isinstance(step.tool_name, str) or not step.tool_name:
                raise _fail(case_id, f"{where}.tool_name", "a tool_call step needs a tool_name")
            open_calls[step.tool_name] = open_calls.get(step.tool_name, 0) + 1
        elif step.kind == "tool_result":
            called = step.tool_name or ""  # "" never has an open call
            if not open_calls.get(called):
                raise _fail(
                    case_id,
                    f"{where}",
                    f"tool_result for {step.tool_name!r} at step {step.index} has no matching "
                    "tool_call before it",
                )
            open_calls[called] -= 1
        elif step.kind == "handoff" and not step.to_agent:
            raise _fail(case_id, f"{where}.to_agent", f"handoff step {step.index} has no to_agent")
    if named and first_unnamed is not None:
        raise _fail(
            case_id,
            "steps.agent",
            f"some steps name an agent and others do not (first unnamed: step {first_unnamed}); "
            "name the agent of every step or of none",
        )


def validate_trajectory(trajectory: Any, case_id: str) -> None:
    """Validate an :class:`AgentTrajectory` when it is written (SPEC §2.2)."""
    if not isinstance(trajectory, AgentTrajectory):
        raise RecordError(
            f"case {case_id!r}: agent_trajectory() expects an AgentTrajectory, "
            f"got {type(trajectory).__name__}"
        )
    validate_steps(trajectory.steps, case_id)
    n = len(trajectory.steps)
    if trajectory.terminal_status not in TERMINAL_STATUSES:
        raise _fail(
            case_id,
            "terminal_status",
            f"{trajectory.terminal_status!r} is not one of success, failure, unknown",
        )
    if not isinstance(trajectory.truncated, bool):
        raise _fail(case_id, "truncated", f"must be true or false, got {trajectory.truncated!r}")
    if trajectory.step_limit is not None and (
        not isinstance(trajectory.step_limit, int) or trajectory.step_limit < 0
    ):
        raise _fail(case_id, "step_limit", f"must be a non-negative integer, got {trajectory.step_limit!r}")
    for i, check in enumerate(trajectory.constraints):
        if not isinstance(check, AgentConstraintCheck):
            raise _fail(case_id, f"constraints[{i}]", "expected an AgentConstraintCheck")
        if not isinstance(check.passed, bool):
            raise _fail(case_id, f"constraints[{i}].passed", f"must be a bool, got {check.passed!r}")
        if not (isinstance(check.step_index, int) and 1 <= check.step_index <= n):
            raise _fail(
                case_id,
                f"constraints[{i}].step_index",
                f"constraint {check.name!r} points at step {check.step_index!r}, "
                f"which does not exist (the trajectory has {n} steps)",
            )
    for i, cp in enumerate(trajectory.checkpoints):
        if not isinstance(cp, AgentCheckpoint):
            raise _fail(case_id, f"checkpoints[{i}]", "expected an AgentCheckpoint")
        if not (isinstance(cp.step_index, int) and 1 <= cp.step_index <= n + 1):
            raise _fail(
                case_id,
                f"checkpoints[{i}].step_index",
                f"checkpoint before step {cp.step_index!r} is outside the trajectory (1..{n + 1})",
            )


# ---- what a recorded value may hold (see the module docstring) ----------------------------

#: deepest nesting of lists and mappings a recorded value may have (the value itself is level 1)
MAX_RECORDED_NESTING = 128
#: characters of a user's value an error message quotes
QUOTE_LIMIT = 60

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = QUOTE_LIMIT
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8
_SHORT.maxlevel = 3


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message: at most ``limit`` characters of it, then "…" and
    the value's full length (``'aaaa…' (52,428,800 characters)``)."""
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        head = repr(value[:limit])
        return f"{head[:-1]}…{head[-1]} ({len(value):,} {unit})"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 14000 else 'over 4,300'} digits"
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__
        return f"<{type(value).__name__}>"
    if len(text) > limit + 20:
        size = f", {len(value):,} items" if isinstance(value, (list, tuple, dict, set, frozenset)) else ""
        text = f"{text[:limit]}… ({type(value).__name__}{size})"
    return text


class UnfitValue(RecordError):
    """A recorded value that JSON cannot hold as it is: ``where`` (``output``, ``state``,
    ``step 3 (tool_result lookup).result``) plus the ``path`` inside the value, and the
    ``problem``. :meth:`at` names it again for another place (a step found by the recorder)."""

    def __init__(self, where: str, path: str, problem: str):
        self.where, self.path, self.problem = where, path, problem
        super().__init__(f"{where}{path}: {problem}")

    def at(self, where: str) -> UnfitValue:
        """The same problem at the same ``path``, named for the place ``where`` instead."""
        return UnfitValue(where, self.path, self.problem)


_NON_FINITE_MSGPACK = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")  # a float64 with every exponent bit set
_QUOTED = re.compile(rb'"[^"]*"')
_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))
# A recorded value keeps its keys in the order the agent built them (not sorted, as canonical
# JSON is): the tape hands it back exactly so, and a framework that shows a tool's dict to its
# model as text (str(), json.dumps) sees the same text in a replay as in the recording
_encode = msgspec.json.Encoder(enc_hook=enc_hook).encode
_SHALLOW = 2 * MAX_RECORDED_NESTING + 1  # a JSON text this short cannot nest deeper
_msgpack = msgspec.msgpack.Encoder(enc_hook=enc_hook).encode


def json_nests_deeper(data: bytes, limit: int) -> bool:
    """Whether the JSON text ``data`` nests lists and objects deeper than ``limit`` levels.

    Byte operations only (C speed, no decoding: the text may be too deep to decode): escapes
    are dropped, everything but brackets and quotes deleted, strings (and the brackets in
    them) cut out, then innermost pairs removed one level per pass. A text with at most
    ``limit`` brackets is shallow enough without that. Unbalanced brackets (malformed JSON)
    count as shallow: the decoder reports them."""
    if len(data) < 2 * limit + 2:
        return False
    if data.count(b"[") + data.count(b"{") <= limit:  # no more openings than levels (strings' included)
        return False
    if b"\\" in data:  # escaped quotes and backslashes are not string ends
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    s = data.translate(None, _NOT_STRUCTURE)
    if len(s) - s.count(b'"') <= limit:
        return False
    if b'"' in s:
        # adjacent quotes end one string and start another, or close an empty one: dropping
        # them keeps every bracket inside or outside a string as it was; what is left is
        # the few strings holding brackets
        s = s.replace(b'""', b"")
        if b'"' in s:
            s = _QUOTED.sub(b"", s)
    s = s.translate(_ONE_BRACKET)
    for _ in range(limit):
        t = s.replace(b"[]", b"")
        if len(t) == len(s):
            return False
        s = t
    return b"[]" in s


def encode_recorded(value: Any, where: str = "value") -> bytes:
    """The canonical JSON of a recorded value, or :class:`UnfitValue` naming the path of a
    NaN/Infinity, of a value that contains itself, or of nesting deeper than
    :data:`MAX_RECORDED_NESTING`. A value msgspec cannot encode at all raises what msgspec
    raises (``TypeError``...). A ``msgspec.Raw`` is JSON already (what an integration's codec
    made of a framework's objects with msgspec, which has no NaN): only its depth is checked."""
    if type(value) is msgspec.Raw:
        data = bytes(value)
        if len(data) > _SHALLOW and json_nests_deeper(data, MAX_RECORDED_NESTING):
            raise UnfitValue(where, "", f"nested deeper than {MAX_RECORDED_NESTING} levels (the limit for a "
                                        "recorded value)")
        return data
    try:
        data = _encode(value)
    except RecursionError:
        raise _unfit(value, where) or UnfitValue(where, "", "nested too deeply to be stored") from None
    if (data.find(b"null") >= 0 and _maybe_non_finite(value)
            or len(data) > _SHALLOW and json_nests_deeper(data, MAX_RECORDED_NESTING)):
        problem = _unfit(value, where)
        if problem is not None:
            raise problem
    return data


def _maybe_non_finite(value: Any) -> bool:
    try:
        return _NON_FINITE_MSGPACK.search(_msgpack(value)) is not None
    except Exception:  # noqa: BLE001 - msgpack refuses what JSON took: look at the value itself
        return True


def _children(value: Any) -> Any:
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple)):
        return enumerate(value)
    if isinstance(value, (set, frozenset)):
        return enumerate(value)
    if isinstance(value, msgspec.Struct):
        return ((f, getattr(value, f, None)) for f in value.__struct_fields__)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
    if callable(getattr(value, "model_dump", None)) and not isinstance(value, type):  # a pydantic model
        return iter(value.model_dump().items())
    return None


def _unfit(value: Any, where: str) -> UnfitValue | None:
    """Walk ``value`` (no recursion: it may be 10,000 levels deep or contain itself) for the
    first thing JSON cannot hold."""
    path: list[Any] = []
    on_path: list[int] = []
    stack: list[Any] = []
    item: Any = value
    while True:
        if isinstance(item, float) and not math.isfinite(item):
            name = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
            return UnfitValue(where, _path_text(path), f"{name} is not allowed (JSON has no {name.lstrip('-')})")
        kids = _children(item) if not isinstance(item, (str, bytes, int, float, msgspec.Raw)) else None
        if kids is not None:
            if id(item) in on_path:
                return UnfitValue(where, _path_text(path),
                                  "the value contains itself (a self-reference cannot be stored as JSON)")
            if len(on_path) >= MAX_RECORDED_NESTING:
                return UnfitValue(where, _path_text(path),
                                  f"nested deeper than {MAX_RECORDED_NESTING} levels (the limit for a recorded value)")
            on_path.append(id(item))
            stack.append(kids)
        elif path:
            path.pop()
        while stack:
            nxt = next(stack[-1], None)
            if nxt is not None:
                path.append(nxt[0])
                item = nxt[1]
                break
            stack.pop()
            on_path.pop()
            if path:
                path.pop()
        else:
            return None


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH_SHOWN = 10  # components of a long path shown before "…"


def _path_text(path: list[Any]) -> str:
    out = []
    for part in path[:_PATH_SHOWN]:
        if isinstance(part, int) and not isinstance(part, bool):
            out.append(f"[{part}]")
        elif isinstance(part, str) and len(part) <= QUOTE_LIMIT and _IDENT.fullmatch(part):
            out.append(f".{part}")
        else:
            out.append(f"[{quoted(part)}]")
    if len(path) > _PATH_SHOWN:
        out.append("…")
    return "".join(out)


def _instant(value: Any, what: str) -> str:
    """An ISO-8601 instant (with a time zone), from the clock the harness passes in."""
    from datetime import datetime

    if not isinstance(value, str):
        raise ValueError(f"{what}: expected an ISO-8601 instant as text, got {type(value).__name__}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what}: {quoted(value)} is not an ISO-8601 instant") from None
    if moment.tzinfo is None:
        raise ValueError(f"{what}: {quoted(value)} has no time zone (write e.g. 2026-01-01T10:00:00Z)")
    return value


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what}: expected a non-empty name, got {quoted(value)}")
    return value


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what}: expected true or false, got {quoted(value)}")
    return value


def _optional_text(value: Any, what: str) -> str | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    if isinstance(value, str):
        return None  # an empty owner is no owner
    raise ValueError(f"{what}: expected text or None, got {quoted(value)}")


def validate_effect(operation: Any, idempotency_key: Any, applied: Any) -> tuple[str, str, bool]:
    """``effect_ledger/v1``: one attempt at an external effect."""
    return (_name(operation, "effect.operation"), _name(idempotency_key, "effect.idempotency_key"),
            _flag(applied, "effect.applied"))


def validate_evidence(kind: str, **fields: Any) -> dict[str, Any]:
    """``release_evidence/v1``: one piece of evidence of ``kind``, its fields checked."""
    if kind == "access":
        return {"tool": _name(fields["tool"], "access.tool"), "allowed": _flag(fields["allowed"], "access.allowed"),
                "required_scope": _optional_text(fields.get("required_scope"), "access.required_scope")}
    if kind == "wait":
        deadline = fields.get("deadline")
        return {"owner": _optional_text(fields.get("owner"), "wait.owner"),
                "deadline": None if deadline in (None, "") else _instant(deadline, "wait.deadline"),
                "resume_token": _optional_text(fields.get("resume_token"), "wait.resume_token")}
    if kind == "continuity":
        return {"expected": fields["expected"], "observed": fields["observed"]}
    if kind == "deadline":
        finished = fields.get("finished_at")
        return {"at": _instant(fields["at"], "deadline.at"),
                "finished_at": None if finished is None else _instant(finished, "deadline.finished_at")}
    if kind == "deliverable":
        ok = fields.get("contract_ok")
        return {"name": _name(fields["name"], "deliverable.name"),
                "exists": _flag(fields["exists"], "deliverable.exists"),
                "contract_ok": None if ok is None else _flag(ok, "deliverable.contract_ok")}
    raise ValueError(f"unknown evidence kind {kind!r}")
