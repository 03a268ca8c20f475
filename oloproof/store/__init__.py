"""The event log and its projections. Nothing outside this package touches SQL."""

from collections.abc import Callable
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


Opener = Callable[..., EventStore]
"""A backend's opener: ``opener(url, **options) -> EventStore`` (``url`` the whole URL)."""

# scheme -> "module:function", imported on first use (a backend's driver is loaded only by a
# log that needs it). A new backend is one module with an opener and one line here, or a
# register_store() call from outside the package.
BACKENDS: dict[str, "str | Opener"] = {
    "sqlite": "oloproof.store.sqlite:open_url",
    "memory": "oloproof.store.memory:open_url",
    "postgresql": "oloproof.store.postgres:open_url",  # psycopg 3: the oloproof[postgres] extra
}

# schemes that name a backend not in this release, with what to use instead
_PLANNED: dict[str, str] = {}


def register_store(scheme: str, opener: "str | Opener") -> None:
    """Make ``open_store`` (and ``--db``) open ``SCHEME://…`` URLs with ``opener``: a callable
    ``opener(url, **options)`` returning an :class:`EventStore`, or a ``"module:function"``
    string naming one (imported on first use). The backend is defined by passing
    :class:`oloproof.testing.StoreContract`. Replaces an earlier registration of ``scheme``."""
    if not scheme or not scheme.isidentifier() or scheme != scheme.lower():
        raise ValueError(f"a store scheme is a lower-case name (sqlite, postgresql), not {scheme!r}")
    BACKENDS[scheme] = opener


def scheme_of_url(url: "str | object") -> str:
    """The backend scheme ``url`` names: ``sqlite`` for a path or a bare file name,
    ``memory`` for ``memory:``, else the part before ``://`` (``postgres`` read as
    ``postgresql``)."""
    from pathlib import Path

    if isinstance(url, Path):
        return "sqlite"
    text = str(url)
    if text == "memory:":
        return "memory"
    scheme, sep, _ = text.partition("://")
    if not sep:  # a bare path (a Windows drive letter has no //)
        return "sqlite"
    scheme = scheme.lower()
    return "postgresql" if scheme == "postgres" else scheme


def printable_url(url: "str | object") -> str:
    """``url`` as a message or a hint may print it: a server URL without its password
    (``postgresql://ci:secret@db/team`` → ``postgresql://ci@db/team``, a ``password=`` query
    parameter dropped too; libpq then reads it from ``PGPASSWORD`` or ``~/.pgpass``); a path
    as it is."""
    from urllib.parse import urlsplit, urlunsplit

    text = str(url)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:  # not a URL urllib can split: say nothing of what follows the scheme's user
        return text.partition("://")[0] + "://…"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}@{host}"
    query = "&".join(p for p in parts.query.split("&") if p and p.partition("=")[0].lower() != "password")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def open_store(url: "str | object", **options: Any) -> EventStore:
    """The event log a URL names (SPEC §18.3): ``sqlite:///relative.db``,
    ``sqlite:////absolute.db`` or a bare path (SQLite; ``options`` are :class:`SQLiteStore`'s:
    ``durability``, ``create``, ``readonly``, ``key``), ``memory:`` (an in-memory log, for
    tests; ``key`` only), ``postgresql://USER@HOST/DB`` or ``postgres://…`` (a PostgreSQL
    database, the same options; needs ``oloproof[postgres]``), or any scheme a backend registered (:data:`BACKENDS`,
    :func:`register_store`). An unknown scheme is a :class:`~oloproof.errors.UsageError`
    (exit 2)."""
    from pathlib import Path

    from oloproof.errors import UsageError

    scheme = scheme_of_url(url)
    opener = BACKENDS.get(scheme)
    if opener is None:
        if scheme in _PLANNED:
            raise UsageError(f"{scheme}://…: {_PLANNED[scheme]}")
        known = ", ".join(f"{s}://" for s in sorted(BACKENDS) if s != "memory")
        raise UsageError(f"{printable_url(url)}: unknown log URL scheme {scheme!r} ({known}, a path, or memory:)")
    if isinstance(opener, str):
        import importlib

        module, _, name = opener.partition(":")
        opener = getattr(importlib.import_module(module), name)
        BACKENDS[scheme] = opener
    return opener(url if isinstance(url, Path) else str(url), **options)


__all__ = [
    "DEFAULT_LOG",
    "PROJECTIONS",
    "ChainProblem",
    "EventStore",
    "BACKENDS",
    "MemoryStore",
    "SQLiteStore",
    "StoredEvent",
    "StreamAppend",
    "VerifyReport",
    "open_store",
    "printable_url",
    "register_store",
]
