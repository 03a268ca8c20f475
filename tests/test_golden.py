"""A log written by schema version 1 must still load, verify and evaluate to the same results."""

import json
from itertools import groupby
from pathlib import Path

from oloproof.history import evaluate_run, latest_run_id, load_run, rebuild_projections
from oloproof.project import suite_from_stored
from oloproof.store import SQLiteStore, StreamAppend

GOLDEN = Path(__file__).parent / "golden" / "log-v1.jsonl"


def test_golden_v1_log_loads_verifies_and_evaluates(tmp_path):
    rows = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    store = SQLiteStore(tmp_path / "log.db")
    for stream, group in groupby(rows, key=lambda r: r["stream"]):
        group = list(group)
        store.commit([StreamAppend(stream, group[0]["seq"], [r["payload"].encode() for r in group],
                                   [r["type"] for r in group])])
    # the chain computed today equals the digests stored then
    assert [e.digest for e in store.read_all()] == [r["digest"] for r in rows]
    assert store.verify().ok
    rebuild_projections(store)
    run_id = latest_run_id(store)
    run = load_run(store, run_id)
    assert run.complete and run.started.case_count == 40
    suite = suite_from_stored(run.started.config)
    summary = evaluate_run(store, run_id, suite)
    got = {k: (r.passed, r.observed, r.missing, r.excluded) for k, r in summary.criteria.items()}
    assert got == {
        "answer_correct": (33, 40, 0, 0),
        "agent_tool_lookup_order_called": (39, 39, 1, 0),
        "agent_no_tool_loop": (29, 39, 1, 0),
        "agent_tool_sequence": (24, 40, 0, 0),
        "agent_constraints_satisfied": (37, 40, 0, 0),
        "agent_steps_le_10": (39, 40, 0, 0),
    }
    assert summary.gate.decision == "FAIL"
    store.close()
