"""The analysis database of ``oloproof export RUN --format sqlite FILE`` (issue 16): plain,
documented tables with foreign keys and indexes, built with sqlite-utils, for Datasette,
pandas or any SQL client (docs/search.md describes every column).

One run per file: ``runs`` holds it, and every other table refers to its cases by
``case_id``. JSON values (arguments, results, outputs, state values) are stored as JSON text,
so ``json_extract`` reads into them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from oloproof.errors import StoreError

#: table -> (columns with their types, primary key, foreign keys, indexes)
TABLES: dict[str, tuple[dict[str, type], tuple[str, ...], list[tuple[str, str, str]], list[list[str]]]] = {
    "runs": ({"run_id": str, "system": str, "version": str, "started_at": str, "finished_at": str,
              "case_count": int, "cases_committed": int, "sealed": int, "log_digest": str, "config_digest": str},
             ("run_id",), [], []),
    "cases": ({"case_id": str, "run_id": str, "position": int, "status": str, "error": str, "error_kind": str,
               "traceback": str, "terminal_status": str, "steps": int, "tool_calls": int, "first_tool": str,
               "last_tool": str,
               "truncated": int, "derived_from": str, "input": str, "output": str, "metadata": str},
              ("case_id",), [("run_id", "runs", "run_id"), ("derived_from", "cases", "case_id")],
              [["run_id"], ["first_tool"], ["status"]]),
    "steps": ({"case_id": str, "step": int, "kind": str, "tool_name": str, "agent": str, "to_agent": str,
               "raised": int, "fault": str, "arguments": str, "result": str},
              ("case_id", "step"), [("case_id", "cases", "case_id")], [["tool_name"], ["kind"]]),
    "verdicts": ({"case_id": str, "criterion": str, "verdict": str, "reason": str},
                 ("case_id", "criterion"), [("case_id", "cases", "case_id")], [["criterion", "verdict"]]),
    "states": ({"case_id": str, "path": str, "value": str, "type": str},
               ("case_id", "path"), [("case_id", "cases", "case_id")], [["path"]]),
    "replays": ({"replay_key": str, "case_id": str, "kind": str, "tool_name": str, "fault": str,
                 "checkpoint_step": int, "method": str, "steps": int, "terminal_status": str, "error": str,
                 "diverged": str, "injected": int, "output": str},
                ("replay_key",), [("case_id", "cases", "case_id")], [["case_id"], ["tool_name", "fault"]]),
    "pairs": ({"derived_case_id": str, "source_case_id": str, "transform": str},
              ("derived_case_id",), [("derived_case_id", "cases", "case_id"), ("source_case_id", "cases", "case_id")],
              [["source_case_id"]]),
}


def write_analysis(path: Path, rows: Mapping[str, Iterable[dict[str, Any]]]) -> int:
    """Write the tables to a new SQLite file at ``path`` (built beside it, then renamed: a
    failure leaves no partial file); returns the number of rows written."""
    import sqlite_utils

    from oloproof.store.sqlite import is_event_log

    if is_event_log(path):
        raise StoreError(f"{path}: is an Oloproof event log; the analysis database would replace it")
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.unlink(missing_ok=True)
    written = 0
    try:
        db = sqlite_utils.Database(scratch)
        for name, (columns, pk, fks, _indexes) in TABLES.items():
            db.table(name).create(columns, pk=pk[0] if len(pk) == 1 else pk, foreign_keys=fks, not_null=set(pk))
        for name, (_, _, _, indexes) in TABLES.items():
            table = db.table(name)
            for batch in _batches(rows.get(name, ())):
                table.insert_all(batch)
                written += len(batch)
            for index in indexes:
                table.create_index(index)
        problems = db.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise StoreError(f"the analysis database breaks its foreign keys ({problems[:3]}): a bug, please report it")
        db.close()
        os.replace(scratch, path)
    except sqlite3.Error as e:
        scratch.unlink(missing_ok=True)
        raise StoreError(f"cannot write the analysis database {path} ({e})") from e
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise
    return written


def _batches(items: Iterable[dict[str, Any]], size: int = 5000) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
