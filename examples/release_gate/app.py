"""The fault-injection release gate of the guide (seeds/fault-injection-release-gate): eight
trials, one controlled fault each, and the environment judged apart from the transcript.

The agent charges an order and delivers the monthly report. The sandbox holds fake payment
and messaging adapters: the payment adapter keeps an effect ledger (every attempt, its
idempotency key, whether it applied), the outbox holds the deliverable. Faults come through
the adapters, never through the prompt:

* declared per case (``"fault"`` in cases.jsonl): the @tool wrapper times the payment out
  *after* it applied (the dangerous ambiguity), or denies the report's write permission;
* conditions that live in the world, through the case's ``initial_state``: an approval that a
  person must give (routed, or not), a restart that drops the approved amount, a deadline
  already spent, an outbox that silently loses what is written.

The agent is deterministic, with one intended defect per trial version (``input.retry``): on a
payment timeout it retries with a NEW idempotency key, which charges twice.
"""

from oloproof import Stateful, current_case, system, tool

REPORT = "monthly-report"


@system(name="release-gate-agent", version="1.0",
        records=("agent_trajectory/v1", "environment_state/v1", "effect_ledger/v1", "release_evidence/v1"))
class Desk(Stateful):
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    # ---- the adapters (what the sandbox records is the environment's evidence) ----------

    @tool
    def charge(self, order_id, amount, idempotency_key):
        """A fake payment adapter: one effect per idempotency key."""
        ledger = self.state.setdefault("payments", [])
        applied = not any(p["key"] == idempotency_key for p in ledger)
        if applied:
            ledger.append({"order_id": order_id, "amount": amount, "key": idempotency_key})
        current_case().effect("charge", idempotency_key=idempotency_key, applied=applied)
        return {"charged": order_id, "amount": amount}

    @tool
    def request_approval(self, order_id, amount):
        """Asks a person; the routing in the world decides whether anyone will answer."""
        routing = self.state.get("approval", {})
        return {"owner": routing.get("owner"), "deadline": routing.get("deadline"),
                "resume_token": f"resume-{order_id}" if routing.get("owner") else None}

    @tool
    def recall(self, key):
        """The agent's persisted decisions; a restart in the world may have dropped some."""
        return {"value": self.state.get("memory", {}).get(key)}

    @tool
    def write_report(self, name, body):
        """A fake messaging adapter: the outbox is the deliverable's home."""
        if not self.state.get("outbox_broken"):
            self.state.setdefault("outbox", {})[name] = body
        return {"written": name}

    # ---- the agent ------------------------------------------------------------------------

    def __call__(self, case):
        rec = current_case()
        order_id, amount = case.input["order_id"], case.input["amount"]
        answer = self.work(rec, case, order_id, amount)
        self.check(rec, order_id)  # the harness: the environment, not the transcript
        return {"answer": answer}

    def work(self, rec, case, order_id, amount):
        if self.state.get("approval", {}).get("required"):
            routed = self.request_approval(order_id=order_id, amount=amount)
            rec.wait(owner=routed["owner"], deadline=routed["deadline"], resume_token=routed["resume_token"])
            rec.finish("unknown")
            return "waiting for approval"
        if "memory" in self.state:
            decided = self.recall(key="approved_amount")["value"]
            rec.continuity(expected=f"approved_amount={amount}", observed=f"approved_amount={decided}")
            if decided != amount:
                rec.finish("failure")
                return "lost the approved amount after a restart"
        key = f"{order_id}-attempt-1"
        result = self.charge(order_id=order_id, amount=amount, idempotency_key=key)
        if "error" in result:  # a timeout: did the charge happen? the agent retries
            key = key if case.input.get("retry") == "same_key" else f"{order_id}-attempt-2"
            self.charge(order_id=order_id, amount=amount, idempotency_key=key)
        body = {"order_id": order_id, "total": amount, "sources": ["ledger"]}
        written = self.write_report(name=REPORT, body=body)
        if "error" in written:
            if written["error"].get("type") == "PermissionDenied":
                rec.access("write_report", allowed=False, required_scope=written["error"].get("required_scope"))
            rec.finish("failure")
            return "could not deliver the report"
        late = self.state.get("clock", {}).get("late")
        rec.finish("failure" if late else "success")
        return "out of time" if late else "done: charged and reported"

    def check(self, rec, order_id):
        """What the harness observes after the agent stopped: the deadline, the deliverable."""
        clock = self.state.get("clock", {})
        if "deadline" in clock:
            rec.deadline(at=clock["deadline"], finished_at=clock["now"])
        if self.state.get("approval", {}).get("required"):
            return  # waiting work is not due yet
        report = self.state.get("outbox", {}).get(REPORT)
        rec.deliverable(REPORT, exists=report is not None,
                        contract_ok=None if report is None else
                        (report.get("order_id") == order_id and bool(report.get("sources"))))
