"""``oloproof export``: a run's records as JSON lines another tool can read.

Each case gives an ``agent_trajectory/v1`` line (when it recorded a trajectory) and an
``environment_state/v1`` line (when it recorded a state); each line carries the run, the case
and the case's verdicts under the run's own configuration::

    {"record": "agent_trajectory/v1", "run_id": ..., "case_id": ..., "verdicts": {...},
     "data": {"steps": [...], "terminal_status": ..., "truncated": ..., "step_limit": ...,
              "constraints": [...], "checkpoints": [...]}}
"""

from __future__ import annotations

from typing import Any, Iterator

import msgspec

from oloproof.evaluate.view import NO_STATE
from oloproof.events import canonical_json


def export_lines(store: Any, run_id: str) -> Iterator[str]:
    from oloproof.history import PairSources, iter_case_views, load_run, replay_service
    from oloproof.project import suite_from_stored

    stored = load_run(store, run_id)
    suite = suite_from_stored(stored.started.config)
    service = replay_service(store, stored)
    pairs = PairSources(store, run_id)
    for view in sorted(iter_case_views(store, run_id), key=lambda v: v.position):
        if suite.fault_specs:
            service.attach(f"{run_id}/{view.case_id}", view, suite.fault_specs)
        result = suite.evaluate_case(pairs.attach(view))
        verdicts = {c: {"verdict": v[0], **({"reason": v[1]} if v[1] else {})}
                    for c, v in zip(suite.criteria, result.verdicts)}
        head = {"run_id": run_id, "case_id": view.case_id, "verdicts": verdicts}
        t = view.trajectory
        if t is not None:
            data = {"steps": [msgspec.to_builtins(s) for s in t.steps], "terminal_status": t.terminal_status,
                    "truncated": t.truncated, "step_limit": t.step_limit,
                    "constraints": [msgspec.to_builtins(c) for c in t.constraints],
                    "checkpoints": [msgspec.to_builtins(c) for c in t.checkpoints]}
            for step in data["steps"]:
                step.pop("type", None)
            for item in data["constraints"] + data["checkpoints"]:
                item.pop("type", None)
            yield canonical_json({"record": "agent_trajectory/v1", **head, "data": data}).decode()
        if view.state is not NO_STATE:
            yield canonical_json({"record": "environment_state/v1", **head, "data": {"state": view.state}}).decode()
        if t is None and view.state is NO_STATE:
            yield canonical_json({"record": "case/v1", **head, "data": {"output": view.output,
                                                                         "error": view.error}}).decode()
