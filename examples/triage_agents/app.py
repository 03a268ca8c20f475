"""A team of three agents and a person: triage hands each request to billing or tech, and a
refund billing cannot issue goes to a person. Deterministic: each request's ``behaviour``
stands in for what the models would have done, so every run gives the same trajectories.

It records its trajectory by hand, naming the agent of every step, as in the guide
"Agents and tools" (several agents).
"""

from oloproof import AgentStep, AgentTrajectory, current_case, system

LOOP_LIMIT = 12  # steps; the billing <-> tech bounce hits it


def lookup_order(order_id):
    return {"order_id": order_id, "status": "delivered"}


def issue_refund(order_id):
    return {"order_id": order_id, "refund": "issued"}


def search_kb(query):
    return {"query": query, "article": "kb-42"}


TOOLS = {"lookup_order": lookup_order, "issue_refund": issue_refund, "search_kb": search_kb}

# behaviour -> (the plan: ("say", agent) | ("call", agent, tool) | ("handoff", agent, to), answer)
PLANS = {
    "refund": ([("say", "triage"), ("handoff", "triage", "billing"), ("call", "billing", "lookup_order"),
                ("call", "billing", "issue_refund"), ("say", "billing")], "refunded"),
    "escalated": ([("say", "triage"), ("handoff", "triage", "billing"), ("call", "billing", "lookup_order"),
                   ("handoff", "billing", "person")], "escalated"),
    "kb": ([("say", "triage"), ("handoff", "triage", "tech"), ("call", "tech", "search_kb"),
            ("say", "tech")], "answered"),
    "tech_refund": ([("say", "triage"), ("handoff", "triage", "tech"), ("call", "tech", "search_kb"),
                     ("call", "tech", "issue_refund"), ("say", "tech")], "refunded"),
    "misrouted_escalation": ([("say", "triage"), ("handoff", "triage", "tech"), ("handoff", "tech", "billing"),
                              ("call", "billing", "lookup_order"), ("handoff", "billing", "person")], "escalated"),
    "misrouted_back": ([("say", "triage"), ("handoff", "triage", "billing"), ("handoff", "billing", "tech"),
                        ("say", "tech"), ("handoff", "tech", "billing"), ("call", "billing", "lookup_order"),
                        ("call", "billing", "issue_refund")], "refunded"),
    "bounce": ([("say", "triage"), ("handoff", "triage", "billing"), ("call", "billing", "lookup_order")]
               + [("handoff", "billing", "tech"), ("say", "tech"), ("handoff", "tech", "billing"),
                  ("say", "billing")] * 5,
               "refunded"),
}


@system(name="triage-agents", version="1.0", records=("agent_trajectory/v1",))
def run(case):
    plan, answer = PLANS[case.input["behaviour"]]
    steps = []
    truncated = False
    for action in plan:
        width = 2 if action[0] == "call" else 1
        if len(steps) + width > LOOP_LIMIT:
            truncated = True
            break
        kind, agent = action[0], action[1]
        if kind == "say":
            steps.append(AgentStep(len(steps) + 1, "message", agent=agent,
                                   arguments={"request": case.input["request"]}))
        elif kind == "handoff":
            steps.append(AgentStep(len(steps) + 1, "handoff", agent=agent, to_agent=action[2]))
        else:
            tool = action[2]
            arguments = ({"query": case.input["request"]} if tool == "search_kb"
                         else {"order_id": case.input["order_id"]})
            steps.append(AgentStep(len(steps) + 1, "tool_call", agent=agent, tool_name=tool, arguments=arguments))
            steps.append(AgentStep(len(steps) + 1, "tool_result", agent=agent, tool_name=tool,
                                   result=TOOLS[tool](**arguments)))
    current_case().agent_trajectory(AgentTrajectory(
        tuple(steps), "unknown" if truncated else "success", truncated=truncated,
        step_limit=LOOP_LIMIT if truncated else None))
    return {"answer": "unresolved" if truncated else answer}
