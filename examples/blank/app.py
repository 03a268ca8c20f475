"""Your system under test — replace the body of __call__ with your agent.

How Oloproof calls it, what `case` holds and what `current_case()` records:
docs/writing-a-system.md ("Write your own system").

This skeleton is a Stateful system: Oloproof puts its sandbox in each case's initial_state
(reset) before the case and records the state it left (snapshot) after it, so evaluators
check the world, not the transcript. Every call of a @tool method is recorded (a tool_call
and a tool_result step) and can be faulted in a replay: `oloproof replay --fault add_note:error`.
"""

from oloproof import Stateful, current_case, system, tool


@system(name="my-agent", version="0.1", records=("agent_trajectory/v1", "environment_state/v1"))
class Agent(Stateful):
    """Instantiated once per concurrent slot: each slot owns its own sandbox."""

    def __init__(self):
        self.state = {}

    # ---- the sandbox: your fake (or disposable) world ------------------------------------

    def reset(self, state):
        self.state = state  # a fresh deep copy of the case's initial_state

    def snapshot(self):
        return self.state  # JSON-serialisable: what the state evaluators compare

    # ---- the tools your agent calls --------------------------------------------------------

    @tool
    def add_note(self, text):
        self.state.setdefault("notes", []).append(text)
        return {"saved": len(self.state["notes"])}

    # ---- the agent: one case in, its output (a dict) out ----------------------------------

    def __call__(self, case):
        # case.id, case.input, case.initial_state, case.metadata (expected is withheld)
        note = case.input["note"].strip()
        self.add_note(note)
        current_case().finish("success")  # success | failure | unknown (the default)
        return {"answer": f"saved: {note}"}
