"""``trials: k`` and pass^k (issue 13, item 6; SPEC §13, §13a).

A flaky but deterministic agent — it fails trial t of case c when sha256(c, t) says so, and
reads t from ``current_case().trial``, the one legitimate place — so that every executor,
every resume and every re-evaluation must give the same numbers, and the numbers can be
computed again by brute force from the per-trial verdicts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from oloproof.config.limits import split_trial, trial_case_id
from oloproof.stats.intervals import clopper_pearson
from oloproof.stats.passk import (
    BOOTSTRAP,
    EXACT,
    RESAMPLES,
    bootstrap_percentile,
    case_pass_hat_k,
    pass_hat_k,
    pass_hat_k_summary,
)

CASES = 25  # ≥ 20 source clusters: rules on clustered data may decide

APP = '''\
import hashlib
import time
from pathlib import Path

from oloproof import Stateful, current_case, system, tool

LOG = Path(__file__).with_name("calls.log")
DELAY = 0.0


def flaky(case_id, trial):
    """Trial ``trial`` of ``case_id`` fails: 1 in 5 (case, trial) pairs, by hash."""
    digest = int(hashlib.sha256(case_id.encode()).hexdigest(), 16)
    return (digest + trial) % 5 == 0


@system(name="flaky-desk", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id):
        self.state["lookups"] = self.state.get("lookups", 0) + 1  # the sandbox counts its calls
        return {"order_id": order_id, "status": "delivered"}

    def __call__(self, case):
        assert "/" not in case.id, case.id  # the system sees the case's own id, never the trial's
        trial = current_case().trial
        with open(LOG, "a") as fh:
            fh.write(f"{case.id} {trial}\\n")
        time.sleep(DELAY)
        self.lookup(case.input["order_id"])
        bad = trial is not None and flaky(case.id, trial)
        return {"answer": "wrong" if bad else "ok"}
'''

CONFIG = '''\
system: {name: flaky-desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: state_matches, mode: subset}
release: release.yaml
'''

RELEASE = '''\
allow_approximate_methods: true
rules:
  - {name: severe, criterion: answer_correct, max_failures: 0}
  - {name: world-every-trial, criterion: state_matches, min_pass_hat_k: 0.8}
  - {name: answer-every-trial, criterion: answer_correct, min_pass_hat_k: 0.9}
'''


def flaky(case_id: str, trial: int) -> bool:
    digest = int(hashlib.sha256(case_id.encode()).hexdigest(), 16)
    return (digest + trial) % 5 == 0


def make_project(folder: Path, cases: int = CASES, config_extra: str = "", release: str = RELEASE,
                 delay: float = 0.0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP.replace("DELAY = 0.0", f"DELAY = {delay}"))
    (folder / "oloproof.yaml").write_text(CONFIG + config_extra)
    (folder / "release.yaml").write_text(release)
    with open(folder / "cases.jsonl", "w") as fh:
        for i in range(cases):
            # the sandbox starts at 0 lookups: a trial that found 1 started from the case's
            # initial_state (its sandbox reset), whatever trial ran before it
            fh.write(json.dumps({"id": f"case-{i:02d}", "input": {"order_id": f"o{i}"},
                                 "initial_state": {"lookups": 0},
                                 "expected": {"answer": "ok", "state": {"lookups": 1}}}) + "\n")
    return folder


def run_json(cli, project: Path, *args: str, db: Path | None = None, expect: int | None = None) -> dict:
    out = (db or project / "out").with_suffix(".json")
    db_args = ["--db", str(db)] if db is not None else []
    r = cli("run", *db_args, "--json", str(out), "--project", str(project), *args, cwd=project)
    if expect is not None:
        assert r.exit_code == expect, r.output
    else:
        assert r.exit_code in (0, 1), r.output
    return json.loads(out.read_text())


def row(data: dict, criterion: str) -> dict:
    return next(r for r in data["criteria"] if r["criterion"] == criterion)


def per_case(data: dict, criterion: str) -> dict[str, list[str]]:
    """case id -> the verdicts of its trials, in trial order."""
    out: dict[str, list[str]] = {}
    for c in data["cases"]:
        case_id, trial = split_trial(c["case_id"])
        assert c.get("trial") == trial
        out.setdefault(case_id, []).append(c["verdicts"][criterion]["verdict"])
    return out


# ---- the estimator and its interval, against brute force ---------------------------------

def brute_case(passed: int, trials: int, k: int) -> Fraction:
    """The share of the k-subsets of a case's trials in which every trial passed."""
    outcomes = [True] * passed + [False] * (trials - passed)
    subsets = list(itertools.combinations(range(trials), k))
    return Fraction(sum(all(outcomes[i] for i in s) for s in subsets), len(subsets))


def test_case_pass_hat_k_is_the_share_of_k_subsets_that_all_pass():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert case_pass_hat_k(c, n, k) == brute_case(c, n, k), (c, n, k)
                assert case_pass_hat_k(c, n, k) <= Fraction(c, n)  # never above the rate
    with pytest.raises(ValueError):
        case_pass_hat_k(2, 2, 3)  # fewer trials than k
    with pytest.raises(ValueError):
        case_pass_hat_k(1, 3, 0)


def test_suite_pass_hat_k_is_the_mean_over_cases():
    rng = random.Random(7)
    for _ in range(50):
        k = rng.randint(1, 4)
        cases = []
        for _ in range(rng.randint(1, 12)):
            n = rng.randint(k, 7)
            cases.append((rng.randint(0, n), n))
        expected = sum((brute_case(c, n, k) for c, n in cases), Fraction(0)) / len(cases)
        assert pass_hat_k(cases, k) == pytest.approx(float(expected), abs=1e-15)
    assert pass_hat_k([], 3) is None


def test_summary_with_k_trials_a_case_is_exact_clopper_pearson_over_cases():
    # 10 cases by passing trials of 3: 0:1, 1:1, 2:2, 3:6
    counts = {(0, 3, 0): 1, (1, 3, 0): 1, (2, 3, 0): 2, (3, 3, 0): 6}
    ph = pass_hat_k_summary(counts, 3)
    assert ph.method == EXACT and ph.k == 3
    assert ph.value == pytest.approx(0.6)
    assert (ph.low, ph.high) == pytest.approx(clopper_pearson(6, 10))
    assert ph.passing_trials == (1, 1, 2, 6) and sum(ph.passing_trials) == 10
    assert (ph.cases, ph.missing, ph.short, ph.excluded) == (10, 0, 0, 0)


def test_summary_missing_short_and_excluded_trials():
    counts = {
        (3, 3, 0): 5,   # all passed
        (2, 3, 0): 1,   # one failed
        (2, 2, 1): 2,   # two passed, one missing: unknown
        (1, 2, 1): 1,   # one failed, one missing: fails anyway
        (2, 2, 0): 1,   # one trial excluded: fewer than k apply
        (0, 0, 0): 3,   # every trial excluded
        (0, 0, 3): 1,   # never recorded
    }
    ph = pass_hat_k_summary(counts, 3)
    assert (ph.cases, ph.missing, ph.short, ph.excluded) == (6, 4, 1, 3)
    assert ph.value == pytest.approx(5 / 6)  # over the cases with every trial observed
    # low end: missing trials failed (5 of 10); high end: missing trials passed (5 + 2 + 1 of 10)
    assert ph.low == pytest.approx(clopper_pearson(5, 10)[0])
    assert ph.high == pytest.approx(clopper_pearson(8, 10)[1])
    # over the cases with a trial observed: the excluded, and the one with none observed, are out
    assert ph.passing_trials == (0, 1, 4, 5) and sum(ph.passing_trials) == 10
    empty = pass_hat_k_summary({(0, 0, 0): 2}, 3)
    assert (empty.value, empty.low, empty.high, empty.excluded) == (None, None, None, 2)


def exact_bootstrap_cdf(population: list[float]):
    """The exact distribution of the bootstrap mean: every ordered resample, equally likely."""
    n = len(population)
    means = Counter(sum(sample) / n for sample in itertools.product(population, repeat=n))
    total = n ** n
    return lambda x, strict: sum(c for m, c in means.items() if (m < x - 1e-12 if strict else m <= x + 1e-12)) / total


def test_bootstrap_percentile_against_the_exact_bootstrap_distribution():
    population = [0.0, 0.25, 0.5, 1.0, 1.0]
    values = Counter(population)
    low, high = bootstrap_percentile(values)
    cdf = exact_bootstrap_cdf(population)
    slack = 0.012  # 2,000 resamples: the Monte Carlo error of a 2.5 % tail
    assert cdf(low, True) <= 0.025 + slack and cdf(low, False) >= 0.025 - slack
    assert 1 - cdf(high, False) <= 0.025 + slack and 1 - cdf(high, True) >= 0.025 - slack
    # fixed seed: the same cases, in any order, give the same interval
    assert bootstrap_percentile(dict(reversed(list(values.items())))) == (low, high)
    assert bootstrap_percentile({}) is None
    assert RESAMPLES == 2000


def test_summary_with_more_trials_than_k_uses_the_bootstrap():
    counts = {(5, 5, 0): 4, (4, 5, 0): 3, (2, 5, 0): 2, (0, 5, 0): 1}
    ph = pass_hat_k_summary(counts, 3)
    assert ph.method == BOOTSTRAP
    values: Counter = Counter()
    for (c, n, _), cases in counts.items():
        values[brute_case(c, n, 3)] += cases  # C(2, 3) = 0: two of the values are 0
    assert ph.value == pytest.approx(float(sum(v * n for v, n in values.items()) / 10))
    assert (ph.low, ph.high) == bootstrap_percentile(values)
    assert ph.low <= ph.value <= ph.high
    assert len(ph.passing_trials) == 6


def test_trial_ids_cannot_be_case_ids():
    from oloproof.config.limits import case_id_problem

    assert trial_case_id("c", 2) == "c/2" and case_id_problem("c/2") is not None
    assert trial_case_id("c~upper", 3) == "c/3~upper"
    assert split_trial("c/3~upper") == ("c~upper", 3) and split_trial("c") == ("c", None)
    assert trial_case_id("c", None) == "c"


# ---- runs ------------------------------------------------------------------------------------

def test_trials_pass_hat_k_is_brute_force_and_below_the_rate(cli, tmp_path):
    p = make_project(tmp_path / "p")
    data = run_json(cli, p, "--trials", "3", expect=1)
    assert len(data["cases"]) == CASES * 3 and data["cases_expected"] == CASES * 3
    assert [c["case_id"] for c in data["cases"][:4]] == ["case-00/1", "case-00/2", "case-00/3", "case-01/1"]

    answers = per_case(data, "answer_correct")
    assert len(answers) == CASES and all(len(v) == 3 for v in answers.values())
    for case_id, verdicts in answers.items():  # the verdicts are the agent's flakiness, trial by trial
        assert verdicts == ["fail" if flaky(case_id, t) else "pass" for t in (1, 2, 3)]
    r = row(data, "answer_correct")
    passes = {c: v.count("pass") for c, v in answers.items()}
    brute = sum(brute_case(n, 3, 3) for n in passes.values()) / CASES
    all_three = sum(n == 3 for n in passes.values())
    assert r["k"] == 3 and r["pass_hat_k"] == pytest.approx(float(brute)) == pytest.approx(all_three / CASES)
    assert (r["pass_hat_k_low"], r["pass_hat_k_high"]) == pytest.approx(clopper_pearson(all_three, CASES))
    assert r["pass_hat_k"] < r["rate"]  # a case that sometimes fails weighs more
    assert r["passing_trials"] == [sum(n == j for n in passes.values()) for j in range(4)]
    assert sum(r["passing_trials"]) == CASES
    assert r["pass_hat_k_method"] == "clopper_pearson_cases" and r["pass_hat_k_cases"] == CASES
    # the rate counts trials, clustered by case
    failing = sum(v.count("fail") for v in answers.values())
    assert (r["passed"], r["observed"]) == (3 * CASES - failing, 3 * CASES)
    assert r["method"] == "design_effect_clopper_pearson" and r["clusters"] == CASES

    # every trial started from the case's initial_state: the sandbox was reset for each
    s = row(data, "state_matches")
    assert s["rate"] == 1.0 and s["pass_hat_k"] == 1.0 and s["passing_trials"] == [0, 0, 0, CASES]

    rules = {g["name"]: g for g in data["gate"]["rules"]}
    # max_failures counts failing trials: a severe failure is never averaged away
    assert rules["severe"]["status"] == "FAIL"
    assert rules["severe"]["detail"] == f"{failing} failures > 0 allowed"
    assert failing == CASES - all_three  # this agent fails at most one of any 3 trials of a case
    low = clopper_pearson(CASES, CASES)[0]
    assert rules["world-every-trial"]["status"] == "PASS"
    assert rules["world-every-trial"]["detail"] == f"pass^3 low {math.floor(low * 1000) / 10:g} % ≥ 80 %"
    assert rules["answer-every-trial"]["status"] == "FAIL"
    assert rules["answer-every-trial"]["reason"] == "pass_hat_k_below_threshold"
    assert rules["answer-every-trial"]["detail"].startswith("pass^3 low ")
    assert rules["answer-every-trial"]["kind"] == "min_pass_hat_k"

    # eval and gate of the stored run see its trials (stored with its configuration)
    r2 = cli("eval", "latest", "--json", str(tmp_path / "eval.json"), cwd=p)
    assert r2.exit_code == 1, r2.output
    again = json.loads((tmp_path / "eval.json").read_text())
    assert again["criteria"] == data["criteria"] and again["gate"] == data["gate"]
    assert again["cases"] == data["cases"]
    assert cli("audit", "verify", cwd=p).exit_code == 0
    shown = cli("show", "latest", "case-00/2", cwd=p)
    assert shown.exit_code == 0 and "case case-00/2" in shown.output

    # the log: one stream per trial, CaseStarted.trial set, one fingerprint per case
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    heads = [json.loads(bytes(x).decode()) for (x,) in conn.execute(
        "SELECT payload FROM events WHERE seq = 0 AND stream LIKE '%/case-03/%' ORDER BY stream")]
    started = json.loads(bytes(conn.execute(
        "SELECT payload FROM events WHERE seq = 0 AND stream NOT LIKE '%/%'").fetchone()[0]).decode())
    conn.close()
    assert [(h["case_id"], h["trial"]) for h in heads] == [("case-03/1", 1), ("case-03/2", 2), ("case-03/3", 3)]
    assert len({h["fingerprint"] for h in heads}) == 1
    assert started["config"]["oloproof"]["trials"] == 3 and started["case_count"] == CASES * 3

    # the lines the system wrote: every (case, trial) once, the trial read from current_case()
    lines = (p / "calls.log").read_text().split("\n")[:-1]
    assert sorted(lines) == sorted(f"case-{i:02d} {t}" for i in range(CASES) for t in (1, 2, 3))


def test_a_single_trial_run_is_unchanged(cli, tmp_path):
    """trials: 1 (or none) stores and reports exactly what a run stored before trials."""
    from tests.test_async import streams

    plain = make_project(tmp_path / "plain")
    one = make_project(tmp_path / "one", config_extra="trials: 1\n")
    a = run_json(cli, plain, db=tmp_path / "a.db")
    b = run_json(cli, one, db=tmp_path / "b.db")
    c = run_json(cli, one, "--trials", "1", db=tmp_path / "c.db")
    for d in (a, b, c):
        for key in ("run_id", "log_digest"):
            d.pop(key)
    assert a == b == c
    assert set(row(a, "answer_correct")) == {"criterion", "passed", "observed", "missing", "excluded", "rate",
                                             "low", "high", "method"}
    assert all("trial" not in case for case in a["cases"]) and len(a["cases"]) == CASES
    assert {g["name"]: (g["status"], g["reason"]) for g in a["gate"]["rules"]}["answer-every-trial"] == \
        ("INSUFFICIENT_EVIDENCE", "single_trial")
    sa, sb = streams(tmp_path / "a.db"), streams(tmp_path / "b.db")
    run_a, run_b = json.loads(sa.pop("RUN")[0]), json.loads(sb.pop("RUN")[0])
    assert sa == sb  # every case stream byte for byte
    assert "trials" not in run_a["config"]["oloproof"]
    assert run_a["config"] == run_b["config"] and run_a["config_digest"] == run_b["config_digest"]
    assert sa and all('"trial"' not in e for evs in sa.values() for e in evs)
    # the system saw no trial
    assert set((plain / "calls.log").read_text().split("\n")[:-1]) == {f"case-{i:02d} None" for i in range(CASES)}


def test_trials_from_the_configuration_and_bad_values(cli, tmp_path):
    p = make_project(tmp_path / "p", config_extra="trials: 2\n")
    data = run_json(cli, p)
    assert row(data, "answer_correct")["k"] == 2 and len(data["cases"]) == 2 * CASES
    over = run_json(cli, p, "--trials", "6", db=tmp_path / "over.db")  # --trials overrides it
    assert row(over, "answer_correct")["k"] == 6 and len(over["cases"]) == 6 * CASES
    # 6 trials: every case fails one of them, some two. max_failures counts the trials
    answers = per_case(over, "answer_correct")
    failing = sum(v.count("fail") for v in answers.values())
    assert failing > sum("fail" in v for v in answers.values()) == CASES
    assert row(over, "answer_correct")["pass_hat_k"] == 0.0 and row(over, "answer_correct")["passing_trials"][6] == 0
    severe = next(g for g in over["gate"]["rules"] if g["name"] == "severe")
    assert severe["detail"] == f"{failing} failures > 0 allowed"
    for bad, message in (("true", "trials: expected a number"), ("0", "trials"), ("2.5", "trials"),
                         ("1001", "trials")):
        (p / "oloproof.yaml").write_text(CONFIG + f"trials: {bad}\n")
        r = cli("run", "--project", str(p), cwd=p)
        assert r.exit_code == 2 and message in r.output, (bad, r.output)
    (p / "oloproof.yaml").write_text(CONFIG)
    for bad in ("0", "-1", "1001"):
        r = cli("run", "--trials", bad, "--project", str(p), cwd=p)
        assert r.exit_code == 2 and "--trials" in r.output, r.output


def test_min_pass_hat_k_needs_approximate_methods_and_clusters(cli, tmp_path):
    p = make_project(tmp_path / "p", release=RELEASE.replace("allow_approximate_methods: true\n", ""))
    data = run_json(cli, p, "--trials", "3", expect=1)
    rules = {g["name"]: g for g in data["gate"]["rules"]}
    for name in ("world-every-trial", "answer-every-trial"):
        assert (rules[name]["status"], rules[name]["reason"]) == \
            ("INSUFFICIENT_EVIDENCE", "approximate_methods_not_allowed")
    assert rules["severe"]["status"] == "FAIL"  # a count needs no interval

    few = make_project(tmp_path / "few", cases=8)
    data = run_json(cli, few, "--trials", "3", expect=1)
    rules = {g["name"]: g for g in data["gate"]["rules"]}
    assert (rules["world-every-trial"]["status"], rules["world-every-trial"]["reason"]) == \
        ("INSUFFICIENT_EVIDENCE", "too_few_clusters")


def test_min_pass_hat_k_rule_decisions():
    from oloproof.config.models import Rule
    from oloproof.evaluate.gate import GateContext, judge_rule
    from oloproof.stats.intervals import RateInterval

    rule = Rule(name="r", criterion="c", min_pass_hat_k=0.5)
    assert rule.kind == "min_pass_hat_k" and rule.threshold == 0.5
    trials = RateInterval(60, 75, 0, 0, 0.8, 0.7, 0.9, "design_effect_clopper_pearson", 25)
    ph = pass_hat_k_summary({(3, 3, 0): 10, (2, 3, 0): 15}, 3)
    ok = GateContext(source_clusters=25, allow_approximate_methods=True, pass_hat_k={"c": ph})
    verdict = judge_rule(rule, trials, ok)
    assert verdict.status == "FAIL" and verdict.reason == "pass_hat_k_below_threshold"
    assert verdict.detail == f"pass^3 low {math.floor(ph.low * 1000) / 10:g} % < 50 %"
    passing = judge_rule(Rule(name="r", criterion="c", min_pass_hat_k=0.2), trials, ok)
    assert passing.status == "PASS" and passing.detail.endswith("≥ 20 %")
    single = RateInterval(20, 25, 0, 0, 0.8, 0.6, 0.9)
    assert judge_rule(rule, single, GateContext(source_clusters=25, allow_approximate_methods=True)).reason == \
        "single_trial"
    assert judge_rule(rule, trials, GateContext(source_clusters=25, pass_hat_k={"c": ph})).reason == \
        "approximate_methods_not_allowed"
    assert judge_rule(rule, trials, GateContext(source_clusters=5, allow_approximate_methods=True,
                                                pass_hat_k={"c": ph})).reason == "too_few_clusters"
    incomplete = GateContext(source_clusters=25, allow_approximate_methods=True, pass_hat_k={"c": ph},
                             incomplete=(70, 75))
    assert judge_rule(Rule(name="r", criterion="c", min_pass_hat_k=0.2), trials, incomplete).reason == \
        "run_incomplete"
    with pytest.raises(ValueError):
        Rule(name="r", criterion="c", min_pass_hat_k=1.5)
    with pytest.raises(ValueError):
        Rule(name="r", criterion="c", min_pass_hat_k=0.5, min_rate=0.5)


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        local = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                         dashboard_address=":0", silence_logs=50)
    yield local.scheduler_address
    local.close()


@pytest.mark.slow
def test_every_executor_gives_the_same_trials(cli, tmp_path, cluster):
    from tests.test_async import streams

    p = make_project(tmp_path / "p")
    outcomes = {}
    for label, args in {"serial": [], "concurrent": ["--concurrency", "4"], "processes": ["--workers", "2"],
                        "dask": ["--scheduler", cluster]}.items():
        db = tmp_path / f"{label}.db"
        data = run_json(cli, p, "--trials", "3", *args, db=db, expect=1)
        data.pop("run_id")
        data.pop("log_digest")
        events = streams(db)
        events.pop("RUN")
        outcomes[label] = (data, events)
    data, events = outcomes["serial"]
    assert len(events) == 3 * CASES
    for label, (d, e) in outcomes.items():
        assert d == data, label  # rates, pass^k, distributions, cases in order, the gate
        assert e == events, label  # every trial's events, byte for byte


SLOW = 0.02  # seconds a trial takes: time to kill the run in the middle


def oloproof(project: Path, *args: str, wait: bool = True):
    cmd = [sys.executable, "-m", "oloproof", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=300)


def committed_streams(project: Path) -> set[str]:
    db = project / ".oloproof" / "log.db"
    if not db.exists():
        return set()
    try:
        conn = sqlite3.connect(db, timeout=5)
        rows = conn.execute("SELECT DISTINCT stream FROM events WHERE seq = 0 AND stream LIKE '%/%'").fetchall()
        conn.close()
        return {r[0].split("/", 1)[1] for r in rows}
    except sqlite3.DatabaseError:
        return set()


@pytest.mark.slow
def test_resume_after_a_kill_records_the_missing_trials_only(tmp_path):
    reference = make_project(tmp_path / "reference")
    ref = oloproof(reference, "run", "--trials", "3", "--json", "ref.json")
    assert ref.returncode == 1, ref.stderr
    expected = json.loads((reference / "ref.json").read_text())

    p = make_project(tmp_path / "p", delay=SLOW)
    proc = oloproof(p, "run", "--trials", "3", wait=False)
    deadline = time.time() + 60
    while len(committed_streams(p)) < 20 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = committed_streams(p)
    assert 20 <= len(before) < 3 * CASES
    runs = json.loads(oloproof(p, "runs", "--json").stdout)
    assert runs[0]["status"] == "incomplete" and runs[0]["case_count"] == 3 * CASES
    run_id = runs[0]["run_id"]

    # the run keeps its own trials: --resume needs no --trials, and refuses another count
    refused = oloproof(p, "run", "--resume", run_id, "--trials", "2")
    assert refused.returncode == 2 and "resume it without --trials" in refused.stderr
    calls_before = Counter((p / "calls.log").read_text().split("\n")[:-1])
    done = oloproof(p, "run", "--resume", run_id, "--json", "resumed.json")
    assert done.returncode == 1, done.stderr
    resumed = json.loads((p / "resumed.json").read_text())
    for key in ("criteria", "metrics", "slices", "cases", "gate", "cases_committed", "cases_expected"):
        assert resumed[key] == expected[key], key
    assert committed_streams(p) == {trial_case_id(f"case-{i:02d}", t) for i in range(CASES) for t in (1, 2, 3)}
    calls = Counter((p / "calls.log").read_text().split("\n")[:-1])
    for stream in before:  # a trial committed before the resume was not recorded again
        case_id, trial = split_trial(stream)
        assert calls[f"{case_id} {trial}"] == calls_before[f"{case_id} {trial}"] == 1, stream
    assert set(calls) == {f"case-{i:02d} {t}" for i in range(CASES) for t in (1, 2, 3)}
    assert oloproof(p, "audit", "verify").returncode == 0


def test_resume_in_process_keeps_the_runs_trials(tmp_path):
    """A run started with trials=3 and resumed from a project that says nothing of trials."""
    from oloproof.app.project import load_project, load_system
    from oloproof.app.run import run_suite
    from oloproof.errors import UsageError
    from oloproof.report.results import results_dict
    from oloproof.store import SQLiteStore

    p = make_project(tmp_path / "p")
    project = load_project(p)
    info = project.prepare()
    system = load_system(project)
    store = SQLiteStore(p / ".oloproof" / "log.db")

    def stop(done, total):
        assert total == 3 * CASES
        if done == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(project, system, store, info, progress=stop, trials=3)
    run_id = store.projection("runs")[0]["run_id"]
    assert store.count_streams(run_id + "/") == 10
    # the run as it stands: 3 cases have all their trials, the 4th one of 3, 21 none
    from oloproof.app.evidence import evaluate_run

    partial = evaluate_run(store, run_id, project.suite)
    ph = partial.pass_hat_k["answer_correct"]
    assert not partial.complete and partial.cases_expected == 3 * CASES
    # the distribution counts the 4 cases with a trial recorded; the 21 never run are not "0 passed"
    assert (ph.cases, ph.missing, sum(ph.passing_trials)) == (3, CASES - 3, 4)
    assert ph.low <= ph.high and ph.high > 0.9  # the unrecorded trials could all pass
    assert partial.gate.decision == "FAIL"  # the severe rule failed already; the others wait
    assert {r.name: r.reason for r in partial.gate.rules}["world-every-trial"] == "run_incomplete"
    fresh = load_project(p)
    info = fresh.prepare()
    with pytest.raises(UsageError, match="resume it without --trials"):
        run_suite(fresh, load_system(fresh), store, info, resume=run_id, trials=1)
    outcome = run_suite(fresh, load_system(fresh), store, info, resume=run_id)
    assert store.count_streams(run_id + "/") == 3 * CASES
    lines = (p / "calls.log").read_text().split("\n")[:-1]
    assert len(lines) == 3 * CASES and len(set(lines)) == 3 * CASES  # no trial recorded twice
    data = results_dict(outcome.run_id, outcome.system_name, outcome.system_version, fresh.suite, outcome.summary)
    assert row(data, "answer_correct")["k"] == 3
    assert outcome.summary.source_clusters == CASES
    store.close()


def test_trials_with_metamorphic_pairs_and_replays(cli, tmp_path):
    """The stateful example: derived cases' trials pair with their source's same trial, every
    trial of a case and of its derived case is one cluster, and replays are judged per trial."""
    from tests.conftest import copy_example

    p = tmp_path / "stateful"
    copy_example("stateful_agent", p)
    single = run_json(cli, p, db=tmp_path / "single.db", expect=1)
    data = run_json(cli, p, "--trials", "2", db=tmp_path / "two.db", expect=1)
    sources = len([c for c in single["cases"] if "~" not in c["case_id"]])
    assert len(data["cases"]) == 2 * len(single["cases"])
    ids = [c["case_id"] for c in data["cases"]]
    first = ids[0].split("/")[0]
    assert f"{first}/2~injected" in ids
    assert data["transforms"][0]["pairs"] == single["transforms"][0]["pairs"] == sources
    assert data["transforms"][0]["checked"]
    for r in data["criteria"]:
        assert r["method"] == "design_effect_clopper_pearson" and 0 < r["clusters"] <= sources and r["k"] == 2
        # a deterministic agent in a sandbox reset for every trial: its trials agree
        assert r["passing_trials"][1] == 0
        one = next(x for x in single["criteria"] if x["criterion"] == r["criterion"])
        assert r["pass_hat_k"] == pytest.approx(one["rate"])  # whole cases, so the same share
        assert (r["passed"], r["observed"]) == (2 * one["passed"], 2 * one["observed"])
    for criterion in ("same_state_under_injected", "recovers_from_error_at_issue_refund"):
        verdicts = per_case(data, criterion)
        plain = {c["case_id"]: c["verdicts"][criterion]["verdict"] for c in single["cases"]}
        assert {c: v for c, v in verdicts.items()} == {c: [v, v] for c, v in plain.items()}


def test_terminal_shows_pass_hat_k_within_80_columns(tmp_path):
    from rich.console import Console

    from oloproof.app.project import load_project, load_system
    from oloproof.app.run import run_suite
    from oloproof.report.terminal import summary_view
    from oloproof.store import SQLiteStore

    p = make_project(tmp_path / "p")
    project = load_project(p)
    info = project.prepare()
    store = SQLiteStore(p / ".oloproof" / "log.db")
    outcome = run_suite(project, load_system(project), store, info, trials=3)
    store.close()
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    console.print(summary_view(outcome.summary, run_id=outcome.run_id, system="flaky-desk 1", min_support=3))
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "pass^3" in text and "answer_correct" in text
    ph = outcome.summary.pass_hat_k["answer_correct"]
    assert f"0:{ph.passing_trials[0]} 1:{ph.passing_trials[1]}" in text


def test_a_case_with_a_failing_trial_is_never_left_out():
    """A failure beside excluded trials counts 0: skipping the question on the other trials
    cannot hide it (found by attacking the first version)."""
    from oloproof.stats.passk import pass_hat_k_summary

    # 20 cases passed all 3 trials; 20 failed trial 1 and were excluded on trials 2 and 3
    s = pass_hat_k_summary({(3, 3, 0): 20, (0, 1, 0): 20}, 3)
    assert s.value == 0.5 and s.cases == 40 and s.short == 0
    assert s.low < 0.5 < s.high
    # without a failure, such a case cannot be estimated: left out, and said so
    s = pass_hat_k_summary({(3, 3, 0): 20, (1, 1, 0): 20}, 3)
    assert s.value == 1.0 and s.short == 20


def test_replays_of_a_trial_meet_the_case_as_the_recording_did(cli, tmp_path):
    """Under trials, a control replay gives the agent the case's own id and the trial it
    replays (found by attacking the first version: the replay saw 'c/1' and no trial, and half
    the controls came out unfaithful)."""
    import json

    from tests.conftest import copy_example

    p = tmp_path / "flaky"
    copy_example("release_gate/flaky", p)
    cfg = p / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("  - {type: release_class}",
                                           "  - {type: release_class}\n"
                                           "  - {type: fault_recovery, tool: charge, fault: error}"))
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code in (0, 1), r.output
    data = json.loads((p / "r.json").read_text())
    reasons = [c["verdicts"]["recovers_from_error_at_charge"].get("reason") for c in data["cases"]]
    assert "replay_not_faithful" not in reasons and len(reasons) == 100


def test_pass_hat_k_of_metamorphic_pairs_is_cluster_aware(cli, tmp_path):
    import json

    from tests.conftest import copy_example

    p = tmp_path / "desk"
    copy_example("stateful_agent", p)
    cli("run", "--trials", "2", "--json", "r.json", cwd=p)
    data = json.loads((p / "r.json").read_text())
    row = next(r for r in data["criteria"] if r["criterion"] == "other_order_untouched")
    assert row["pass_hat_k_method"] == "design_effect_clopper_pearson"  # sources and derived cases: clusters
