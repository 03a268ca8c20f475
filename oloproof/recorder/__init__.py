"""Recording: how to record ONE case (:mod:`oloproof.recorder.record`, shared by runs and
replays) and where recordings run (:mod:`oloproof.recorder.executors`: serial, concurrent,
processes, Dask). The decorators users write live in :mod:`oloproof.system`."""

from oloproof.recorder.case import CaseRecorder, current_case

__all__ = ["CaseRecorder", "current_case"]
