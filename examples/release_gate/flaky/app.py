"""The release gate's flaky variant: the same desk, an agent whose delivery step fails now and
then (a deterministic stand-in for a stochastic model: it fails some trials of some cases).

Run with ``trials: 5``: the plain rate averages the trials, pass^5 asks that a case pass in all
five — the number a user who retries nothing actually gets. A severe failure is never averaged
away: ``max_failures`` counts failing trials.
"""

import hashlib

from oloproof import Stateful, current_case, system, tool


def flaky(case_id, trial):
    """About one trial in four fails, always the same ones (so every run agrees)."""
    return hashlib.sha256(f"{case_id}/{trial}".encode()).digest()[0] % 4 == 0


@system(name="release-gate-flaky", version="1.0",
        records=("agent_trajectory/v1", "environment_state/v1", "effect_ledger/v1", "release_evidence/v1"))
class FlakyDesk(Stateful):
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def charge(self, order_id, amount, idempotency_key):
        ledger = self.state.setdefault("payments", [])
        applied = not any(p["key"] == idempotency_key for p in ledger)
        if applied:
            ledger.append({"order_id": order_id, "amount": amount, "key": idempotency_key})
        current_case().effect("charge", idempotency_key=idempotency_key, applied=applied)
        return {"charged": order_id}

    @tool
    def write_report(self, name, body):
        self.state.setdefault("outbox", {})[name] = body
        return {"written": name}

    def __call__(self, case):
        rec = current_case()
        order_id = case.input["order_id"]
        self.charge(order_id=order_id, amount=case.input["amount"], idempotency_key=f"{order_id}-1")
        if not flaky(case.id, rec.trial or 1):  # the flaky step: sometimes the report is never written
            self.write_report(name="report", body={"order_id": order_id, "sources": ["ledger"]})
        rec.finish("success")  # it says it is done either way
        report = self.state.get("outbox", {}).get("report")
        rec.deliverable("report", exists=report is not None,
                        contract_ok=None if report is None else report["order_id"] == order_id)
        return {"answer": "done"}
