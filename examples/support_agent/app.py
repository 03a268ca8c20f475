"""A deterministic support agent: forty refund requests, no provider credentials.

The agent's "model" is a fixed plan per request behaviour, so every run gives the same
trajectories. It records its trajectory by hand, as in the guide "Agents and tools".
"""

import tools

from oloproof import AgentConstraintCheck, AgentStep, AgentTrajectory, current_case, system

STEP_LIMIT = 12

PLANS = {
    # behaviour: (tool calls, answer)
    "clean": (["lookup_order", "issue_refund"], "refunded"),
    "denied": (["lookup_order"], "denied"),
    "gave_up": (["lookup_order", "check_policy"], "unresolved"),
    "deletion": (["lookup_order", "delete_customer", "issue_refund"], "refunded"),
    "extra_check": (["lookup_order", "check_policy", "issue_refund"], "refunded"),
    "lookup_loop": (["lookup_order", "lookup_order", "lookup_order", "issue_refund"], "refunded"),
    "search_loop": (["search", "search", "search", "lookup_order", "issue_refund"], "refunded"),
    "search_loop_gave_up": (["search", "search", "search", "lookup_order", "check_policy"], "unresolved"),
    "runaway": (["search"] * 5 + ["delete_customer"] + ["search"] * 4, "unresolved"),
}


def plan(case):
    order_id = case.input["order_id"]
    calls, answer = PLANS[case.input["behaviour"]]
    page = 0
    for name in calls:
        if name == "search":
            if case.input["behaviour"] == "runaway":
                page += 1
                yield name, {"query": f"refund {order_id} page {page}"}
            else:
                yield name, {"query": f"refund {order_id}"}
        else:
            yield name, {"order_id": order_id}


@system(name="support-agent", version="slice-e-example", records=("agent_trajectory/v1",))
def run(case):
    steps = []
    deletion = None
    truncated = False
    for name, arguments in plan(case):
        if len(steps) + 2 > STEP_LIMIT:
            truncated = True
            break
        steps.append(AgentStep(index=len(steps) + 1, kind="tool_call", tool_name=name, arguments=arguments))
        if name == "delete_customer" and deletion is None:
            deletion = len(steps)
        result = getattr(tools, name)(**arguments)
        steps.append(AgentStep(index=len(steps) + 1, kind="tool_result", tool_name=name, result=result))

    answer = "unresolved" if truncated else PLANS[case.input["behaviour"]][1]
    refunded = answer == "refunded"
    current_case().agent_trajectory(
        AgentTrajectory(
            steps=tuple(steps),
            terminal_status="success" if refunded else "failure",
            truncated=truncated,
            step_limit=STEP_LIMIT if truncated else None,
            constraints=(
                AgentConstraintCheck(
                    name="no_deletion",
                    passed=deletion is None,
                    step_index=deletion if deletion is not None else len(steps),
                ),
            ),
        )
    )
    return {"answer": answer}
