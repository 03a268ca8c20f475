"""Bad configuration: located errors, exit code 2, nothing written to the log."""

import pytest

from oloproof.app.project import load_project, load_system
from oloproof.errors import ConfigError
from tests.conftest import write

GOOD = """\
system:
  name: s
  version: v1
  callable: app:run
  records: [agent_trajectory/v1]
cases: cases.jsonl
evaluators:
  - {type: agent_max_steps, max_steps: 3}
release: release.yaml
"""


def project(tmp_path, config=GOOD, release="rules: []\n"):
    write(tmp_path / "oloproof.yaml", config)
    write(tmp_path / "release.yaml", release)
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}}\n')
    write(tmp_path / "app.py", "def run(case):\n    return {}\n")
    return tmp_path


def error_of(tmp_path, **kw):
    with pytest.raises(ConfigError) as e:
        load_project(project(tmp_path, **kw))
    return str(e.value)


def test_good_config_loads(tmp_path):
    p = load_project(project(tmp_path))
    assert p.suite.criteria == ["agent_steps_le_3"]


def test_unknown_top_level_key_did_you_mean(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace("evaluators:", "evaluater:"))
    assert "oloproof.yaml:7" in msg and "unknown key 'evaluater'" in msg and "did you mean 'evaluators'" in msg


def test_unknown_system_key(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace("  records:", "  recrods:"))
    assert "oloproof.yaml:5" in msg and "did you mean 'records'" in msg


def test_unknown_evaluator_type(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace("agent_max_steps", "agent_max_step"))
    assert "oloproof.yaml:8" in msg and "did you mean 'agent_max_steps'" in msg


def test_evaluator_option_errors_are_located(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace("max_steps: 3", "max_steps: ten"))
    assert "oloproof.yaml:8" in msg and "evaluators[0].max_steps" in msg and "'ten'" in msg
    msg = error_of(tmp_path, config=GOOD.replace("max_steps: 3", "max_steps: 3, max_step: 4"))
    assert "unknown key 'max_step'" in msg and "did you mean 'max_steps'" in msg


def test_trajectory_evaluators_need_records(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace("  records: [agent_trajectory/v1]\n", ""))
    assert "oloproof.yaml:7" in msg and "needs the system to record agent_trajectory/v1" in msg


def test_duplicate_criterion(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace(
        "  - {type: agent_max_steps, max_steps: 3}", "  - {type: agent_max_steps, max_steps: 3}\n"
        "  - {type: agent_max_steps, max_steps: 3}"))
    assert "already produced by evaluators[0]" in msg


def test_invalid_yaml_names_the_line(tmp_path):
    msg = error_of(tmp_path, config=GOOD.replace("cases: cases.jsonl", "cases: [unclosed"))
    assert "oloproof.yaml:" in msg and "invalid YAML" in msg


def test_release_rule_unknown_criterion(tmp_path):
    msg = error_of(tmp_path, release="rules:\n  - {name: r, criterion: agent_steps_le_30, max_failures: 0}\n")
    assert "release.yaml:2" in msg and "did you mean 'agent_steps_le_3'" in msg


def test_release_rule_needs_exactly_one_kind(tmp_path):
    msg = error_of(tmp_path, release="rules:\n  - {name: r, criterion: agent_steps_le_3, "
                                     "max_failures: 0, min_rate: 0.5}\n")
    assert "release.yaml:2" in msg and "exactly one of" in msg


def test_release_threshold_range(tmp_path):
    msg = error_of(tmp_path, release="rules:\n  - {name: r, criterion: agent_steps_le_3, min_lower_bound: 1.5}\n")
    assert "release.yaml:2" in msg and "min_lower_bound" in msg


def test_bad_slice_and_metric(tmp_path):
    msg = error_of(tmp_path, config=GOOD + "slices: [first_tol]\n")
    assert "slices[0]" in msg and "unknown slice 'first_tol'" in msg
    msg = error_of(tmp_path, config=GOOD + "slices: ['trajectory_length:8,4']\n")
    assert "increasing" in msg
    msg = error_of(tmp_path, config=GOOD + "metrics:\n  - {id: p, type: quantile, source: agent_steps, quantile: 2}\n")
    assert "oloproof.yaml:11" in msg and "quantile" in msg


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no oloproof.yaml"):
        load_project(tmp_path)


def test_system_decorator_must_agree(tmp_path):
    p = project(tmp_path)
    write(p / "app.py", "from oloproof import system\n"
                        "@system(name='s', version='v2', records=('agent_trajectory/v1',))\n"
                        "def run(case):\n    return {}\n")
    with pytest.raises(ConfigError) as e:
        load_system(load_project(p))
    assert "system.version is 'v1'" in str(e.value) and "'v2'" in str(e.value)


def test_system_import_errors(tmp_path):
    p = project(tmp_path, config=GOOD.replace("app:run", "nope:run"))
    with pytest.raises(ConfigError, match="cannot import module 'nope'"):
        load_system(load_project(p))
    p = project(tmp_path, config=GOOD.replace("app:run", "app:missing"))
    with pytest.raises(ConfigError, match="has no attribute 'missing'"):
        load_system(load_project(p))
