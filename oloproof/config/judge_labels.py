"""People's labels of a model judge's criterion (SPEC §18.6): ``labels/NAME.jsonl``, one line
per labelled case, ``{"case_id": "c-7", "label": "pass" | "fail"}``.

A line written by ``oloproof label`` also carries ``prompt_digest``, the digest of what the
judge was shown of the case when it was labelled: the label then counts only against a
judgement of that same output (a label of another output, from a run before the agent changed,
is *stale* and left out of the calibration). A line without it counts against whatever output
the case has.

Validated like the other label files: malformed JSON, a missing or unknown field, a label that
is not ``pass`` or ``fail``, an unknown case id (with a did-you-mean) and a case labelled twice
are located errors (file:line, case, field; exit 2). A case id may name a trial (``c/2``) of a
suite case.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from oloproof.config.cases import shown_path, too_deep
from oloproof.config.files import read_regular
from oloproof.config.limits import MAX_NESTING, json_nests_deeper, quoted, split_trial
from oloproof.config.locate import did_you_mean
from oloproof.errors import CaseFileError, ConfigError

#: what a label may say
LABELS = ("pass", "fail")
_KEYS = {"case_id", "label", "prompt_digest"}
_DIGEST = re.compile(r"[0-9a-f]{64}")

#: case id -> (label, prompt digest or None)
Labels = dict[str, tuple[str, str | None]]


def read_labels(path: Path, ids: frozenset[str] | None, where: str) -> tuple[Labels, dict[str, int]]:
    """The labels of one file, and the line each case is labelled on. ``ids``: the suite's case
    ids a label may name (None: any). ``where`` names the configuration line that points at the
    file, for a file that is missing or cannot be read."""
    if not path.exists():
        raise ConfigError(f"{where}: labels file {shown_path(path)} not found; create it (it may be empty) or "
                          "label cases with 'oloproof label RUN --criterion CRITERION'")
    if path.is_dir():
        raise ConfigError(f"{where}: labels file {shown_path(path)} is a folder, not a file")
    try:
        content = read_regular(path, f"{where}: labels file {shown_path(path)}", ConfigError)
    except OSError as e:
        raise ConfigError(f"{where}: labels file {shown_path(path)} cannot be read "
                          f"({type(e).__name__}: {e.strerror})") from e
    labels: Labels = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        at = f"{shown_path(path)}:{number}"
        if json_nests_deeper(raw, MAX_NESTING):
            raise CaseFileError(too_deep(at, raw, id_key="case_id"))
        try:
            row = msgspec.json.decode(raw)
        except msgspec.DecodeError as e:
            raise CaseFileError(f"{at}: malformed JSON ({e})") from e
        if not isinstance(row, dict) or not {"case_id", "label"} <= set(row) or not set(row) <= _KEYS:
            extra = sorted(set(row) - _KEYS) if isinstance(row, dict) else []
            hint = f" (unknown field {quoted(extra[0])}{did_you_mean(extra[0], _KEYS)})" if extra else ""
            raise CaseFileError(f"{at}: a label is {{\"case_id\": ..., \"label\": \"pass\"|\"fail\"}}{hint}, "
                                f"got {quoted(raw.decode('utf-8', 'replace'))}")
        case_id, label = row["case_id"], row["label"]
        if not isinstance(case_id, str) or not case_id:
            raise CaseFileError(f"{at}: field 'case_id' must be a case id (a string), got {quoted(case_id)}")
        if label not in LABELS:
            raise CaseFileError(f"{at}: case {quoted(case_id)}: field 'label' must be \"pass\" or \"fail\", "
                                f"got {quoted(label)}{did_you_mean(str(label), LABELS)}")
        digest = row.get("prompt_digest")
        if digest is not None and not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
            raise CaseFileError(f"{at}: case {quoted(case_id)}: field 'prompt_digest' must be 64 hex digits "
                                f"(as 'oloproof label' writes it), got {quoted(digest)}")
        if ids is not None and split_trial(case_id)[0] not in ids:
            raise CaseFileError(f"{at}: case {quoted(case_id)}: no such case in the suite"
                                f"{did_you_mean(case_id, sorted(ids))}")
        if case_id in lines:
            raise CaseFileError(f"{at}: case {quoted(case_id)}: labelled twice (first on line {lines[case_id]}); "
                                "keep one line per case")
        lines[case_id] = number
        labels[case_id] = (label, digest)
    return labels, lines


def load_judge_labels(root: Path, judges: list[tuple[str, str, str]], ids: frozenset[str] | None) -> dict[str, Labels]:
    """The labels of every model judge with a ``calibration:`` file: criterion -> labels.
    ``judges``: (criterion, labels path relative to ``root``, where the configuration names it)."""
    return {criterion: read_labels(root / relative, ids, here)[0] for criterion, relative, here in judges}


__all__ = ["LABELS", "Labels", "load_judge_labels", "read_labels"]
