"""A careful hand-written recorder: the floor `oloproof run` is compared with (issue #2).

It does the same work as `oloproof run` on the suite made by bench/bench_run.py: the agent's
five tool calls, JSON events with a per-stream hash chain, one FULL-synchronous transaction
per case and verdict rows — and nothing else (no config validation, no report).

    python bench/baseline_recorder.py SUITE_DIR DB_PATH
"""

import hashlib
import sqlite3
import sys
from pathlib import Path

import msgspec

encode = msgspec.json.Encoder(order="sorted").encode


def fetch(key):
    return {"key": key, "value": len(key)}


def transform(value):
    return {"value": value * 2}


def store(key, value):
    return {"stored": key, "value": value}


def notify(key):
    return {"notified": key}


def main() -> None:
    suite, db = Path(sys.argv[1]), sys.argv[2]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS events (pos INTEGER PRIMARY KEY, stream TEXT, seq INTEGER, "
                 "type TEXT, payload BLOB, digest TEXT, UNIQUE (stream, seq))")
    conn.execute("CREATE TABLE IF NOT EXISTS verdicts (run_id, case_id, criterion, verdict, reason, "
                 "PRIMARY KEY (run_id, case_id, criterion))")
    decoder = msgspec.json.Decoder()
    with open(suite / "cases.jsonl", "rb") as fh:
        for line in fh:
            case = decoder.decode(line)
            key = case["input"]["key"]
            steps = []

            def call(name, fn, **kw):
                steps.append({"type": "step", "index": len(steps) + 1, "kind": "tool_call",  # noqa: B023 - called within this iteration
                              "tool_name": name, "arguments": kw})
                result = fn(**kw)
                steps.append({"type": "step", "index": len(steps) + 1, "kind": "tool_result",  # noqa: B023 - called within this iteration
                              "tool_name": name, "result": result})
                return result

            a = call("fetch", fetch, key=key)
            b = call("transform", transform, value=a["value"])
            call("fetch", fetch, key=key + "x")
            call("store", store, key=key, value=b["value"])
            call("notify", notify, key=key)
            output = {"answer": f"done {key}"}
            events = [{"type": "case_started", "case": case}, *steps,
                      {"type": "trajectory", "terminal_status": "success"},
                      {"type": "case_finished", "output": output}]
            stream = "run/" + case["id"]
            previous = ""
            rows = []
            for seq, ev in enumerate(events):
                payload = encode(ev)
                previous = hashlib.sha256(previous.encode() + payload).hexdigest()
                rows.append((stream, seq, ev["type"], payload, previous))
            tools = [s["tool_name"] for s in steps if s["kind"] == "tool_call"]
            verdicts = [
                ("run", case["id"], "answer_correct",
                 "pass" if case["expected"]["answer"] in output["answer"] else "fail", None),
                ("run", case["id"], "agent_tool_fetch_called", "pass" if "fetch" in tools else "fail", None),
                ("run", case["id"], "agent_steps_le_10", "pass" if len(steps) <= 10 else "fail", None),
            ]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO events (stream, seq, type, payload, digest) VALUES (?, ?, ?, ?, ?)", rows)
            conn.executemany("INSERT INTO verdicts VALUES (?, ?, ?, ?, ?)", verdicts)
            conn.execute("COMMIT")
    conn.close()


if __name__ == "__main__":
    main()
