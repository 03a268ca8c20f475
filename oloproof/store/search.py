"""The search projection: every recorded step of every run and replay, in SQLite FTS5 (issue 16).

Two tables, in the shape sqlite-utils makes them (:data:`SCHEMA`): ``search_steps`` (one row per
step event, keyed by the event's position ``pos`` in the log: run, case, step, kind, tool, the replay it belongs to,
and its text — tool name, agents, arguments and result as JSON text) and its FTS5 index
``search_steps_fts`` (external content: the text is stored once). A case or replay that ended
in an error gives a row of kind ``error``.

Like the other projections it is a cache derived from the events, never a source of
decisions: :func:`catch_up` indexes the events written since the last call (the log's meta
row ``search_indexed_to`` holds how far it got, in the same transaction as the rows), and
:func:`rebuild` starts it again from nothing (``oloproof audit rebuild``). Writers do not
index what they write (a run's cases pay nothing for it): the first search after them
catches the index up (:func:`behind`), once. The user's query
is always bound as a parameter; FTS5 reports a malformed one, which becomes
:class:`SearchQueryError`.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from oloproof.errors import StoreError, UsageError
from oloproof.events import JUDGEMENT_CACHE, SEARCHED_TYPES, replayed_stream, search_fields

TABLE = "search_steps"
FTS = TABLE + "_fts"
_CURSOR = "search_indexed_to"
#: a search stops after this long (a query of many prefix* terms over a large log): exit 2
SEARCH_SECONDS = 10
PROGRESS_STEPS = 20_000  # SQLite steps between two looks at the clock
_BATCH = 20_000
REPLAY = "replay/"
#: the snippet's highlight markers (private-use characters: no recorded text is parsed as
#: markup; the report layer turns them into a style or into « »)
MARK_ON, MARK_OFF = "\ue000", "\ue001"


_OPERATOR = re.compile(r"(^|\s)(AND|OR|NOT|NEAR)(\s|\(|$)")


def misplaced_operator(query: str) -> bool:
    """The query holds an FTS5 operator (AND, OR, NOT, NEAR) as a word."""
    return _OPERATOR.search(query) is not None


class SearchQueryError(UsageError):
    """A search query FTS5 cannot parse (exit code 2)."""


#: the two tables, as sqlite-utils' ``Table.create`` and ``Table.enable_fts`` make them (a test
#: holds them to it, and sqlite-utils finds the index: ``db["search_steps"].search(...)``
#: works, as in Datasette). Written out rather than run through sqlite-utils, because its
#: ``enable_fts`` commits whatever transaction is open (``executescript``) and importing it
#: costs a quarter of a second: here they are made inside the log's own schema transaction,
#: so two processes opening a new log never race.
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS [{TABLE}] ([pos] INTEGER PRIMARY KEY, [run_id] TEXT, [case_id] TEXT, "
    "[step] INTEGER, [kind] TEXT, [tool_name] TEXT, [replay] TEXT, [text] TEXT)",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS [{FTS}] USING FTS5 (\n    [text],\n    "
    f"tokenize='unicode61 remove_diacritics 2',\n    content=[{TABLE}]\n)",
)


def exists(conn: sqlite3.Connection) -> bool:
    """Whether the log has both search tables (``search_steps`` and its FTS5 index); without
    them a search is refused with a hint, and the lag and the names are empty."""
    return conn.execute("SELECT count(*) FROM sqlite_master WHERE name IN (?, ?)", (TABLE, FTS)).fetchone()[0] == 2


def indexed_to(conn: sqlite3.Connection) -> int | None:
    """How far the index holds the log; ``None`` when the cursor is not a position the log
    can have (damaged: the index is rebuilt at the next catch-up)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_CURSOR,)).fetchone()
    if row is None:
        return 0
    value = row[0]
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def names(conn: sqlite3.Connection, what: str) -> list[str]:
    """Distinct tool names of the index, or criteria of the ``verdicts`` view."""
    sql = {"tool_name": f"SELECT DISTINCT tool_name FROM {TABLE} WHERE tool_name IS NOT NULL",
           "criterion": "SELECT DISTINCT criterion FROM verdicts"}[what]
    return sorted(r[0] for r in conn.execute(sql))


def behind(conn: sqlite3.Connection) -> bool:
    """Whether :func:`catch_up` has work: events past the cursor, rows past it, or a cursor
    the log cannot have. Two lookups of the largest key: nothing is scanned."""
    done = indexed_to(conn)
    if done is None:
        return True
    top = conn.execute("SELECT max(pos) FROM events").fetchone()[0] or 0
    held = conn.execute(f"SELECT max(pos) FROM {TABLE}").fetchone()[0] or 0
    return top != done or held > done


def lag(conn: sqlite3.Connection) -> int:
    """How many searchable events the index does not hold yet."""
    marks = ", ".join("?" * len(SEARCHED_TYPES))
    done = indexed_to(conn)
    return conn.execute(f"SELECT count(*) FROM events WHERE pos > ? AND type IN ({marks})",
                        (0 if done is None else done, *SEARCHED_TYPES)).fetchone()[0]


def catch_up(conn: sqlite3.Connection) -> int:
    """Index every searchable event written after the cursor; returns how many rows were
    added. The caller holds the write transaction."""
    done = indexed_to(conn)
    top = conn.execute("SELECT max(pos) FROM events").fetchone()[0] or 0
    held = conn.execute(f"SELECT max(pos) FROM {TABLE}").fetchone()[0] or 0
    if done is None or done > top or held > done:
        return rebuild(conn)  # a cursor the log cannot have, or rows past it: start again
    if top <= done:
        return 0
    marks = ", ".join("?" * len(SEARCHED_TYPES))
    cur = conn.execute(f"SELECT pos, stream, type, CAST(payload AS BLOB) FROM events "
                       f"WHERE pos > ? AND pos <= ? AND type IN ({marks}) ORDER BY pos",
                       (done, top, *SEARCHED_TYPES))
    added = 0
    current: str | None = None
    owner: tuple[str, str, str | None] | None = None
    while True:
        batch = cur.fetchmany(_BATCH)
        if not batch:
            break
        rows = []
        for pos, stream, type_, payload in batch:
            if stream != current:  # a stream's events come together: whose they are is asked once
                current, owner = stream, _owner(conn, stream)
            if owner is None:
                continue
            try:
                fields = search_fields(type_, payload)
            except Exception:  # noqa: BLE001 - a payload that does not decode: `audit verify` reports it
                continue
            if fields is None:
                continue
            rows.append((pos, *owner[:2], *fields[:3], owner[2], fields[3]))
        conn.executemany(f"INSERT INTO {TABLE} (pos, run_id, case_id, step, kind, tool_name, replay, text) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        added += len(rows)
    # the index reads the texts just stored, inside SQLite (nothing bound twice from Python)
    conn.execute(f"INSERT INTO {FTS} (rowid, text) SELECT pos, text FROM {TABLE} WHERE pos > ? AND pos <= ?",
                 (done, top))
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_CURSOR, str(top)))
    return added


def _owner(conn: sqlite3.Connection, stream: str) -> tuple[str, str, str | None] | None:
    """(run, case, replay key) a stream's steps are indexed under; None for a stream whose
    steps are not (a judgement cache's copies, whose case holds them; a run's own stream; a
    replay stream that does not say which case it replays)."""
    if stream.startswith(JUDGEMENT_CACHE):
        return None
    if stream.startswith(REPLAY):
        replayed = _replayed(conn, stream)
        return None if replayed is None else (*replayed, stream[len(REPLAY):])
    run_id, sep, case_id = stream.partition("/")
    return (run_id, case_id, None) if sep else None


def _replayed(conn: sqlite3.Connection, stream: str) -> tuple[str, str] | None:
    row = conn.execute("SELECT CAST(payload AS BLOB) FROM events WHERE stream = ? AND seq = 0", (stream,)).fetchone()
    try:
        run_id, sep, case_id = replayed_stream(row[0]).partition("/") if row else ("", "", "")
    except Exception:  # noqa: BLE001 - not a replay_started: nothing to attach its steps to
        return None
    return (run_id, case_id) if sep else None


def rebuild(conn: sqlite3.Connection) -> int:
    """Drop every row and index the whole log again (the caller holds the write transaction)."""
    # dropped and made again, not emptied: a damaged FTS5 table may refuse its own 'delete-all'
    try:
        conn.execute(f"DROP TABLE IF EXISTS {FTS}")
    except (sqlite3.DatabaseError, MemoryError):  # MemoryError: SQLITE_NOMEM from a damaged page's sizes
        # FTS5 opens a table to drop it, and cannot open one whose pages were damaged: its entry
        # is taken out of the schema (a new schema version, so the connection reads it again)
        # and its shadow tables, plain tables, dropped. Only the derived index is touched.
        version = conn.execute("PRAGMA schema_version").fetchone()[0]
        conn.execute("PRAGMA writable_schema = ON")
        try:
            conn.execute("DELETE FROM sqlite_master WHERE type = 'table' AND name = ?", (FTS,))
            conn.execute(f"PRAGMA schema_version = {int(version) + 1}")
        finally:
            conn.execute("PRAGMA writable_schema = OFF")
        for shadow in ("data", "idx", "docsize", "config", "content"):
            conn.execute(f"DROP TABLE IF EXISTS {FTS}_{shadow}")
    kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone()
    if kind is not None and kind[0] == "view":  # something else made in its place
        conn.execute(f"DROP VIEW {TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute("DELETE FROM meta WHERE key = ?", (_CURSOR,))
    return catch_up(conn)


@dataclass(frozen=True)
class SearchFilter:
    """What a search keeps besides the query, every field ANDed and bound as a parameter:
    the runs (none: every run), the system, the tool, the step kind, and a (criterion,
    verdict) the step's case must have in the ``verdicts`` view."""

    run_ids: tuple[str, ...] = ()
    system: str | None = None
    tool: str | None = None
    kind: str | None = None
    verdict: tuple[str, str] | None = None  # (criterion, verdict)


def check_query(query: str) -> None:
    """Refuse a query FTS5 cannot parse (:class:`SearchQueryError`), tried on an empty index
    of the same shape in memory: whatever fails there is the query's fault, not the log's."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE q USING fts5(text)")
        probe.execute("SELECT rowid FROM q WHERE q MATCH ?", (query,)).fetchall()
    except sqlite3.Error as e:
        message = repr(str(e).removeprefix("fts5: "))[1:-1]  # the query's own characters, escaped
        if _OPERATOR.search(query):  # an operator misplaced: quoting would search for the operator's name
            hint = ("operators go between words: a AND b, a OR b, a NOT b (NOT needs a word before it), "
                    "NEAR(a b); a word ending in * matches a prefix")
        else:
            phrase = '"' + query.replace('"', '""') + '"'
            hint = (f"to find it as typed, quote it as a phrase: {phrase!r} (quote anything with - : . or other "
                    "punctuation)")
        raise SearchQueryError(f"search query {query!r} is not valid FTS5 syntax ({message}); {hint}") from None
    finally:
        probe.close()


def search(conn: sqlite3.Connection, query: str, where: SearchFilter, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` steps matching ``query`` (FTS5 syntax) and ``where``, newest first."""
    sql = [f"SELECT s.pos, s.run_id, s.case_id, s.step, s.kind, s.tool_name, s.replay, "
           f"snippet({FTS}, 0, ?, ?, '…', 16) FROM {FTS} JOIN {TABLE} AS s ON s.pos = {FTS}.rowid "
           f"WHERE {FTS} MATCH ?"]
    args: list[Any] = [MARK_ON, MARK_OFF, query]
    if where.run_ids:
        sql.append(f"AND s.run_id IN ({', '.join('?' * len(where.run_ids))})")
        args.extend(where.run_ids)
    if where.system is not None:
        sql.append("AND s.run_id IN (SELECT run_id FROM runs WHERE system = ?)")
        args.append(where.system)
    if where.tool is not None:
        sql.append("AND s.tool_name = ?")
        args.append(where.tool)
    if where.kind is not None:
        sql.append("AND s.kind = ?")
        args.append(where.kind)
    if where.verdict is not None:
        sql.append("AND EXISTS (SELECT 1 FROM verdicts AS v WHERE v.run_id = s.run_id AND v.case_id = s.case_id "
                   "AND v.criterion = ? AND v.verdict = ?)")
        args.extend(where.verdict)
    sql.append(f"ORDER BY {FTS}.rowid DESC LIMIT ?")
    args.append(limit)
    check_query(query)
    deadline = time.monotonic() + SEARCH_SECONDS
    # called by SQLite every PROGRESS_STEPS steps: the query stops past the deadline, and on Ctrl-C
    # (the signal is taken while this Python callback runs, and aborts the query)
    conn.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
    try:
        rows = conn.execute(" ".join(sql), args).fetchall()
    except sqlite3.OperationalError as e:
        if time.monotonic() <= deadline and str(e) == "interrupted":
            raise KeyboardInterrupt from None  # Ctrl-C: exit 130, as anywhere else
        if time.monotonic() > deadline:
            raise SearchQueryError(f"search query {query!r} took longer than {SEARCH_SECONDS} s and was stopped; "
                                   "narrow it (fewer prefix* terms, a phrase, --run, --tool or --kind)") from None
        raise StoreError(f"the search index cannot be read ({e}); 'oloproof audit rebuild' rebuilds it from "
                         "the events") from e
    except (sqlite3.DatabaseError, MemoryError) as e:  # a damaged index: a cache, rebuilt from the events
        # FTS5 reads sizes from its own pages: a damaged page can claim gigabytes, and SQLite's
        # SQLITE_NOMEM reaches Python as a MemoryError (seen on random bytes written over them)
        reason = str(e) if not isinstance(e, MemoryError) else "SQLite ran out of memory reading it: damaged pages"
        raise StoreError(f"the search index cannot be read ({reason}); 'oloproof audit rebuild' rebuilds it "
                         "from the events") from e
    finally:
        conn.set_progress_handler(None, 0)
    keys = ("pos", "run_id", "case_id", "step", "kind", "tool_name", "replay", "snippet")
    return [dict(zip(keys, r)) for r in rows]
