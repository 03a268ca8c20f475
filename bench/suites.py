"""Shared by the benchmarks: a packaged example scaled to any number of cases, a timed
whole process, a median with its range."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
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


def timed(cmd: list[str], cwd: Path) -> float:
    """Wall time of a whole process (exit 0 or 1 — a blocked gate — expected)."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"{cmd} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return dt


def spread(values: list[float]) -> str:
    """The median and the range of a benchmark's rounds."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"
