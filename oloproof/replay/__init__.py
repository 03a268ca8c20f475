"""Replay: checkpoints, the tape, fault results and control-replay fidelity.

The built-in replay for ``@tool`` systems, the fault shapes and ``oloproof replay`` arrive
with the replay engine; the ``Replayable`` contract is declared in :mod:`oloproof.recorder`.
"""
