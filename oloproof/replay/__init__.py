"""Replay: which replays a case needs (plan), the fixed fault results (faults), the tape and
control-replay fidelity — all pure — plus the engine that runs replays and the cache that
reads stored ones. The ``Replayable`` contract is declared in :mod:`oloproof.system`.
"""
