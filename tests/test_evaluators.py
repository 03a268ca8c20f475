"""Every evaluator: pass, fail, missing, excluded and the truncated-prefix rule."""

import pytest

from oloproof.evaluate.registry import registry
from tests.helpers import calls, view


def make(type_name, **cfg):
    cls = registry()[type_name]
    return cls(cls.config_model.model_validate({"type": type_name, **cfg}))


def verdict(ev, v):
    return ev.evaluate(v)


# ---- shared rules --------------------------------------------------------------------------

@pytest.mark.parametrize("type_name,cfg", [
    ("agent_tool_called", {"tool_name": "t"}), ("agent_no_tool_loop", {}),
    ("agent_tool_sequence", {}), ("agent_no_undeclared_tool", {}),
    ("agent_constraints_satisfied", {"constraints": ["c"]}), ("agent_max_steps", {"max_steps": 3}),
])
def test_trajectory_evaluators_missing_without_trajectory_or_on_error(type_name, cfg):
    ev = make(type_name, **cfg)
    assert verdict(ev, view(None, expected={"tools": ["t"]})) == ("missing", "no_trajectory_recorded")
    assert verdict(ev, view(calls("t"), expected={"tools": ["t"]}, error="boom")) == ("missing", "system_error")


# ---- contains ------------------------------------------------------------------------------

def test_contains():
    ev = make("contains", criterion="answer_correct", field="answer", expected_field="answer")
    assert ev.criterion == "answer_correct"
    assert verdict(ev, view(output={"answer": "refunded now"}, expected={"answer": "refunded"}))[0] == "pass"
    assert verdict(ev, view(output={"answer": "denied"}, expected={"answer": "refunded"}))[0] == "fail"
    assert verdict(ev, view(output={"other": 1}, expected={"answer": "refunded"}))[0] == "fail"
    assert verdict(ev, view(output={"answer": ["a", "b"]}, expected={"answer": "b"}))[0] == "pass"
    assert verdict(ev, view(output={"answer": "x"}, expected={})) == ("excluded", "no_expected_value")
    assert verdict(ev, view(error="Boom", expected={"answer": "x"})) == ("missing", "system_error")


def test_contains_requires_criterion():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        make("contains", field="a", expected_field="a")


# ---- agent_tool_called ---------------------------------------------------------------------

def test_tool_called():
    ev = make("agent_tool_called", tool_name="lookup", min_calls=2)
    assert ev.criterion == "agent_tool_lookup_called"
    assert verdict(ev, view(calls("lookup", "x", ("lookup", {"a": 1}))))[0] == "pass"
    assert verdict(ev, view(calls("lookup")))[0] == "fail"
    # truncated: the calls may be in the part that was not recorded
    assert verdict(ev, view(calls("lookup", truncated=True))) == ("missing", "truncated")
    assert verdict(ev, view(calls("lookup", "lookup", truncated=True)))[0] == "pass"


# ---- agent_no_tool_loop --------------------------------------------------------------------

def test_no_tool_loop():
    ev = make("agent_no_tool_loop", max_repeats=2)
    same = ("search", {"q": "x"})
    assert verdict(ev, view(calls(same, same, "lookup", same)))[0] == "pass"
    assert verdict(ev, view(calls(same, same, same)))[0] == "fail"
    # different arguments are different calls
    assert verdict(ev, view(calls(same, same, ("search", {"q": "y"}))))[0] == "pass"
    # truncated: a loop already in the prefix fails; otherwise it may go on beyond the end
    assert verdict(ev, view(calls(same, same, same, truncated=True)))[0] == "fail"
    assert verdict(ev, view(calls(same, same, truncated=True))) == ("missing", "truncated")
    assert verdict(ev, view(calls("a", "b", truncated=True))) == ("missing", "truncated")


# ---- agent_tool_sequence -------------------------------------------------------------------

def test_tool_sequence_ordered():
    ev = make("agent_tool_sequence")
    exp = {"tools": ["lookup", "refund"]}
    assert verdict(ev, view(calls("lookup", "refund"), expected=exp))[0] == "pass"
    assert verdict(ev, view(calls("refund", "lookup"), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls("lookup"), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls(), expected={"tools": []}))[0] == "pass"
    assert verdict(ev, view(calls("lookup"), expected={"tools": []}))[0] == "fail"
    assert verdict(ev, view(calls("lookup"), expected={})) == ("excluded", "no_declared_tools")
    # truncated: fails once no continuation can match, else missing
    assert verdict(ev, view(calls("search", truncated=True), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls("lookup", truncated=True), expected=exp)) == ("missing", "truncated")
    assert verdict(ev, view(calls("lookup", "refund", truncated=True), expected=exp)) == ("missing", "truncated")


def test_tool_sequence_unordered():
    ev = make("agent_tool_sequence", ordered=False)
    exp = {"tools": ["lookup", "refund"]}
    assert verdict(ev, view(calls("refund", "lookup"), expected=exp))[0] == "pass"
    assert verdict(ev, view(calls("refund", "lookup", "lookup"), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls("lookup", "lookup", truncated=True), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls("refund", truncated=True), expected=exp)) == ("missing", "truncated")


# ---- agent_no_undeclared_tool --------------------------------------------------------------

def test_no_undeclared_tool():
    ev = make("agent_no_undeclared_tool")
    exp = {"tools": ["lookup", "refund"]}
    assert verdict(ev, view(calls("refund", "lookup", "lookup"), expected=exp))[0] == "pass"
    assert verdict(ev, view(calls("lookup", "delete"), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls("lookup"), expected={})) == ("excluded", "no_declared_tools")
    assert verdict(ev, view(calls("delete", truncated=True), expected=exp))[0] == "fail"
    assert verdict(ev, view(calls("lookup", truncated=True), expected=exp)) == ("missing", "truncated")


# ---- agent_constraints_satisfied -----------------------------------------------------------

def test_constraints_satisfied():
    ev = make("agent_constraints_satisfied", constraints=["no_deletion"])
    ok = (("no_deletion", True, 2),)
    bad = (("no_deletion", False, 1),)
    assert verdict(ev, view(calls("a", constraints=ok)))[0] == "pass"
    assert verdict(ev, view(calls("a", constraints=bad)))[0] == "fail"
    assert verdict(ev, view(calls("a", constraints=(("other", False, 1),)))) == \
        ("missing", "constraint_not_recorded")
    # truncated: a recorded failure decides it; all-passed so far does not
    assert verdict(ev, view(calls("a", constraints=bad, truncated=True)))[0] == "fail"
    assert verdict(ev, view(calls("a", constraints=ok, truncated=True))) == ("missing", "truncated")


# ---- agent_max_steps -----------------------------------------------------------------------

def test_max_steps():
    ev = make("agent_max_steps", max_steps=4)
    assert ev.criterion == "agent_steps_le_4"
    assert verdict(ev, view(calls("a", "b")))[0] == "pass"
    assert verdict(ev, view(calls("a", "b", "c")))[0] == "fail"
    assert verdict(ev, view(calls("a", "b", "c", truncated=True)))[0] == "fail"
    assert verdict(ev, view(calls("a", truncated=True))) == ("missing", "truncated")


def test_registry_has_every_family():
    assert {"contains", "agent_tool_called", "agent_no_tool_loop", "agent_tool_sequence",
            "agent_no_undeclared_tool", "agent_constraints_satisfied", "agent_max_steps"} <= set(registry())


def test_third_party_evaluators_load_from_entry_points(tmp_path, monkeypatch):
    import importlib.metadata
    import sys

    from oloproof.config.locate import Locator
    from oloproof.config.models import ProjectConfig
    from oloproof.evaluate.base import REGISTRY
    from oloproof.evaluate.engine import build_suite

    (tmp_path / "myplugin.py").write_text(
        "from oloproof.evaluate import Evaluator, evaluator\n"
        "from oloproof.evaluate.base import PASS\n"
        "@evaluator('always_pass')\n"
        "class AlwaysPass(Evaluator):\n"
        "    def default_criterion(self):\n        return 'always'\n"
        "    def judge(self, case):\n        return PASS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint(name="always_pass", value="myplugin", group="oloproof.evaluators")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [ep] if group == "oloproof.evaluators" else [])
    config = ProjectConfig.model_validate({"system": {"name": "s", "version": "1", "callable": "a:b"},
                                           "evaluators": [{"type": "always_pass"}]})
    try:
        suite = build_suite(config, Locator("oloproof.yaml"))
        assert suite.criteria == ["always"]
    finally:
        REGISTRY.pop("always_pass", None)
        sys.modules.pop("myplugin", None)
