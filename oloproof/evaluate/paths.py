"""Dotted paths into JSON state: ``orders.ord-999.status``, list items by index
(``items.0.sku`` or ``items[0].sku``), and comparisons that report every path they looked at.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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


def resolve(value: Any, path: Path) -> Any:
    """The value at ``path``, or :data:`ABSENT`."""
    for seg in path:
        if isinstance(value, dict):
            key = str(seg)
            if key not in value:
                return ABSENT
            value = value[key]
        elif isinstance(value, list):
            if isinstance(seg, int):
                i = seg
            elif isinstance(seg, str) and seg.isdigit():
                i = int(seg)
            else:
                return ABSENT
            if i >= len(value):
                return ABSENT
            value = value[i]
        else:
            return ABSENT
    return value


def leaves(value: Any, prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every leaf under ``value`` (an empty dict or list is a leaf)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, prefix + (k,))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, prefix + (i,))
    else:
        yield prefix, value


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def equal(a: Any, b: Any, tolerance: float = 0.0) -> bool:
    """Deep equality; numeric leaves within ``tolerance``; ``True`` is not ``1``."""
    if _is_number(a) and _is_number(b):
        return a == b or abs(a - b) <= tolerance
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y, tolerance) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _child(value: Any, key: Any) -> Any:
    if isinstance(value, dict):
        return value.get(key if isinstance(key, str) else str(key), ABSENT)
    if isinstance(value, list) and isinstance(key, int) and key < len(value):
        return value[key]
    return ABSENT


def walk_leaves(expected: Any, recorded: Any, initial: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any, Any]]:
    """``(path, expected leaf, recorded value, initial value)`` for every leaf of ``expected``,
    walking the three trees side by side (one pass, no lookups from the root)."""
    if isinstance(expected, dict) and expected:
        for k, v in expected.items():
            yield from walk_leaves(v, _child(recorded, k), _child(initial, k),
                                   f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(expected, list) and expected:
        for i, v in enumerate(expected):
            yield from walk_leaves(v, _child(recorded, i), _child(initial, i), f"{prefix}[{i}]")
    else:
        yield prefix, expected, recorded, initial
