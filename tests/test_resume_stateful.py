"""Resuming a run whose cases have replays and metamorphic pairs gives the same results as a
run that was never interrupted, and runs no replay twice."""

import pytest

from oloproof.app.project import load_project, load_system
from oloproof.app.run import run_suite
from oloproof.report.results import results_dict
from oloproof.store import SQLiteStore
from tests.conftest import copy_example


def results_of(outcome, project):
    data = results_dict(outcome.run_id, outcome.system_name, outcome.system_version, project.suite, outcome.summary)
    data.pop("run_id")
    return data


def test_interrupted_stateful_run_resumes_to_the_same_results(tmp_path):
    reference = copy_example("stateful_agent", tmp_path / "reference")
    project = load_project(reference)
    info = project.prepare()
    store = SQLiteStore(reference / ".oloproof" / "log.db")
    expected = results_of(run_suite(project, load_system(project), store, info), project)
    reference_replays = store.count_streams("replay/")
    store.close()

    p = copy_example("stateful_agent", tmp_path / "desk")
    project = load_project(p)
    info = project.prepare()
    system = load_system(project)
    store = SQLiteStore(p / ".oloproof" / "log.db")

    def stop_after_fifteen(done, total):
        if done == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(project, system, store, info, progress=stop_after_fifteen)
    run_id = store.projection("runs")[0]["run_id"]
    assert store.count_streams(run_id + "/") == 15
    replays_before = store.count_streams("replay/")
    outcome = run_suite(project, system, store, info, resume=run_id)
    assert outcome.run_id == run_id
    assert results_of(outcome, project) == expected
    assert store.count_streams(run_id + "/") == 44
    # every replay exactly once: the committed cases' replays came from the cache
    assert 0 < replays_before < store.count_streams("replay/") == reference_replays
    assert store.verify().ok
    store.close()


def test_a_run_without_json_keeps_no_cases_but_the_same_rows(tmp_path):
    rows = {}
    for keep in (True, False):
        p = copy_example("stateful_agent", tmp_path / f"desk-{keep}")
        project = load_project(p)
        info = project.prepare()
        store = SQLiteStore(p / ".oloproof" / "log.db")
        outcome = run_suite(project, load_system(project), store, info, keep_cases=keep)
        store.close()
        assert len(outcome.summary.cases) == (44 if keep else 0)
        rows[keep] = (outcome.summary.criteria, outcome.summary.slices, outcome.summary.gate,
                      outcome.summary.transforms, outcome.summary.source_clusters)
    assert rows[True] == rows[False]
