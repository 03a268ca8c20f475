"""Shared CLI plumbing: error handling, the console, opening the log."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Callable

import click

from oloproof.errors import Interrupted, OloproofError, UsageError

DB_HELP = "Path of the event log (default: .oloproof/log.db in the current folder)."


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream)
    return Console(file=stream, width=int(os.environ.get("COLUMNS", "0")) or 200, no_color=True,
                   highlight=False)


def fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handled(fn: Callable) -> Callable:
    """Turn Oloproof errors into a message on stderr and their exit code (2 for bad input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OloproofError as e:
            fail(str(e), e.exit_code)
        except (Interrupted, KeyboardInterrupt):
            fail("interrupted", 130)
        except SystemExit:
            raise
        except Exception as e:  # an Oloproof bug: say so, with what a bug report needs
            import traceback

            traceback.print_exc(file=sys.stderr)
            fail(f"internal error ({type(e).__name__}: {e}); this is a bug in Oloproof — please report it "
                 "with the traceback above", 3)

    return wrapper


def open_log(db: str | None, *, must_exist: bool = True, durability: str = "full") -> Any:
    from oloproof.store import DEFAULT_LOG, SQLiteStore

    path = Path(db or DEFAULT_LOG)
    if must_exist and not path.exists():
        raise UsageError(f"no event log at {path}; run 'oloproof run' first or pass --db")
    store = SQLiteStore(path, durability=durability, create=not must_exist)
    if store.projections_stale:  # written by an older Oloproof: derive the tables again
        from oloproof.app.evidence import rebuild_projections

        click.echo("rebuilding the log's projection tables from its events…", err=True)
        rebuild_projections(store)
    return store


def resolve_run(store: Any, run: str) -> str:
    from oloproof.app.runs import resolve_run as resolve

    return resolve(store, run)


def check_output_path(path: str) -> None:
    """Refuse, before anything runs, an output file that could not be written at the end."""
    if path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--json {path}: is a folder; name a file")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--json {path}: folder {parent} does not exist")


def write_json(path: str, data: Any) -> None:
    import json

    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if path == "-":
        click.echo(text, nl=False)
        return
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
