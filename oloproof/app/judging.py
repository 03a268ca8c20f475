"""Asking model judges while a run records (SPEC §18.6): the evidence ``model_judge`` reads.

The driver (:mod:`oloproof.app.run`, the log's single writer) hands every recorded case whose
model judges lack a judgement (:meth:`~oloproof.evaluate.engine.SuiteEvaluation.pending_judgements`:
selected, past its ``after:`` criteria, not judged yet) to :class:`Judging`, which

1. looks each question up in the cache, the stream ``judgement/<key>`` keyed by (judge, model,
   rubric digest, prompt digest) like a replay: an unchanged output is never judged twice, in
   this run or any later one;
2. asks the judge what the cache lacks, on a pool of threads as large as the run's
   concurrency (``--concurrency N`` or ``--workers N``; 1 otherwise) — a Python judge
   ``fn(prompt, *, case)`` with the public :class:`oloproof.CaseView`, or the
   ``openai_compatible`` provider (:mod:`oloproof.app.judge_provider`);
3. gives the driver the case's :class:`~oloproof.events.JudgementRecorded` events, in the order
   of the suite's judges, once all are in. The driver appends them to the case's stream (after
   its own events, before the seal, which covers them) and the first judgement of a key to its
   cache stream, in one transaction; then the case is judged.

A judge that raises, times out or fails past its retries gives a judgement with verdict
``error`` (the case is ``missing``, ``judge_error``); errors are not cached, so the next run
asks again. Nothing here decides a verdict: the evaluator reads the events.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec

from oloproof.errors import Interrupted
from oloproof.evaluate.engine import SuiteEvaluation
from oloproof.evaluate.judge import UNREADABLE, JudgeRequest, ModelJudge, cache_key, parse_answer
from oloproof.events import JUDGEMENT_CACHE, JudgementRecorded, JudgeVerdict
from oloproof.store.base import EventStore, StreamAppend
from oloproof.store.log import EventLog
from oloproof.views import CaseView


def judge_concurrency(executor: Any) -> int:
    """How many judge calls a run makes at once: its executor's slots (``--concurrency N``,
    ``--workers N``), else 1."""
    for name in ("n", "_n"):
        n = getattr(executor, name, None)
        if isinstance(n, int) and n > 0:
            return n
    return 1


@dataclass
class _Pending:
    """A case waiting for its judges: the driver's bookkeeping, the questions, the answers."""

    tag: Any
    requests: list[JudgeRequest]
    answers: dict[int, JudgementRecorded] = field(default_factory=dict)


class Judging:
    """The model judges of a run (module docstring).

    Args:
        suite: the run's evaluation (its ``model_judge`` evaluators, Python judges bound).
        store: the log, for the cache (read here; the driver writes).
        concurrency: judge calls at once (:func:`judge_concurrency`).
        environ: where a provider's variables are read (default: the process environment).
        where: criterion -> where its evaluator sits in oloproof.yaml, for error messages.

    Raises:
        ConfigError: a provider's environment variable is not set (before the run writes).
    """

    def __init__(self, suite: SuiteEvaluation, store: EventStore, concurrency: int = 1, *,
                 environ: Mapping[str, str] | None = None, where: Mapping[str, str] | None = None):
        from oloproof.app.judge_provider import OpenAICompatible

        self.store = store
        self.log = EventLog(store)
        self.judges: dict[str, ModelJudge] = {e.criterion: e for _, e in suite.judges}
        self.providers: dict[str, Any] = {}
        for criterion, e in self.judges.items():
            if e.provider is not None:
                self.providers[criterion] = OpenAICompatible(e.provider, concurrency=concurrency, environ=environ,
                                                             where=(where or {}).get(criterion, criterion))
        self.pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="oloproof-judge")
        self._done: queue.SimpleQueue[tuple[_Pending, int, JudgementRecorded]] = queue.SimpleQueue()
        #: cases waiting for a judge's answer
        self.outstanding = 0
        #: judge calls made (cache misses asked), and judgements read from the cache
        self.calls = 0
        self.cached = 0

    def close(self, cancel: bool = False) -> None:
        """Stop the pool (``cancel``: do not wait for calls in flight) and the providers."""
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)
        for provider in self.providers.values():
            provider.close()

    def ask(self, case: CaseView, requests: list[JudgeRequest], tag: Any) -> list[JudgementRecorded] | None:
        """The judgements ``case`` needs: returned at once when the cache holds them all, else
        None — the calls are made in the pool and :meth:`finished` gives them back with ``tag``."""
        pending = _Pending(tag, requests)
        misses = []
        for k, request in enumerate(requests):
            hit = self.cached_judgement(request)
            if hit is not None:
                pending.answers[k] = hit
                self.cached += 1
            else:
                misses.append(k)
        if not misses:
            return [pending.answers[k] for k in range(len(requests))]
        self.outstanding += 1
        from oloproof.evaluate.python import public_view

        view = public_view(case) if any(self.judges[requests[k].criterion].provider is None for k in misses) else None
        for k in misses:
            self.calls += 1
            self.pool.submit(self._call, pending, k, view)
        return None

    def cached_judgement(self, request: JudgeRequest) -> JudgementRecorded | None:
        """The judgement stored under the request's key, as the case's copy (``cached``), or None."""
        stream = JUDGEMENT_CACHE + request.key
        stored = self.store.read_stream(stream)
        if not stored:
            return None
        event = self.log.decoded(stored[:1])[0]
        if not isinstance(event, JudgementRecorded):
            return None
        return msgspec.structs.replace(event, criterion=request.criterion, cached=True)

    def _call(self, pending: _Pending, k: int, view: Any) -> None:
        request = pending.requests[k]
        try:
            event = self._judgement(request, view)
        except BaseException as e:  # noqa: BLE001 - never lose a case: an Oloproof bug is a judge error too
            event = request.judgement("error", error=f"{type(e).__name__}: {e}"[:500])
        self._done.put((pending, k, event))

    def _judgement(self, request: JudgeRequest, view: Any) -> JudgementRecorded:
        provider = self.providers.get(request.criterion)
        if provider is not None:
            from oloproof.app.judge_provider import JudgeFailure

            try:
                verdict, explanation, raw = provider.ask(request.prompt)
            except JudgeFailure as e:
                return request.judgement("error", error=str(e))
            return request.judgement(verdict, explanation, raw)
        fn = self.judges[request.criterion].function
        return call_python_judge(fn, request, view)

    def finished(self, timeout: float = 0.0) -> list[tuple[Any, list[JudgementRecorded]]]:
        """Cases whose judges have all answered: (tag, judgements in request order). Waits up
        to ``timeout`` seconds for the first answer."""
        out = []
        block = timeout > 0
        while True:
            try:
                pending, k, event = self._done.get(block=block, timeout=timeout if block else None)
            except queue.Empty:
                break
            block = False
            pending.answers[k] = event
            if len(pending.answers) == len(pending.requests):
                self.outstanding -= 1
                out.append((pending.tag, [pending.answers[j] for j in range(len(pending.requests))]))
        return out


def call_python_judge(fn: Callable[..., Any] | None, request: JudgeRequest, view: Any) -> JudgementRecorded:
    """Ask a Python judge: ``fn(prompt, case=view)`` must return ``{"verdict": "pass" | "fail" |
    "unsure", "explanation": ...}``; anything else is ``unsure`` (its value kept as the raw
    response), an exception a judgement with verdict ``error``."""
    if fn is None:
        return request.judgement("error", error=f"the Python judge {request.judge} is not imported")
    try:
        value = fn(request.prompt, case=view)
    except (KeyboardInterrupt, Interrupted):
        raise
    except BaseException as e:  # noqa: BLE001 - the user's code: any error is a judge error
        text = " ".join(str(e).split())[:300] or "(no message)"
        return request.judgement("error", error=f"{type(e).__name__}: {text}")
    try:
        raw = msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError):
        raw = repr(value)[:10_000]
    verdict: JudgeVerdict
    verdict, explanation = parse_answer(value)
    return request.judgement(verdict, explanation, raw)


def judgement_appends(store: EventStore, stream: str, events: list[JudgementRecorded]) -> list[StreamAppend]:
    """What the driver commits for a case's new judgements: the events at the end of the case's
    stream, and each new answer (not an error, not an unreadable reply, not from the cache) as
    the first event of its cache stream when that stream is not there yet."""
    log = EventLog(store)
    appends = [log.batch(stream, store.stream_length(stream), events)]
    seen = set()
    for event in events:
        if event.cached or event.verdict == "error" or (event.verdict == "unsure" and event.explanation in UNREADABLE):
            continue  # no answer to keep: the next run asks again

        key = JUDGEMENT_CACHE + cache_key(event.judge, event.model, event.rubric_digest, event.prompt_digest)
        if key in seen or store.stream_length(key):
            continue
        seen.add(key)
        appends.append(log.batch(key, 0, [event]))
    return appends


__all__ = ["Judging", "call_python_judge", "judge_concurrency", "judgement_appends"]
