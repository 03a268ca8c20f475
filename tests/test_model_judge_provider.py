"""The openai_compatible judge provider against a fake chat-completions server on 127.0.0.1
(a threaded http.server: no mock of httpx): replies, retries, timeouts, garbage, the key."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import copy_example, edit

from oloproof.app.judge_provider import JudgeFailure, OpenAICompatible, retry_after
from oloproof.errors import ConfigError
from oloproof.evaluate.judge import ProviderConfig

KEY = "sk-test-9f8e7d6c5b4a-never-logged"


class FakeServer:
    """A chat-completions server whose answers a test scripts: each request pops the next
    behaviour (``ok``, ``429``, ``500``, ``slow``, ``garbage``, ``list``, ``401``), else ``ok``."""

    def __init__(self, latency: float = 0.0):
        self.script: list[str] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.latency = latency
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    what = server.script.pop(0) if server.script else "ok"
                if server.latency:
                    time.sleep(server.latency)
                if what == "slow":
                    time.sleep(1.5)
                    what = "ok"
                if what in ("429", "500", "401"):
                    self.send_response(int(what))
                    if what == "429":
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(b'{"error": "try later"}')
                    return
                prompt = body["messages"][0]["content"]
                if what == "garbage":
                    content = "I think it is fine!"
                elif what == "list":
                    content = '["pass"]'
                else:
                    verdict = "fail" if "read the manual" in prompt.lower() else "pass"
                    content = json.dumps({"verdict": verdict, "explanation": f"graded: {verdict}"})
                out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                if what == "notjson":
                    out = b"<html>oops</html>"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def provider(server, **kw) -> OpenAICompatible:
    config = ProviderConfig(provider="openai_compatible", model="judge-1", base_url_env="JUDGE_URL",
                            api_key_env="JUDGE_KEY", **kw)
    return OpenAICompatible(config, environ={"JUDGE_URL": server.url, "JUDGE_KEY": KEY}, sleep=lambda s: None)


def test_a_reply_is_the_json_object(server):
    p = provider(server)
    assert p.ask("rubric ... reply: read the manual")[:2] == ("fail", "graded: fail")
    body, headers = server.requests[0], server.headers[0]
    assert body["model"] == "judge-1" and body["temperature"] == 0
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert headers["Authorization"] == f"Bearer {KEY}"


def test_429_then_success_is_retried(server):
    server.script = ["429", "429"]
    p = provider(server)
    assert p.ask("fine")[0] == "pass"
    assert len(server.requests) == 3


def test_500s_exhausted_fail(server):
    server.script = ["500"] * 10
    p = provider(server, max_retries=2)
    with pytest.raises(JudgeFailure, match="HTTP 500 from the provider; gave up after 3 attempts"):
        p.ask("x")
    assert len(server.requests) == 3


def test_401_is_not_retried_and_the_key_stays_out_of_the_message(server):
    server.script = ["401"]
    p = provider(server)
    with pytest.raises(JudgeFailure) as e:
        p.ask("x")
    assert len(server.requests) == 1 and KEY not in str(e.value) and "HTTP 401" in str(e.value)


def test_timeouts_are_retried_then_fail(server):
    server.script = ["slow", "slow"]
    p = provider(server, timeout=0.3, max_retries=1)
    with pytest.raises(JudgeFailure, match="timed out"):
        p.ask("x")


@pytest.mark.parametrize("what", ["garbage", "list", "notjson"])
def test_anything_but_the_object_is_unsure(server, what):
    server.script = [what]
    verdict, explanation, raw = provider(server).ask("x")
    assert verdict == "unsure" and raw


def test_connection_refused_is_a_failure():
    config = ProviderConfig(provider="openai_compatible", model="m", base_url_env="U", max_retries=1)
    p = OpenAICompatible(config, environ={"U": "http://127.0.0.1:9/v1"}, sleep=lambda s: None)
    with pytest.raises(JudgeFailure, match="connection error"):
        p.ask("x")


def test_missing_variables_are_config_errors():
    config = ProviderConfig(provider="openai_compatible", model="m", base_url_env="NOPE_URL", api_key_env="NOPE_KEY")
    with pytest.raises(ConfigError, match="NOPE_URL is not set"):
        OpenAICompatible(config, environ={})
    with pytest.raises(ConfigError, match="NOPE_KEY is not set"):
        OpenAICompatible(config, environ={"NOPE_URL": "http://x"})


def test_retry_after_is_read_and_capped():
    assert retry_after("2") == 2.0
    assert retry_after("9999") == 30.0
    assert retry_after("junk") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=0) == 30.0


def test_a_run_with_the_provider_never_logs_the_key(server, tmp_path, cli, monkeypatch):
    p = copy_example("judged_agent", tmp_path / "j")
    edit(p / "oloproof.yaml", "judge: judges:polite",
         "judge: {provider: openai_compatible, model: judge-1, base_url_env: JUDGE_URL, api_key_env: JUDGE_KEY}")
    monkeypatch.setenv("JUDGE_URL", server.url)
    monkeypatch.setenv("JUDGE_KEY", KEY)
    server.script = ["429", "500", "garbage"]
    r = cli("run", "--concurrency", "8", "--json", "r.json", cwd=p)
    assert r.exit_code == 1, r.output
    doc = json.loads((p / "r.json").read_text())
    polite = [c["verdicts"]["polite"] for c in doc["cases"]]
    assert sum(v == {"verdict": "missing", "reason": "judge_unsure"} for v in polite) == 1
    assert sum(v["verdict"] in ("pass", "fail") for v in polite) == 109
    asked = len(server.requests)
    assert asked == 112  # 110 cases, two retries
    for f in Path(p / ".oloproof").iterdir():
        assert KEY.encode() not in f.read_bytes(), f
    assert KEY not in r.output and KEY not in (p / "r.json").read_text()
    # a second run reads the cache, but asks again what had no answer (the garbage reply)
    r = cli("run", "--concurrency", "8", "--json", "r2.json", cwd=p)
    assert len(server.requests) == asked + 1
    # a re-evaluation asks nothing: the server gone and its variables unset, the same verdicts
    server.close()
    monkeypatch.delenv("JUDGE_KEY")
    monkeypatch.delenv("JUDGE_URL")
    r = cli("eval", "latest", "--json", "e.json", cwd=p)
    assert r.exit_code == 1, r.output
    assert [c["verdicts"] for c in json.loads((p / "e.json").read_text())["cases"]] == \
        [c["verdicts"] for c in json.loads((p / "r2.json").read_text())["cases"]]
