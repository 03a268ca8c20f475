"""YAML loading with line numbers, and pydantic errors turned into located messages."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from oloproof.errors import ConfigError


@dataclass
class Locator:
    """Maps a path inside a YAML document (keys and list indexes) to its line number."""

    file: str
    lines: dict[tuple, int] = field(default_factory=dict)

    def line(self, path: Iterable[Any] = ()) -> int | None:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def where(self, path: Iterable[Any] = ()) -> str:
        line = self.line(path)
        return f"{self.file}:{line}" if line else self.file

    def sub(self, prefix: tuple) -> "Locator":
        """A locator for the sub-document at ``prefix`` (paths relative to it)."""
        n = len(prefix)
        return Locator(self.file, {k[n:]: v for k, v in self.lines.items() if k[:n] == prefix})


def load_yaml(path: Path) -> tuple[Any, Locator]:
    """``yaml.safe_load`` with a :class:`Locator`; YAML errors become :class:`ConfigError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: file not found") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from e
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from e
    finally:
        loader.dispose()
    locator = Locator(str(path))
    if node is not None:
        _walk(node, (), locator.lines)
    return data, locator


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


def dotted(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    matches = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {matches[0]!r}?" if matches else ""


def pydantic_message(error: Any, model: Any, where: Any, prefix: tuple = ()) -> str:
    """One located line per pydantic error (``where(path) -> 'file:line'``).

    ``model`` is the pydantic model class validated, used for did-you-mean on unknown keys.
    """
    lines = []
    for err in error.errors():
        loc = prefix + tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            known = _fields_at(model, tuple(err["loc"])[:-1])
            msg = f"unknown key {loc[-1]!r}{did_you_mean(loc[-1], known)}"
            if known:
                msg += f" (known keys: {', '.join(sorted(known))})"
            lines.append(f"{where(loc)}: {dotted(loc[:-1]) + ': ' if len(loc) > 1 else ''}{msg}")
            continue
        value = err.get("input")
        shown = f" (got {value!r})" if not isinstance(value, (dict, list)) and err["type"] != "missing" else ""
        lines.append(f"{where(loc)}: {dotted(loc)}: {err['msg']}{shown}")
    return "\n".join(lines)


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
