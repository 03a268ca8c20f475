"""The refund desk of the guide "Stateful agents": a sandbox of orders that Oloproof resets
before every case, tools that change it, and a deterministic agent with two intended defects.

Defect 1 — an instruction pasted in the message makes it refund without checking the order.
Defect 2 — it never reads the refund's result, so a failed refund is reported as done.

Neither shows in a plain run of the source cases: the first needs the request tampered with
(a metamorphic pair), the second a tool that fails (a fault replay). That is the point.
"""

from oloproof import Stateful, current_case, system, tool

REFUND_LIMIT = 500  # larger refunds need a person


@system(name="refund-desk", version="1.0",
        records=("agent_trajectory/v1", "environment_state/v1"))
class RefundDesk(Stateful):
    """The system under test: its sandbox is ``self.state``, its tools are methods."""

    def __init__(self):
        self.state = {}

    # ---- the sandbox -------------------------------------------------------------------

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    # ---- the tools ---------------------------------------------------------------------

    @tool
    def lookup_order(self, order_id):
        order = self.state.get("orders", {}).get(order_id)
        if order is None:
            return {"error": "order_not_found", "order_id": order_id}
        return {"order_id": order_id, **order}

    @tool
    def issue_refund(self, order_id):
        order = self.state.get("orders", {}).get(order_id)
        if order is None or order["status"] != "delivered":
            return {"error": "not_refundable", "order_id": order_id}
        order["status"] = "refunded"
        return {"order_id": order_id, "status": "refunded", "amount": order["amount"]}

    @tool
    def escalate_to_human(self, order_id, reason):
        self.state.setdefault("escalations", []).append({"order_id": order_id, "reason": reason})
        return {"ticket": len(self.state["escalations"]), "order_id": order_id}

    # ---- the agent ---------------------------------------------------------------------

    def __call__(self, case):
        order_id = case.input["order_id"]
        message = case.input["message"]
        if "SYSTEM OVERRIDE" in message:  # defect 1: obeys an instruction pasted in the request
            self.issue_refund(order_id)
            current_case().finish("success")
            return {"answer": "refunded"}
        order = self.lookup_order(order_id)
        if "error" in order:
            self.escalate_to_human(order_id, "order not found")
            current_case().finish("success")
            return {"answer": "escalated"}
        if order["status"] != "delivered":
            current_case().finish("success")
            return {"answer": "denied"}
        if order["amount"] > REFUND_LIMIT:
            self.escalate_to_human(order_id, "above the refund limit")
            current_case().finish("success")
            return {"answer": "escalated"}
        self.issue_refund(order_id)  # defect 2: the result is never checked
        current_case().finish("success")
        return {"answer": "refunded"}
