"""YAML loading with line numbers, and pydantic errors turned into located messages.

The loader (:class:`_Loader`, a ``yaml.SafeLoader``) refuses, with the line: nesting deeper
than :data:`~oloproof.config.limits.MAX_NESTING` (64) levels, more than
:data:`~oloproof.config.limits.MAX_ALIASES` (100) aliases or aliases standing for more than
:data:`~oloproof.config.limits.MAX_ALIAS_NODES` (10,000) nodes once expanded (a "billion
laughs" stops at its first alias past the budget), an alias inside the node it names,
duplicate mapping keys, integers too long to convert, and — after loading, with the field's
path — NaN and infinite numbers. See docs/input-limits.md.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from oloproof.config.files import read_regular
from oloproof.config.limits import (
    MAX_ALIAS_NODES,
    MAX_ALIASES,
    MAX_NESTING,
    QUOTE_LIMIT,
    quoted,
)
from oloproof.errors import ConfigError


@dataclass
class Locator:
    """Maps a path inside a YAML document (keys and list indexes) to its line number."""

    file: str
    lines: dict[tuple, int] = field(default_factory=dict)

    def line(self, path: Iterable[Any] = ()) -> int | None:
        """The line of ``path``, or of its nearest ancestor the document has (a missing key
        is reported where its parent is); None when not even the root has a line."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def where(self, path: Iterable[Any] = ()) -> str:
        """``file:line`` of ``path`` (see :meth:`line`), or just the file when no line is known."""
        line = self.line(path)
        return f"{self.file}:{line}" if line else self.file

    def sub(self, prefix: tuple) -> Locator:
        """A locator for the sub-document at ``prefix`` (paths relative to it)."""
        n = len(prefix)
        return Locator(self.file, {k[n:]: v for k, v in self.lines.items() if k[:n] == prefix})


class _Refused(yaml.YAMLError):
    """A document the loader refuses (a limit, a duplicate key): a message and where."""

    def __init__(self, mark: Any, message: str):
        super().__init__(message)
        self.mark = mark
        self.message = message


_MERGE = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the limits of :mod:`oloproof.config.limits`."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._alias_nodes = 0
        self._open: set[str] = set()  # anchors of the collections being composed
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded

    # ---- composing: depth, aliases -------------------------------------------------------

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # (an undefined alias is PyYAML's own error)
                self._aliases += 1
                if self._aliases > MAX_ALIASES:
                    raise _Refused(event.start_mark, f"more than {MAX_ALIASES} YAML aliases (the limit)")
                if event.anchor in self._open:
                    raise _Refused(event.start_mark, f"alias *{quoted(event.anchor)[1:-1]} refers to a "
                                                     "node that contains it (a recursive structure)")
                self._alias_nodes += self._size(node)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise _Refused(event.start_mark, f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} "
                                                     "nodes (the limit)")
            return super().compose_node(parent, index)
        if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        event = self.peek_event()
        if self._depth >= MAX_NESTING:
            raise _Refused(event.start_mark, f"nested deeper than {MAX_NESTING} levels (the limit)")
        anchor = event.anchor
        self._depth += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)

    def _size(self, node: Any) -> int:
        """Nodes ``node`` stands for, aliases expanded (memoised: linear in the document)."""
        key = id(node)
        size = self._sizes.get(key)
        if size is None:
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(self._size(n) for n in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
            else:
                size = 1
            self._sizes[key] = size
        return size

    # ---- constructing: duplicate keys, long integers ---------------------------------------

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: PyYAML reports it below
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _Refused(key_node.start_mark,
                                   f"duplicate key {quoted(key)} (first on line {first})")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise _Refused(node.start_mark, f"the integer {quoted(node.value)} is too long") from None


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def load_yaml(path: Path) -> tuple[Any, Locator]:
    """``yaml.safe_load`` with a :class:`Locator` and the limits of
    :mod:`oloproof.config.limits`; YAML errors become :class:`ConfigError`."""
    try:
        text = read_regular(path, str(path), ConfigError).decode("utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: file not found") from e
    except IsADirectoryError as e:
        raise ConfigError(f"{path}: is a folder, not a file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from e
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _Refused as e:
        raise ConfigError(f"{path}:{e.mark.line + 1}: {e.message}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from e
    except RecursionError as e:  # not expected within the nesting limit; never a traceback
        raise ConfigError(f"{path}: nested too deeply to be read") from e
    finally:
        loader.dispose()
    locator = Locator(str(path))
    if node is not None:
        _walk(node, (), locator.lines)
    _check_finite(data, (), locator)
    return data, locator


def _check_finite(data: Any, path: tuple, locator: Locator) -> None:
    """NaN and infinite numbers are refused wherever they are (they would be stored as null)."""
    if isinstance(data, float):
        if not math.isfinite(data):
            raise ConfigError(f"{locator.where(path)}: {dotted(path)}: {data} is not a finite number "
                              "(.inf and .nan are not accepted)")
    elif isinstance(data, dict):
        for k, v in data.items():
            _check_finite(v, path + (k,), locator)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _check_finite(v, path + (i,), locator)


def _walk(node: yaml.Node, path: tuple, lines: dict) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = path + (key.value,)
            _walk(value, sub, lines)
            lines[sub] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), lines)


def dotted(loc: Iterable[Any], cap: bool = True) -> str:
    """``evaluators[0].max_steps``; a key longer than ``QUOTE_LIMIT`` is cut (unless ``cap``
    is false: the caller quotes the whole path with :func:`quoted`)."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = str(part)
            if cap and len(text) > QUOTE_LIMIT:
                text = quoted(text)
            out += ("." if out else "") + text
    return out or "(top level)"


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to a misspelt ``word`` (difflib,
    cutoff 0.6), to append to an error message; ``""`` when none is close or the word is huge."""
    word = str(word)
    if len(word) > 4 * QUOTE_LIMIT:  # difflib indexes the whole word: not for a 50 MB one
        return ""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {matches[0]!r}?" if matches else ""


#: errors of one validation shown; the rest are counted
SHOWN_ERRORS = 10
_MESSAGE_LIMIT = 400


def pydantic_message(error: Any, model: Any, where: Any, prefix: tuple = ()) -> str:
    """One located line per pydantic error (``where(path) -> 'file:line'``), at most
    :data:`SHOWN_ERRORS` of them; values are quoted short (:func:`quoted`).

    ``model`` is the pydantic model class validated, used for did-you-mean on unknown keys.
    """
    lines = []
    errors = error.errors()
    for err in errors[:SHOWN_ERRORS]:
        loc = prefix + tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            known = _fields_at(model, tuple(err["loc"])[:-1])
            msg = f"unknown key {quoted(loc[-1])}{did_you_mean(loc[-1], known)}"
            if known:
                msg += f" (known keys: {', '.join(sorted(known))})"
            lines.append(f"{where(loc)}: {dotted(loc[:-1]) + ': ' if len(loc) > 1 else ''}{msg}")
            continue
        value = err.get("input")
        shown = f" (got {quoted(value)})" if not isinstance(value, (dict, list)) and err["type"] != "missing" else ""
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's own prefix says nothing
        if len(msg) > _MESSAGE_LIMIT:
            msg = msg[:_MESSAGE_LIMIT] + "…"
        if err["type"] == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
            # YAML reads `version: 1.0` as a number: 1.0 and 1.00 would be one version
            msg += f"; quote it (\"{value}\") to keep it as written"
        if err["type"] in ("literal_error", "enum") and isinstance(value, str):
            import re

            shown += did_you_mean(value, re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", ""))))
        lines.append(f"{where(loc)}: {dotted(loc)}: {msg}{shown}")
    if len(errors) > SHOWN_ERRORS:
        lines.append(f"… and {len(errors) - SHOWN_ERRORS} more error(s)")
    return "\n".join(lines)


def validate_model(model: Any, data: Any, where: Any, prefix: tuple = ()) -> Any:
    """``model.model_validate(data)`` for configuration: errors are located (``where(path) ->
    'file:line'``, paths under ``prefix``), a boolean is refused where the model expects a
    number (pydantic would take ``true`` as 1), and so is a text naming a non-finite number
    (``"inf"``, ``"nan"``, ``"1e999"``), and a number where it expects true or false. Any
    pydantic model: the evaluators' config models too."""
    from pydantic import ValidationError

    _check_numbers(model, data, prefix, where)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(pydantic_message(e, model, where, prefix)) from e


def _finite_text(text: str) -> bool:
    """False for a text that reads as a NaN or infinite float (``inf``, ``NaN``, ``1e999``)."""
    if len(text) > 400:
        return True  # not a number pydantic takes either
    try:
        return math.isfinite(float(text))
    except ValueError:
        return True


def _check_numbers(model: Any, data: Any, loc: tuple, where: Any) -> None:
    fields = getattr(model, "model_fields", None)
    if not fields or not isinstance(data, dict):
        return
    for name, info in fields.items():
        key = info.alias or name
        if key in data:
            _check_number(info.annotation, data[key], loc + (key,), where)


def _check_number(ann: Any, value: Any, loc: tuple, where: Any) -> None:
    import typing

    if ann is None or ann is Any:
        return
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _check_number(typing.get_args(ann)[0], value, loc, where)
    options = typing.get_args(ann) if origin in (typing.Union, _UnionType) else (ann,)
    if any(o is Any for o in options):
        return
    if isinstance(value, bool):
        if bool not in options and any(o in (int, float) for o in options):
            raise ConfigError(f"{where(loc)}: {dotted(loc)}: expected a number, got "
                              f"{str(value).lower()} (a boolean)")
        return
    if isinstance(value, (int, float)):
        if bool in options and not any(o in (int, float) for o in options):
            raise ConfigError(f"{where(loc)}: {dotted(loc)}: expected true or false, got {quoted(value)}")
        return
    if isinstance(value, str):
        if float in options and str not in options and not _finite_text(value):
            raise ConfigError(f"{where(loc)}: {dotted(loc)}: {quoted(value)} is not a finite number")
        return
    for option in options:
        inner = typing.get_origin(option)
        args = typing.get_args(option)
        if hasattr(option, "model_fields"):
            _check_numbers(option, value, loc, where)
        elif inner in (list, tuple, set, frozenset) and args and isinstance(value, list):
            item = args[0]
            for i, v in enumerate(value):
                _check_number(item, v, loc + (i,), where)
        elif inner is dict and len(args) == 2 and isinstance(value, dict):
            for k, v in value.items():
                _check_number(args[1], v, loc + (k,), where)


try:
    from types import UnionType as _UnionType
except ImportError:  # pragma: no cover
    _UnionType = None  # type: ignore[assignment,misc]


def _fields_at(model: Any, loc: tuple) -> list[str]:
    current = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        ann = fields[part].annotation
        current = _inner_model(ann)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _inner_model(ann: Any) -> Any:
    if hasattr(ann, "model_fields"):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None
