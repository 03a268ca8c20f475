"""The three fault results, fixed and documented (SPEC §7.1). They never change shape.

For ``@tool`` systems the faulted call **returns** the fault result in place of the tool's
(it does not raise): the agent sees what a production adapter hands back on failure, and
whether it reads it is exactly what the replay tests. ``Replayable`` systems get the same
value as ``change.result``.

======== ==================================================================================
kind     result
======== ==================================================================================
error    ``{"error": {"type": "ToolError", "message": "<tool> failed"}}``
timeout  ``{"error": {"type": "TimeoutError", "message": "<tool> timed out"}}``
malformed the string ``'{"status": "ok", "resu'`` — truncated JSON text, which parses as no
         tool's normal shape
======== ==================================================================================
"""

from __future__ import annotations

from typing import Any

FAULT_KINDS = ("error", "timeout", "malformed")
MALFORMED = '{"status": "ok", "resu'


def fault_result(kind: str, tool: str) -> Any:
    if kind == "error":
        return {"error": {"type": "ToolError", "message": f"{tool} failed"}}
    if kind == "timeout":
        return {"error": {"type": "TimeoutError", "message": f"{tool} timed out"}}
    if kind == "malformed":
        return MALFORMED
    raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(FAULT_KINDS)})")
