"""Calibrated model judges (SPEC §18.6): ``{type: model_judge, criterion, rubric, judge, sees,
after, calibration, min_labels, min_agreement}``.

A model judge answers a semantic question code cannot (is the reply polite, does it answer the
question asked). Its answers are evidence like any other, so:

* **Judgements are events.** The app layer asks the judge while a run records (the driver,
  :mod:`oloproof.app.judging`) and appends its answer to the case's stream as a
  :class:`~oloproof.events.JudgementRecorded`; this evaluator only *reads* them. ``eval``,
  ``gate``, ``view``, ``diff``, ``export`` and ``show`` never call a judge: a judged run gives
  the same verdicts with the judge unreachable. The evaluator's :attr:`ModelJudge.judge_spec`
  says which judgements it needs (as ``replay_spec`` says which replays a fault evaluator
  needs); the runner produces them first.
* **The verdict**, in this order: a case ``when:`` does not select is ``excluded``
  (``not_selected``); a case whose system raised is ``missing`` (its error kind); a case that
  did not pass every ``after:`` criterion is ``excluded`` (``deterministic_check_failed``) and
  is never sent to the judge; with ``sees: [trajectory]`` a case that recorded no trajectory is
  ``missing`` (``no_trajectory_recorded``) and a truncated one ``missing`` (``truncated``: a
  prefix cannot show the judge what the whole run did); a case with no judgement by this judge
  (same judge id, model, rubric digest and ``sees``) is ``missing`` (``not_judged``: the run
  did not ask it — a rubric changed since, say); then the judgement decides: ``pass``,
  ``fail``, ``unsure`` (also a reply that is not the JSON object) ``missing`` (``judge_unsure``),
  a judge that errored or timed out ``missing`` (``judge_error``). Never ``pass`` without a
  judge's ``pass``.
* **Calibration.** People's labels (``labels/NAME.jsonl``, :mod:`oloproof.config.judge_labels`)
  measure the judge: agreement, sensitivity and specificity with exact intervals
  (:func:`calibrate`). Fewer than ``min_labels`` usable labels, or an agreement whose low end is
  below ``min_agreement``, and every gate rule on the criterion is ``INSUFFICIENT_EVIDENCE``
  (``judge_not_calibrated``); a calibrated criterion's rules read the judge-corrected interval
  (:mod:`oloproof.stats.correction`).

Pure: no I/O. The prompt is rendered here (:func:`render_prompt`), so its digest — the cache
key's part that says what the judge saw — is the same in a run and in a test.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from oloproof.evaluate.base import FAIL, PASS, Evaluator, EvaluatorConfig, Verdict, evaluator, excluded, missing
from oloproof.events import JudgementRecorded, JudgeVerdict, canonical_json
from oloproof.records import AGENT_TRAJECTORY_V1
from oloproof.stats.correction import METHOD, CorrectedRate, corrected_rate
from oloproof.stats.intervals import clopper_pearson
from oloproof.views import CaseView

#: reasons of this family's verdicts and gate rules
DETERMINISTIC_CHECK_FAILED = "deterministic_check_failed"
JUDGE_ERROR = "judge_error"
JUDGE_UNSURE = "judge_unsure"
NOT_JUDGED = "not_judged"
JUDGE_NOT_CALIBRATED = "judge_not_calibrated"
#: what a judge may be shown of a case, in the order the prompt shows it
SEES = ("input", "output", "trajectory")
#: the built-in provider
OPENAI_COMPATIBLE = "openai_compatible"

_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ProviderConfig(BaseModel):
    """``judge: {provider: openai_compatible, model, base_url_env, api_key_env, timeout,
    max_retries}``: a chat-completions endpoint. The base URL and the key are read from the
    environment variables named here, when the run asks the judge; neither is ever stored."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    provider: Literal["openai_compatible"]
    model: str = Field(min_length=1, max_length=200)
    #: the environment variable holding the base URL (``…/v1``; ``/chat/completions`` is added)
    base_url_env: str
    #: the environment variable holding the API key (sent as a bearer token); None: no key
    api_key_env: str | None = None
    #: seconds one request may take (connect and read)
    timeout: float = Field(default=60.0, gt=0, le=3600)
    #: retries of a transient failure (429, 5xx, a connection error or timeout) before
    #: the case is left ``missing`` (``judge_error``)
    max_retries: int = Field(default=3, ge=0, le=10)

    @model_validator(mode="before")
    @classmethod
    def _names_not_values(cls, data: Any) -> Any:
        # checked before field validation, so that a message never quotes the value: a key
        # written where its variable's name belongs must not be echoed into a terminal or CI log
        if isinstance(data, dict):
            for key in ("base_url_env", "api_key_env"):
                value = data.get(key)
                if isinstance(value, str) and not _ENV_NAME.fullmatch(value):
                    raise ValueError(f"{key} must be the NAME of an environment variable (letters, digits and _, "
                                     "e.g. OPENAI_API_KEY), not its value")
        return data


class ModelJudgeConfig(EvaluatorConfig):
    """Config of ``type: model_judge`` (module docstring; docs/configuration.md)."""

    criterion: str = Field(min_length=1)
    rubric: str = Field(min_length=1, max_length=100_000)
    #: ``module:function`` of a Python judge, or a provider (:class:`ProviderConfig`)
    judge: str | ProviderConfig
    sees: list[Literal["input", "output", "trajectory"]] = Field(default=["input", "output"], min_length=1)
    #: criteria every case must pass before the judge is asked (deterministic checks first)
    after: list[str] = []
    #: the labels file (``labels/NAME.jsonl``, relative to the project folder)
    calibration: str | None = Field(default=None, min_length=1)
    min_labels: int = Field(default=20, ge=1)
    min_agreement: float = Field(default=0.8, ge=0, le=1)

    @field_validator("judge", mode="before")
    @classmethod
    def _judge_shape(cls, v: Any) -> Any:
        if isinstance(v, str) and not _SPEC.fullmatch(v):
            raise ValueError("expected module:function of a Python judge (e.g. judges:polite) or "
                             "{provider: openai_compatible, model: ..., base_url_env: ..., api_key_env: ...}")
        return v

    @field_validator("sees")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("names a thing twice")
        return v


@dataclass(frozen=True)
class JudgeRequest:
    """One question for a judge about one case: what :mod:`oloproof.app.judging` sends, keyed
    like a replay by (judge, model, rubric digest, prompt digest)."""

    criterion: str
    judge: str
    model: str
    rubric_digest: str
    prompt: str
    prompt_digest: str
    sees: tuple[str, ...]

    @property
    def key(self) -> str:
        """The cache key: SHA-256 over judge, model, rubric digest and prompt digest."""
        return cache_key(self.judge, self.model, self.rubric_digest, self.prompt_digest)

    def judgement(self, verdict: JudgeVerdict, explanation: str = "", raw: str | None = None,
                  error: str | None = None) -> JudgementRecorded:
        """The event recording the judge's answer to this request."""
        return JudgementRecorded(criterion=self.criterion, judge=self.judge, model=self.model,
                                 rubric_digest=self.rubric_digest, prompt_digest=self.prompt_digest,
                                 sees=list(self.sees), verdict=verdict, explanation=explanation,
                                 raw_response=raw, prompt=self.prompt, error=error)


def sha256(text: str) -> str:
    """SHA-256 of ``text`` (UTF-8), hex."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def cache_key(judge: str, model: str, rubric_digest: str, prompt_digest: str) -> str:
    """What a judgement is cached under (the stream ``judgement/<key>``)."""
    return hashlib.sha256(canonical_json([judge, model, rubric_digest, prompt_digest])).hexdigest()


# ---- the prompt ----------------------------------------------------------------------------

_ASK = ('Reply with only a JSON object, no other text: {"verdict": "pass" | "fail" | "unsure", '
        '"explanation": "<one or two sentences>"}. "pass": the rubric is met; "fail": it is not; '
        '"unsure": what is shown does not decide it.')


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _one(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def render_trajectory(case: CaseView) -> str:
    """The case's steps, one line each: index, kind, agent, tool, arguments and result."""
    t = case.trajectory
    if t is None:
        return "(no trajectory recorded)"
    lines = []
    for s in t.steps:
        line = f"{s.index}. {s.kind}"
        if s.agent:
            line += f" [{s.agent}]"
        if s.kind == "handoff" and s.to_agent:
            line += f" -> {s.to_agent}"
        if s.tool_name:
            line += f" {s.tool_name}"
        if s.arguments is not None:
            line += f" {_one(s.arguments)}"
        if s.result is not None:
            line += f" => {_one(s.result)}"
        lines.append(line)
    lines.append(f"(terminal status: {t.terminal_status})")
    return "\n".join(lines)


def render_prompt(rubric: str, sees: tuple[str, ...], case: CaseView) -> str:
    """The one user message a judge gets: what it grades, the rubric, what it sees of the case
    (``sees``, in the order input, output, trajectory), and the JSON object to reply with."""
    parts = ["You are grading one run of an AI agent against a rubric.", "", "## Rubric", rubric.strip()]
    if "input" in sees:
        parts += ["", "## Input", _json(case.input)]
    if "output" in sees:
        parts += ["", "## Output", _json(case.output)]
    if "trajectory" in sees:
        parts += ["", "## Trajectory (the agent's steps)", render_trajectory(case)]
    parts += ["", "## Your answer", _ASK]
    return "\n".join(parts)


# ---- a judge's reply -----------------------------------------------------------------------

NOT_THE_OBJECT = ('the reply is not the JSON object {"verdict": "pass" | "fail" | "unsure", '
                  '"explanation": ...}: counted as unsure')
#: the explanation of a provider's reply that is not a chat completion at all
NOT_A_COMPLETION = "the provider's reply is not a chat completion: counted as unsure"
#: explanations of an ``unsure`` that is no answer (the reply was unreadable): never cached,
#: so the next run asks again
UNREADABLE = (NOT_THE_OBJECT, NOT_A_COMPLETION)
_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*)\n```\Z", re.S)


def parse_answer(value: Any) -> tuple[JudgeVerdict, str]:
    """A judge's answer as (verdict, explanation): a mapping with ``verdict`` ``pass``, ``fail``
    or ``unsure`` (any case) and an optional ``explanation``; anything else is ``unsure`` with
    :data:`NOT_THE_OBJECT` as its explanation."""
    if isinstance(value, Mapping):
        verdict = value.get("verdict")
        if isinstance(verdict, str) and verdict.strip().lower() in ("pass", "fail", "unsure"):
            explanation = value.get("explanation", "")
            if not isinstance(explanation, str):
                explanation = _one(explanation)
            return verdict.strip().lower(), explanation  # type: ignore[return-value]
    return "unsure", NOT_THE_OBJECT


def parse_reply(content: Any) -> tuple[JudgeVerdict, str]:
    """A provider's reply content (text) as (verdict, explanation): the JSON object, alone or
    in one fenced code block; anything else is ``unsure`` (:func:`parse_answer`)."""
    if not isinstance(content, str):
        return parse_answer(None)
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeError):
        return parse_answer(None)
    return parse_answer(value)


# ---- the evaluator -------------------------------------------------------------------------

@evaluator("model_judge")
class ModelJudge(Evaluator):
    """A semantic check answered by a model judge (module docstring): its verdict is the
    judge's recorded judgement of the case, read from the case's events, never a call."""

    config_model = ModelJudgeConfig
    config: ModelJudgeConfig

    def __init__(self, config: ModelJudgeConfig):
        super().__init__(config)
        self.rubric = config.rubric
        self.rubric_digest = sha256(config.rubric)
        self.sees = tuple(s for s in SEES if s in config.sees)
        self.after = tuple(config.after)
        provider = config.judge if isinstance(config.judge, ProviderConfig) else None
        #: the provider's settings, or None for a Python judge
        self.provider = provider
        #: ``openai_compatible`` or the ``module:function`` of the Python judge
        self.judge_id = OPENAI_COMPATIBLE if provider is not None else str(config.judge)
        #: the Python judge's code digest (the app layer sets it: :meth:`bind`); "" unknown
        self.digest = ""
        #: the imported Python judge; this module never calls it (the app layer does)
        self.function: Any = None
        #: case id -> (label, prompt digest the label was given for, or None)
        self.judge_labels: dict[str, tuple[str, str | None]] = {}
        self.min_labels = config.min_labels
        self.min_agreement = config.min_agreement
        if "trajectory" in self.sees:
            self.requires = (AGENT_TRAJECTORY_V1,)

    def default_criterion(self) -> str:
        return self.config.criterion

    @property
    def judge_spec(self) -> tuple[str, str]:
        """(judge id, model): which judge's judgements this evaluator reads; the runner asks
        that judge for what a case lacks before the case is judged."""
        return self.judge_id, self.model

    @property
    def model(self) -> str:
        """The provider's model, or ``code:<16 hex>`` of a Python judge's code."""
        if self.provider is not None:
            return self.provider.model
        return f"code:{self.digest[:16]}" if self.digest else "code:unknown"

    def bind(self, function: Any, digest: str) -> None:
        """Hand over the imported Python judge and the digest of its code (the app layer)."""
        self.function, self.digest = function, digest

    def set_labels(self, labels: Mapping[str, tuple[str, str | None]]) -> None:
        """People's labels of this criterion (case id -> (pass|fail, prompt digest or None))."""
        self.judge_labels = dict(labels)

    def request(self, case: CaseView) -> JudgeRequest:
        """The question this judge is asked about ``case``."""
        prompt = render_prompt(self.rubric, self.sees, case)
        return JudgeRequest(self.criterion, self.judge_id, self.model, self.rubric_digest, prompt,
                            sha256(prompt), self.sees)

    def judgement_of(self, case: CaseView) -> JudgementRecorded | None:
        """The case's latest judgement by this judge (judge id, model, rubric, ``sees``)."""
        model, sees = self.model, list(self.sees)
        for j in reversed(case.judgements):
            if (j.judge == self.judge_id and j.model == model and j.rubric_digest == self.rubric_digest
                    and j.sees == sees):
                return j
        return None

    def _before(self, case: CaseView, prior: Mapping[str, Verdict]) -> Verdict | None:
        """The verdict a case gets without a judgement, or None when the judge decides it."""
        if case.error is not None:
            return missing(case.error_kind or "system_error")
        for name in self.after:
            if prior.get(name, ("missing", None))[0] != "pass":
                return excluded(DETERMINISTIC_CHECK_FAILED)
        if "trajectory" in self.sees:
            if case.trajectory is None:
                return missing("no_trajectory_recorded")
            if case.trajectory.truncated:
                return missing("truncated")
        return None

    def pending(self, case: CaseView, prior: Mapping[str, Verdict]) -> bool:
        """Whether the judge must be asked about ``case``: it passed its ``after:`` criteria
        (``prior``: criterion -> verdict), can be shown, and has no judgement yet."""
        return self._before(case, prior) is None and self.judgement_of(case) is None

    def evaluate_after(self, case: CaseView, prior: Mapping[str, Verdict]) -> Verdict:
        """The verdict (module docstring), given the case's verdicts on the other criteria."""
        before = self._before(case, prior)
        if before is not None:
            return before
        j = self.judgement_of(case)
        if j is None:
            return missing(NOT_JUDGED)
        if j.verdict == "pass":
            return PASS
        if j.verdict == "fail":
            return FAIL
        return missing(JUDGE_ERROR if j.verdict == "error" else JUDGE_UNSURE)

    def evaluate(self, case: CaseView) -> Verdict:
        """Judged alone (no other criterion known): as if every ``after:`` criterion passed."""
        return self.evaluate_after(case, dict.fromkeys(self.after, PASS))

    def judge(self, case: CaseView) -> Verdict:
        return self.evaluate(case)

    def prompt_digest_of(self, case: CaseView) -> str:
        """The prompt digest of the judgement the verdict read ("" when none)."""
        j = self.judgement_of(case)
        return j.prompt_digest if j is not None else ""


# ---- calibration ---------------------------------------------------------------------------

@dataclass
class LabelTally:
    """A judge criterion's verdicts on labelled cases, as a run's cases are added."""

    true_pass: int = 0  # labelled pass, judged pass
    false_fail: int = 0  # labelled pass, judged fail
    true_fail: int = 0  # labelled fail, judged fail
    false_pass: int = 0  # labelled fail, judged pass
    unjudged: int = 0  # labelled, but the judge gave no pass or fail (missing, excluded)
    stale: int = 0  # labelled for another output than the one judged (its prompt digest)

    def add(self, label: str, verdict: str, digest_ok: bool) -> None:
        """Count one labelled case: its label, the criterion's verdict, whether the label was
        given for the output judged."""
        if not digest_ok:
            self.stale += 1
        elif verdict not in ("pass", "fail"):
            self.unjudged += 1
        elif label == "pass":
            if verdict == "pass":
                self.true_pass += 1
            else:
                self.false_fail += 1
        elif verdict == "fail":
            self.true_fail += 1
        else:
            self.false_pass += 1


@dataclass(frozen=True)
class JudgeCalibration:
    """How far a judge criterion's judge can be trusted, measured against people's labels, and
    the judge-corrected rate when it can (:func:`calibrate`)."""

    criterion: str
    labels: int  # labelled cases compared: the judge said pass or fail on the output labelled
    labels_given: int  # label lines for the criterion
    stale: int
    unjudged: int
    true_pass: int
    false_fail: int
    true_fail: int
    false_pass: int
    agreement: float | None
    agreement_low: float | None
    agreement_high: float | None
    sensitivity: float | None
    sensitivity_low: float | None
    sensitivity_high: float | None
    specificity: float | None
    specificity_low: float | None
    specificity_high: float | None
    min_labels: int
    min_agreement: float
    calibrated: bool
    #: why it is not calibrated, in words (None when it is)
    problem: str | None
    corrected: CorrectedRate | None


def _exact(k: int, n: int) -> tuple[float | None, float | None, float | None]:
    if n == 0:
        return None, None, None
    low, high = clopper_pearson(k, n)
    return k / n, low, high


def calibrate(criterion: str, tally: LabelTally, labels_given: int, row: Any, *, min_labels: int,
              min_agreement: float, apparent: Any = None) -> JudgeCalibration:
    """The calibration of a judge criterion from its labelled cases (``tally``) and its rate
    row (``row``, a :class:`~oloproof.stats.intervals.RateInterval`): agreement, sensitivity
    and specificity with Clopper–Pearson intervals; calibrated when at least ``min_labels``
    labels were compared and the agreement's low end is at least ``min_agreement``; then the
    corrected rate (:func:`~oloproof.stats.correction.corrected_rate`; ``apparent``: the
    criterion's interval at the correction's per-part level, cluster-aware when its cases are
    clustered — None: the exact one from ``row``'s counts)."""
    n = tally.true_pass + tally.false_fail + tally.true_fail + tally.false_pass
    agree = tally.true_pass + tally.true_fail
    agreement = _exact(agree, n)
    sensitivity = _exact(tally.true_pass, tally.true_pass + tally.false_fail)
    specificity = _exact(tally.true_fail, tally.true_fail + tally.false_pass)
    problem = None
    if n < min_labels:
        problem = f"{n} usable label{'s' if n != 1 else ''} < {min_labels} needed (min_labels)"
    elif not (tally.true_pass + tally.false_fail and tally.true_fail + tally.false_pass):
        which = "pass" if not tally.true_pass + tally.false_fail else "fail"
        problem = (f"no case labelled {which} among those compared: the judge's "
                   f"{'sensitivity' if which == 'pass' else 'specificity'} is unknown")
    elif agreement[1] is not None and agreement[1] < min_agreement:
        problem = (f"agreement low end {agreement[1] * 100:.1f} % < {min_agreement * 100:g} % "
                   "needed (min_agreement)")
    corrected = None
    if problem is None:
        corrected = corrected_rate(row.passed, row.observed, row.missing, true_pass=tally.true_pass,
                                   false_fail=tally.false_fail, true_fail=tally.true_fail,
                                   false_pass=tally.false_pass,
                                   apparent=None if apparent is None else (apparent.low, apparent.high),
                                   method=None if apparent is None or not apparent.approximate
                                   else f"{METHOD}+{apparent.method}")
    return JudgeCalibration(criterion, n, labels_given, tally.stale, tally.unjudged, tally.true_pass,
                            tally.false_fail, tally.true_fail, tally.false_pass, *agreement, *sensitivity,
                            *specificity, min_labels, min_agreement, problem is None, problem, corrected)


__all__ = [
    "DETERMINISTIC_CHECK_FAILED",
    "JUDGE_ERROR",
    "JUDGE_NOT_CALIBRATED",
    "JUDGE_UNSURE",
    "NOT_JUDGED",
    "JudgeCalibration",
    "JudgeRequest",
    "LabelTally",
    "ModelJudge",
    "ModelJudgeConfig",
    "ProviderConfig",
    "calibrate",
    "parse_answer",
    "parse_reply",
    "render_prompt",
]


def check_after(evaluators: list[Evaluator], where_criterion: Mapping[str, int], locator: Any) -> None:
    """Every ``after:`` criterion of a model judge is produced by another evaluator that is
    not a model judge (deterministic checks first); else a located
    :class:`~oloproof.errors.ConfigError` with a did-you-mean."""
    from oloproof.config.locate import did_you_mean
    from oloproof.errors import ConfigError

    judges = {e.criterion for e in evaluators if isinstance(e, ModelJudge)}
    for i, e in enumerate(evaluators):
        if not isinstance(e, ModelJudge):
            continue
        for k, name in enumerate(e.after):
            where = locator.where(("evaluators", i, "after", k))
            if name not in where_criterion:
                raise ConfigError(f"{where}: evaluators[{i}].after[{k}]: no evaluator produces {name!r}"
                                  f"{did_you_mean(name, where_criterion)} (criteria: {', '.join(where_criterion)})")
            if name in judges:
                raise ConfigError(f"{where}: evaluators[{i}].after[{k}]: {name!r} is a model judge's criterion; "
                                  "after: names deterministic checks, which run before any judge")
