"""A log written by schema version 1 must still load, verify and evaluate to the same results."""

import json
from itertools import groupby
from pathlib import Path

from oloproof.app.evidence import evaluate_run
from oloproof.app.project import suite_from_stored
from oloproof.app.projections import rebuild_projections
from oloproof.app.runs import latest_run_id, load_run
from oloproof.store import SQLiteStore, StreamAppend

GOLDEN = Path(__file__).parent / "golden" / "log-v1.jsonl"
STATEFUL = Path(__file__).parent / "golden" / "stateful-v1.jsonl"


def load_golden(path: Path, db: Path) -> SQLiteStore:
    """Append a golden log's events to a fresh store; the chain computed today must equal
    the digests stored then."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    store = SQLiteStore(db)
    for stream, group in groupby(rows, key=lambda r: r["stream"]):
        group = list(group)
        store.commit([StreamAppend(stream, group[0]["seq"], [r["payload"].encode() for r in group],
                                   [r["type"] for r in group])])
    assert [e.digest for e in store.read_all()] == [r["digest"] for r in rows]
    assert store.verify().ok
    return store


def test_golden_v1_log_loads_verifies_and_evaluates(tmp_path):
    store = load_golden(GOLDEN, tmp_path / "log.db")
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


def test_golden_stateful_log_evaluates_and_still_replays(tmp_path, cli):
    """A v1 log with states, checkpoints, replays and metamorphic pairs: its stored replays are
    read back (nothing runs), and today's replay engine still replays its recordings."""
    from tests.conftest import copy_example

    project = tmp_path / "desk"
    copy_example("stateful_agent", project)
    store = load_golden(STATEFUL, project / ".oloproof" / "log.db")
    rebuild_projections(store)
    run_id = latest_run_id(store)
    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    summary = evaluate_run(store, run_id, suite)
    got = {k: (r.passed, r.observed, r.missing, r.excluded) for k, r in summary.criteria.items()}
    assert got["recovers_from_error_at_issue_refund"] == (0, 12, 0, 0)
    assert got["same_state_under_injected"] == (6, 6, 0, 6)
    assert got["state_matches"] == (12, 12, 0, 0)
    store.close()
    r = cli("replay", "--fault", "issue_refund:timeout", "--json", "t.json", cwd=project)
    assert r.exit_code == 0, r.output
    data = json.loads((project / "t.json").read_text())
    made_the_call = [c for c in data["cases"] if c["verdict"] != "excluded"]
    assert made_the_call and all(c["control"]["faithful"] for c in made_the_call)
    # the v1 log's replays are keyed without a code digest (it predates them): today's replays
    # are keyed by today's code, so the controls run again, then the faults
    assert data["executed"] == 2 * len(made_the_call)


PREFIX = Path(__file__).parent / "golden" / "prefix-v1.jsonl"


def test_golden_prefix_log_loads_verifies_and_evaluates(tmp_path):
    """A log with the prefix-regression events (case_started.v1 with a frozen prefix, usage.v1,
    attribution.v1) keeps loading, verifying and judging the same."""
    from oloproof.app.attribution import latest_attribution
    from oloproof.app.prefix import is_prefix_run, prefix_outcomes
    from oloproof.app.runs import iter_case_views, run_headers

    store = load_golden(PREFIX, tmp_path / "log.db")
    rebuild_projections(store)
    e2e, prefix_run = (r.run_id for r in run_headers(store))
    assert not is_prefix_run(load_run(store, e2e).started) and is_prefix_run(load_run(store, prefix_run).started)
    a = latest_attribution(store, e2e, "refund-all")
    assert (a["first_unacceptable_step"], a["category"], a["primary"]["rule"]) == \
        (11, "stopping_too_early", "declared_complete_without_verification")
    run = load_run(store, prefix_run)
    summary = evaluate_run(store, prefix_run, suite_from_stored(run.started.config))
    got = {k: (r.passed, r.observed, r.missing, r.excluded) for k, r in summary.criteria.items()}
    assert got == {"prefix_action_acceptable": (0, 1, 0, 0), "retention_action_acceptable": (0, 0, 0, 1),
                   "irreversible_action_acceptable": (0, 0, 0, 1), "no_critical_forbidden_action": (1, 1, 0, 0)}
    [row] = prefix_outcomes(list(iter_case_views(store, prefix_run)))
    assert (row.outcome.status, row.outcome.action) == ("other", 'refund({"amount":11,"order":"o1"})')
    [view] = iter_case_views(store, e2e)
    assert len(view.usage) == 4 and sum(u.input_tokens for u in view.usage) == 406  # v1: four model calls
    store.close()
