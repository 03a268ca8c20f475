"""Shared by the benchmarks: a packaged example scaled to any number of cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def scaled_example(name: str, folder: Path, n: int) -> Path:
    """Copy ``examples/<name>`` into ``folder`` with its cases repeated up to ``n`` cases,
    each copy a distinct case (its own id and fingerprint, so no replay is shared)."""
    source = EXAMPLES / name
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    base = [json.loads(line) for line in (source / "cases.jsonl").read_text().splitlines() if line.strip()]
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(n):
            case = dict(base[i % len(base)])
            case["id"] = f"{case['id']}-{i:06d}"
            case["input"] = {**case["input"], "copy": i}
            fh.write(json.dumps(case) + "\n")
    return folder
