"""The SQLite backend of the event log: one file in WAL mode.

Every write is one ``BEGIN IMMEDIATE`` transaction (a second writer waits on the busy
timeout rather than failing). Events are append-only: triggers refuse UPDATE and DELETE on
the ``events`` table, and each event carries a hash-chain digest per stream.
"""

from __future__ import annotations

import sqlite3
from itertools import count, repeat
from pathlib import Path
from typing import Iterator, Sequence

from oloproof.errors import CorruptLogError, DuplicateEventError, StoreError
from oloproof.store.base import (
    PROJECTIONS,
    PROJECTIONS_VERSION,
    EventStore,
    Rows,
    StoredEvent,
    StreamAppend,
    chain,
)

SCHEMA_VERSION = "1"  # of the events table; projections have their own version
DURABILITY = {"full": "FULL", "normal": "NORMAL"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    pos INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload BLOB NOT NULL,
    digest TEXT NOT NULL,
    UNIQUE (stream, seq)
);
CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'oloproof events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'oloproof events are append-only'); END;
"""


_VERDICTS_VIEW = """
CREATE VIEW IF NOT EXISTS verdicts AS
SELECT e.run_id, e.case_id, j.key AS criterion, json_extract(j.value, '$[0]') AS verdict,
       json_extract(j.value, '$[1]') AS reason
FROM evaluations AS e
JOIN runs AS r ON r.run_id = e.run_id AND r.eval_key = e.eval_key,
     json_each(e.result, '$.verdicts') AS j
"""


class SQLiteStore(EventStore):
    """Event log in one SQLite file (default ``.oloproof/log.db``)."""

    def __init__(self, path: str | Path, *, durability: str = "full", create: bool = True):
        self.path = Path(path)
        self.projections_stale = False
        if durability not in DURABILITY:
            raise StoreError(f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}")
        if not create and not self.path.exists():
            raise StoreError(f"no event log at {self.path}")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=60.0)
            self._conn.execute("PRAGMA busy_timeout = 60000")
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            self._conn.execute(f"PRAGMA synchronous = {DURABILITY[durability]}")
            self._prepare()
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: not a readable Oloproof log ({e})") from e
        if mode.lower() != "wal":
            raise StoreError(f"{self.path}: could not switch the log to WAL mode (got {mode})")

    @property
    def db(self) -> "sqlite_utils.Database":  # noqa: F821
        """The log as a :mod:`sqlite_utils` database, for ad-hoc inspection of projections."""
        import sqlite_utils

        return sqlite_utils.Database(self._conn)

    def _prepare(self) -> None:
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "events" not in tables:
            raise CorruptLogError(f"{self.path}: an SQLite file, but not an Oloproof log (no events table)")
        if "meta" in tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None or row[0] != SCHEMA_VERSION:
                raise CorruptLogError(
                    f"{self.path}: log schema version {row[0] if row else 'unknown'!r}; "
                    f"this Oloproof reads version {SCHEMA_VERSION}"
                )
            cols = {r[1] for r in self._conn.execute("PRAGMA table_info(events)")}
            if not {"stream", "seq", "type", "payload", "digest"} <= cols:
                raise CorruptLogError(f"{self.path}: events table is missing columns")
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(_SCHEMA):
                self._conn.execute(statement)
            self._conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
            )
            row = self._conn.execute("SELECT value FROM meta WHERE key='projections_version'").fetchone()
            if row is None or row[0] != PROJECTIONS_VERSION:
                # derived tables of another shape: drop them; they are rebuilt from the events
                self._conn.execute("DROP VIEW IF EXISTS verdicts")
                for name in PROJECTIONS:
                    self._conn.execute(f"DROP TABLE IF EXISTS {name}")
                self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('projections_version', ?)",
                                   (PROJECTIONS_VERSION,))
                self.projections_stale = bool(self._conn.execute("SELECT 1 FROM events LIMIT 1").fetchone())
            for name, (cols, key) in PROJECTIONS.items():
                self._conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)}, PRIMARY KEY ({', '.join(key)}))"
                    " WITHOUT ROWID"
                )
            self._conn.execute(_VERDICTS_VIEW)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    # ---- writing -----------------------------------------------------------------------

    def commit(self, appends: Sequence[StreamAppend], rows: Rows | None = None) -> None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot start a write transaction ({e})") from e
        try:
            rows_out: list[tuple] = []
            for ap in appends:
                if ap.start == 0:
                    previous = ""
                else:
                    row = conn.execute(
                        "SELECT seq, digest FROM events WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                        (ap.stream,),
                    ).fetchone()
                    if row is None or row[0] != ap.start - 1:
                        raise DuplicateEventError(
                            f"stream {ap.stream!r} does not end at sequence {ap.start - 1}; "
                            "batch rolled back"
                        )
                    previous = row[1]
                digests, _ = chain(previous, ap)
                stream = ap.stream
                rows_out.extend(zip(repeat(stream), count(ap.start), ap.types, ap.payloads, digests))
            if rows_out:  # every stream of the batch in one statement
                conn.executemany(
                    "INSERT INTO events (stream, seq, type, payload, digest) VALUES (?, ?, ?, ?, ?)", rows_out
                )
            for table, table_rows in (rows or {}).items():
                cols, _ = PROJECTIONS[table]
                conn.executemany(
                    f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(cols))})", table_rows
                )
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as e:
            conn.execute("ROLLBACK")
            raise DuplicateEventError(f"duplicate (stream, sequence): {e}; batch rolled back") from e
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # ---- reading -----------------------------------------------------------------------

    def stream_length(self, stream: str) -> int:
        row = self._conn.execute("SELECT MAX(seq) FROM events WHERE stream = ?", (stream,)).fetchone()
        return 0 if row[0] is None else row[0] + 1

    def read_stream(self, stream: str) -> list[StoredEvent]:
        cur = self._conn.execute(
            "SELECT stream, seq, type, payload, digest FROM events WHERE stream = ? ORDER BY seq",
            (stream,),
        )
        return [StoredEvent(*_bytes_row(r)) for r in cur]

    def read_prefix(self, prefix: str) -> Iterator[StoredEvent]:
        if prefix:
            cur = self._conn.execute(
                "SELECT stream, seq, type, payload, digest FROM events "
                "WHERE stream >= ? AND stream < ? ORDER BY stream, seq",
                (prefix, prefix + "\U0010ffff"),
            )
        else:
            cur = self._conn.execute(
                "SELECT stream, seq, type, payload, digest FROM events ORDER BY stream, seq"
            )
        try:
            for r in cur:
                yield StoredEvent(*_bytes_row(r))
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e

    def iter_streams(self, prefix: str) -> Iterator[tuple[str, list[bytes]]]:
        cur = self._conn.execute(
            "SELECT stream, payload FROM events WHERE stream >= ? AND stream < ? ORDER BY stream, seq",
            (prefix, prefix + "\U0010ffff"),
        )
        stream = None
        group: list[bytes] = []
        try:
            for s, payload in cur:
                if s != stream:
                    if group:
                        yield stream, group  # type: ignore[misc]
                    stream, group = s, []
                group.append(payload if isinstance(payload, bytes) else payload.encode())
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e
        if group:
            yield stream, group  # type: ignore[misc]

    def stream_heads(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        cur = self._conn.execute(
            "SELECT stream, payload FROM events WHERE seq = 0 AND stream >= ? AND stream < ? ORDER BY stream",
            (prefix, prefix + "\U0010ffff"),
        )
        for s, payload in cur:
            yield s, payload if isinstance(payload, bytes) else payload.encode()

    def projection(self, table: str, **where: object) -> list[dict]:
        return list(self.iter_projection(table, **where))

    def iter_projection(self, table: str, **where: object) -> Iterator[dict]:
        cols, key = PROJECTIONS[table]
        sql = f"SELECT {', '.join(cols)} FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        sql += f" ORDER BY {', '.join(key)}"
        for r in self._conn.execute(sql, tuple(where.values())):
            yield dict(zip(cols, r))

    def count_streams(self, prefix: str) -> int:
        return self._conn.execute(
            "SELECT COUNT(*) FROM events WHERE seq = 0 AND stream >= ? AND stream < ?",
            (prefix, prefix + "\U0010ffff"),
        ).fetchone()[0]

    def count(self, table: str, **where: object) -> int:
        sql = f"SELECT COUNT(*) FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        return self._conn.execute(sql, tuple(where.values())).fetchone()[0]

    def clear_projections(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        for name in PROJECTIONS:
            self._conn.execute(f"DELETE FROM {name}")
        self._conn.execute("COMMIT")

    def delete_projection_rows(self, table: str, **where: object) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            f"DELETE FROM {table} WHERE " + " AND ".join(f"{k} = ?" for k in where), tuple(where.values())
        )
        self._conn.execute("COMMIT")

    def integrity_check(self) -> str:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    def close(self) -> None:
        self._conn.close()


def _bytes_row(r: tuple) -> tuple:
    payload = r[3]
    if isinstance(payload, str):
        payload = payload.encode()
    return (r[0], r[1], r[2], payload, r[4])


def _split(script: str) -> list[str]:
    out, buf = [], []
    for line in script.strip().splitlines():
        buf.append(line)
        joined = "\n".join(buf).strip()
        if joined.endswith(";") and (not joined.upper().startswith("CREATE TRIGGER") or joined.endswith("END;")):
            out.append(joined)
            buf = []
    return out
