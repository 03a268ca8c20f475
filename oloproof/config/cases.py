"""JSONL case files: validated line by line before anything runs (SPEC §3).

Every problem is reported as ``file:line: case 'id': field 'x': message`` and raised as
:class:`~oloproof.errors.CaseFileError` (exit code 2). Reading is streaming: validation keeps
only ids and fingerprints, so a 50,000-case suite does not sit in memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oloproof.config.locate import did_you_mean, dotted
from oloproof.errors import CaseFileError
from oloproof.events import case_fingerprint


class CaseModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # the slow path: built on first use

    id: str = Field(min_length=1)
    input: dict[str, Any]
    initial_state: dict[str, Any] | None = None
    expected: dict[str, Any] = {}
    metadata: dict[str, Any] = {}

    @field_validator("id")
    @classmethod
    def _no_tilde(cls, v: str) -> str:
        if "~" in v:
            raise ValueError("'~' is reserved for derived cases (<source>~<transform>)")
        if v != v.strip() or "\n" in v:
            raise ValueError("must not start or end with white space")
        return v


class _CaseLine(msgspec.Struct, forbid_unknown_fields=True):
    """The fast path: well-formed lines decode straight into this; anything it rejects goes
    through :class:`CaseModel`, the source of truth, for a located message."""

    id: str
    input: dict[str, Any]
    initial_state: dict[str, Any] | None = None
    expected: dict[str, Any] = {}
    metadata: dict[str, Any] = {}


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


@dataclass(frozen=True)
class SuiteInfo:
    count: int
    digest: str
    ids: frozenset[str] = frozenset()
    sources: int = 0


def _check_expected(case: Any, where: str) -> None:
    if "route" in case.expected:
        route = case.expected["route"]
        if not isinstance(route, list) or not route or not all(isinstance(a, str) and a for a in route):
            raise CaseFileError(
                f"{where}: case {case.id!r}: field 'expected.route': must be a list of agent names, "
                f"got {route!r}"
            )
    if "tools" in case.expected:
        tools = case.expected["tools"]
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise CaseFileError(
                f"{where}: case {case.id!r}: field 'expected.tools': must be a list of tool names, "
                f"got {tools!r}"
            )


class CaseFile:
    """A JSONL case file. ``validate()`` checks every line; iterating yields :class:`SuiteCase`."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        try:
            fh = self.path.open("rb")
        except FileNotFoundError as e:
            raise CaseFileError(f"{self.path}: case file not found") from e
        except OSError as e:
            raise CaseFileError(f"{self.path}: cannot read ({e})") from e
        with fh:
            for number, raw in enumerate(fh, start=1):
                if raw.strip():
                    yield number, raw

    def _parse(self, number: int, raw: bytes) -> SuiteCase:
        try:
            return self._parse_line(number, raw)
        except RecursionError as e:
            raise CaseFileError(f"{self.path}:{number}: the case is nested too deeply to be read") from e

    def _parse_line(self, number: int, raw: bytes) -> SuiteCase:
        try:
            line = _FAST.decode(raw)
        except msgspec.DecodeError:
            line = None
        if line is not None and line.id and "~" not in line.id and line.id == line.id.strip():
            model: Any = line
        else:
            model = self._validate(number, raw)
        _check_expected(model, f"{self.path}:{number}")
        return SuiteCase(
            id=model.id,
            input=model.input,
            initial_state=model.initial_state,
            expected=model.expected,
            metadata=model.metadata,
            line=number,
            fingerprint=case_fingerprint(model.input, model.initial_state, model.expected),
        )

    def _validate(self, number: int, raw: bytes) -> CaseModel:
        where = f"{self.path}:{number}"
        try:
            data = msgspec.json.decode(raw)
        except msgspec.DecodeError as e:
            raise CaseFileError(f"{where}: malformed JSON ({e})") from e
        if not isinstance(data, dict):
            raise CaseFileError(f"{where}: a case must be a JSON object, got {type(data).__name__}")
        case_id = data.get("id")
        label = f"case {case_id!r}" if isinstance(case_id, str) else "case (no id)"
        try:
            model = CaseModel.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            loc = tuple(err["loc"])
            if err["type"] == "extra_forbidden":
                msg = f"unknown field{did_you_mean(loc[-1], CaseModel.model_fields)}"
            else:
                msg = err["msg"]
                if err["type"] != "missing":
                    msg += f", got {err.get('input')!r}"
            raise CaseFileError(f"{where}: {label}: field {dotted(loc)!r}: {msg}") from e
        return model

    def validate(self, keep_ids: bool = False) -> SuiteInfo:
        """Check every line; raise :class:`CaseFileError` on the first problem. The ids are
        returned only with ``keep_ids`` (validity labels need them; a plain run does not)."""
        seen: dict[str, int] = {}
        digest = hashlib.sha256()
        for number, raw in self._lines():
            case = self._parse(number, raw)
            if case.id in seen:
                raise CaseFileError(
                    f"{self.path}:{number}: case {case.id!r}: field 'id': duplicate id "
                    f"(first used on line {seen[case.id]})"
                )
            seen[case.id] = number
            digest.update(f"{case.id}\x00{case.fingerprint}\n".encode())
        if not seen:
            raise CaseFileError(f"{self.path}: no cases")
        return SuiteInfo(count=len(seen), digest=digest.hexdigest(),
                         ids=frozenset(seen) if keep_ids else frozenset(), sources=len(seen))

    def __iter__(self) -> Iterator[SuiteCase]:
        for number, raw in self._lines():
            yield self._parse(number, raw)
