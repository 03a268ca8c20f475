"""The upcast path, run before a real schema change needs it (eventsourcing's way): the v1
golden logs are read through a made-up v2 and v3 of two event kinds, chained upcasters and a
codec that knows only the latest versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

from oloproof.errors import CorruptLogError
from oloproof.events import (
    CODEC,
    UPCASTERS,
    CaseFinished,
    Codec,
    Event,
    FaultKind,
    StepKind,
    StepRecorded,
    TrajectoryRecorded,
)
from oloproof.records import STEP_KINDS, TERMINAL_STATUSES
from oloproof.store import SQLiteStore, StreamAppend
from oloproof.store.log import EventLog
from oloproof.system import ALL_FAULT_KINDS
from tests.test_golden import GOLDEN, STATEFUL, load_golden

PREFIX_GOLDEN = GOLDEN.parent / "prefix-v1.jsonl"


class CaseFinishedV3(Event, frozen=True, tag="case_finished.v3"):
    """Made up: ``error_kind`` renamed ``kind``, and the exception's type split off."""

    output: Any = None
    error: str | None = None
    kind: str | None = None
    exception: str | None = None
    traceback: str | None = None


class TrajectoryRecordedV2(Event, frozen=True, tag="trajectory.v2"):
    """Made up: ``terminal_status`` renamed ``status``; ``truncated`` folded into it."""

    status: str
    step_limit: int | None = None
    steps: int = 0


def _v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in raw.items() if k != "error_kind"}
    out["kind"] = raw.get("error_kind")
    error = raw.get("error")
    out["exception"] = error.split(":", 1)[0] if error and ":" in error else None
    return out


def _trajectory_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    status = "truncated" if raw.get("truncated") else raw["terminal_status"]
    return {"type": raw["type"], "status": status, "step_limit": raw.get("step_limit"), "steps": raw.get("steps", 0)}


def later_codec() -> Codec:
    """Today's events with CaseFinished and TrajectoryRecorded replaced by later versions."""
    replaced = {CaseFinished, TrajectoryRecorded}
    events = tuple(e for e in CODEC.events if e not in replaced) + (CaseFinishedV3, TrajectoryRecordedV2)
    upcasters = {**UPCASTERS,  # the real v1 -> v2 of case_finished
                 "case_finished.v2": ("case_finished.v3", _v2_to_v3),
                 "trajectory.v1": ("trajectory.v2", _trajectory_v1_to_v2)}
    return Codec(events, upcasters)


@pytest.mark.parametrize("golden", [GOLDEN, STATEFUL, PREFIX_GOLDEN], ids=lambda p: p.stem)
def test_a_v1_log_reads_through_v2_and_v3(tmp_path: Path, golden: Path) -> None:
    store = load_golden(golden, tmp_path / "log.db")
    today, later = EventLog(store), EventLog(store, later_codec())
    ends = trajectories = 0
    for (stream, now), (same, up) in zip(today.streams(""), later.streams(""), strict=True):
        assert stream == same and len(now) == len(up)
        for a, b in zip(now, up):
            if isinstance(a, CaseFinished):  # v1 -> v2 (real) -> v3 (made up)
                ends += 1
                assert isinstance(b, CaseFinishedV3)
                assert (b.output, b.error, b.kind, b.traceback) == (a.output, a.error, a.error_kind, None)
                assert b.exception == (a.error.split(":", 1)[0] if a.error and ":" in a.error else None)
            elif isinstance(a, TrajectoryRecorded):
                trajectories += 1
                assert isinstance(b, TrajectoryRecordedV2)
                assert b.status == ("truncated" if a.truncated else a.terminal_status) and b.steps == a.steps
            else:  # every other event is read as it was
                assert a == b
    assert ends > 0 and trajectories > 0
    # the log itself is untouched: its chains still verify, its type column still says v1
    assert store.verify().ok
    assert {e.type for e in store.read_all() if e.type.startswith("case_finished")} == {"case_finished.v1"}
    store.close()


def test_an_event_written_today_reads_through_the_later_version(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    EventLog(store).append("r/c", 0, [CaseFinished(None, "ValueError: no order 7", "system_error", "tb")])
    (event,) = EventLog(store, later_codec()).read("r/c")
    assert event == CaseFinishedV3(None, "ValueError: no order 7", "system_error", "ValueError", "tb")
    assert later_codec().upcast_targets == {"case_finished.v3", "trajectory.v2"}
    assert CODEC.upcast_targets == {"case_finished.v2"}
    store.close()


def test_an_upcaster_loop_or_a_missing_target_is_a_located_corrupt_log(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    store.commit([StreamAppend("r/c", 0, [b'{"type":"case_finished.v1","error":"x"}'], ["case_finished.v1"])])
    looping = Codec(CODEC.events, {"case_finished.v1": ("case_finished.v0", lambda r: r),
                                   "case_finished.v0": ("case_finished.v1", lambda r: r)})
    with pytest.raises(CorruptLogError, match=r"'r/c' #0 cannot be decoded: .*loop"):
        EventLog(store, looping).read("r/c")
    nowhere = Codec(CODEC.events, {"case_finished.v1": ("case_finished.v9", lambda r: r)})
    with pytest.raises(CorruptLogError, match=r"'r/c' #0 cannot be decoded"):
        EventLog(store, nowhere).read("r/c")
    store.close()


def test_literal_fields_refuse_values_outside_their_list() -> None:
    good = CODEC.encode(StepRecorded(0, "tool_call", "lookup"))
    assert CODEC.decode(good) == StepRecorded(0, "tool_call", "lookup")
    for bad in (b'{"type":"step.v1","index":0,"kind":"sing"}',
                b'{"type":"step.v1","index":0,"kind":"tool_result","fault":"gremlin"}',
                b'{"type":"trajectory.v1","terminal_status":"maybe"}',
                b'{"type":"evidence.v1","kind":"access","data":{},"source":"someone"}',
                b'{"type":"replay_started.v1","cache_key":"k","kind":"rerun","case_id":"c","case_stream":"s",'
                b'"fingerprint":"f","system_name":"n","system_version":"v","checkpoint_step":0}'):
        with pytest.raises(msgspec.ValidationError):
            CODEC.decode(bad)


def test_the_literal_lists_are_the_ones_the_code_checks_against() -> None:
    assert STEP_KINDS == set(get_args(StepKind))
    assert TERMINAL_STATUSES == {"success", "failure", "unknown"}
    assert set(ALL_FAULT_KINDS) == set(get_args(FaultKind))
