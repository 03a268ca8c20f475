"""Limits on what configuration and case files may hold (docs/input-limits.md).

Every limit is checked while a file is read, before anything runs: past it, the command stops
with a located one-line error (file, line, field; case id for a case file) and exit code 2,
and nothing is written to the log.

===========================  =======  ========================================================
limit                        value    applies to
===========================  =======  ========================================================
:data:`MAX_NESTING`          64       levels of nested lists/mappings in a YAML file
                                      (``oloproof.yaml``, ``release.yaml``) and in a JSON
                                      line of a case or label file (its object is level 1)
:data:`MAX_ALIASES`          100      YAML aliases (``*name``) in one document
:data:`MAX_ALIAS_NODES`      10,000   nodes the aliases of one YAML document stand for, once
                                      expanded (a "billion laughs" is refused at its first
                                      alias past this, in milliseconds)
:data:`MAX_ID_LENGTH`        200      characters of a case id
:data:`MAX_TRANSFORM_NAME`   50       characters of a metamorphic transform's name (it ends
                                      every derived case id: ``<source>~<transform>``)
:data:`MAX_NAME_LENGTH`      200      characters of a name in configuration: system name,
                                      version, callable and factory, metric id and source,
                                      slice, rule name and criterion, transform field
``MAX_TYPE_LENGTH``          100      characters of an evaluator's ``type``
                                      (:mod:`oloproof.config.models`)
``QUOTE_LIMIT``              60       characters of a user's value quoted in an error
                                      message ("…" and the full length follow)
``SHOWN_ERRORS``             10       validation errors listed for one file (the rest are
                                      counted; :mod:`oloproof.config.locate`)
===========================  =======  ========================================================

Besides: YAML mapping keys are unique; an alias may not refer to a node that contains it;
numbers in configuration are finite (no ``.inf``, ``.nan``, ``1e999``); a boolean is not a
number (``min_slice_support: true`` is refused) nor a number a boolean; a case id holds no
control character (newline, tab, NUL...), line or paragraph separator, surrogate, Unicode
non-character (U+FFFE, U+FFFF, U+10FFFF...), ``/`` (streams are ``<run_id>/<case_id>``) or
``~`` (derived cases), and does not start or end with white space.

Recorded values (a case's output, tool arguments and results, states) have their own limits,
in :mod:`oloproof.records` (``MAX_RECORDED_NESTING``).
"""

from __future__ import annotations

import re

from oloproof.records import (
    MAX_RECORDED_NESTING,
    QUOTE_LIMIT,
    json_nests_deeper,
    quoted,
)

__all__ = [
    "MAX_ALIASES",
    "MAX_ALIAS_NODES",
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_NESTING",
    "MAX_RECORDED_NESTING",
    "MAX_TRANSFORM_NAME",
    "QUOTE_LIMIT",
    "case_id_problem",
    "json_nests_deeper",
    "quoted",
    "split_trial",
    "trial_case_id",
]

MAX_NESTING = 64
MAX_ALIASES = 100
MAX_ALIAS_NODES = 10_000
MAX_ID_LENGTH = 200
MAX_TRANSFORM_NAME = 50
MAX_NAME_LENGTH = 200

#: characters a case id must not hold: C0/C1 controls, line/paragraph separators,
#: surrogates, non-characters (U+FDD0..U+FDEF and the last two code points of every plane)
_BAD_ID_CHAR = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufdd0-\ufdef"
    + "".join(f"{chr(p * 0x10000 + 0xFFFE)}{chr(p * 0x10000 + 0xFFFF)}" for p in range(17))
    + "]"
)


def case_id_problem(case_id: str) -> str | None:
    """Why ``case_id`` cannot name a case, or ``None`` when it can."""
    if not case_id:
        return "must not be empty"
    if len(case_id) > MAX_ID_LENGTH:
        return f"is {len(case_id):,} characters long; a case id has at most {MAX_ID_LENGTH}"
    bad = _BAD_ID_CHAR.search(case_id)
    if bad is not None:
        ch = bad.group()
        kind = ("a control character" if ch < "\xa0" else
                "a line or paragraph separator" if ch in "\u2028\u2029" else
                "a surrogate" if "\ud800" <= ch <= "\udfff" else "a Unicode non-character")
        return f"must not contain {kind} (U+{ord(ch):04X} at position {bad.start()})"
    if "~" in case_id:
        return "'~' is reserved for derived cases (<source>~<transform>)"
    if "/" in case_id:
        return "must not contain '/' (it separates the run id from the case id in the log)"
    if case_id != case_id.strip():
        return "must not start or end with white space"
    return None


def trial_case_id(case_id: str, trial: int | None) -> str:
    """The id (and stream ``<run_id>/<id>``) of trial ``trial`` of a case under ``trials: k``:
    ``c/2`` — a case id never holds ``/``, so no case can be named like a trial. For a derived
    case the trial follows its source part, ``c/2~upper``, so that ``<source>~<transform>``
    still holds (its source is ``c/2``, the same trial of ``c``). ``None``: the case's own id
    (a single trial)."""
    if trial is None:
        return case_id
    source, sep, transform = case_id.partition("~")
    return f"{source}/{trial}{sep}{transform}"


def split_trial(case_id: str) -> tuple[str, int | None]:
    """``(case id, trial)`` of a trial's id (:func:`trial_case_id`); ``(case_id, None)`` for
    the id of a single-trial case."""
    head, sep, transform = case_id.partition("~")
    source, slash, trial = head.rpartition("/")
    if not slash or not trial.isdigit():
        return case_id, None
    return source + sep + transform, int(trial)

