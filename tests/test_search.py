"""``oloproof search`` (issue 16): every stored step of every run and replay, found by text;
the index is a cache of the events (rebuilt identical, never a decision); hostile queries are
refused with one line and exit 2, the log untouched."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from conftest import write

from oloproof.store import SQLiteStore


def log_path(project: Path) -> Path:
    return project / ".oloproof" / "log.db"


def called(project: Path, tool: str) -> set[tuple[str, str]]:
    """(run, case) of every case whose recorded trajectory called ``tool`` — from the events."""
    from oloproof.app.runs import iter_case_views, run_headers

    store = SQLiteStore(log_path(project), readonly=True)
    try:
        return {(h.run_id, v.case_id) for h in run_headers(store) for v in iter_case_views(store, h.run_id)
                if v.trajectory is not None and any(s.kind == "tool_call" and s.tool_name == tool
                                                    for s in v.trajectory.steps)}
    finally:
        store.close()


def hits(cli, project: Path, *args: str) -> list[dict]:
    r = cli("search", *args, "--json", "-", cwd=project)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def events(project: Path) -> list[tuple]:
    conn = sqlite3.connect(log_path(project))
    try:
        return conn.execute("SELECT stream, seq, digest FROM events ORDER BY pos").fetchall()
    finally:
        conn.close()


def test_delete_customer_lists_exactly_the_cases_that_called_it(cli, support_run):
    expected = called(support_run, "delete_customer")
    assert len(expected) == 3
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code == 0
    assert "6 steps in 3 cases match 'delete_customer'" in r.output
    for run_id, case_id in expected:
        assert f"oloproof show {run_id} {case_id}" in r.output
    found = hits(cli, support_run, "delete_customer")
    assert {(h["run_id"], h["case_id"]) for h in found} == expected
    assert {h["kind"] for h in found} == {"tool_call", "tool_result"}
    assert all(set(h) == {"run_id", "case_id", "step", "kind", "tool_name", "snippet", "replay"} for h in found)
    assert all("«delete_customer»" in h["snippet"] for h in found)
    # each hit names the recorded step it is: the same tool at that index in the trajectory
    from oloproof.app.runs import iter_case_views

    store = SQLiteStore(log_path(support_run), readonly=True)
    try:
        views = {v.case_id: v for v in iter_case_views(store, found[0]["run_id"])}
    finally:
        store.close()
    for h in found:
        step = views[h["case_id"]].trajectory.steps[h["step"] - 1]
        assert (step.kind, step.tool_name) == (h["kind"], h["tool_name"]) == (h["kind"], "delete_customer")


def test_filters_narrow_the_hits(cli, support_run):
    assert {h["kind"] for h in hits(cli, support_run, "delete_customer", "--kind", "tool_call")} == {"tool_call"}
    refunds = hits(cli, support_run, "refund", "--tool", "issue_refund", "--limit", "1000")
    assert refunds and {h["tool_name"] for h in refunds} == {"issue_refund"}
    assert len({(h["case_id"]) for h in refunds}) == len(called(support_run, "issue_refund"))
    assert cli("search", "delete_customer", "--system", "no-such-system", cwd=support_run).exit_code == 2
    assert len(hits(cli, support_run, "delete_customer", "--system", "support-agent")) == 6
    # the cases that broke the no-deletion constraint are the ones that deleted
    failed = hits(cli, support_run, "delete_customer", "--verdict", "agent_constraints_satisfied=fail")
    assert {h["case_id"] for h in failed} == {c for _, c in called(support_run, "delete_customer")}
    assert hits(cli, support_run, "delete_customer", "--verdict", "agent_constraints_satisfied=pass") == []
    # a second run: newest first, and --run keeps one
    assert cli("run", cwd=support_run).exit_code == 1
    both = hits(cli, support_run, "delete_customer")
    runs = list(dict.fromkeys(h["run_id"] for h in both))
    latest = {h["run_id"] for h in hits(cli, support_run, "delete_customer", "--run", "latest")}
    assert len(runs) == 2 and latest == {runs[0]}  # the newest run first
    limited = hits(cli, support_run, "delete_customer", "--limit", "2")
    assert len(limited) == 2 and {h["run_id"] for h in limited} == {runs[0]}


@pytest.mark.parametrize("query", [
    'a" OR 1=1; DROP TABLE events; --', "NEAR(", "AND", "   ", "a" * 5000,
])
def test_hostile_or_malformed_queries_are_one_line_exit_2_and_change_nothing(cli, support_run, query):
    """A misplaced operator (the user meant FTS5 syntax), an empty or an oversized query."""
    before = events(support_run)
    r = cli("search", query, cwd=support_run)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output
    assert "\x1b" not in r.output  # the query is shown escaped
    assert events(support_run) == before


@pytest.mark.parametrize("query", [
    "*", "ord-009", '"', "x:y", "^", "')); DELETE FROM events; --", "\x1b[31mred", "sku-004",
])
def test_text_that_is_not_fts5_is_searched_as_a_phrase_and_says_so(cli, support_run, query):
    """SPEC §18.2: as the report's search box does, text that is not FTS5 syntax is looked
    for as typed (a phrase), with a note; nothing in the log changes."""
    before = events(support_run)
    r = cli("search", query, "--json", "-", cwd=support_run)
    assert r.exit_code == 0, r.output
    assert "note: " in r.output and "as the phrase" in r.output
    assert "\x1b" not in r.output  # the query is shown escaped
    assert events(support_run) == before


def test_bad_filters_are_refused_with_a_hint(cli, support_run):
    r = cli("search", "refund", "--kind", "tool_cal", cwd=support_run)
    assert r.exit_code == 2 and "did you mean 'tool_call'" in r.output
    r = cli("search", "refund", "--verdict", "answer_correct", cwd=support_run)
    assert r.exit_code == 2 and "CRITERION=VERDICT" in r.output
    r = cli("search", "refund", "--verdict", "x=failed", cwd=support_run)
    assert r.exit_code == 2 and "did you mean 'fail'" in r.output
    r = cli("search", "refund", "--run", "nope", cwd=support_run)
    assert r.exit_code == 2
    r = cli("search", "refund", "--limit", "0", cwd=support_run)
    assert r.exit_code == 2


def test_a_query_phrase_finds_an_id_with_punctuation(cli, support_run):
    found = hits(cli, support_run, '"ord-009"')
    assert found and {h["case_id"] for h in found} == {"case_008"}


def test_the_index_is_a_cache_rebuilt_identical_from_the_events(cli, support_run):
    before = hits(cli, support_run, "refund OR delete_customer", "--limit", "1000")
    sql(support_run, "DELETE FROM search_steps",  # a damaged cache
        "INSERT INTO search_steps_fts (search_steps_fts) VALUES ('delete-all')")
    assert hits(cli, support_run, "refund OR delete_customer") == []
    assert cli("audit", "rebuild", cwd=support_run).exit_code == 0
    assert hits(cli, support_run, "refund OR delete_customer", "--limit", "1000") == before
    # and the gate, a decision, never read it
    assert cli("gate", "latest", cwd=support_run).exit_code == 1


def test_replays_are_searchable_and_name_the_case_they_replay(cli, tmp_path):
    from conftest import copy_example

    project = tmp_path / "desk"
    copy_example("stateful_agent", project)
    assert cli("run", cwd=project).exit_code in (0, 1)  # its fault_recovery criterion replays issue_refund:error
    found = hits(cli, project, "issue_refund", "--kind", "tool_result", "--limit", "1000")
    replayed = [h for h in found if h["replay"]]
    recorded = [h for h in found if not h["replay"]]
    assert replayed and recorded
    run_id = recorded[0]["run_id"]
    assert {h["run_id"] for h in replayed} == {run_id}
    assert {h["case_id"] for h in replayed} <= {h["case_id"] for h in recorded}
    # the faulted results of the replays are found with the error they carry
    faulted = hits(cli, project, "error", "--tool", "issue_refund", "--kind", "tool_result", "--limit", "1000")
    assert {h["replay"] for h in faulted} & {h["replay"] for h in replayed} - {None}


def tiny_project(folder: Path) -> None:
    write(folder / "oloproof.yaml", "system: {name: s, version: '1', callable: 'app:run', "
                                    "records: [agent_trajectory/v1]}\n"
                                    "cases: cases.jsonl\nevaluators: []\n")


def test_recorded_text_is_shown_literally_never_as_markup_or_escapes(cli, tmp_path):
    tiny_project(tmp_path)
    write(tmp_path / "cases.jsonl", '{"id": "c1", "input": {}}\n{"id": "c2", "input": {}}\n')
    write(tmp_path / "app.py", '''
from oloproof import current_case, system

@system(name="s", version="1", records=("agent_trajectory/v1",))
def run(case):
    if case.id == "c2":
        raise RuntimeError("boom [bold red]marked[/] \\x1b[2J cleared")
    current_case().message("<script>alert(1)</script> [bold red]secret[/] \\x1b]8;;http://evil\\x1b\\\\link\\x1b]8;;\\x1b\\\\")
    current_case().final("done")
    current_case().finish("success")
    return {"answer": "done"}
''')
    assert cli("run", cwd=tmp_path).exit_code == 0
    r = cli("search", "secret", cwd=tmp_path)
    assert r.exit_code == 0
    assert "[bold red]secret[/]" in r.output and "<script>alert(1)</script>" in r.output
    assert "\x1b" not in r.output and "\\u001b" in r.output  # shown as the JSON escape it is stored as
    errors = hits(cli, tmp_path, "boom", "--kind", "error")
    assert [(h["case_id"], h["step"]) for h in errors] == [("c2", None)]
    r = cli("search", "boom", cwd=tmp_path)
    assert "[bold red]marked[/]" in r.output and "\x1b" not in r.output and "\\x1b[2J" in r.output


def sql(project: Path, *statements: str) -> None:
    conn = sqlite3.connect(log_path(project))
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def test_a_log_written_before_the_index_says_how_to_build_it(cli, support_run):
    sql(support_run, "DROP TABLE search_steps_fts", "DROP TABLE search_steps",
        "DELETE FROM meta WHERE key = 'search_indexed_to'")
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code == 2 and "no search index yet" in r.output and "audit rebuild" in r.output
    assert cli("audit", "rebuild", cwd=support_run).exit_code == 0
    assert len(hits(cli, support_run, "delete_customer")) == 6


def test_steps_written_by_another_process_not_indexed_yet_are_announced(cli, support_run, monkeypatch):
    """A search catches the index up first; while another process holds the log (a run
    writing), it answers at once from what is indexed and says how much it lags."""
    from oloproof.store import sqlite as sqlite_module

    sql(support_run, "UPDATE meta SET value = '0' WHERE key = 'search_indexed_to'", "DELETE FROM search_steps",
        "INSERT INTO search_steps_fts (search_steps_fts) VALUES ('delete-all')")
    monkeypatch.setattr(sqlite_module, "SEARCH_WAIT", 0.05)
    writer = sqlite3.connect(log_path(support_run), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        r = cli("search", "delete_customer", cwd=support_run)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert r.exit_code == 0 and "no step matches" in r.output and "not indexed yet" in r.output
    # the writer gone, the next search catches up
    assert len(hits(cli, support_run, "delete_customer")) == 6


def test_a_run_indexes_nothing_and_the_first_search_after_it_finds_every_step(cli, support_project):
    """The index is off the run's path: the run leaves it behind (its cases pay nothing for
    it) and the first search catches it up, in full, changing no event."""
    assert cli("run", cwd=support_project).exit_code == 1  # the example's gate blocks
    conn = sqlite3.connect(log_path(support_project))
    try:
        assert conn.execute("SELECT count(*) FROM search_steps").fetchone() == (0,)
        steps = conn.execute("SELECT count(*) FROM events WHERE type = 'step.v1'").fetchone()[0]
    finally:
        conn.close()
    before = events(support_project)
    expected = called(support_project, "delete_customer")
    found = hits(cli, support_project, "delete_customer", "--limit", "1000")
    assert {(h["run_id"], h["case_id"]) for h in found} == expected and len(found) == 6
    assert events(support_project) == before
    assert indexed_steps(log_path(support_project)) == steps  # every step, each once
    assert "not indexed yet" not in cli("search", "refund", cwd=support_project).output


def indexed_steps(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        [(n,)] = conn.execute("SELECT count(DISTINCT pos) FROM search_steps WHERE kind != 'error'").fetchall()
        return n
    finally:
        conn.close()


def test_an_import_is_searchable(cli, tmp_path):
    line = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                               "scopeSpans": [{"spans": [{
                                   "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "00f067aa0ba902b7",
                                   "name": "execute_tool wipe_disk", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                                   "attributes": [
                                       {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                                       {"key": "gen_ai.tool.name", "value": {"stringValue": "wipe_disk"}},
                                       {"key": "gen_ai.tool.call.arguments",
                                        "value": {"stringValue": '{"disk": "sda"}'}}]}]}]}]}
    write(tmp_path / "t.jsonl", json.dumps(line) + "\n")
    assert cli("import", "otel", str(tmp_path / "t.jsonl"), cwd=tmp_path).exit_code == 0
    found = hits(cli, tmp_path, "sda")
    assert [(h["kind"], h["tool_name"], h["step"]) for h in found] == [("tool_call", "wipe_disk", 1)]


def _steps_log(path: Path, cases: int, start: int = 0) -> SQLiteStore:
    from oloproof.events import StepRecorded, encode, tag_of
    from oloproof.store import StreamAppend

    store = SQLiteStore(path)
    for n in range(start, start + cases):
        events = [StepRecorded(1, "tool_call", "refund", {"order_id": f"ord-{n}"}),
                  StepRecorded(2, "tool_result", "refund", result={"ok": True})]
        store.commit([StreamAppend(f"run/c{n}", 0, [encode(e) for e in events], [tag_of(e) for e in events])])
    return store


def indexed(path: Path) -> tuple[int, int, int]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT count(*), count(DISTINCT pos) FROM search_steps").fetchone()
        fts = conn.execute("SELECT count(*) FROM search_steps_fts WHERE search_steps_fts MATCH 'refund'").fetchone()[0]
        return rows[0], rows[1], fts
    finally:
        conn.close()


def test_two_writers_catching_up_index_every_step_once(tmp_path):
    a = _steps_log(tmp_path / "log.db", 5)
    b = _steps_log(tmp_path / "log.db", 5, start=5)
    assert a.index_search() + b.index_search() == 20
    a.commit([])
    assert b.index_search() == 0 and a.index_search() == 0
    a.close()
    b.close()
    assert indexed(tmp_path / "log.db") == (20, 20, 20)


@pytest.mark.slow
def test_a_catch_up_killed_midway_leaves_nothing_and_is_done_again(tmp_path, monkeypatch):
    from oloproof.store import search as search_module

    store = _steps_log(tmp_path / "log.db", 30000 // 2)  # more than one batch of rows
    real = search_module.search_fields
    calls = []

    def dying(type_, payload):
        calls.append(1)
        if len(calls) == 25000:  # after the first batch was inserted
            raise KeyboardInterrupt
        return real(type_, payload)

    monkeypatch.setattr(search_module, "search_fields", dying)
    with pytest.raises(KeyboardInterrupt):
        store.index_search()
    assert indexed(tmp_path / "log.db") == (0, 0, 0)  # rolled back, cursor too
    monkeypatch.setattr(search_module, "search_fields", real)
    assert store.index_search() == 30000
    store.close()
    assert indexed(tmp_path / "log.db") == (30000, 30000, 30000)


def test_the_index_tables_are_what_sqlite_utils_makes_and_it_finds_them(tmp_path):
    import sqlite_utils

    from oloproof.store import search as search_module

    store = _steps_log(tmp_path / "log.db", 3)
    store.index_search()
    store.close()
    db = sqlite_utils.Database(tmp_path / "log.db")
    assert db["search_steps"].detect_fts() == "search_steps_fts"
    assert [r["case_id"] for r in db["search_steps"].search("\"ord-1\"", columns=["case_id"])] == ["c1"]
    # the same DDL sqlite-utils writes, on a fresh database
    ref = sqlite_utils.Database(memory=True)
    ref["search_steps"].create({"pos": int, "run_id": str, "case_id": str, "step": int, "kind": str,
                                "tool_name": str, "replay": str, "text": str}, pk="pos")
    ref["search_steps"].enable_fts(["text"], fts_version="FTS5", tokenize="unicode61 remove_diacritics 2")
    ours = {t: db[t].schema for t in ("search_steps", "search_steps_fts")}
    theirs = {t: ref[t].schema for t in ("search_steps", "search_steps_fts")}
    # the same but for how identifiers are quoted ([x] or "x": it changed between versions) and spacing
    norm = lambda sql: "".join(sql.replace("IF NOT EXISTS ", "").translate(str.maketrans("", "", '[]"')).split())  # noqa: E731
    assert {t: norm(s) for t, s in ours.items()} == {t: norm(s) for t, s in theirs.items()}
    assert len(search_module.SCHEMA) == 2


def test_a_misplaced_operator_is_explained_not_quoted(cli, support_run):
    r = cli("search", "refund* AND NOT escalate", cwd=support_run)
    assert r.exit_code == 2 and "NOT needs a word before it" in r.output and "quote it as a phrase" not in r.output
    r = cli("search", "ord-009", "--json", "h.json", cwd=support_run)
    assert r.exit_code == 0 and "searched for it as typed, as the phrase \"ord-009\"" in r.output
    phrase = json.loads((support_run / "h.json").read_text())
    assert phrase and phrase == hits(cli, support_run, '"ord-009"')  # the same hits as the quoted phrase
    assert hits(cli, support_run, "refund* NOT escalate", "--limit", "1000")


def test_a_filter_naming_nothing_the_log_holds_is_a_typo_not_an_empty_answer(cli, support_run):
    for args, hint in ((["--system", "nosuch"], "support-agent"),
                       (["--tool", "delete_custmer"], "did you mean 'delete_customer'"),
                       (["--verdict", "answer_correc=fail"], "did you mean 'answer_correct'")):
        r = cli("search", "delete_customer", *args, cwd=support_run)
        assert r.exit_code == 2 and hint in r.output, (args, r.output)
    # a real name with no hit is an answer: exit 0
    r = cli("search", "delete_customer", "--tool", "lookup_order", cwd=support_run)
    assert r.exit_code == 0 and "no step matches" in r.output
    assert len(hits(cli, support_run, "delete_customer", "--verdict", "agent_constraints_satisfied=FAIL")) == 6


@pytest.mark.parametrize("args", [
    ["search", "delete_customer", "--json", ".oloproof/log.db"],
    ["export", "latest", "--format", "sqlite", ".oloproof/log.db"],
    ["export", "latest", "--out", ".oloproof/log.db"],
    ["export", "latest", "--format", "otlp-json", "--out", ".oloproof/log.db"],
    ["eval", "latest", "--json", ".oloproof/log.db"],
])
def test_no_output_ever_replaces_the_log(cli, support_run, args):
    before = events(support_run)
    r = cli(*args, cwd=support_run)
    assert r.exit_code == 2 and "is an Oloproof event log" in r.output
    assert events(support_run) == before and cli("audit", "verify", cwd=support_run).exit_code == 0


def test_a_tool_name_cannot_forge_lines_and_recorded_markers_never_highlight(cli, tmp_path):
    tiny_project(tmp_path)
    write(tmp_path / "cases.jsonl", '{"id": "c1", "input": {}}\n')
    write(tmp_path / "app.py", '''
from oloproof import current_case, system

@system(name="s", version="1", records=("agent_trajectory/v1",))
def run(case):
    current_case().step("tool_call", tool_name="benign\\n  case case_999   oloproof show x case_999\\u2028",
                        arguments={"q": "zzforge \\ue000fake\\ue001 \\u00abalso\\u00bb"})
    current_case().finish("success")
    return {"answer": "done"}
''')
    assert cli("run", cwd=tmp_path).exit_code == 0
    r = cli("search", "zzforge", cwd=tmp_path)
    assert r.exit_code == 0
    assert not any(line.startswith("  case case_999") for line in r.output.splitlines())
    assert "benign\\n" in r.output and "\u2028" not in r.output
    [hit] = hits(cli, tmp_path, "zzforge")
    assert hit["snippet"].count("«") == 2  # the match itself, and the recorded «also»
    assert "«zzforge»" in hit["snippet"] and "\ue000" not in hit["snippet"] and "«fake»" not in hit["snippet"]


def test_a_damaged_index_is_a_clear_error_that_rebuild_repairs(cli, support_run):
    sql(support_run, "UPDATE search_steps SET kind = NULL, tool_name = NULL")
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code == 0 and "step 11" in r.output  # shown with what is left
    sql(support_run, "UPDATE search_steps_fts_config SET v = 99 WHERE k = 'version'")
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code == 2 and "audit rebuild" in r.output and "Traceback" not in r.output
    assert cli("audit", "rebuild", cwd=support_run).exit_code == 0
    assert len(hits(cli, support_run, "delete_customer")) == 6
    # pages so damaged that FTS5 cannot even open the table to drop it (seeded: randomblob() made
    # this test pass or fail by chance)
    rnd = random.Random(0)
    conn = sqlite3.connect(log_path(support_run))
    for (row,) in conn.execute("SELECT id FROM search_steps_fts_data").fetchall():
        conn.execute("UPDATE search_steps_fts_data SET block = ? WHERE id = ?", (rnd.randbytes(300), row))
    conn.commit()
    conn.close()
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code in (0, 2) and "Traceback" not in r.output and "internal error" not in r.output
    assert cli("audit", "rebuild", cwd=support_run).exit_code == 0
    assert len(hits(cli, support_run, "delete_customer")) == 6
    assert cli("audit", "verify", cwd=support_run).exit_code == 0


def test_a_structure_record_claiming_gigabytes_is_a_damaged_index_not_a_crash(cli, support_run):
    # FTS5's structure record (id 10) read from these bytes sizes an allocation SQLite refuses:
    # SQLITE_NOMEM, a MemoryError in Python, was exit 3 "internal error"
    rnd = random.Random(168)
    rnd.randbytes(300)
    sql(support_run, f"UPDATE search_steps_fts_data SET block = x'{rnd.randbytes(300).hex()}' WHERE id = 10")
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code == 2 and "damaged pages" in r.output and "audit rebuild" in r.output, r.output
    assert cli("audit", "rebuild", cwd=support_run).exit_code == 0
    assert len(hits(cli, support_run, "delete_customer")) == 6
    conn = sqlite3.connect(log_path(support_run))
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_a_search_past_its_time_limit_stops_with_exit_2(cli, support_run, monkeypatch):
    from oloproof.store import search as search_module

    monkeypatch.setattr(search_module, "SEARCH_SECONDS", -1)  # every query is already past it
    monkeypatch.setattr(search_module, "PROGRESS_STEPS", 1)
    r = cli("search", "refund* OR delete* OR lookup*", cwd=support_run)
    assert r.exit_code == 2 and "took longer than" in r.output


def test_the_first_run_never_writes_its_results_over_its_own_new_log(cli, support_project):
    (support_project / ".oloproof").mkdir()
    r = cli("run", "--json", ".oloproof/log.db", cwd=support_project)
    assert r.exit_code == 2 and "is an Oloproof event log" in r.output
    assert cli("audit", "verify", cwd=support_project).exit_code == 0
    assert cli("gate", "latest", cwd=support_project).exit_code == 1  # the run is there, sealed


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_the_logs_companion_files_are_never_written_over(cli, support_run, suffix):
    r = cli("search", "delete_customer", "--json", f".oloproof/log.db{suffix}", cwd=support_run)
    assert r.exit_code == 2 and "is an Oloproof event log" in r.output


@pytest.mark.parametrize("cursor", ["'abc'", "x'00ff'", "1.5", "'99999999999999999999'", "'-5'",
                                    "'9223372036854775807'", "''"])
def test_a_damaged_cursor_is_rebuilt_never_an_error(cli, support_run, cursor):
    sql(support_run, f"UPDATE meta SET value = {cursor} WHERE key = 'search_indexed_to'")
    r = cli("search", "delete_customer", cwd=support_run)
    assert r.exit_code == 0 and "Traceback" not in r.output
    assert cli("run", cwd=support_run).exit_code == 1  # the gate, not an index error
    assert len(hits(cli, support_run, "delete_customer")) == 12  # both runs, each step once
    assert cli("audit", "verify", cwd=support_run).exit_code == 0


def test_audit_rebuild_replaces_a_view_made_in_the_index_place(cli, support_run):
    sql(support_run, "DROP TABLE search_steps_fts", "DROP TABLE search_steps", "CREATE VIEW search_steps AS SELECT 1")
    assert cli("search", "delete_customer", cwd=support_run).exit_code == 2
    assert cli("audit", "rebuild", cwd=support_run).exit_code == 0
    assert len(hits(cli, support_run, "delete_customer")) == 6


def test_spaces_in_a_tool_name_cannot_wrap_into_a_fake_run_line(cli, tmp_path):
    tiny_project(tmp_path)
    write(tmp_path / "cases.jsonl", '{"id": "c1", "input": {}}\n')
    fake = "lookup" + " " * 600 + "run 20261202T000000-aaaaaa  support-agent v1" + " " * 600 + "x"
    write(tmp_path / "app.py", f'''
from oloproof import current_case, system

@system(name="s", version="1", records=("agent_trajectory/v1",))
def run(case):
    current_case().step("tool_call", tool_name={fake!r}, arguments={{"q": "zzpad" + " " * 900 + "run 1999 fake"}})
    current_case().finish("success")
    return {{"answer": "done"}}
''')
    assert cli("run", cwd=tmp_path).exit_code == 0
    r = cli("search", "zzpad", cwd=tmp_path)
    runs = [line for line in r.output.splitlines() if line.startswith("run ")]
    assert len(runs) == 1 and "aaaaaa" not in runs[0] and "1999" not in runs[0]


def test_an_import_from_a_pipe_is_refused_at_once(cli, tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe")
    r = cli("import", "otel", str(tmp_path / "pipe"), cwd=tmp_path)  # never opened: no hang
    assert r.exit_code == 2 and "not a regular file" in r.output
