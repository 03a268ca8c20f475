"""The log's vocabulary: tagged, frozen msgspec structs, one per event kind.

Every event is encoded as canonical JSON (msgspec, dict keys sorted) — except the values a
system recorded (a step's arguments and result, a state), which keep their keys in the order
the system built them, so that a replay hands them back as they were. The tag carries the
schema version (``case_started.v1``); an older version gets its own struct and an upcast
function in :data:`UPCASTERS`, applied on read, so stored logs stay readable.

Streams: ``<run_id>`` holds the run's own events (started, resumed, sealed); each case of
the run is the stream ``<run_id>/<case_id>``, written in one transaction when the case ends;
``replay/<key>`` holds one replay; ``pin/<name>`` names a run.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Union, cast, get_args

import msgspec


def enc_hook(value: Any) -> Any:
    """What msgspec cannot encode by itself and a tool may return: a ``str``, ``int`` or
    ``float`` subclass is stored as the plain value; a pydantic model as its JSON form
    (``model_dump(mode="json")``); dataclasses and msgspec structs msgspec encodes natively.
    Anything else stays a ``TypeError`` (reported naming the step)."""
    if isinstance(value, str):  # a str subclass (LangChain's TextAccessor, an enum's member): its text,
        return str.__str__(value)  # by the base type's method, so that an override cannot change it
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    dump = getattr(value, "model_dump", None)
    if dump is not None and callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_ENCODER = msgspec.json.Encoder(order="sorted", enc_hook=enc_hook)
encode = _ENCODER.encode


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes of ``value`` (sorted keys, no whitespace); a ``msgspec.Raw`` (JSON
    an integration encoded, in its own key order) is read and written again canonically."""
    if type(value) is msgspec.Raw:
        value = msgspec.json.decode(value)
    return _ENCODER.encode(value)


def case_fingerprint(input: Any, initial_state: Any, expected: Any, fault: Any = None, prefix: Any = None) -> str:
    """SHA-256 of the canonical JSON of input, initial_state and expected (SPEC §3) — and of
    the case's declared ``fault`` when it has one (the fault is part of the case's question);
    a case without a fault keeps the fingerprint it always had."""
    fields = {"expected": expected, "initial_state": initial_state, "input": input}
    if fault is not None:
        fields["fault"] = fault
    if prefix is not None:  # a frozen prefix case: its frozen world is its question
        fields["prefix"] = prefix
    return hashlib.sha256(_ENCODER.encode(fields)).hexdigest()


#: what a step is (``agent_trajectory/v1``, SPEC §3)
StepKind = Literal["message", "tool_call", "tool_result", "observation", "decision", "final", "handoff"]
#: how the agent said its trajectory ended
TerminalStatus = Literal["success", "failure", "unknown"]
#: the faults a case or a replay can inject into a tool's result (SPEC §9, §18.1)
FaultKind = Literal["error", "timeout", "malformed", "timeout_after_effect", "denied"]
#: the kinds of release evidence (``release_evidence/v1``)
EvidenceKind = Literal["access", "wait", "continuity", "deadline", "deliverable"]
#: who recorded a piece of evidence: the system's sandbox, or the harness for a fault it injected
EvidenceSource = Literal["system", "harness"]
#: a replay's purpose: the control that proves it reproduces the recording, a fault, an
#: attribution probe
ReplayKind = Literal["control", "fault", "probe"]
#: how a replay ran: from the recorded tape (@tool) or through the system's own replay
ReplayMethod = Literal["tape", "replayable"]
#: how a log's chains and seals are computed
ChainScheme = Literal["sha256", "hmac-sha256"]
#: ``--durability``: fsync every commit, or let a power loss lose the last ones
Durability = Literal["full", "normal"]
#: a model judge's answer (``judgement.v1``, SPEC §18.6): ``unsure`` (also any reply that is not
#: the asked-for JSON object) and ``error`` (the judge failed or timed out) leave the case missing
JudgeVerdict = Literal["pass", "fail", "unsure", "error"]


class Event(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    """Base of every stored event."""


class RunStarted(Event, frozen=True, tag="run_started.v1"):
    """Opens a run's own stream (``<run_id>``): the system, its records, the configuration
    and suite it runs under (with their digests) and what it could see when it started."""

    run_id: str
    system_name: str
    system_version: str
    records: list[str]
    config: dict[str, Any]
    config_digest: str
    cases_path: str
    suite_digest: str
    case_count: int
    started_at: str
    durability: Durability = "full"
    #: SHA-256 over the system's module and the project's own Python files: replays are
    #: keyed by it, so changing the agent's code re-runs its replays ("" in older logs)
    code_digest: str = ""
    #: the seal digest of the log's latest sealed run when this one started: runs chain to one
    #: another, so a run deleted whole (its streams and its seal) is missed by the next one
    previous_seal: str = ""
    #: what the agent saw of its world (SPEC §14): ``tools`` (name -> schema digest of every
    #: ``@tool`` it has), ``instructions`` (its instructions text), ``external_data`` (the
    #: version of mutable external data it reads). A prefix case frozen from this run keeps
    #: them, and is stale for a system whose surface no longer matches. Empty when unknown.
    surface: dict[str, Any] = {}
    #: what the system could read when the run started, path -> 16 hex digits of its SHA-256:
    #: the project folder's files (paths relative to it), the modules it imported from
    #: PYTHONPATH and what ``system.code`` names (absolute paths). ``--resume`` refuses a run
    #: one of them changed in, naming it. Not part of any replay key. Empty in older logs.
    files: dict[str, str] = {}
    #: a *partial run*'s choice of cases (``run --case/-k/--limit/--last-failed``): the flags as
    #: given and ``ids``, the source cases chosen. Empty for a run of the whole suite. A partial
    #: run never passes its gate (``partial_run``) and is never a baseline.
    selection: dict[str, Any] = {}


class RunResumed(Event, frozen=True, tag="run_resumed.v1"):
    """A ``run --resume`` took up an unfinished run again (the run's stream, ``<run_id>``)."""

    run_id: str
    resumed_at: str


class RunFinished(Event, frozen=True, tag="run_finished.v1"):
    """Ended a run in logs written before seals (the run's stream, ``<run_id>``); still read,
    no longer written: :class:`RunSealed` replaces it."""

    run_id: str
    finished_at: str
    cases_committed: int


class RunSealed(Event, frozen=True, tag="run_sealed.v1"):
    """Ends a finished run (it replaces ``run_finished`` in logs since the seal): the streams
    the run wrote or relied on, each with its length and the head of its chain, and a digest
    over them all (:func:`seal_digest`). ``oloproof audit verify`` checks a run against it, and
    the digest, kept outside the log (``--expect``), anchors the run against a rewrite."""

    run_id: str
    finished_at: str
    case_count: int  # cases the suite held
    cases_committed: int
    #: case id -> [events, first 16 hex digits of its head digest] (the stream ``<run_id>/<id>``)
    cases: dict[str, list[Any]]
    #: replay key -> the same, for the replay streams (``replay/<key>``) the cases were judged with
    replays: dict[str, list[Any]]
    scheme: ChainScheme  # sha256 | hmac-sha256: how the chain and the digest are computed
    digest: str  # "<scheme>:<hex>"


class RunPinned(Event, frozen=True, tag="run_pinned.v1"):
    """Names a run (stream ``pin/<name>``; the latest event wins): ``baseline: pin:NAME``."""

    name: str
    run_id: str
    pinned_at: str


class RunPushed(Event, frozen=True, tag="run_pushed.v1"):
    """A sealed run copied in from another log by ``oloproof push`` (stream ``push/<run_id>``):
    its seal digest, and the seal of the run it followed there (``previous_seal``), which this
    log need not hold — the audit then knows the predecessor lives elsewhere, not deleted."""

    run_id: str
    digest: str
    previous_seal: str
    pushed_at: str


class CaseStarted(Event, frozen=True, tag="case_started.v1"):
    """Opens a case's stream (``<run_id>/<case_id>``): the case as the run asked it — input,
    initial state, expected, metadata, cluster, fault, trial — and its fingerprint (SPEC §3)."""

    run_id: str
    case_id: str
    position: int
    fingerprint: str
    input: Any
    initial_state: Any = None
    expected: Any = None
    metadata: dict[str, Any] = {}
    cluster: str | None = None
    #: the case's declared fault, ``{"tool", "kind", "call"}``: applied by the @tool wrapper
    fault: dict[str, Any] | None = None
    #: which trial of the case this is (1…k, under ``trials: k``); None for a single trial
    trial: int | None = None
    #: a frozen prefix case (``oloproof prefix run``, SPEC §14): the boundary, the frozen steps
    #: before it, the versions, the acceptable and forbidden next actions (see
    #: oloproof.config.prefixes). The system acts from that world; its first action past the
    #: boundary is recorded, not executed, and ends the case.
    prefix: dict[str, Any] | None = None
    #: the case's ``tags`` (SPEC §18.5: what an evaluator's ``when: {tags: [...]}`` selects)
    tags: list[str] | None = None


class StepRecorded(Event, frozen=True, tag="step.v1"):
    """One step of an ``agent_trajectory/v1`` record (1-based ``index``), in a case stream or
    a replay stream (``replay/<key>``): a message, tool call or result, handoff, final…"""

    index: int
    kind: StepKind
    tool_name: str | None = None
    arguments: Any = None
    result: Any = None
    agent: str | None = None
    to_agent: str | None = None
    #: the tool raised: ``result`` is ``{"error": {"type", "message"}}`` and a replay from the
    #: tape raises again (see oloproof.replay.tape)
    raised: bool = False
    #: for a case whose agent ran concurrent asyncio tasks: the step's entry in the case's
    #: task tree (the ticks of the tasks it ran in, then its own); steps are ordered by it,
    #: and the replay tape answers concurrent calls by it (see oloproof.recorder.case)
    branch: list[int] | None = None
    #: on a ``tool_result``: the kind of the case's declared fault that made this result
    #: (the caller got the fault's shape, not the tool's answer; see oloproof.system)
    fault: FaultKind | None = None


class ConstraintRecorded(Event, frozen=True, tag="constraint.v1"):
    """An environment check the system recorded about step ``step_index`` and whether it
    passed (case or replay stream; ``agent_constraints_satisfied`` reads it)."""

    name: str
    passed: bool
    step_index: int


class CheckpointRecorded(Event, frozen=True, tag="checkpoint.v1"):
    """A resume point before step ``step_index``, with the sandbox's state there when the
    system is Stateful (case stream): where a replay starts (SPEC §7)."""

    step_index: int
    state: Any = None
    id: str | None = None


class TrajectoryRecorded(Event, frozen=True, tag="trajectory.v1"):
    """Closes an ``agent_trajectory/v1`` record: the steps, constraints and checkpoints
    before it in the stream belong to it."""

    terminal_status: TerminalStatus
    truncated: bool = False
    step_limit: int | None = None
    steps: int = 0


class EffectRecorded(Event, frozen=True, tag="effect.v1"):
    """One attempt at an external effect (``effect_ledger/v1``), recorded by the sandbox."""

    operation: str
    idempotency_key: str
    applied: bool
    step_index: int = 0  # the steps recorded before it


class EvidenceRecorded(Event, frozen=True, tag="evidence.v1"):
    """One piece of release evidence (``release_evidence/v1``): ``kind`` is access, wait,
    continuity, deadline or deliverable; ``data`` its validated fields."""

    kind: EvidenceKind
    data: dict[str, Any]
    step_index: int = 0
    #: who recorded it: the system's sandbox (``system``), or the harness itself for a fault
    #: it injected (``harness``: a declared ``denied`` fault records the denial, SPEC §18.1)
    source: EvidenceSource = "system"


class UsageRecorded(Event, frozen=True, tag="usage.v1"):
    """Model usage the agent reported (``current_case().usage``): tokens, cost and the
    latency its model client measured. Oloproof keeps no wall clock in a case's events (a
    replay or a rerun stays byte-comparable), so latency is what the agent reports."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    latency_ms: float | None = None
    model: str | None = None
    step_index: int = 0


class EnvironmentStateRecorded(Event, frozen=True, tag="environment_state.v1"):
    """The sandbox's ``snapshot()`` when the case (or replay) ended, even one that raised
    (``environment_state/v1``, SPEC §4.3), in its case or replay stream."""

    state: Any = None


class ReplayStarted(Event, frozen=True, tag="replay_started.v1"):
    """Opens a replay stream (``replay/<cache key>``): a control or fault replay of one case."""

    cache_key: str
    kind: ReplayKind
    case_id: str
    case_stream: str  # the recording it replays
    fingerprint: str
    system_name: str
    system_version: str
    checkpoint_step: int
    checkpoint_id: str | None = None
    checkpoint_digest: str = ""
    change: Any = None  # {"step_index", "tool_name", "fault", "result"} for a fault replay
    method: ReplayMethod = "tape"  # tape (built-in, @tool) | replayable (the system's own replay)
    code_digest: str = ""  # of the system's code (see RunStarted.code_digest)


class ReplayFinished(Event, frozen=True, tag="replay_finished.v1"):
    """Closes a replay stream (``replay/<key>``): the replay's output or error, where it left
    the tape, and whether its fault was injected (a fault never injected is a replay error)."""

    output: Any = None
    error: str | None = None
    error_kind: str | None = None  # system_error (the agent raised) | replay_error
    diverged: str | None = None  # the replay left the recorded tape before the checkpoint
    injected: bool = True


class CaseObserved(Event, frozen=True, tag="case_observed.v1"):
    """What the recording driver measured about a case it ran, just before its
    ``case_finished`` (case streams only; older logs have none). ``wall_ms``: milliseconds on
    the worker's clock from the sandbox's reset to the state's snapshot (under
    ``--concurrency`` cases share the processor: waiting counts); ``model_calls`` and
    ``tool_calls``: the calls that ran — a model call records a ``decision`` step, a tool call
    a ``tool_call`` step; in a prefix case the frozen calls answered from its tape and the
    boundary action (recorded, never executed) are not counted. An observation, not a replayed
    fact: replays never read a clock (they record none), and two runs of one agent differ in
    ``wall_ms``. Quantile metrics read it (sources ``wall_ms``, ``model_calls``,
    ``tool_calls``); nothing else decides on it."""

    wall_ms: float
    model_calls: int = 0
    tool_calls: int = 0


class CaseFinished(Event, frozen=True, tag="case_finished.v2"):
    """How a case ended: its output, or the error that ended it. ``traceback``: the frames of
    the user's code when the system raised (Oloproof's own frames left out); None for any
    other end, and for ``case_finished.v1`` events, which had no traceback (upcast on read)."""

    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    traceback: str | None = None


class CaseRetried(Event, frozen=True, tag="case_retried.v1"):
    """A case is run again (``retries:`` in ``oloproof.yaml``, SPEC §18.8): the attempt before
    it ended with an infrastructure error the configuration retries (``after``: its error
    kind) and failed no criterion. The events after it, up to the next ``case_retried``, are
    attempt ``attempt`` (2, 3 …); the case's verdict is its last attempt's. Every attempt
    stays in the case's one stream (``<run_id>/<case_id>``), committed whole with the last."""

    attempt: int
    after: str


class JudgementRecorded(Event, frozen=True, tag="judgement.v1"):
    """A model judge's verdict on a case (``model_judge``, SPEC §18.6), appended to the case's
    stream after its own events and before the run's seal; re-evaluation reads it and never
    asks the judge again. The first judgement made under a key (judge, model, rubric digest,
    prompt digest) is also kept alone in the stream ``judgement/<key>``, the cache a later run
    reads instead of asking again. No credential is ever part of it."""

    criterion: str
    #: ``openai_compatible`` or the ``module:function`` of a Python judge
    judge: str
    #: the model the provider was asked for; for a Python judge ``code:<16 hex>`` of its code
    model: str
    rubric_digest: str  # SHA-256 of the rubric text
    prompt_digest: str  # SHA-256 of the prompt (rubric and what the judge sees)
    #: what the judge was shown of the case: input, output, trajectory
    sees: list[str]
    verdict: JudgeVerdict
    explanation: str = ""
    #: the reply as the judge gave it (a provider's message content; a Python judge's return
    #: value as JSON); None when the judge gave none (``error``)
    raw_response: str | None = None
    prompt: str = ""
    #: why the judge gave no verdict (verdict ``error``): a timeout, an HTTP status, an exception
    error: str | None = None
    #: the judgement was read from the cache (``judgement/<key>``), made by an earlier judge call
    cached: bool = False


class AttributionRecorded(Event, frozen=True, tag="attribution.v1"):
    """The attribution of one stored case's failure (``oloproof attribute``, SPEC §14): its
    first unacceptable step, the responsible layer, causes, evidence, recoverability,
    confidence. Stream ``attribution/<run_id>/<case_id>``; the latest event wins. It is a
    reading of the record, not a verdict: the gate never reads it."""

    run_id: str
    case_id: str
    attribution: dict[str, Any]
    attributed_at: str


AnyEvent = (
    RunStarted
    | RunResumed
    | RunFinished
    | RunSealed
    | RunPinned
    | RunPushed
    | CaseStarted
    | StepRecorded
    | ConstraintRecorded
    | CheckpointRecorded
    | TrajectoryRecorded
    | EffectRecorded
    | EvidenceRecorded
    | UsageRecorded
    | EnvironmentStateRecorded
    | CaseObserved
    | CaseFinished
    | CaseRetried
    | ReplayStarted
    | ReplayFinished
    | AttributionRecorded
    | JudgementRecorded
)

#: An upcaster turns the decoded dict of one schema version into the dict of the next one
#: (its ``type`` included): ``old tag -> (next tag, function)``. Upcasters chain, so a v1
#: event is read through v2, v3 … up to the struct the code has now (eventsourcing's way).
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[str, tuple[str, Upcaster]] = {
    # v1 had no traceback: the case ended as it did, where it raised is unknown
    "case_finished.v1": ("case_finished.v2", lambda raw: {**raw, "traceback": None}),
}


class _Tagged(msgspec.Struct):
    type: str


_TAG_ONLY = msgspec.json.Decoder(_Tagged)


def stored_tag(payload: bytes | str) -> str:
    """The type a payload was written with (``case_finished.v1``), before any upcast: what
    the log's type column must hold."""
    return _TAG_ONLY.decode(payload).type


class Codec:
    """The one place events become bytes and bytes become events.

    Args:
        events: the event structs the code knows now (a tagged union: nothing read from disk
            names code to import).
        upcasters: old tag -> (next tag, dict -> dict), applied on read until a known tag is
            reached; see :data:`UPCASTERS`.

    Encoding is canonical JSON (msgspec, sorted keys). Decoding tries the typed union first
    (one call for a whole stream) and upcasts only the events that need it. A test builds a
    codec with made-up later versions to run the upcast path before a real schema change.
    """

    def __init__(self, events: tuple[type[Event], ...], upcasters: Mapping[str, tuple[str, Upcaster]]):
        self.events = events
        self.upcasters = dict(upcasters)
        union = Union[events]  # type: ignore[valid-type]  # noqa: UP007 - built from a runtime tuple of types
        self._one = msgspec.json.Decoder(union)
        self._many = msgspec.json.Decoder(list[union])
        self._union = union
        # msgspec types a tag str | int | None: every event's is its str
        self._tags: dict[type, str] = {cls: cast(str, cls.__struct_config__.tag) for cls in events}
        known = set(self._tags.values())
        #: the tags an older event is upcast to: a stored event decoded as one of them may have
        #: been written as another (its own type, kept in the log's type column, is read from
        #: the payload)
        self.upcast_targets = frozenset(self._final(tag) for tag in self.upcasters if self._final(tag) in known)

    def _final(self, tag: str) -> str:
        seen = set()
        while tag in self.upcasters and tag not in seen:
            seen.add(tag)
            tag = self.upcasters[tag][0]
        return tag

    def tag_of(self, event: Event) -> str:
        """The stored type of an event (its tag, schema version included)."""
        return self._tags[type(event)]

    def encode(self, event: Any) -> bytes:
        """Canonical JSON bytes of an event."""
        return _ENCODER.encode(event)

    def pack(self, events: Sequence[Event]) -> tuple[list[bytes], list[str]]:
        """(payloads, types) of ``events``: what a stream append carries."""
        return [_ENCODER.encode(e) for e in events], [self._tags[type(e)] for e in events]

    def decode(self, payload: bytes | str) -> Event:
        """Decode one stored payload, upcasting older schema versions."""
        try:
            return self._one.decode(payload)
        except msgspec.ValidationError:
            raw = msgspec.json.decode(payload)
            if not (isinstance(raw, dict) and raw.get("type") in self.upcasters):
                raise
            return self.upcast(raw)

    def upcast(self, raw: dict[str, Any]) -> Event:
        """The current event an older version's decoded dict stands for."""
        seen = set()
        while raw.get("type") in self.upcasters:
            tag = raw["type"]
            if tag in seen:
                raise msgspec.ValidationError(f"the upcasters of {tag!r} loop")
            seen.add(tag)
            target, step = self.upcasters[tag]
            raw = {**step(raw), "type": target}
        return msgspec.convert(raw, self._union)

    def decode_many(self, payloads: Sequence[bytes]) -> list[Event]:
        """Decode several payloads in one call (one JSON array), upcasting where needed."""
        try:
            return self._many.decode(b"[" + b",".join(payloads) + b"]")
        except msgspec.ValidationError:
            return [self.decode(p) for p in payloads]

    def decode_stream(self, stream: str, payloads: Sequence[bytes], start: int = 0) -> list[Event]:
        """Decode one stream's payloads; an undecodable one is a
        :class:`~oloproof.errors.CorruptLogError` naming the stream and the sequence."""
        try:
            return self.decode_many(payloads)
        except Exception:  # noqa: BLE001 - any fast-path failure falls back to the per-payload decode below
            pass
        from oloproof.errors import CorruptLogError

        out = []
        for seq, payload in enumerate(payloads, start):  # find the culprit for the message
            try:
                out.append(self.decode(payload))
            except Exception as e:
                raise CorruptLogError(f"event {stream!r} #{seq} cannot be decoded: {e}") from e
        return out


#: the codec of the events the code knows now
CODEC = Codec(get_args(AnyEvent), UPCASTERS)
tag_of = CODEC.tag_of
decode = CODEC.decode
decode_many = CODEC.decode_many
decode_stream = CODEC.decode_stream
pack = CODEC.pack
UPCAST_TARGETS = CODEC.upcast_targets


# ---- what the search index reads (oloproof.store.search) ---------------------------------------

class _SearchStep(msgspec.Struct):
    index: int = 0
    kind: str = ""
    tool_name: str | None = None
    agent: str | None = None
    to_agent: str | None = None
    arguments: msgspec.Raw = msgspec.Raw(b"")
    result: msgspec.Raw = msgspec.Raw(b"")


class _SearchEnd(msgspec.Struct):
    error: str | None = None


class _SearchReplay(msgspec.Struct):
    case_stream: str = ""


_SEARCH_STEP = msgspec.json.Decoder(_SearchStep)
_SEARCH_END = msgspec.json.Decoder(_SearchEnd)
_SEARCH_REPLAY = msgspec.json.Decoder(_SearchReplay)
class _SearchJudgement(msgspec.Struct):
    criterion: str = ""
    verdict: str = ""
    explanation: str = ""
    error: str | None = None


_SEARCH_JUDGEMENT = msgspec.json.Decoder(_SearchJudgement)
#: the stored types the search index holds: steps, the errors that ended a case or replay,
#: and model judges' judgements (their explanations)
SEARCHED_TYPES = ("step.v1", "case_finished.v1", "case_finished.v2", "replay_finished.v1", "judgement.v1")
#: the judgement cache's streams (``judgement/<key>``): copies of case-stream judgements, not searched
JUDGEMENT_CACHE = "judgement/"


#: the snippet's highlight markers (U+E000, U+E001: oloproof.store.search) never come from a
#: recorded text, so a recorded value cannot fake a highlighted match
_NO_MARKS = {0xE000: 0xFFFD, 0xE001: 0xFFFD}


def _searchable(raw: bytes) -> str:
    # the JSON text of a value, its escapes undone where they would glue words ("a\nb")
    if b"\\" in raw:
        raw = (raw.replace(b"\\\\", b"\x00").replace(b"\\n", b" ").replace(b"\\t", b" ").replace(b"\\r", b" ")
               .replace(b'\\"', b'"').replace(b"\x00", b"\\"))
    return raw.decode("utf-8", "replace")


def _unmarked(text: str) -> str:
    # a membership test is a memchr; translate() walks every character
    return text.translate(_NO_MARKS) if "\ue000" in text or "\ue001" in text else text


def search_fields(type_: str, payload: bytes) -> tuple[int | None, str, str | None, str] | None:
    """What the search index keeps of one stored event: ``(step, kind, tool_name, text)`` of a
    step (its tool, agents, arguments and result as JSON text), ``(None, "error", None,
    message)`` of a case or replay that ended in an error, ``(None, "judgement", None, text)`` of
    a model judge's judgement (its criterion, verdict, explanation and error); ``None`` for
    anything else."""
    if type_ == "step.v1":
        s = _SEARCH_STEP.decode(payload)
        parts = [x for x in (s.tool_name, s.agent, s.to_agent) if x]
        for value in (s.arguments, s.result):
            raw = bytes(value)
            if raw and raw != b"null":
                parts.append(_searchable(raw))
        return s.index, s.kind, s.tool_name, _unmarked(" ".join(parts))
    if type_ in ("case_finished.v1", "case_finished.v2", "replay_finished.v1"):
        error = _SEARCH_END.decode(payload).error
        return None if error is None else (None, "error", None, _unmarked(error))
    if type_ == "judgement.v1":
        j = _SEARCH_JUDGEMENT.decode(payload)
        text = " ".join(x for x in (j.criterion, j.verdict, j.explanation, j.error) if x)
        return None, "judgement", None, _unmarked(text)
    return None


def replayed_stream(payload: bytes) -> str:
    """The case stream a replay stream's first event (``replay_started``) replays."""
    return _SEARCH_REPLAY.decode(payload).case_stream


#: chain schemes: plain SHA-256 (anyone can recompute it) or HMAC-SHA256 under a key that
#: stays outside the log (``OLOPROOF_LOG_KEY``)
SHA256: Final = "sha256"
HMAC_SHA256: Final = "hmac-sha256"


def scheme_of(key: bytes | None) -> ChainScheme:
    """The chain scheme a log written with ``key`` uses: ``hmac-sha256`` with a key, else ``sha256``."""
    return SHA256 if key is None else HMAC_SHA256


def chain_digest(previous: str, stream: str, sequence: int, payload: bytes, key: bytes | None = None) -> str:
    """The hash-chain digest of one event: SHA-256 (HMAC-SHA256 under ``key``) over the
    previous digest, the stream, the sequence and the canonical payload (so no event can be
    altered, moved or dropped unseen)."""
    return chain_digests(previous, stream, sequence, (payload,), key)[0]


def chain_digests(previous: str, stream: str, start: int, payloads: Any, key: bytes | None = None) -> list[str]:
    """Digests of consecutive events of one stream, continuing from ``previous``."""
    if key is None:
        sha256: Any = hashlib.sha256
    else:
        base = hmac.new(key, digestmod=hashlib.sha256)

        def sha256(data: bytes = b"") -> Any:
            h = base.copy()
            h.update(data)
            return h
    join = b"".join
    tag = b"\x00" + stream.encode() + b"\x00"
    out = []
    seq = start
    for payload in payloads:
        if len(payload) < 65536:
            previous = sha256(join((previous.encode(), tag, b"%d\x00" % seq, payload))).hexdigest()
        else:  # a large snapshot: hash it in place rather than copy it
            h = sha256(join((previous.encode(), tag, b"%d\x00" % seq)))
            h.update(payload)
            previous = h.hexdigest()
        out.append(previous)
        seq += 1
    return out


def seal_digest(run_id: str, run_head: tuple[int, str], heads: dict[str, tuple[int, str]],
                key: bytes | None = None) -> str:
    """The digest a seal records: over the run stream's head before the seal and the full
    head (length, last digest) of every stream the run wrote or relied on, in name order —
    the canonical JSON ``{"run", "run_head", "streams": [[stream, length, digest], …]}``."""
    digest = SealDigest(run_id, run_head, key)
    for stream, (length, head) in sorted(heads.items()):
        digest.add(stream, length, head)
    return digest.hexdigest()


class SealDigest:
    """:func:`seal_digest` fed one stream at a time, in name order: the same digest, with
    nothing held (a 50,000-case run's seal needs no list of its streams)."""

    def __init__(self, run_id: str, run_head: tuple[int, str], key: bytes | None = None):
        self._scheme = SHA256 if key is None else HMAC_SHA256
        self._hash: Any = hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)
        # canonical JSON, keys sorted: run, run_head, streams
        self._hash.update(b'{"run":' + _ENCODER.encode(run_id) + b',"run_head":'
                          + _ENCODER.encode(list(run_head)) + b',"streams":[')
        self._separator = b""
        self._last: str | None = None

    def add(self, stream: str, length: int, digest: str) -> None:
        """The next stream's head; streams come in name order, each once."""
        if self._last is not None and stream <= self._last:
            raise ValueError(f"seal digest: stream {stream!r} comes after {self._last!r}, not in name order")
        self._last = stream
        self._hash.update(self._separator + _ENCODER.encode([stream, length, digest]))
        self._separator = b","

    def hexdigest(self) -> str:
        """``<scheme>:<hex>`` over the streams added so far."""
        final = self._hash.copy()
        final.update(b"]}")
        return f"{self._scheme}:{final.hexdigest()}"
