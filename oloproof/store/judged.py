"""The judgement cache beside an SQLite log: ``<log>-judged``, an SQLite file of its own.

It holds what judging a sealed run produced — its case results, as opaque bytes in parts —
under the run's seal digest and an evaluation key, with a MAC over them; the app layer
(:mod:`oloproof.app.judged`) makes the bytes, the key and the MAC and decides whether to
trust them. It is a cache: deleting the file loses nothing (the next reader judges the run
from its events again), ``oloproof audit rebuild`` deletes it, and it is never part of the
log — read commands open the log read-only and write only here, never waiting on a writer
of the log (nor on another reader: a cache that is busy is left alone).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from urllib.parse import quote

#: entries kept: the oldest beyond this many go when another is written
KEEP = 32

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS judged (seal TEXT NOT NULL, key TEXT NOT NULL, cases INTEGER NOT NULL, "
    "mac TEXT NOT NULL, UNIQUE (seal, key))",
    "CREATE TABLE IF NOT EXISTS judged_parts (seal TEXT NOT NULL, key TEXT NOT NULL, part INTEGER NOT NULL, "
    "body BLOB NOT NULL, PRIMARY KEY (seal, key, part)) WITHOUT ROWID",
)


class JudgementCache:
    """The cache file ``path`` (made on the first write). Every failure to read or write it
    — missing, locked, damaged, on read-only storage — reads as "not cached"."""

    def __init__(self, path: Path):
        self.path = path

    def entry(self, seal: str, key: str) -> tuple[int, str] | None:
        """(cases, MAC) of the entry for ``(seal, key)``, or None."""
        conn = self._reader()
        if conn is None:
            return None
        try:
            row = conn.execute("SELECT cases, mac FROM judged WHERE seal = ? AND key = ?", (seal, key)).fetchone()
            return None if row is None else (int(row[0]), str(row[1]))
        except sqlite3.Error:
            return None
        finally:
            conn.close()

    def parts(self, seal: str, key: str) -> Iterator[bytes]:
        """The entry's parts, in order (nothing when it cannot be read)."""
        conn = self._reader()
        if conn is None:
            return
        try:
            for (body,) in conn.execute("SELECT body FROM judged_parts WHERE seal = ? AND key = ? ORDER BY part",
                                        (seal, key)):
                yield bytes(body)
        except sqlite3.Error:
            return
        finally:
            conn.close()

    def writer(self, seal: str, key: str) -> CacheWriter | None:
        """A writer of the entry for ``(seal, key)`` (replacing one there), in one transaction
        of the cache file; None when the file cannot be written now (read-only storage, or
        another process writing it: no one waits for a cache)."""
        try:
            # written from the thread that takes a forked judge's results (app.forked), one at a time
            conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=0, check_same_thread=False)
        except sqlite3.Error:
            return None
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("DELETE FROM judged WHERE seal = ? AND key = ?", (seal, key))
            conn.execute("DELETE FROM judged_parts WHERE seal = ? AND key = ?", (seal, key))
        except sqlite3.Error:
            with suppress(sqlite3.Error):
                conn.close()
            return None
        return CacheWriter(conn, seal, key)

    def drop(self) -> None:
        """Delete the cache (the file and its journal)."""
        for suffix in ("", "-journal", "-wal", "-shm"):
            with suppress(OSError):
                Path(str(self.path) + suffix).unlink()

    def _reader(self) -> sqlite3.Connection | None:
        if not self.path.is_file():
            return None
        try:
            conn = sqlite3.connect("file:" + quote(str(self.path.resolve())) + "?mode=ro", uri=True, timeout=0)
            conn.execute("PRAGMA busy_timeout = 0")
            return conn
        except sqlite3.Error:
            return None


class CacheWriter:
    """One entry being written: parts added in order, then :meth:`commit` (or :meth:`abort`:
    nothing of it is kept). Failures make it a no-op."""

    def __init__(self, conn: sqlite3.Connection, seal: str, key: str):
        self._conn: sqlite3.Connection | None = conn
        self.seal, self.key = seal, key
        self._parts = 0

    def add(self, body: bytes) -> None:
        """The next part."""
        if self._conn is None:
            return
        try:
            self._conn.execute("INSERT INTO judged_parts (seal, key, part, body) VALUES (?, ?, ?, ?)",
                               (self.seal, self.key, self._parts, body))
            self._parts += 1
        except sqlite3.Error:
            self.abort()

    def commit(self, cases: int, mac: str) -> None:
        """Keep the entry (its case count and MAC), and let the oldest entries beyond
        :data:`KEEP` go."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.execute("INSERT INTO judged (seal, key, cases, mac) VALUES (?, ?, ?, ?)",
                         (self.seal, self.key, cases, mac))
            old = conn.execute("SELECT seal, key FROM judged ORDER BY rowid DESC LIMIT -1 OFFSET ?",
                               (KEEP,)).fetchall()
            for seal, key in old:
                conn.execute("DELETE FROM judged WHERE seal = ? AND key = ?", (seal, key))
                conn.execute("DELETE FROM judged_parts WHERE seal = ? AND key = ?", (seal, key))
            conn.execute("COMMIT")
        except sqlite3.Error:
            self.abort()
            return
        self._close()

    def abort(self) -> None:
        """Keep nothing of the entry."""
        conn = self._conn
        if conn is None:
            return
        with suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            with suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
