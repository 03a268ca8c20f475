"""The fault results, fixed and documented (SPEC §7.1, §13a). They never change shape.

For ``@tool`` systems the faulted call **returns** the fault result in place of the tool's
(it does not raise): the agent sees what a production adapter hands back on failure, and
whether it reads it is exactly what the replay tests. ``Replayable`` systems get the same
value as ``change.result`` (and the kind as ``change.fault``).

======== ==================================================================================
kind     result
======== ==================================================================================
error    ``{"error": {"type": "ToolError", "message": "<tool> failed"}}``
timeout  ``{"error": {"type": "TimeoutError", "message": "<tool> timed out"}}``
malformed the string ``'{"status": "ok", "resu'`` — truncated JSON text, which parses as no
         tool's normal shape
======== ==================================================================================

Two more kinds come from the adapters of the fault-injection release gate (SPEC §13a), and
are accepted wherever a kind is (a case's ``fault``, ``oloproof replay --fault``):

* ``timeout_after_effect`` — the tool **runs** (its effect lands in the sandbox), then the
  caller gets the ``timeout`` shape instead of its result: the dangerous ambiguity.
* ``denied`` — the tool does not run; the caller gets
  ``{"error": {"type": "PermissionDenied", "message": "<tool>: permission denied (requires
  scope <scope>)", "required_scope": "<scope>"}}``; ``<scope>`` is the fault's ``scope``
  (a case's declaration may give it) or, by default, the tool's name.

The shapes live beside ``@tool`` (:mod:`oloproof.system`), which applies a case's declared
fault while it is recorded; this module is their name for the replay engine.
"""

from __future__ import annotations

from oloproof.system import (
    ALL_FAULT_KINDS,
    FIXED_FAULT_KINDS,
    MALFORMED,
    RUNS_THE_TOOL,
    fault_result,
)

#: the three kinds with a fixed result (SPEC §7.1)
FAULT_KINDS = FIXED_FAULT_KINDS

__all__ = ["ALL_FAULT_KINDS", "FAULT_KINDS", "MALFORMED", "RUNS_THE_TOOL", "fault_result"]
