"""Matching a recorded value against an expected one that may hold matchers (SPEC §18.5).

The grammar — which matchers exist and what makes one valid — is
:mod:`oloproof.config.matchers` (case files are checked against it when read); this module
says what a valid pattern *means*:

* **literals** are equal as JSON values: numbers by value (``1`` equals ``1.0``), everything
  else by type and value (``true`` is not ``1``, ``"1"`` is not ``1``);
* **objects** match an object holding every key they name, each value matching in turn; keys
  they do not name are ignored — unless ``exact`` is true, when the recorded object must have
  exactly the named keys (at every depth);
* **lists** match a list of the same length, item by item, in order;
* **matchers**: ``$regex`` — a string the pattern matches as a whole (``re.fullmatch``: write
  ``.*foo.*`` to find ``foo`` anywhere); ``$approx`` — a number (not a bool, not a string)
  within ``$tol`` of the value (absolute, default 1e-6); ``$in`` — matches one of the
  alternatives; ``$any`` — any value (in an object, the key must still be there);
  ``$contains`` — a string holding the substring, or a list with an element matching it.

:func:`mismatch` says where and why a value does not match (the case panel shows it);
:func:`matches` is its yes/no. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oloproof.config.matchers import (
    DEFAULT_TOLERANCE,
    MatcherError,
    check_pattern,
    compile_regex,
    is_matcher,
    is_number,
)

__all__ = ["Mismatch", "MatcherError", "check_pattern", "is_matcher", "matches", "mismatch", "same_json"]


@dataclass(frozen=True)
class Mismatch:
    """Why a recorded value does not match: ``path`` is where inside the value (``""`` the
    value itself, ``.iban``, ``[2].sku``), ``reason`` says what did not hold."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"at {self.path}: {self.reason}" if self.path else self.reason


def _short(value: Any, limit: int = 40) -> str:
    from oloproof.events import canonical_json

    try:
        text = value if isinstance(value, str) else canonical_json(value).decode()
    except (TypeError, ValueError, OverflowError):
        text = repr(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(text) if isinstance(value, str) else text


def same_json(a: Any, b: Any) -> bool:
    """Equality of two JSON scalars as literals compare: numbers by value (``1 == 1.0``),
    anything else by type and value (``True`` is not ``1``)."""
    if is_number(a) and is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def matches(expected: Any, recorded: Any, *, exact: bool = False) -> bool:
    """Whether ``recorded`` matches the pattern ``expected`` (module docstring); ``exact``:
    objects must have exactly the keys the pattern names, at every depth."""
    return mismatch(expected, recorded, exact=exact) is None


def mismatch(expected: Any, recorded: Any, *, exact: bool = False, path: str = "") -> Mismatch | None:
    """None when ``recorded`` matches the pattern ``expected``; otherwise where (below
    ``path``) and why it does not. ``expected`` is assumed valid
    (:func:`~oloproof.config.matchers.check_pattern`); a regex that no longer compiles is a
    mismatch, never a match."""
    if is_matcher(expected):
        return _matcher(expected, recorded, exact, path)
    if isinstance(expected, Mapping):
        if not isinstance(recorded, Mapping):
            return Mismatch(path, f"not an object ({_short(recorded)})")
        for key, want in expected.items():
            where = f"{path}.{key}"
            if key not in recorded:
                return Mismatch(where, "not in the recorded value")
            found = mismatch(want, recorded[key], exact=exact, path=where)
            if found is not None:
                return found
        if exact:
            for key in recorded:
                if key not in expected:
                    return Mismatch(f"{path}.{key}", "not expected (exact: only the named keys)")
        return None
    if isinstance(expected, list):
        if not isinstance(recorded, list):
            return Mismatch(path, f"not a list ({_short(recorded)})")
        if len(recorded) != len(expected):
            return Mismatch(path, f"{len(recorded)} items, expected {len(expected)}")
        for i, (want, got) in enumerate(zip(expected, recorded)):
            found = mismatch(want, got, exact=exact, path=f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if same_json(expected, recorded) else Mismatch(path, f"not equal to {_short(expected)}")


def _matcher(m: Mapping[str, Any], recorded: Any, exact: bool, path: str) -> Mismatch | None:
    if "$any" in m:
        return None
    if "$regex" in m:
        pattern = m["$regex"]
        if not isinstance(recorded, str):
            return Mismatch(path, f"not a string ({_short(recorded)}), so no match for the pattern")
        try:
            compiled = compile_regex(pattern)
        except ValueError as e:
            return Mismatch(path, f"the pattern {e}")
        return None if compiled.fullmatch(recorded) else Mismatch(path, f"does not match the pattern {_short(pattern)}")
    if "$approx" in m:
        target, tol = m["$approx"], m.get("$tol", DEFAULT_TOLERANCE)
        if not is_number(recorded):
            return Mismatch(path, f"not a number ({_short(recorded)})")
        try:
            ok = abs(recorded - target) <= tol
        except OverflowError:  # an integer beyond any float is within no tolerance of one
            ok = False
        return None if ok else Mismatch(path, f"not within {tol:g} of {_short(target)}")
    if "$in" in m:
        if any(matches(alt, recorded, exact=exact) for alt in m["$in"]):
            return None
        return Mismatch(path, f"not one of {_short(m['$in'], 60)}")
    if "$contains" in m:
        needle = m["$contains"]
        if isinstance(recorded, str):
            if not isinstance(needle, str):
                return Mismatch(path, f"a string cannot contain {_short(needle)}")
            return None if needle in recorded else Mismatch(path, f"does not contain {_short(needle)}")
        if isinstance(recorded, list):
            if any(matches(needle, item, exact=exact) for item in recorded):
                return None
            return Mismatch(path, f"no item matches {_short(needle)}")
        return Mismatch(path, f"not a string or a list ({_short(recorded)})")
    # check_pattern refuses anything else; a stored pattern it never saw matches nothing
    return Mismatch(path, f"not a known matcher {_short(dict(m))}")
