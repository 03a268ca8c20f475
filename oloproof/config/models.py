"""Validated models of ``oloproof.yaml`` and ``release.yaml`` (pydantic, unknown keys rejected).

Numbers: a boolean is not a number (``min_slice_support: true`` is refused, not taken as 1)
and a number is not a boolean; NaN and infinite values are refused — ``.inf``/``.nan`` by the
loader wherever they are, ``"inf"`` or ``1e999`` written as text by
:func:`~oloproof.config.locate.validate_model`, and ``allow_inf_nan=False`` besides. The
limits on the files themselves are in :mod:`oloproof.config.limits`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from oloproof.config import paths as state_paths
from oloproof.config.limits import (
    MAX_NAME_LENGTH,
    MAX_TRANSFORM_NAME,
    case_id_problem,
    quoted,
)
from oloproof.config.locate import Locator, did_you_mean, load_yaml, validate_model
from oloproof.errors import ConfigError
from oloproof.records import KNOWN_RECORDS

#: the most ``trials`` (and ``--trials``) may be
MAX_TRIALS = 1000
MAX_CODE_PATHS = 100  # entries of system.code


class Strict(BaseModel):
    """Base of every configuration model: unknown keys refused, frozen, NaN and infinity refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


#: characters of an evaluator's ``type:`` (a name such as ``agent_max_steps``)
MAX_TYPE_LENGTH = 100


def _evaluator_entry(item: dict[str, Any]) -> dict[str, Any]:
    if "type" not in item:
        raise ValueError("every evaluator needs a 'type'")
    kind = item["type"]
    if not isinstance(kind, str) or not kind or len(kind) > MAX_TYPE_LENGTH:
        got = f"a {type(kind).__name__}" if not isinstance(kind, str) else quoted(kind)
        raise ValueError(f"'type' must be the name of an evaluator type, got {got}")
    return item


class SystemConfig(Strict):
    """``system:`` in ``oloproof.yaml`` (SPEC §3): name, version, the ``module:attribute`` to
    call, the records it promises (known ones only), and optionally a factory and more code
    paths. When the system also has ``@system(...)``, the two must agree."""

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    version: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    callable: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, description="module:attribute, e.g. app:run")
    records: tuple[str, ...] = ()
    #: module:attribute of a zero-argument callable returning a fresh system object: how a
    #: system given as one object gets a sandbox per concurrent slot
    factory: str | None = Field(default=None, max_length=MAX_NAME_LENGTH)
    #: more files or folders the system reads (relative to the project folder, or absolute),
    #: digested with the project folder's files: a resume refuses a run whose inputs changed.
    #: None when unset, so that the stored configuration (and its digest) of a project without
    #: it stays what it was
    code: list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]] | None = \
        Field(default=None, max_length=MAX_CODE_PATHS)

    @field_validator("callable", "factory")
    @classmethod
    def _callable_shape(cls, v: str | None) -> str | None:
        if v is None:
            return v
        module, sep, attr = v.partition(":")
        if not sep or not module or not attr:
            raise ValueError("must be 'module:attribute', e.g. 'app:run'")
        return v

    @field_validator("records")
    @classmethod
    def _known_records(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for r in v:
            if r not in KNOWN_RECORDS:
                raise ValueError(f"unknown record {quoted(r)} (known: {', '.join(KNOWN_RECORDS)})")
        return v


class MetricConfig(Strict):
    """One ``metrics:`` entry (SPEC §5.2): a quantile (strictly between 0 and 1) of a per-case
    ``source`` — steps, tool calls, cost, tokens, latency (reported), wall time and calls
    (observed) or an output field."""

    id: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    type: Literal["quantile"]
    source: str = Field(min_length=1, max_length=MAX_NAME_LENGTH,
                        description="agent_steps, agent_tool_calls, cost, tokens, latency_ms, wall_ms, model_calls, "
                                    "tool_calls or an output field")
    quantile: float = Field(gt=0, lt=1)


#: what a metamorphic transform may rewrite: ``input.PATH`` or ``initial_state.PATH``
TRANSFORM_ROOTS = ("input", "initial_state")


class TransformConfig(Strict):
    """A metamorphic transform (SPEC §7.2, §18.5): rewrite one value of every source case with
    ``template`` — ``input[field]``, or the value at ``target``: ``input.PATH`` or
    ``initial_state.PATH`` (an injection placed in the environment, not in the request).
    Exactly one of ``field`` and ``target``."""

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    #: the ``input`` key to rewrite (one key, taken literally: a dot in it is no path)
    field: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_LENGTH)
    #: ``input.PATH`` or ``initial_state.PATH`` (the path syntax of state evaluators)
    target: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_LENGTH)
    template: str
    validity_labels: str | None = None
    minimum_validity: float = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_target(self) -> TransformConfig:
        if (self.field is None) == (self.target is None):
            raise ValueError("give exactly one of field (an input key) and target (input.PATH or "
                             "initial_state.PATH)")
        if self.target is not None:
            root, dot, rest = self.target.partition(".")
            if root in TRANSFORM_ROOTS and not rest:
                raise ValueError(f"target {quoted(self.target)} names no path: write {root}.PATH "
                                 "(e.g. initial_state.inbox[0].body)")
            if root not in TRANSFORM_ROOTS or not dot:
                raise ValueError(f"target {quoted(self.target)} must start with input. or initial_state. "
                                 f"(e.g. initial_state.inbox[0].body){did_you_mean(root, TRANSFORM_ROOTS)}")
            try:
                state_paths.parse_path(rest)
            except state_paths.PathError as e:
                raise ValueError(f"target {quoted(self.target)}: {e}") from None
        return self

    @property
    def root(self) -> str:
        """``input`` or ``initial_state``: the part of the case the transform rewrites."""
        return "input" if self.target is None else self.target.partition(".")[0]

    @property
    def path(self) -> tuple[Any, ...]:
        """The path of the rewritten value under :attr:`root` (``(field,)`` for ``field:``)."""
        if self.target is None:
            return (self.field,)
        return state_paths.parse_path(self.target.partition(".")[2])

    @property
    def label(self) -> str:
        """Where the transform writes, as messages and the case panel show it:
        ``input.message``, ``initial_state.inbox[0].body``."""
        if self.target is None:
            return f"input.{self.field}"
        return f"{self.root}.{state_paths.format_path(self.path)}"

    def original(self, input: Any, initial_state: Any) -> Any:
        """The value the transform rewrites in a case with this ``input`` and
        ``initial_state`` (:data:`oloproof.config.paths.ABSENT` when the case has none)."""
        return state_paths.resolve(input if self.root == "input" else initial_state, self.path)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if "~" in v:
            raise ValueError("a transform name must not contain '~' (it separates <source>~<transform>)")
        if len(v) > MAX_TRANSFORM_NAME:
            raise ValueError(f"a transform name has at most {MAX_TRANSFORM_NAME} characters (it ends "
                             f"every derived case id), got {quoted(v)}")
        problem = case_id_problem(v)  # it is part of the derived cases' ids
        if problem is not None:
            raise ValueError(f"a transform name {problem}")
        return v

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        if "{value}" not in v:
            raise ValueError("the template must contain {value} (the field's original text)")
        return v


class MetamorphicConfig(Strict):
    """``metamorphic:`` in ``oloproof.yaml`` (SPEC §7.2): at least one transform, names unique."""

    transforms: list[TransformConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> MetamorphicConfig:
        seen = set()
        for t in self.transforms:
            if t.name in seen:
                raise ValueError(f"two transforms are named {t.name!r}")
            seen.add(t.name)
        return self


class PrefixConfig(Strict):
    """``prefix:`` in ``oloproof.yaml`` (SPEC §14a): how ``oloproof prefix run`` runs the
    project's frozen prefix cases."""

    #: the folder of prefix cases (``prefixes/<case_id>.yaml``)
    cases: str = Field(default="prefixes", min_length=1, max_length=MAX_NAME_LENGTH)
    #: ``version:V``, ``pin:NAME`` or a run id: the prefix run is compared with it case by
    #: case, and the gate blocks on more than ``max_regressions`` newly failing cases
    baseline: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_LENGTH)
    max_regressions: int = Field(default=0, ge=0)
    #: runs of every prefix case: pass^k of cases marked ``irreversible: true``
    trials: int = Field(default=1, ge=1, le=MAX_TRIALS)
    #: a release.yaml for prefix runs, replacing the built-in rules
    release: str | None = Field(default=None, max_length=MAX_NAME_LENGTH)
    #: evaluators run beside the built-in prefix criteria (``claims_supported`` …)
    evaluators: list[Annotated[dict[str, Any], AfterValidator(_evaluator_entry)]] = []
    #: paths ``prefix create`` always redacts (``state.customers.*.email``, ``**.card``)
    redact: list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]] = []
    #: quantile metrics of prefix runs (cost, tokens, latency_ms of the short run …)
    metrics: list[MetricConfig] = []
    #: control systems for ``attribute --bisect --control NAME``: NAME -> module:attribute
    controls: dict[str, Annotated[str, Field(min_length=3, max_length=MAX_NAME_LENGTH)]] = {}

    @field_validator("controls")
    @classmethod
    def _control_shape(cls, v: dict[str, str]) -> dict[str, str]:
        for name, spec in v.items():
            module, sep, attr = spec.partition(":")
            if not (sep and module and attr):
                raise ValueError(f"control {name!r}: {spec!r} must be module:attribute (e.g. agent:AgentV2)")
        return v


#: the errors ``retries: {on: [...]}`` may name: the infrastructure's, never a verdict
RETRY_ON = ("worker_died", "case_timeout", "system_error")
#: the most ``retries.max`` may be
MAX_RETRIES = 10


class RetriesConfig(Strict):
    """``retries: {max: N, on: [worker_died, case_timeout, system_error]}`` (SPEC §18.8): a case
    whose attempt ended with one of the errors listed, and failed no criterion, is run again,
    at most ``max`` more times. Every attempt stays in the log; the verdict is the last
    attempt's. A case that failed a criterion is never run again."""

    #: how many more times a case may run after its first attempt
    max: int = Field(ge=1, le=MAX_RETRIES)
    #: the error kinds that are retried (at least one; each of :data:`RETRY_ON`)
    on: list[Literal["worker_died", "case_timeout", "system_error"]] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _on_is_a_key(cls, data: Any) -> Any:
        # YAML 1.1 reads a plain `on` key as the boolean true (GitHub Actions' `on:` too):
        # here it can only mean the key `on`
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("max", mode="before")
    @classmethod
    def _whole(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("must be a whole number of retries, got a boolean")
        return v

    @field_validator("on")
    @classmethod
    def _once_each(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("an error kind is listed twice")
        return v


class ProjectConfig(Strict):
    """The whole of ``oloproof.yaml`` (SPEC §3): the system, the suite's kind (regression or
    capability), the case file, evaluators, metrics (ids unique), slices, metamorphic
    transforms, the release file, timeout, trials, prefix cases and attribution settings."""

    system: SystemConfig
    #: what the suite is for (seeds/fault-injection-release-gate): ``regression`` — failures
    #: the agent may no longer repeat, a high expected pass rate: every criterion no release
    #: rule names gets the default rule ``max_failures: 0`` (oloproof.evaluate.gate.kind_rules);
    #: ``capability`` — a hard suite that may start low: it reports, and a gate on it is
    #: labelled a capability gate. None: not declared, the release rules alone
    kind: Literal["regression", "capability"] | None = None
    cases: str = "cases.jsonl"
    evaluators: list[Annotated[dict[str, Any], AfterValidator(_evaluator_entry)]] = []
    metrics: list[MetricConfig] = []
    slices: list[Annotated[str, Field(max_length=MAX_NAME_LENGTH)]] = []
    min_slice_support: int = Field(default=3, ge=1)
    metamorphic: MetamorphicConfig | None = None
    release: str | None = None
    #: seconds a case (or one replay) may take; past it the case is missing (case_timeout)
    timeout: float | None = Field(default=None, gt=0, le=7 * 24 * 3600, allow_inf_nan=False)
    #: times every case runs (a stochastic agent): each trial its own recording, the trials of
    #: a case one cluster; criteria then report pass^k beside the rate (SPEC §13)
    trials: int = Field(default=1, ge=1, le=MAX_TRIALS)
    #: run a case again after an infrastructure error (``worker_died``, ``case_timeout``,
    #: ``system_error``, as listed); None: never
    retries: RetriesConfig | None = None
    #: frozen prefix cases (``oloproof prefix run``)
    prefix: PrefixConfig | None = None
    #: the rules of ``oloproof attribute`` (tools that verify or change, protected paths …;
    #: see oloproof.evaluate.attribution.AttributionSettings), validated when used
    attribution: dict[str, Any] | None = None

    @field_validator("timeout", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("must be a number of seconds, got a boolean")
        return v

    @model_validator(mode="after")
    def _unique_metric_ids(self) -> ProjectConfig:
        seen = set()
        for m in self.metrics:
            if m.id in seen:
                raise ValueError(f"metric id {m.id!r} is used twice")
            seen.add(m.id)
        return self


class NoRegression(Strict):
    """``no_regression: {baseline: version:v1, max_regressions: 0}`` (or ``max_p: 0.05``): the
    candidate against a baseline run of the log, case by case."""

    #: ``version:V`` (the latest finished run of version V before this one), ``pin:NAME`` (a
    #: run pinned with ``oloproof runs --pin``) or a run id
    baseline: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    max_regressions: int | None = Field(default=None, ge=0)
    max_p: float | None = Field(default=None, gt=0, le=1)
    #: the fewest cases the candidate must pair with its baseline (same id and fingerprint)
    #: for the rule to decide anything; default: half of the candidate's cases, rounded up,
    #: and at least 1. Fewer: INSUFFICIENT_EVIDENCE (``too_few_pairs``) — zero pairs are no
    #: evidence of "no regression"
    min_paired: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_limit(self) -> NoRegression:
        if (self.max_regressions is None) == (self.max_p is None):
            raise ValueError("no_regression needs exactly one of max_regressions, max_p")
        kind, _, value = self.baseline.partition(":")
        if kind in ("version", "pin") and not value:
            raise ValueError(f"baseline {self.baseline!r}: name the {kind} after '{kind}:'")
        if self.baseline == "latest":
            raise ValueError("baseline 'latest' would be the run being gated; use version:V or pin:NAME")
        return self


RULE_KINDS = ("max_failures", "min_lower_bound", "min_rate", "no_regression", "min_pass_hat_k")


class Rule(Strict):
    """One release rule (SPEC §8): a named criterion and exactly one of the rule kinds
    (``max_failures``, ``min_lower_bound``, ``min_rate``, ``no_regression``, ``min_pass_hat_k``)."""

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    criterion: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    max_failures: int | None = Field(default=None, ge=0)
    min_lower_bound: float | None = Field(default=None, ge=0, le=1)
    min_rate: float | None = Field(default=None, ge=0, le=1)
    no_regression: NoRegression | None = None
    #: the least the low end of the criterion's pass^k interval may be (runs with trials > 1)
    min_pass_hat_k: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _one_kind(self) -> Rule:
        kinds = [k for k in RULE_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"a rule needs exactly one of {', '.join(RULE_KINDS)}"
                + (f" (got {', '.join(kinds)})" if kinds else "")
            )
        return self

    @property
    def kind(self) -> str:
        """Which of :data:`RULE_KINDS` the rule sets (the validator allows exactly one)."""
        for k in RULE_KINDS:
            if getattr(self, k) is not None:
                return k
        raise AssertionError("unreachable")

    @property
    def threshold(self) -> float:
        """The rule's limit as a number: its kind's value, or for ``no_regression`` its
        ``max_regressions`` (else its ``max_p``)."""
        if self.no_regression is not None:
            nr = self.no_regression
            limit = nr.max_regressions if nr.max_regressions is not None else nr.max_p
            if limit is None:  # NoRegression's validator requires one of them
                raise ValueError("no_regression needs exactly one of max_regressions, max_p")
            return float(limit)
        return getattr(self, self.kind)


class ReleaseConfig(Strict):
    """``release.yaml`` (SPEC §8): the rules (names unique), and whether rules on clustered
    cases may use approximate (cluster-adjusted) methods; without it such a rule is
    ``INSUFFICIENT_EVIDENCE``."""

    allow_approximate_methods: bool = False
    rules: list[Rule] = []

    @model_validator(mode="after")
    def _unique_names(self) -> ReleaseConfig:
        seen = set()
        for r in self.rules:
            if r.name in seen:
                raise ValueError(f"rule name {r.name!r} is used twice")
            seen.add(r.name)
        return self


def validate_yaml(model: type[Strict], data: Any, locator: Locator) -> Any:
    """``data`` (a loaded YAML document; empty counts as ``{}``) validated as ``model``, every
    problem located with ``locator``.

    Raises:
        ConfigError: the document is not a mapping, or does not validate.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{locator.where()}: expected a mapping at the top level, got {type(data).__name__}")
    return validate_model(model, data, locator.where)


def load_project_config(path: Path) -> tuple[ProjectConfig, Any, Locator]:
    """Load ``oloproof.yaml``: the validated model, the raw data and its locator."""
    data, locator = load_yaml(path)
    return validate_yaml(ProjectConfig, data, locator), data, locator


def load_release_config(path: Path) -> tuple[ReleaseConfig, Locator]:
    """Load ``release.yaml``: the validated model and its locator."""
    data, locator = load_yaml(path)
    return validate_yaml(ReleaseConfig, data, locator), locator
