"""Dotted paths into JSON state: ``orders.ord-999.status``, list items by index
(``items.0.sku`` or ``items[0].sku``), and comparisons that report every path they looked at.
Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# the path syntax is configuration's too (case validation, metamorphic transforms): it lives
# in oloproof.config.paths, below both, and is re-exported here
from oloproof.config.paths import ABSENT, Path, PathError, format_path, parse_path, resolve

__all__ = ["ABSENT", "Path", "PathError", "equal", "format_path", "leaves", "parse_path", "resolve",
           "walk_leaves"]


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
