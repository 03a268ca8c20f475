"""The event log and its projections. Nothing outside this package touches SQL."""

from typing import Any

from oloproof.store.base import (
    PROJECTIONS,
    ChainProblem,
    EventStore,
    StoredEvent,
    StreamAppend,
    VerifyReport,
)
from oloproof.store.memory import MemoryStore
from oloproof.store.sqlite import SQLiteStore

DEFAULT_LOG = ".oloproof/log.db"


def open_store(url: "str | object", **options: Any) -> EventStore:
    """The event log a URL names (SPEC §18.3): ``sqlite:///relative.db``,
    ``sqlite:////absolute.db`` or a bare path (SQLite;
    ``options`` are :class:`SQLiteStore`'s: ``durability``, ``create``, ``readonly``,
    ``key``), ``memory:`` (an in-memory log, for tests), ``postgresql://…`` (the team log,
    not in this release). Anything else is a :class:`~oloproof.errors.UsageError` (exit 2)."""
    from pathlib import Path

    from oloproof.errors import UsageError

    if isinstance(url, Path):  # a path is a path, whatever it holds
        return SQLiteStore(url, **options)
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if text == "memory:":
        key = options.get("key")
        return MemoryStore(key=key if isinstance(key, bytes) else None)
    if not sep:  # a bare path (a Windows drive letter has no //)
        return SQLiteStore(Path(text), **options)
    if scheme == "sqlite":
        if not rest.startswith("/"):
            raise UsageError(f"{text}: an SQLite URL is sqlite:///PATH (three slashes, then the path)")
        # as SQLAlchemy reads it: sqlite:///rel/path.db, sqlite:////abs/path.db
        return SQLiteStore(Path(rest[1:]), **options)
    if scheme in ("postgresql", "postgres"):
        raise UsageError(f"{scheme}://…: the PostgreSQL backend is not in this release; use an SQLite log "
                         "(a path, or sqlite:///PATH)")
    raise UsageError(f"{text}: unknown log URL scheme {scheme!r} (sqlite:///PATH, a path, or memory:)")

__all__ = [
    "DEFAULT_LOG",
    "PROJECTIONS",
    "ChainProblem",
    "EventStore",
    "MemoryStore",
    "SQLiteStore",
    "StoredEvent",
    "StreamAppend",
    "VerifyReport",
    "open_store",
]
