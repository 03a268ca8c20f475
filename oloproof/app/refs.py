"""Naming runs: ``latest``, ``version:V``, ``pin:NAME`` or a run id, and the pins themselves
(``oloproof runs --pin``). Read by the gate's baselines, ``diff``, ``view`` and every command
that takes a RUN."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from oloproof.app.runs import StoredRun, append_event, load_run, run_headers
from oloproof.errors import UsageError
from oloproof.events import RunPinned
from oloproof.store.base import EventStore
from oloproof.store.log import EventLog

PIN = "pin/"
PIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def pin_run(store: EventStore, run_id: str, name: str, clock: Callable[[], str]) -> RunPinned:
    """``oloproof runs --pin RUN NAME``: the latest pin of a name wins; earlier ones stay."""
    if not PIN_NAME.fullmatch(name):
        raise UsageError(f"pin name {name!r}: use letters, digits, '.', '_' or '-' (at most 64, "
                         "starting with a letter or digit)")
    load_run(store, run_id)  # the run exists
    stream = PIN + name
    event = RunPinned(name, run_id, clock())
    append_event(store, stream, event)  # a pin racing another lands too
    return event


def pinned(store: EventStore, name: str) -> str | None:
    """The run pin ``name`` names now (its stream's latest ``RunPinned``), or None."""
    last = EventLog(store).last_of(PIN + name, RunPinned, "a pin")
    return None if last is None else last.run_id


def pins(store: EventStore) -> dict[str, str]:
    """Every pin name -> the run it names now."""
    out = {}
    for stream in store.stream_names(PIN):
        run_id = pinned(store, stream[len(PIN):])
        if run_id is not None:
            out[stream[len(PIN):]] = run_id
    return out


def resolve_ref(store: EventStore, ref: str, *, system: str | None = None, before: Any = None,
                not_run: str | None = None) -> str | None:
    """A run id for ``latest``, ``version:V`` (the latest finished run of that version),
    ``pin:NAME`` or a run id; None when nothing matches. ``system``/``before``/``not_run``
    narrow ``version:`` to runs of that system started before a run, and never that run."""
    kind, sep, value = ref.partition(":")
    if sep and kind == "pin":
        return pinned(store, value)
    if sep and kind == "version":
        for started in reversed(run_headers(store)):
            if started.system_version != value or started.run_id == not_run:
                continue
            if system is not None and started.system_name != system:
                continue
            if before is not None and (started.started_at, started.run_id) >= before:
                continue
            if started.selection:
                continue  # a partial run (some of the suite's cases) is no baseline
            if load_run(store, started.run_id).sealed is None:
                continue  # an unfinished run is no baseline
            return started.run_id
        return None
    if ref == "latest":
        headers = run_headers(store)
        return headers[-1].run_id if headers else None
    return ref if store.stream_length(ref) and "/" not in ref else None


def require_ref(store: EventStore, ref: str) -> str:
    """:func:`resolve_ref`, for a reference that must name a run.

    Raises:
        UsageError: nothing matches; the message lists the pins for ``pin:``, points to
            ``oloproof runs`` for ``version:``, and names the known runs otherwise.
    """
    run_id = resolve_ref(store, ref)
    if run_id is None:
        kind = ref.partition(":")[0]
        if kind == "pin":
            known = ", ".join(sorted(pins(store))) or "none"
            raise UsageError(f"no run is pinned as {ref[4:]!r} (pins: {known}); pin one with "
                             "'oloproof runs --pin RUN NAME'")
        if kind == "version":
            raise UsageError(f"no finished run of version {ref[8:]!r} in the log (see 'oloproof runs')")
        load_run(store, ref)  # raises the usual "no run" error with the known runs
        raise UsageError(f"{ref!r} names no run (see 'oloproof runs')")
    return run_id


def trials_of(run: StoredRun) -> int:
    """Trials a case in ``run`` (``trials: k``; 1 for runs without it)."""
    from oloproof.app.project import stored_trials

    return stored_trials(run.started.config)


def is_ref(store: EventStore, text: str) -> bool:
    """``text`` names a run: ``latest``, ``version:V``, ``pin:NAME`` (found or not: a
    reference, not a case id) or a run id the log holds."""
    kind, sep, _ = text.partition(":")
    return text == "latest" or (bool(sep) and kind in ("version", "pin")) or resolve_ref(store, text) is not None
