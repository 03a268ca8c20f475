"""The writing side: ``@system``, ``@tool``, ``current_case()`` and the runner."""

from oloproof.recorder.case import CaseRecorder, current_case
from oloproof.recorder.declare import Replayable, Stateful, SystemInfo, system, system_info, tool

__all__ = ["CaseRecorder", "Replayable", "Stateful", "SystemInfo", "current_case", "system",
           "system_info", "tool"]
