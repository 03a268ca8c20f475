"""Docstrings on the package's public names (STYLE.md habit 10): a ratchet, never below today's
share. Issue 24 raised it from 67 % to 90 % (99 % on 2026-12-02).

A public name is a module, or a function or class defined in a public module, or a public
method or property of such a class — none of them starting with ``_``. A class counts only
with its own docstring (not its base's, nor the signature a dataclass writes for itself); a
method may inherit its base's (an ``EventStore`` backend's ``commit`` is documented where the
contract is).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import oloproof

THRESHOLD = 0.90  # STYLE.md's floor; the share was 99 % when it was set


def _own_class_doc(cls: type) -> bool:
    doc = cls.__dict__.get("__doc__")
    return bool(doc and doc.strip()) and not doc.startswith(f"{cls.__name__}(")


def public_names() -> list[tuple[str, bool]]:
    """(qualified name, documented) of every public name of the package."""
    out: list[tuple[str, bool]] = []
    for info in pkgutil.walk_packages(oloproof.__path__, "oloproof."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        module = importlib.import_module(info.name)
        out.append((info.name, bool(module.__doc__ and module.__doc__.strip())))
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != info.name:
                continue
            if inspect.isclass(obj):
                out.append((f"{info.name}.{name}", _own_class_doc(obj)))
                for member, value in vars(obj).items():
                    if member.startswith("_"):
                        continue
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if inspect.isfunction(value) or isinstance(value, property):
                        documented = bool(inspect.getdoc(getattr(obj, member, value)) or inspect.getdoc(value))
                        out.append((f"{info.name}.{name}.{member}", documented))
            elif inspect.isfunction(obj):
                out.append((f"{info.name}.{name}", bool(inspect.getdoc(obj))))
    return out


def test_public_names_keep_their_docstrings() -> None:
    names = public_names()
    missing = [n for n, documented in names if not documented]
    share = 1 - len(missing) / len(names)
    assert len(names) > 500  # the walk found the package, not a fragment of it
    assert share >= THRESHOLD, (f"{share:.1%} of {len(names)} public names have a docstring; "
                                f"without one: {', '.join(missing[:40])}")


def test_the_checker_sees_a_missing_docstring() -> None:
    class Plain:
        def method(self) -> None:
            pass

    assert not _own_class_doc(Plain)
    import dataclasses

    assert not _own_class_doc(dataclasses.make_dataclass("Row", ["a"]))
