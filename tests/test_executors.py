"""Results never depend on the executor: every example (replays and metamorphic pairs
included) and an async agent give the same results and the same events under serial,
--concurrency, --workers and Dask (a real LocalCluster), and --resume works under each."""

import json
import shutil

import pytest

from tests.async_project import make_async_project
from tests.conftest import EXAMPLES
from tests.test_async import streams

EXAMPLE_DIRS = ["support_agent", "triage_agents", "stateful_agent"]


@pytest.fixture(scope="module")
def cluster():
    """A real Dask LocalCluster of two worker processes, shared by this module's tests."""
    distributed = pytest.importorskip("distributed")
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        local = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                         dashboard_address=":0", silence_logs=50)
    yield local.scheduler_address
    local.close()


def executors(cluster_address):
    return {
        "serial": [],
        "concurrent": ["--concurrency", "4"],
        "processes": ["--workers", "2"],
        "dask": ["--scheduler", cluster_address],
    }


def copy(name, target):
    if name == "async":
        return make_async_project(target)
    shutil.copytree(EXAMPLES / name, target, ignore=shutil.ignore_patterns("__pycache__", ".oloproof"))
    return target


def run_with(cli, p, args, db):
    r = cli("run", "--db", str(db), "--json", str(db.with_suffix(".json")), "--project", str(p), *args, cwd=p)
    assert r.exit_code in (0, 1), r.output
    data = json.loads(db.with_suffix(".json").read_text())
    data.pop("run_id")
    data.pop("log_digest")  # covers the chains, which cover the stream names (the run id)
    events = streams(db)
    run_stream = [json.loads(e) for e in events.pop("RUN")]
    return r.exit_code, data, events, run_stream


@pytest.mark.parametrize("name", EXAMPLE_DIRS + ["async"])
@pytest.mark.slow
def test_every_executor_gives_the_same_results_and_events(cli, tmp_path, cluster, name):
    p = copy(name, tmp_path / name)
    outcomes = {label: run_with(cli, p, args, tmp_path / f"{label}.db")
                for label, args in executors(cluster).items()}
    code, data, events, run_stream = outcomes["serial"]
    assert data["cases"] and events
    if name == "stateful_agent":
        assert any(s.startswith("replay/") for s in events) and any("~" in s for s in events)
    for label, (c, d, e, rs) in outcomes.items():
        assert c == code, label
        assert d == data, label  # verdicts, intervals, slices, gate: all of it
        assert e == events, label  # every case and replay event, byte for byte
        # the run's own events differ only in their timings, and in the seal's digests (the
        # chains cover the stream names, which hold the run id); the sealed streams agree
        assert strip_run(rs) == strip_run(run_stream), label


def strip_run(events):
    out = []
    for ev in events:
        ev = {k: v for k, v in ev.items() if k not in ("started_at", "finished_at", "digest")}
        for field in ("cases", "replays"):
            if ev.get("type") == "run_sealed.v1":
                ev[field] = {s: n for s, (n, _) in ev[field].items()}
        out.append(ev)
    return out


@pytest.mark.slow
def test_executor_dask_starts_a_local_cluster(cli, tmp_path):
    pytest.importorskip("distributed")
    p = copy("support_agent", tmp_path / "s")
    _, serial, events, _ = run_with(cli, p, [], tmp_path / "serial.db")
    _, dask, dask_events, _ = run_with(cli, p, ["--executor", "dask", "--workers", "2"], tmp_path / "dask.db")
    assert dask == serial and dask_events == events


@pytest.mark.parametrize("first,second", [("concurrent", "processes"), ("processes", "dask"),
                                          ("dask", "serial"), ("serial", "concurrent")])
@pytest.mark.slow
def test_resume_under_every_executor(tmp_path, cluster, first, second):
    """Stop a run of the stateful example after some cases under one executor, finish it
    under another: the same results as a run never interrupted, every replay once."""
    from oloproof.app.project import load_project, load_system
    from oloproof.app.run import make_executor, run_suite
    from oloproof.report.results import results_dict
    from oloproof.store import SQLiteStore

    def pool(label):
        return {"serial": lambda: make_executor(),
                "concurrent": lambda: make_executor(concurrency=4),
                "processes": lambda: make_executor(workers=2),
                "dask": lambda: make_executor(scheduler=cluster)}[label]()

    def results(outcome, project):
        data = results_dict(outcome.run_id, outcome.system_name, outcome.system_version, project.suite,
                            outcome.summary)
        data.pop("run_id")
        return data

    ref = copy("stateful_agent", tmp_path / "ref")
    project = load_project(ref)
    info = project.prepare()
    store = SQLiteStore(ref / ".oloproof" / "log.db")
    expected = results(run_suite(project, load_system(project), store, info), project)
    replays = store.count_streams("replay/")
    store.close()

    p = copy("stateful_agent", tmp_path / "p")
    project = load_project(p)
    info = project.prepare()
    system = load_system(project)
    store = SQLiteStore(p / ".oloproof" / "log.db")

    def stop(done, total):
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(project, system, store, info, executor=pool(first), progress=stop)
    run_id = store.projection("runs")[0]["run_id"]
    # cases run ahead of judging (their replays come later): some or all are committed
    assert 5 <= store.count_streams(run_id + "/") <= 44
    assert store.projection("runs")[0]["status"] == "incomplete"
    outcome = run_suite(project, system, store, info, executor=pool(second), resume=run_id)
    assert results(outcome, project) == expected
    assert store.count_streams(run_id + "/") == 44
    assert store.count_streams("replay/") == replays
    assert store.verify().ok
    store.close()


@pytest.mark.slow
def test_any_json_number_crosses_to_workers(cli, tmp_path, cluster):
    """A case may hold any JSON number: integers past 64 bits travel to and from workers."""
    p = copy("support_agent", tmp_path / "big")
    lines = (p / "cases.jsonl").read_text().splitlines()
    case = json.loads(lines[0])
    case["input"]["reference"] = 2 ** 80 + 1
    case["metadata"]["weight"] = -(2 ** 70)
    (p / "cases.jsonl").write_text("\n".join([json.dumps(case)] + lines[1:]) + "\n")
    _, serial, events, _ = run_with(cli, p, [], tmp_path / "serial.db")
    assert str(2 ** 80 + 1) in next(e for s, evs in events.items() for e in evs if case["id"] in s)
    for label in ("processes", "dask"):
        _, data, evs, _ = run_with(cli, p, executors(cluster)[label], tmp_path / f"{label}.db")
        assert data == serial and evs == events, label
