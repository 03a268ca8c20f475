"""The built-in model judge provider, ``openai_compatible``: chat completions over ``httpx``.

One request per judgement: ``POST {base URL}/chat/completions`` with the model, one user
message holding the rubric and what the judge sees (:func:`oloproof.evaluate.judge.render_prompt`)
and ``temperature: 0``; the reply's ``choices[0].message.content`` must be the JSON object
``{"verdict", "explanation"}`` (:func:`~oloproof.evaluate.judge.parse_reply`): anything else —
a body that is not JSON, JSON without that content, content that is not the object — is
``unsure``, with the body kept as the raw response.

* **Secrets.** The base URL and the key are read from the environment variables the
  configuration names, when the run starts; the key is sent as a bearer token and goes nowhere
  else: not into an event, an error message or the stored configuration. Messages say what
  failed (a status, a timeout, a kind of connection error), never the request.
* **Transient failures** — 429, a 5xx, a connection error, a timeout — are retried up to
  ``max_retries`` times, waiting as ``Retry-After`` asks (seconds or an HTTP date), capped at
  :data:`MAX_RETRY_WAIT` seconds, else an exponential backoff from :data:`BACKOFF`. Any other
  status (401, 404 …) is not retried. A judgement that still fails is :class:`JudgeFailure`:
  the case is ``missing`` (``judge_error``).
* **Concurrency.** One client per provider, its connection pool as large as the run's judge
  pool (:mod:`oloproof.app.judging`), so at most that many requests are in flight.

``httpx`` is imported when a provider is made, never by ``import oloproof``.
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from oloproof.errors import ConfigError
from oloproof.evaluate.judge import NOT_A_COMPLETION, ProviderConfig, parse_reply
from oloproof.events import JudgeVerdict

#: the longest wait a ``Retry-After`` may ask for (seconds): past it the wait is this
MAX_RETRY_WAIT = 30.0
#: the first backoff (seconds) when no ``Retry-After`` is given; doubled each retry
BACKOFF = 0.25
#: how much of an error body a message may quote
_BODY = 200


class JudgeFailure(Exception):
    """A judge gave no verdict (the case is ``missing``, ``judge_error``); the message is safe
    to record: it names no key and no URL."""


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (a number or an HTTP date), capped at
    :data:`MAX_RETRY_WAIT`; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(MAX_RETRY_WAIT, max(0.0, seconds))


class OpenAICompatible:
    """A chat-completions judge (module docstring).

    Args:
        config: the provider's configuration (model, the environment variables' names,
            timeout, retries).
        concurrency: the most requests in flight at once (the connection pool's size).
        environ: where the variables are read (the process environment by default).
        where: names the configuration entry in error messages.
        sleep: how a retry waits (tests pass a recorder).

    Raises:
        ConfigError: a variable the configuration names is not set (exit 2, before the run).
    """

    def __init__(self, config: ProviderConfig, *, concurrency: int = 1, environ: Mapping[str, str] | None = None,
                 where: str = "model_judge", sleep: Callable[[float], None] = time.sleep):
        env = os.environ if environ is None else environ
        base = env.get(config.base_url_env, "").strip()
        if not base:
            raise ConfigError(f"{where}: judge.base_url_env: environment variable {config.base_url_env} is not set "
                              "(it must hold the provider's base URL, e.g. https://api.openai.com/v1)")
        key = None
        if config.api_key_env is not None:
            key = env.get(config.api_key_env, "")
            if not key:
                raise ConfigError(f"{where}: judge.api_key_env: environment variable {config.api_key_env} is not set")
        import httpx

        self.config = config
        self.url = base.rstrip("/") + "/chat/completions"
        self._key = key
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(config.timeout), headers=headers,
                                    limits=httpx.Limits(max_connections=concurrency,
                                                        max_keepalive_connections=concurrency))
        self._httpx = httpx
        #: requests sent (every attempt), for the benchmark and the tests
        self.requests = 0

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _safe(self, text: str) -> str:
        """``text`` with the key taken out, should a server echo it."""
        return text.replace(self._key, "[key]") if self._key else text

    def ask(self, prompt: str) -> tuple[JudgeVerdict, str, str | None]:
        """(verdict, explanation, raw response) for one prompt; :class:`JudgeFailure` when the
        judge gave no answer after the retries a transient failure earns."""
        httpx = self._httpx
        body = {"model": self.config.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0}
        attempts = self.config.max_retries + 1
        problem = "no attempt"
        for attempt in range(attempts):
            wait: float | None = None
            try:
                self.requests += 1
                response = self._client.post(self.url, json=body)
            except httpx.TimeoutException:
                problem = f"timed out (timeout {self.config.timeout:g} s)"
            except httpx.TransportError as e:
                problem = f"connection error ({type(e).__name__})"
            else:
                status = response.status_code
                if status == 429 or 500 <= status < 600:
                    problem = f"HTTP {status} from the provider"
                    wait = retry_after(response.headers.get("retry-after"))
                elif status >= 400:
                    text = self._safe(response.text[:_BODY]).replace("\n", " ")
                    raise JudgeFailure(f"HTTP {status} from the provider (not retried): {text}")
                else:
                    return self._answer(response)
            if attempt + 1 < attempts:
                self._sleep(wait if wait is not None else min(MAX_RETRY_WAIT, BACKOFF * 2 ** attempt))
        raise JudgeFailure(f"{problem}; gave up after {attempts} attempt{'s' if attempts != 1 else ''}")

    def _answer(self, response: Any) -> tuple[JudgeVerdict, str, str | None]:
        text = self._safe(response.text)
        try:
            data = response.json()
            content = data["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError):
            verdict, explanation = parse_reply(None)
            return verdict, NOT_A_COMPLETION, text
        verdict, explanation = parse_reply(content)
        return verdict, explanation, self._safe(content) if isinstance(content, str) else text


__all__ = ["BACKOFF", "MAX_RETRY_WAIT", "JudgeFailure", "OpenAICompatible", "retry_after"]
