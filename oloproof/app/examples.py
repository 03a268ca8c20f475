"""The packaged examples copied out by ``oloproof init --example NAME [DIR]``."""

from __future__ import annotations

import shutil
from pathlib import Path

from oloproof.errors import UsageError

#: example name -> folder under examples/ (shipped in the wheel as oloproof/_examples).
EXAMPLES = {"stateful-agent": "stateful_agent", "support-agent": "support_agent",
            "triage-agents": "triage_agents", "release-gate": "release_gate",
            "prefix-regression": "prefix_regression", "pydantic-ai-agent": "pydantic_ai_agent",
            "pydantic-ai-team": "pydantic_ai_team",
            "openai-agents-team": "openai_agents_team", "deliverables": "deliverables",
            "langgraph-team": "langgraph_team", "banking-agent": "banking_agent",
            "judged-agent": "judged_agent"}
#: what ``oloproof init --blank`` copies: a runnable skeleton to start a project from
BLANK = "blank"
_FOLDERS = {**EXAMPLES, BLANK: "blank"}
#: what an example needs beyond Oloproof itself: printed by ``init``, named when it is missing
EXTRAS = {"pydantic-ai-agent": "pip install 'oloproof[otel]' pydantic-ai-slim",
          "pydantic-ai-team": "pip install 'oloproof[pydantic-ai]'",
          "openai-agents-team": "pip install 'oloproof[openai-agents]'",
          "langgraph-team": "pip install 'oloproof[langgraph]'"}
_SKIP = {"__pycache__", ".oloproof", ".pytest_cache"}


def examples_root() -> Path:
    """The folder the examples are in: ``oloproof/_examples`` in a wheel, ``examples/`` in a
    source checkout.

    Raises:
        UsageError: neither exists (a broken installation).
    """
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_examples", package.parent / "examples"):
        if candidate.is_dir():
            return candidate
    raise UsageError("the packaged examples are missing from this installation")


def example_files(name: str) -> tuple[Path, list[Path]]:
    """An example's folder (``name`` is an example or ``blank``) and its files, sorted,
    without caches, local logs and ``.pyc`` files.

    Raises:
        UsageError: an unknown example (the message lists the available ones).
    """
    if name not in _FOLDERS:
        raise UsageError(f"unknown example {name!r} (available: {', '.join(sorted(EXAMPLES))})")
    source = examples_root() / _FOLDERS[name]
    files = sorted(p for p in source.rglob("*")
                   if p.is_file() and not _SKIP & set(p.relative_to(source).parts)
                   and p.suffix != ".pyc")
    return source, files


def copy_example(name: str, target: Path) -> list[Path]:
    """Copy an example into ``target``; refuse to write outside it or over existing files."""
    source, files = example_files(name)
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} exists and is not a folder")
    root = target.resolve()
    plan = []
    for f in files:
        rel = f.relative_to(source)
        dest = (root / rel).resolve()
        if root != dest and root not in dest.parents:
            raise UsageError(f"refusing to write {dest}: outside {root}")
        if dest.exists() or dest.is_symlink():
            raise UsageError(f"refusing to overwrite {dest}; choose an empty folder")
        plan.append((f, dest))
    for f, dest in plan:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest)
    return [d for _, d in plan]
