"""Metamorphic transforms and their validity labels (SPEC §7.2).

Each source case gets one derived case per transform, id ``<source>~<transform>``, in the
source's cluster, with ``input[field]`` — or the value at ``target``, ``input.PATH`` or
``initial_state.PATH`` (SPEC §18.5) — rewritten by the template. Validity labels are JSONL
lines ``{"case_id": "ord-001~injected", "valid": true}`` written by a person who read the pair.
Everything is checked before anything runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from oloproof.config.cases import CaseFile, SuiteCase, SuiteInfo, shown_path, too_deep
from oloproof.config.files import read_regular
from oloproof.config.limits import MAX_NESTING, json_nests_deeper, quoted
from oloproof.config.locate import Locator, did_you_mean
from oloproof.config.models import MetamorphicConfig, TransformConfig
from oloproof.config.paths import ABSENT, replace_at
from oloproof.errors import CaseFileError, ConfigError
from oloproof.events import case_fingerprint

SCALARS = (str, int, float, bool)


def rewrite(case: SuiteCase, t: TransformConfig) -> SuiteCase:
    """The case derived from ``case`` by transform ``t`` (SPEC §7.2, §18.5): id
    ``<source>~<transform>``, the value ``t`` targets (``input[field]``, or the value at
    ``input.PATH`` / ``initial_state.PATH``) put into the template's ``{value}`` (a non-string
    as JSON), its own fingerprint (the rewritten input or initial state is another question),
    the source's cluster, expected, fault and tags. Only the containers along the path are
    copied: the source case is never changed."""
    value = t.original(case.input, case.initial_state)
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    new = t.template.replace("{value}", text)
    new_input, new_state = case.input, case.initial_state
    if t.root == "input":
        new_input = replace_at(case.input, t.path, new)
    else:
        new_state = replace_at(case.initial_state, t.path, new)
    return SuiteCase(
        id=f"{case.id}~{t.name}", input=new_input, initial_state=new_state,
        expected=case.expected, metadata=case.metadata, line=case.line,
        fingerprint=case_fingerprint(new_input, new_state, case.expected, case.fault), cluster=case.id,
        fault=case.fault,  # the same question, asked with the rewritten input or world
        tags=case.tags,
    )


@dataclass
class Suite:
    """The source cases of a case file and the cases derived from them."""

    cases: CaseFile
    metamorphic: MetamorphicConfig | None = None
    #: the source cases a partial run keeps (their derived cases with them); None: every case
    keep: frozenset[str] | None = None

    @property
    def transforms(self) -> list[TransformConfig]:
        """The configured metamorphic transforms (empty without a ``metamorphic:`` section)."""
        return self.metamorphic.transforms if self.metamorphic else []

    def validate(self, locator: Locator | None = None) -> SuiteInfo:
        """Validate the case file, then every derived case: each source case must have every
        transform's field (or target path), as a scalar. The digest and ids then cover the derived cases too.

        Raises:
            CaseFileError: a bad line, or a transform field that is missing or not a scalar.
        """
        info = self.cases.validate(keep_ids=bool(self.transforms))
        if not self.transforms:
            return info
        missing: dict[str, list[str]] = {t.name: [] for t in self.transforms}
        digest = hashlib.sha256(info.digest.encode())
        ids = set(info.ids)
        for case in self.cases:
            for t in self.transforms:
                value = t.original(case.input, case.initial_state)
                if value is ABSENT:
                    missing[t.name].append(case.id)
                    continue
                if not isinstance(value, SCALARS):
                    raise CaseFileError(
                        f"{self.cases.label}:{case.line}: case {quoted(case.id)}: field {quoted(t.label)}: "
                        f"transform {t.name!r} rewrites text, got a {type(value).__name__}")
                derived = rewrite(case, t)
                digest.update(f"{derived.id}\x00{derived.fingerprint}\n".encode())
                ids.add(derived.id)
        for name, ids_missing in missing.items():
            if ids_missing:
                shown = ", ".join(quoted(i) for i in ids_missing[:5])
                more = f" and {len(ids_missing) - 5} more" if len(ids_missing) > 5 else ""
                where = next(t.label for t in self.transforms if t.name == name)
                raise CaseFileError(
                    f"{self.cases.label}: transform {name!r} rewrites {where}, which "
                    f"{len(ids_missing)} case(s) do not have: {shown}{more}")
        return SuiteInfo(count=len(ids), digest=digest.hexdigest(), ids=frozenset(ids), sources=info.sources,
                         fault_tools=info.fault_tools, expected_tools=info.expected_tools)

    def __iter__(self) -> Iterator[SuiteCase]:
        """Each source case, then its derived cases (so a pair is judged as soon as it ran)."""
        transforms = self.transforms
        keep = self.keep
        for case in self.cases:
            if keep is not None and case.id not in keep:
                continue
            yield case
            for t in transforms:
                yield rewrite(case, t)


def load_labels(root: Path, metamorphic: MetamorphicConfig | None, ids: frozenset[str],
                locator: Locator) -> dict[str, dict[str, bool]]:
    """Validity labels per transform: {transform: {derived case id: valid}}."""
    out: dict[str, dict[str, bool]] = {}
    if metamorphic is None:
        return out
    for k, t in enumerate(metamorphic.transforms):
        labels: dict[str, bool] = {}
        out[t.name] = labels
        if not t.validity_labels:
            continue
        path = root / t.validity_labels
        here = locator.where(('metamorphic', 'transforms', k, 'validity_labels'))
        if not path.exists():
            raise ConfigError(f"{here}: labels file {shown_path(path)} not found")
        if path.is_dir():  # a FIFO or a device is refused by read_regular
            raise ConfigError(f"{here}: labels file {shown_path(path)} is a folder, not a file")
        try:
            content = read_regular(path, f"{here}: labels file {shown_path(path)}", ConfigError)
        except OSError as e:
            raise ConfigError(f"{here}: labels file {shown_path(path)} cannot be read "
                              f"({type(e).__name__}: {e.strerror})") from e
        seen_line: dict[str, int] = {}
        for number, raw in enumerate(content.splitlines(), start=1):
            if not raw.strip():
                continue
            where = f"{shown_path(path)}:{number}"
            if json_nests_deeper(raw, MAX_NESTING):
                raise CaseFileError(too_deep(where, raw, id_key="case_id"))
            try:
                row = msgspec.json.decode(raw)
            except msgspec.DecodeError as e:
                raise CaseFileError(f"{where}: malformed JSON ({e})") from e
            if not isinstance(row, dict) or set(row) != {"case_id", "valid"}:
                raise CaseFileError(f"{where}: a label is {{\"case_id\": ..., \"valid\": true|false}}, "
                                    f"got {quoted(raw.decode('utf-8', 'replace'))}")
            case_id, valid = row["case_id"], row["valid"]
            if not isinstance(case_id, str):
                raise CaseFileError(f"{where}: field 'case_id' must be a string, got {quoted(case_id)}")
            if not isinstance(valid, bool):
                raise CaseFileError(f"{where}: case {quoted(case_id)}: field 'valid' must be true or false, "
                                    f"got {quoted(valid)}")
            if not case_id.endswith("~" + t.name) or case_id not in ids:
                pairs = sorted(i for i in ids if i.endswith("~" + t.name))
                raise CaseFileError(f"{where}: case {quoted(case_id)}: no such pair for transform {t.name!r}"
                                    f"{did_you_mean(case_id, pairs)}")
            if case_id in seen_line:
                raise CaseFileError(f"{where}: case {quoted(case_id)}: labelled twice "
                                    f"(first on line {seen_line[case_id]})")
            seen_line[case_id] = number
            labels[case_id] = valid
    return out
