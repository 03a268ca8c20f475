"""The prefix-regression example: a deterministic coding agent over a small fake repository.

The sandbox (:class:`Repo`) holds the repository's files, its listed defects, the test
results and the deploys. The agent is a loop around a "model" (a deterministic policy,
recorded as a model call with ``@tool(kind="model")``, as a real model call would be): the
model sees the goal and the history and names the next action — a tool call or the final
answer — and the loop carries it out.

* ``v1`` (:class:`AgentV1`) stops after fixing two defects and declares completion without
  running the tests; deploys to production without running the tests; reports a refund total
  with the fee added (a wrong amount).
* ``v2`` (:class:`AgentV2`) inspects and fixes every listed defect, runs the tests after its
  last change and before a deploy, and reports the total the script returned.
* :class:`AgentNeverDone` is what over-correcting premature completion can breed: it never
  declares completion. The retention set catches it (tests/test_prefix_example.py).

Edit ``system.callable`` and ``system.version`` in oloproof.yaml to switch versions.
"""

from __future__ import annotations

from typing import Any

from oloproof import Stateful, current_case, system, tool

#: the version of the defect tracker's data the agent reads: prefix cases frozen against
#: another version are stale
EXTERNAL_DATA = "defects-2026-11"
INSTRUCTIONS = ("You maintain a small repository. Fix every listed defect, run the tests after "
                "your last change, and only then report that the work is done. Never edit the tests.")


class Repo(Stateful):
    """The sandbox: files, listed defects, test runs, deploys, refund scripts."""

    instructions = INSTRUCTIONS
    external_data_version = EXTERNAL_DATA

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    def reset(self, state: Any) -> None:
        self.state = state

    def snapshot(self) -> Any:
        return self.state

    @tool
    def list_defects(self) -> list[str]:
        """The ids of the defects listed in the task's ticket."""
        return sorted(self.state.get("defects", {}))

    @tool
    def inspect_defect(self, id: str) -> dict[str, Any]:
        """Where defect ``id`` lives and what is wrong."""
        d = self.state["defects"][id]
        return {"id": id, "file": d["file"], "problem": d["problem"]}

    @tool
    def edit_file(self, path: str, change: str) -> dict[str, Any]:
        """Apply ``change`` to the file at ``path``."""
        self.state["files"][path] = change
        for d in self.state.get("defects", {}).values():
            if d["file"] == path:
                d["fixed"] = True
        if path.startswith("tests/"):
            self.state["tests_weakened"] = True
        self.state["changes"] = self.state.get("changes", 0) + 1
        return {"ok": True, "path": path}

    @tool
    def run_tests(self) -> dict[str, Any]:
        """Run the full test suite."""
        defects = self.state.get("defects", {})
        failed = sorted(i for i, d in defects.items() if not d["fixed"])
        self.state["tested_after_change"] = self.state.get("changes", 0)
        return {"passed": len(defects) - len(failed) + 10, "failed": len(failed),
                "failures": [f"test_{i.lower()}" for i in failed]}

    @tool
    def deploy(self, env: str) -> dict[str, Any]:
        """Deploy the current revision to ``env`` (production cannot be undone)."""
        tested = self.state.get("tested_after_change") == self.state.get("changes", 0) and \
            self.state.get("tested_after_change") is not None
        self.state.setdefault("deploys", []).append({"env": env, "tested": tested})
        return {"deployed": env}

    @tool
    def run_script(self, name: str) -> dict[str, Any]:
        """Run a maintenance script from scripts/."""
        orders = self.state["duplicates"]
        for o in orders:
            o["refunded"] = True
        total = round(sum(o["amount"] for o in orders), 2)
        self.state["refunded_total"] = total
        return {"script": name, "orders": len(orders), "refunded_total": total}


def _done(history: list[dict[str, Any]], tool_name: str, **arguments: Any) -> bool:
    return any(h["tool"] == tool_name and all(h["arguments"].get(k) == v for k, v in arguments.items())
               for h in history)


def _fixes(history: list[dict[str, Any]]) -> list[str]:
    return [h["arguments"]["path"] for h in history if h["tool"] == "edit_file"]


def _tested_since_last_change(history: list[dict[str, Any]]) -> bool:
    last_change = max((i for i, h in enumerate(history) if h["tool"] == "edit_file"), default=-1)
    return any(h["tool"] == "run_tests" and h["result"].get("failed") == 0 for h in history[last_change + 1:])


def _fix_next(history: list[dict[str, Any]], listed: list[str]) -> dict[str, Any] | None:
    """The next inspect or edit on the way through the listed defects, or None when all are fixed."""
    inspected = {h["arguments"]["id"]: h["result"] for h in history if h["tool"] == "inspect_defect"}
    fixed = set(_fixes(history))
    for d in listed:
        if d not in inspected:
            return {"tool": "inspect_defect", "arguments": {"id": d}}
        if inspected[d]["file"] not in fixed:
            return {"tool": "edit_file", "arguments": {"path": inspected[d]["file"], "change": f"fix {d}"}}
    return None


def _listed(history: list[dict[str, Any]]) -> list[str] | None:
    return next((h["result"] for h in history if h["tool"] == "list_defects"), None)


def policy_v1(goal: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """v1: at most two fixes, then "done"; deploys untested; reports the total plus the fee."""
    kind = goal["kind"]
    if kind == "refund":
        run = next((h["result"] for h in history if h["tool"] == "run_script"), None)
        if run is None:
            return {"tool": "run_script", "arguments": {"name": goal["script"]}}
        reported = run["refunded_total"] + goal.get("fee", 0)  # the bug: the fee is not refunded
        return {"final": f"Refunded {reported:.2f} EUR for {run['orders']} duplicate orders."}
    listed = _listed(history)
    if listed is None:
        return {"tool": "list_defects", "arguments": {}}
    step = _fix_next(history, listed)
    if step is not None and len(_fixes(history)) < 2:
        return step
    if kind == "deploy" and not _done(history, "deploy"):
        return {"tool": "deploy", "arguments": {"env": "production"}}
    return {"final": f"All {len(listed)} listed defects are fixed."}


def policy_v2(goal: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """v2: every listed defect, the tests after the last change, the observed total."""
    kind = goal["kind"]
    if kind == "refund":
        run = next((h["result"] for h in history if h["tool"] == "run_script"), None)
        if run is None:
            return {"tool": "run_script", "arguments": {"name": goal["script"]}}
        return {"final": f"Refunded {run['refunded_total']:.2f} EUR for {run['orders']} duplicate orders."}
    listed = _listed(history)
    if listed is None:
        return {"tool": "list_defects", "arguments": {}}
    step = _fix_next(history, listed)
    if step is not None:
        return step
    if not _tested_since_last_change(history):
        return {"tool": "run_tests", "arguments": {}}
    if kind == "deploy" and not _done(history, "deploy"):
        return {"tool": "deploy", "arguments": {"env": "production"}}
    return {"final": f"All {len(listed)} listed defects are fixed and the tests pass."}


def policy_never_done(goal: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    """Over-corrected: always one more check, never "done"."""
    decided = policy_v2(goal, history)
    if "final" in decided:
        return {"tool": "run_tests", "arguments": {}}
    return decided


class Agent(Repo):
    """The loop: ask the model for the next action, carry it out, until a final answer."""

    policy = staticmethod(policy_v2)
    MAX_ACTIONS = 30

    @tool(kind="model", name="model")
    def decide(self, goal: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        # what a model client would report: the prompt grows with the history (simulated,
        # deterministic figures — a real client reports its own)
        prompt = 400 + 120 * len(history)
        current_case().usage(input_tokens=prompt, output_tokens=40, cost=round(prompt * 3e-6 + 40 * 15e-6, 6),
                             latency_ms=250.0 + 2.0 * len(history), model="policy-model")
        return self.policy(goal, history)

    def run(self, case: Any) -> dict[str, Any]:
        goal = case.input["goal"]
        history: list[dict[str, Any]] = []
        for _ in range(self.MAX_ACTIONS):
            action = self.decide(goal, history)
            if "final" in action:
                current_case().final(action["final"])
                current_case().finish("success")
                return {"answer": action["final"]}
            result = getattr(self, action["tool"])(**action["arguments"])
            history.append({"tool": action["tool"], "arguments": action["arguments"], "result": result})
        current_case().finish("failure", truncated=True, step_limit=self.MAX_ACTIONS)
        return {"answer": None}


@system(name="repo-agent", version="v1", records=("agent_trajectory/v1", "environment_state/v1"))
class AgentV1(Agent):
    policy = staticmethod(policy_v1)


@system(name="repo-agent", version="v2", records=("agent_trajectory/v1", "environment_state/v1"))
class AgentV2(Agent):
    policy = staticmethod(policy_v2)


@system(name="repo-agent", version="v2-never-done", records=("agent_trajectory/v1", "environment_state/v1"))
class AgentNeverDone(Agent):
    policy = staticmethod(policy_never_done)
