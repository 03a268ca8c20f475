"""Frozen prefix cases: ``prefixes/<case_id>.yaml`` (SPEC §14, §14a).

A prefix case freezes the world of one stored case just before a decision boundary — the
goal, the instructions, the messages and tool results before the boundary, the environment
state at the boundary and the versions the agent ran under — and declares which next actions
are acceptable and which are forbidden. ``oloproof prefix create`` writes it;
``oloproof prefix run`` reads every file of the folder (``prefix.cases``, default
``prefixes/``), validates it here before anything runs, and runs each as a case.

The file (a reviewable YAML document; the frozen steps and state may sit in a JSON sidecar
beside it, named in ``frozen.sidecar`` with its SHA-256, when they are large)::

    case_id: premature-completion-017
    source_trace: <run_id>/<case_id>
    versions: {agent: v1, harness: 9d2c1e7…, tool_schemas: {run_tests: 3f…}, instructions: a1…,
               external_data: defects-2026-11}
    boundary: {before_step: 9, first_unacceptable_step: 9, category: stopping_too_early}
    snapshot: {goal: …, instructions: …, remaining_acceptance_checks: [...]}
    input: {...}                 # the source case's input (a plain @tool system is re-run with it)
    metadata: {...}
    frozen: {steps: [...], state: {...}}     # or {sidecar: NAME.json, sha256: HEX}
    acceptable_actions: [{tool: inspect_defect}, {tool: run_tests}]
    forbidden_actions: [{final: true, critical: true}]
    retention: false             # a case where the opposite action is right (reported apart)
    irreversible: false          # its next action cannot be undone: judged by pass^k
    evidence: [{step: 9, text: ...}]

An action matcher names exactly one of ``tool`` (a glob over the tool name, with optional
``arguments``: key -> glob for text, exact value otherwise), ``final: true`` (declaring
completion; with ``claims_supported: true|false`` it also requires the final's claims to be
supported — or not — by the frozen tool results) or ``message`` (a regular expression the
message text must contain, case-insensitive). ``critical: true`` on a forbidden action counts
it among the critical forbidden actions. A bare name (``- inspect_defect_c``, as the seed
writes its actions) is the tool-name matcher ``{tool: inspect_defect_c}``.

The seed's own minimal record has no ``frozen`` and no ``input``: such a *snapshot-only*
record freezes its snapshot alone — the goal is the frozen world, no steps, no state — and the
snapshot's fields are the case's input; the candidate's first action is the first step of its
recording (:func:`first_action_step`), while ``boundary`` keeps the source trace's numbering.
The seed prints it with its indentation lost; :func:`seed_form` reads that printing as the
nested record it stands for.

Errors are located (``prefixes/x.yaml:12: case 'x': field 'boundary.before_step': …``) and
raised as :class:`~oloproof.errors.CaseFileError` (exit code 2).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from oloproof.config.cases import CaseId, SuiteCase, SuiteInfo, shown_path
from oloproof.config.files import open_regular
from oloproof.config.limits import quoted
from oloproof.config.locate import Locator, load_yaml, validate_model
from oloproof.errors import CaseFileError, ConfigError
from oloproof.events import StepKind, case_fingerprint

#: frozen content above this many bytes of JSON goes to a sidecar file
SIDECAR_THRESHOLD = 8 * 1024
#: the most a sidecar may hold (docs/input-limits.md)
MAX_SIDECAR = 256 * 1024 * 1024
MAX_PATTERN = 500
STEP_KINDS: tuple[str, ...] = get_args(StepKind)  # the log's own list (oloproof.events)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def nested_repeat(pattern: str) -> bool:
    """Whether a regular expression repeats, without bound, a part that itself repeats
    without bound — ``(a+)+``, ``(a*)*``, ``(x+y*)+`` — the shape of catastrophic backtracking."""
    import re._parser as sre  # type: ignore[import-not-found]  # re's own parser (typeshed has no stub for it)

    def unbounded(items: Any, inside: bool) -> bool:
        for op, arg in items:
            if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)):
                low, high, body = arg
                repeats = high == sre.MAXREPEAT or high > 16
                if repeats and inside:
                    return True
                if unbounded(body, inside or repeats):
                    return True
            elif op == sre.SUBPATTERN:
                if unbounded(arg[-1], inside):
                    return True
            elif op == sre.BRANCH:
                if any(unbounded(branch, inside) for branch in arg[1]):
                    return True
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                if unbounded(arg[1], inside):
                    return True
        return False

    try:
        return unbounded(sre.parse(pattern), False)
    except Exception:  # noqa: BLE001 - re compiled it: a parser detail we do not know is no refusal
        return False


class ActionMatcher(_Strict):
    """One acceptable or forbidden next action (see the module docstring)."""

    tool: str | None = Field(default=None, min_length=1, max_length=200)
    arguments: dict[str, Any] | None = None
    final: bool | None = None
    message: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN)
    claims_supported: bool | None = None
    critical: bool = False
    note: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _one_kind(self) -> ActionMatcher:
        kinds = [k for k in ("tool", "final", "message") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("an action names exactly one of tool, final, message "
                             f"(got {', '.join(kinds) or 'none'})")
        if self.final is False:
            raise ValueError("final: false matches nothing; write final: true, or name a tool or a message")
        if self.arguments is not None and self.tool is None:
            raise ValueError("arguments: only with tool:")
        if self.claims_supported is not None and self.final is None:
            raise ValueError("claims_supported: only with final: true")
        if self.message is not None:
            try:
                re.compile(self.message)
            except re.error as e:
                raise ValueError(f"message: {quoted(self.message)} is not a regular expression ({e})") from None
            if nested_repeat(self.message):
                raise ValueError(f"message: {quoted(self.message)} repeats a group that itself repeats (like "
                                 "(a+)+): such a pattern can take exponential time on a long message; rewrite "
                                 "it without the nested repetition")
        return self

    def describe(self) -> str:
        """A short text for tables: ``tool edit_file(path=tests/*)``, ``final``, ``message /…/``."""
        if self.tool is not None:
            args = ", ".join(f"{k}={v}" for k, v in (self.arguments or {}).items())
            return f"tool {self.tool}" + (f"({args})" if args else "")
        if self.final:
            claims = {True: " with supported claims", False: " with an unsupported claim", None: ""}
            return "final" + claims[self.claims_supported]
        return f"message /{self.message}/"


class FrozenStep(_Strict):
    """One frozen step before the boundary, in the log's step shape (a known ``kind``, index from 1)."""

    index: int = Field(ge=1)
    kind: str
    tool_name: str | None = None
    arguments: Any = None
    result: Any = None
    agent: str | None = None
    to_agent: str | None = None
    raised: bool = False
    fault: str | None = None

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in STEP_KINDS:
            raise ValueError(f"unknown step kind {quoted(v)} (one of {', '.join(STEP_KINDS)})")
        return v


class Frozen(_Strict):
    """``frozen:`` of a prefix file: the steps and state inline, or a ``sidecar`` JSON file
    beside it (a bare file name) with its SHA-256, never both."""

    steps: list[FrozenStep] | None = None
    state: Any = None
    sidecar: str | None = Field(default=None, min_length=1, max_length=255)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _inline_or_sidecar(self) -> Frozen:
        if self.sidecar is not None:
            if self.steps is not None or self.state is not None:
                raise ValueError("frozen: give steps and state inline, or a sidecar, not both")
            if self.sha256 is None:
                raise ValueError("frozen.sidecar needs frozen.sha256 (the sidecar's SHA-256)")
            if "/" in self.sidecar or "\\" in self.sidecar or self.sidecar.startswith("."):
                raise ValueError(f"frozen.sidecar: {quoted(self.sidecar)} must be a file name beside the "
                                 "prefix file (no folder)")
        return self


class Boundary(_Strict):
    """``boundary:`` (SPEC §14): the step the decision comes before (the candidate's first
    action is step ``before_step``), and the source case's first unacceptable step and
    failure category when known."""

    before_step: int = Field(ge=1)
    first_unacceptable_step: int | None = Field(default=None, ge=1)
    category: str | None = Field(default=None, max_length=200)


class Versions(_Strict):
    """``versions:``, what the source run ran under. Tool schema digests, the instructions'
    digest and the external data version decide staleness (:func:`versions_stale`); what is
    not named is not compared."""

    agent: str | None = None
    harness: str | None = None
    tool_schemas: dict[str, str] = {}
    instructions: str | None = None
    external_data: str | None = None


class Snapshot(_Strict):
    """``snapshot:``: the goal, the instructions and the acceptance checks still open at the
    boundary; a Resumable system's ``resume`` gets the goal and instructions from it."""

    goal: Any = None
    instructions: str | None = None
    remaining_acceptance_checks: list[Any] = []


class Evidence(_Strict):
    """One ``evidence:`` note for the file's reviewer (``prefix create`` takes it from the
    source case's attribution), optionally pinned to a step; a bare text is accepted. Not
    part of what the run stores or judges."""

    step: int | None = Field(default=None, ge=1)
    text: str = Field(max_length=4000)


class PrefixFile(_Strict):
    """A prefix case file, validated."""

    case_id: CaseId
    source_trace: str | None = None
    versions: Versions = Versions()
    boundary: Boundary
    snapshot: Snapshot = Snapshot()
    #: None: the snapshot is the input (a snapshot-only record, see :func:`seed_form`)
    input: dict[str, Any] | None = None
    metadata: dict[str, Any] = {}
    #: None: a snapshot-only record — nothing frozen but the snapshot (no steps, no state)
    frozen: Frozen | None = None
    acceptable_actions: list[ActionMatcher] = Field(min_length=1)
    forbidden_actions: list[ActionMatcher] = []
    retention: bool = False
    irreversible: bool = False
    evidence: list[Evidence] = []
    #: the redaction paths applied when the prefix was created (``--redact``, ``prefix.redact``)
    redacted: list[str] = []

    @field_validator("evidence", mode="before")
    @classmethod
    def _text_evidence(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"text": e} if isinstance(e, str) else e for e in v]
        return v

    @field_validator("acceptable_actions", "forbidden_actions", mode="before")
    @classmethod
    def _bare_names(cls, v: Any) -> Any:
        # the seed's record lists actions by name: a bare name is a tool-name matcher
        if isinstance(v, list):
            return [{"tool": a} if isinstance(a, str) else a for a in v]
        return v

    def snapshot_input(self) -> dict[str, Any]:
        """The case's input: ``input``, or — in a snapshot-only record, which has none — the
        snapshot's fields that are set (the goal, the instructions, the remaining checks)."""
        if self.input is not None:
            return self.input
        return {k: v for k, v in self.snapshot.model_dump().items() if v not in (None, [])}


#: the sections of a prefix record and their fields (for a record whose indentation was lost)
_SECTIONS: dict[str, tuple[str, ...]] = {
    "versions": tuple(Versions.model_fields), "boundary": tuple(Boundary.model_fields),
    "snapshot": tuple(Snapshot.model_fields),
}


def seed_form(data: dict[str, Any], locator: Locator) -> tuple[dict[str, Any], Locator]:
    """A record in the seed's printed shape, read as the nested record it stands for.

    The seed (trajectory-prefix-regression) prints its minimal record with the indentation
    lost: ``versions:``, ``boundary:`` and ``snapshot:`` stand empty, and their fields follow
    at the top level (``agent: v42``, ``before_step: 18``, ``goal: …``). A section key with
    no value, followed by keys that are that section's fields and no field of the record,
    takes them back, in document order (so ``instructions`` after ``versions:`` is the
    versions' digest, after ``snapshot:`` the snapshot's text). Anything else is left as it
    is, for validation to locate. The locator learns the moved keys' lines."""
    if not any(data.get(section, 0) is None for section in _SECTIONS):
        return data, locator
    top = set(PrefixFile.model_fields)
    out: dict[str, Any] = {}
    lines = dict(locator.lines)
    section: str | None = None
    for key, value in data.items():
        if key in _SECTIONS and value is None:
            section, out[key] = key, {}
            continue
        if section is not None and key not in top and key in _SECTIONS[section]:
            out[section][key] = value
            for path, line in locator.lines.items():
                if path[:1] == (key,):
                    lines[(section, *path)] = line
            continue
        section = None
        out[key] = value
    return out, Locator(locator.file, lines)


def versions_stale(frozen: dict[str, Any], surface: dict[str, Any] | None) -> list[str]:
    """Why a prefix frozen with ``frozen`` versions no longer matches a system whose
    ``surface`` (``RunStarted.surface``) is given: a tool it froze is gone or has another
    schema, its instructions or its external data version changed. Empty: not stale. What
    the frozen versions do not name is not compared."""
    surface = surface or {}
    tools = surface.get("tools") or {}
    problems = []
    for name, schema in sorted((frozen.get("tool_schemas") or {}).items()):
        now = tools.get(name)
        if now is None:
            problems.append(f"tool {name!r} no longer exists")
        elif now != schema:
            problems.append(f"tool {name!r} changed its schema ({schema[:8]} -> {now[:8]})")
    instructions = frozen.get("instructions")
    if instructions and instructions != instructions_digest(surface.get("instructions")):
        problems.append("the instructions changed")
    data = frozen.get("external_data")
    if data and data != surface.get("external_data"):
        problems.append(f"the external data changed ({data} -> {surface.get('external_data') or 'none'})")
    return problems


def instructions_digest(text: Any) -> str | None:
    """The first 16 hex digits of the SHA-256 of an instructions text (None without one)."""
    if not isinstance(text, str) or not text:
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class PrefixCases:
    """The prefix cases of a folder: validated file by file; iterating yields
    :class:`SuiteCase` with ``prefix`` set (the interface of :class:`~oloproof.config.cases.CaseFile`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.label = shown_path(self.path)

    def files(self) -> list[Path]:
        """The folder's ``*.yaml``/``*.yml`` entries in name order (anything not a folder: a
        FIFO is refused when read, never skipped).

        Raises:
            CaseFileError: the folder does not exist, or is a file.
        """
        if not self.path.exists():
            raise CaseFileError(f"{self.label}: no such folder; create prefix cases with "
                                "'oloproof prefix create RUN CASE'")
        if not self.path.is_dir():
            raise CaseFileError(f"{self.label}: is a file; prefix.cases names the folder of prefix cases")
        # not only regular files: a FIFO or a device named *.yaml is refused when read, never skipped
        return sorted(p for p in self.path.iterdir() if p.suffix in (".yaml", ".yml") and not p.is_dir())

    def validate(self, keep_ids: bool = False) -> SuiteInfo:
        """Load and validate every prefix file; ids must be unique across files and there
        must be at least one. The ids are returned only with ``keep_ids``.

        Raises:
            CaseFileError: the first bad file, a duplicate id, or an empty folder.
        """
        seen: dict[str, str] = {}
        digest = hashlib.sha256()
        for path in self.files():
            case = load_prefix_case(path)
            if case.id in seen:
                raise CaseFileError(f"{shown_path(path)}: case {quoted(case.id)}: field 'case_id': duplicate id "
                                    f"(also {seen[case.id]}); keep one file per case")
            digest.update(f"{case.id}\x00{case.fingerprint}\n".encode())
            seen[case.id] = path.name
        if not seen:
            raise CaseFileError(f"{self.label}: no prefix cases (*.yaml); create one with "
                                "'oloproof prefix create RUN CASE'")
        return SuiteInfo(count=len(seen), digest=digest.hexdigest(),
                         ids=frozenset(seen) if keep_ids else frozenset(), sources=len(seen))

    def __iter__(self) -> Iterator[SuiteCase]:
        for path in self.files():
            yield load_prefix_case(path)


def load_prefix_file(path: Path) -> tuple[PrefixFile, dict[str, Any], Any]:
    """A prefix file validated, its frozen steps and state (from the sidecar if it has one),
    and its locator."""
    try:
        data, locator = load_yaml(path)
    except ConfigError as e:
        raise CaseFileError(str(e)) from None
    label = shown_path(path)
    if not isinstance(data, dict):
        raise CaseFileError(f"{label}: a prefix case is a mapping (case_id, boundary, frozen, …), "
                            f"got {type(data).__name__}")
    data, locator = seed_form(data, locator)
    case_id = data.get("case_id")
    who = f"case {quoted(case_id)}: " if isinstance(case_id, str) else ""

    def where(loc: Any = ()) -> str:
        return f"{locator.where(loc)}: {who}".rstrip(": ")

    try:
        model = validate_model(PrefixFile, data, where)
    except ConfigError as e:
        raise CaseFileError(str(e)) from None
    if path.stem != model.case_id:
        raise CaseFileError(f"{locator.where(('case_id',))}: {who}field 'case_id': the file is named "
                            f"{path.name}; name it {model.case_id}.yaml (one file per case)")
    frozen = _frozen_content(path, model, locator, who)
    return model, frozen, locator


def _frozen_content(path: Path, model: PrefixFile, locator: Any, who: str) -> dict[str, Any]:
    f = model.frozen
    if f is None:  # a snapshot-only record: its goal is all that is frozen
        return {"steps": [], "state": None}
    if f.sidecar is None:
        steps, state = [s.model_dump(exclude_defaults=True) for s in (f.steps or [])], f.state
        _full_steps(steps, f.steps or [])
    else:
        side = path.parent / f.sidecar
        where = f"{locator.where(('frozen', 'sidecar'))}: {who}field 'frozen.sidecar'"
        try:
            with open_regular(side, f"{where}: {side.name}", CaseFileError) as fh:  # no FIFO, no device
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_SIDECAR:
                    raise CaseFileError(f"{where}: {side.name} holds {size:,} bytes, more than the {MAX_SIDECAR:,} "
                                        "a frozen prefix may hold")
                raw = fh.read(MAX_SIDECAR + 1)
        except OSError as e:
            raise CaseFileError(f"{where}: cannot read {side.name} ({type(e).__name__})") from None
        if hashlib.sha256(raw).hexdigest() != f.sha256:
            raise CaseFileError(f"{where}: {side.name} does not match frozen.sha256 (it was changed "
                                "after the prefix was created; create the prefix again)")
        try:
            content = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError) as e:
            raise CaseFileError(f"{where}: {side.name} is not JSON ({str(e)[:200]})") from None
        if not isinstance(content, dict) or not isinstance(content.get("steps", []), list):
            raise CaseFileError(f"{where}: {side.name} is not a frozen prefix (an object with steps and state)")
        parsed = []
        for i, step in enumerate(content.get("steps", [])):
            try:
                parsed.append(FrozenStep.model_validate(step))
            except ValidationError as e:
                err = e.errors()[0]
                field = ".".join(str(x) for x in err["loc"]) or "step"
                message = str(err["msg"]).removeprefix("Value error, ")
                raise CaseFileError(f"{where}: {side.name}: steps[{i}].{field}: {message}") from None
        steps = [s.model_dump(exclude_defaults=True) for s in parsed]
        _full_steps(steps, parsed)
        state = content.get("state")
    before = model.boundary.before_step
    where = f"{locator.where(('frozen',))}: {who}field 'frozen.steps'"
    if len(steps) != before - 1:
        raise CaseFileError(f"{where}: the boundary is before step {before}, so steps 1..{before - 1} are "
                            f"frozen; the file has {len(steps)}")
    open_calls: dict[str, int] = {}
    for position, s in enumerate(steps, start=1):
        if s["index"] != position:
            raise CaseFileError(f"{where}: step indexes must be 1..{before - 1} in order; "
                                f"position {position} has index {s['index']}")
        if s["kind"] == "final":
            raise CaseFileError(f"{where}: step {position} is a final answer; a prefix ends before the "
                                "agent's final answer, not after it")
        name = s.get("tool_name") or ""
        if s["kind"] == "tool_call":
            open_calls[name] = open_calls.get(name, 0) + 1
        elif s["kind"] == "tool_result":
            if not open_calls.get(name):
                raise CaseFileError(f"{where}: step {position}: tool_result for {name!r} has no tool_call before it")
            open_calls[name] -= 1
    if any(open_calls.values()):
        raise CaseFileError(f"{locator.where(('boundary', 'before_step'))}: {who}field 'boundary.before_step': "
                            f"step {before} falls between a tool call and its result; put the boundary "
                            "before the call")
    return {"steps": steps, "state": state}


def _full_steps(dumped: list[dict[str, Any]], models: list[FrozenStep]) -> None:
    # exclude_defaults drops a None result or arguments: keep the keys every step needs
    for d, m in zip(dumped, models):
        d.setdefault("index", m.index)
        d.setdefault("kind", m.kind)


def prefix_record(model: PrefixFile, frozen: dict[str, Any]) -> dict[str, Any]:
    """What a prefix run stores in ``CaseStarted.prefix``: everything the case's evaluation
    needs, so that it is judged from the log alone."""
    return {
        "source_trace": model.source_trace,
        "versions": model.versions.model_dump(exclude_none=True),
        "boundary": model.boundary.model_dump(exclude_none=True),
        "snapshot": model.snapshot.model_dump(),
        "steps": frozen["steps"],
        "acceptable_actions": [m.model_dump(exclude_none=True, exclude_defaults=True)
                               for m in model.acceptable_actions],
        "forbidden_actions": [m.model_dump(exclude_none=True, exclude_defaults=True) for m in model.forbidden_actions],
        "retention": model.retention,
        "irreversible": model.irreversible,
    }


def load_prefix_case(path: Path) -> SuiteCase:
    """The prefix file at ``path`` as a case to run: its input, the frozen state as its
    initial state, no ``expected``, and its :func:`prefix_record` as ``prefix`` — folded into
    the fingerprint, since the frozen world is the case's question."""
    model, frozen, _ = load_prefix_file(path)
    prefix = prefix_record(model, frozen)
    state = frozen["state"]
    inp = model.snapshot_input()
    return SuiteCase(id=model.case_id, input=inp, initial_state=state, expected={},
                     metadata=dict(model.metadata), line=1,
                     fingerprint=case_fingerprint(inp, state, {}, None, prefix), prefix=prefix)


def first_action_step(prefix: dict[str, Any]) -> int:
    """The step of the candidate's first action in a prefix case's recording: right after its
    frozen steps. For a record with frozen steps that is ``boundary.before_step``; a
    snapshot-only record keeps its source's step numbers in ``boundary`` and has none."""
    return len(prefix["steps"]) + 1
