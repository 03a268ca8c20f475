"""Evaluator plugins (issue 24, SPEC §18.3): third-party families from the
``oloproof.evaluators`` entry-point group, loaded lazily; a plugin that fails to load is a
warning naming it, never a crash of a configuration that does not use it."""

from __future__ import annotations

import importlib.metadata
import json
import sys

import pytest

from tests.conftest import write

PLUGIN = '''\
import oloproof
from oloproof.evaluate.base import PASS, Evaluator, EvaluatorConfig, fail


class Config(EvaluatorConfig):
    word: str


@oloproof.evaluator("says_word", config=Config)  # the public registration
class SaysWord(Evaluator):
    def default_criterion(self):
        return "says_word"

    def judge(self, case):
        return PASS if self.config.word in str(case.output) else fail("word_missing")
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Entry points of the group as an installed distribution would declare them."""
    lib = tmp_path / "lib"
    write(lib / "good_plugin.py", PLUGIN)
    write(lib / "broken_plugin.py", "raise RuntimeError('this plugin is broken at import')\n")
    monkeypatch.syspath_prepend(str(lib))
    eps = [importlib.metadata.EntryPoint("says_word", "good_plugin", "oloproof.evaluators"),
           importlib.metadata.EntryPoint("broken", "broken_plugin", "oloproof.evaluators")]
    real = importlib.metadata.entry_points
    loaded: list[str] = []

    def entry_points(**kw):
        if kw.get("group") == "oloproof.evaluators":
            loaded.append("looked")
            return eps
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    yield loaded
    for name in ("good_plugin", "broken_plugin"):
        sys.modules.pop(name, None)


def project(tmp_path, evaluator):
    p = tmp_path / "p"
    write(p / "app.py", "from oloproof import system\n\n@system(name='x', version='1')\ndef run(case):\n"
                        "    return {'a': 'hello world'}\n")
    write(p / "oloproof.yaml", "system:\n  name: x\n  version: '1'\n  callable: app:run\ncases: cases.jsonl\n"
                               f"evaluators:\n  - {evaluator}\n")
    write(p / "cases.jsonl", '{"id": "c1", "input": {}, "expected": {"a": "hello"}}\n')
    return p


def test_a_plugin_family_runs_and_a_broken_one_only_warns(cli, tmp_path, plugins):
    p = project(tmp_path, "{type: says_word, word: world}")
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    assert "broken" in r.output and "could not be loaded" in r.output  # a warning that names it
    case = json.loads((p / "r.json").read_text())["cases"][0]
    assert case["verdicts"]["says_word"]["verdict"] == "pass"


def test_plugins_are_loaded_only_for_a_type_no_built_in_family_has(cli, tmp_path, plugins):
    p = project(tmp_path, "{type: contains, criterion: ok, field: a, expected_field: a}")
    r = cli("run", cwd=p)
    assert r.exit_code == 0, r.output
    assert plugins == [] and "could not be loaded" not in r.output


def test_an_unknown_type_beside_a_broken_plugin_is_exit_2_not_3(cli, tmp_path, plugins):
    p = project(tmp_path, "{type: no_such_family}")
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and "unknown evaluator type 'no_such_family'" in r.output, r.output
    assert "bug in Oloproof" not in r.output
