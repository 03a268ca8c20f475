"""The path syntax of environment state: ``orders.ord-999.status``, list items by index
(``items.0.sku`` or ``items[0].sku``). Configuration reads it (case validation, metamorphic
transforms on ``initial_state.PATH``) and evaluators compare by it
(:mod:`oloproof.evaluate.paths` re-exports these names), so it lives here, below both.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

ABSENT: Any = msgspec.UNSET  # a path that leads nowhere; omitted when encoded
_INDEX = re.compile(r"\[(\d+)\]")

Path = tuple[Any, ...]


class PathError(ValueError):
    """A path string that does not parse (empty, an empty segment, a bad ``[index]``)."""

    pass


def parse_path(text: str) -> Path:
    """``"orders.ord-1.items[0].sku"`` → ``("orders", "ord-1", "items", 0, "sku")``."""
    if not isinstance(text, str) or not text.strip():
        raise PathError(f"a path must be a non-empty string, got {text!r}")
    out: list[Any] = []
    for part in text.split("."):
        head, _, tail = part.partition("[")
        if not head and not tail:
            raise PathError(f"path {text!r} has an empty segment")
        if head:
            out.append(head)
        if tail:
            indexes = _INDEX.findall("[" + tail)
            if "".join(f"[{i}]" for i in indexes) != "[" + tail:
                raise PathError(f"path {text!r}: bad index in {part!r} (use items[0] or items.0)")
            out.extend(int(i) for i in indexes)
    return tuple(out)


def format_path(path: Path) -> str:
    """The inverse of :func:`parse_path`: ``("items", 0, "sku")`` → ``"items[0].sku"``."""
    text = ""
    for seg in path:
        if isinstance(seg, int):
            text += f"[{seg}]"
        else:
            text += ("." if text else "") + str(seg)
    return text


def _index(seg: Any) -> int | None:
    if isinstance(seg, int):
        return seg
    if isinstance(seg, str) and seg.isdigit():
        return int(seg)
    return None


def resolve(value: Any, path: Path) -> Any:
    """The value at ``path``, or :data:`ABSENT`. A segment names a key of an object (an index
    segment too: ``{"0": …}``) or, as a number, an item of a list."""
    for seg in path:
        if isinstance(value, dict):
            key = str(seg)
            if key not in value:
                return ABSENT
            value = value[key]
        elif isinstance(value, list):
            i = _index(seg)
            if i is None or i >= len(value):
                return ABSENT
            value = value[i]
        else:
            return ABSENT
    return value


def replace_at(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with the value at ``path`` (which must resolve) replaced by ``new``;
    only the containers along the path are copied, the input is never changed.

    Raises:
        KeyError: ``path`` does not resolve in ``value`` (:func:`resolve` gives ABSENT).
    """
    if not path:
        return new
    seg, rest = path[0], path[1:]
    if isinstance(value, dict) and str(seg) in value:
        key = str(seg)
        return {**value, key: replace_at(value[key], rest, new)}
    if isinstance(value, list):
        i = _index(seg)
        if i is not None and i < len(value):
            items = list(value)
            items[i] = replace_at(value[i], rest, new)
            return items
    raise KeyError(format_path(path))
