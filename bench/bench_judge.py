"""Model judges (issue 27): what judging costs a run, and what re-evaluating a judged run asks.

1. 200 cases judged by the ``openai_compatible`` provider against a fake chat-completions
   server on 127.0.0.1 that answers after 200 ms, at ``--concurrency 50`` — against the same run
   without the judge, in interleaved rounds (a fresh log each, so every judgement is asked).
   Target: under 2 s of wall time beyond the run.
2. A 10,000-case run judged through the same server, then ``oloproof eval`` of it: the server
   counts the requests (target: zero), and a second ``oloproof run`` (cache: zero as well).

    python bench/bench_judge.py [--rounds 5] [--big 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

APP = '''from oloproof import system


@system(name="bench-judged", version="1")
def run(case):
    return {"reply": f"Your order {case.input['n']} ships tomorrow."}
'''
CONFIG = '''system: {name: bench-judged, version: '1', callable: app:run}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: mentions, field: reply, expected_field: n}
'''
JUDGE = '''  - type: model_judge
    criterion: polite
    rubric: The reply is courteous.
    judge: {provider: openai_compatible, model: bench, base_url_env: BENCH_JUDGE_URL, timeout: 30}
    sees: [output]
    after: [mentions]
'''


class Server:
    """A chat-completions server answering every request after ``latency`` seconds."""

    def __init__(self, latency: float):
        self.count = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.count += 1
                time.sleep(latency)
                body = json.dumps({"choices": [{"message": {"content": json.dumps(
                    {"verdict": "pass", "explanation": "courteous"})}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.request_queue_size = 256
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def project(folder: Path, cases: int, judged: bool) -> Path:
    folder.mkdir(parents=True)
    (folder / "app.py").write_text(APP)
    (folder / "oloproof.yaml").write_text(CONFIG + (JUDGE if judged else ""))
    (folder / "cases.jsonl").write_text("".join(
        json.dumps({"id": f"c{i:05d}", "input": {"n": str(i)}, "expected": {"n": str(i)}}) + "\n"
        for i in range(cases)))
    return folder


def oloproof(folder: Path, *args: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "oloproof", *args], cwd=folder, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"oloproof {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--big", type=int, default=10_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    slow = Server(0.2)
    env = {**os.environ, "BENCH_JUDGE_URL": slow.url}
    try:
        plain = project(tmp / "plain", 200, judged=False)
        judged = project(tmp / "judged", 200, judged=True)
        times: dict[str, list[float]] = {"without judge": [], "with judge": []}
        for _ in range(args.rounds):
            for name, folder in (("without judge", plain), ("with judge", judged)):
                shutil.rmtree(folder / ".oloproof", ignore_errors=True)
                times[name].append(oloproof(folder, "run", "--concurrency", "50", "--durability", "normal", env=env))
        asked = slow.count
        print(f"200 cases, --concurrency 50, a judge answering after 200 ms ({args.rounds} interleaved rounds; "
              f"{asked} judge requests = {asked // args.rounds} a round):")
        for name, ts in times.items():
            print(f"  {name:14s} median {statistics.median(ts):.2f} s  (range {min(ts):.2f}–{max(ts):.2f} s)")
        extra = [j - p for j, p in zip(times["with judge"], times["without judge"])]
        print(f"  judging costs  median {statistics.median(extra):.2f} s beyond the run "
              f"(range {min(extra):.2f}–{max(extra):.2f} s; target < 2 s)")

        fast = Server(0.0)
        env = {**os.environ, "BENCH_JUDGE_URL": fast.url}
        big = project(tmp / "big", args.big, judged=True)
        took = oloproof(big, "run", "--concurrency", "50", "--durability", "normal", env=env)
        first = fast.count
        took_eval = oloproof(big, "eval", "latest", env=env)
        after_eval = fast.count - first
        took_again = oloproof(big, "run", "--concurrency", "50", "--durability", "normal", env=env)
        after_run = fast.count - first - after_eval
        print(f"{args.big:,} cases judged: run {took:.1f} s, {first:,} judge requests; "
              f"re-evaluation (oloproof eval) {took_eval:.1f} s, {after_eval} judge requests (target 0); "
              f"a second run {took_again:.1f} s, {after_run} judge requests (all from the cache)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
