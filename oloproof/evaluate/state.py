"""Environment-state evaluators (SPEC §4.3). Each needs ``records: [environment_state/v1]``.

They compare the state the sandbox was left in (the ``environment_state/v1`` snapshot) with
``expected.state`` or with ``initial_state``, and report every path they compared: initial,
expected and recorded value and the verdict, which the case panel shows. A case whose system
recorded no state is ``missing`` (``no_state_recorded``), never ``pass``. The state is the
environment's, not the agent's, so a truncated trace changes nothing here.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from pydantic import Field, field_validator

from oloproof.evaluate.base import (
    FAIL,
    PASS,
    Evaluator,
    EvaluatorConfig,
    Verdict,
    evaluator,
    excluded,
    missing,
)
from oloproof.evaluate.paths import (
    ABSENT,
    Path,
    PathError,
    equal,
    format_path,
    leaves,
    parse_path,
    resolve,
    walk_leaves,
)
from oloproof.records import ENVIRONMENT_STATE_V1
from oloproof.views import NO_STATE, CaseView


class PathCheck(msgspec.Struct, frozen=True, omit_defaults=True):
    """One compared path, as the case panel and the JSON results show it."""

    criterion: str
    path: str
    verdict: str
    initial: Any = msgspec.UNSET
    expected: Any = msgspec.UNSET
    recorded: Any = msgspec.UNSET
    note: str | None = None


def _paths(v: list[str]) -> list[str]:
    for p in v:
        try:
            parse_path(p)
        except PathError as e:
            raise ValueError(str(e)) from None
    return v


class StateMatchesConfig(EvaluatorConfig):
    """Config of ``type: state_matches``: ``mode`` (``whole`` or ``subset``), the ``paths``
    to compare (None: the whole state; each must parse) and the numeric ``tolerance``."""

    mode: Literal["whole", "subset"] = "whole"
    paths: list[str] | None = None
    tolerance: float = Field(default=0.0, ge=0)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, v: list[str] | None) -> list[str] | None:
        return v if v is None else _paths(v)


class StateUnchangedConfig(EvaluatorConfig):
    """Config of ``type: state_unchanged``: the paths that must keep their initial value (at
    least one; each must parse) and the numeric ``tolerance``."""

    paths: list[str] = Field(min_length=1)
    tolerance: float = Field(default=0.0, ge=0)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, v: list[str]) -> list[str]:
        return _paths(v)


class StateEvaluator(Evaluator):
    """Base of the environment-state families: they require ``environment_state/v1`` and
    report every path they compared (``has_paths``) beside the verdict."""

    requires = (ENVIRONMENT_STATE_V1,)
    has_paths = True

    def judge(self, case: CaseView) -> Verdict:
        """The verdict of :meth:`judge_paths`, without its path checks."""
        return self.judge_paths(case)[0]

    def evaluate_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        """The verdict and the compared paths: missing with no paths when the system raised,
        otherwise :meth:`judge_paths`."""
        if case.error is not None:
            return missing(case.error_kind or "system_error"), []
        return self.judge_paths(case)

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        """The family's rule over the recorded state: the verdict and every path compared.
        A case that recorded no state is missing (``no_state_recorded``), never a pass; the
        other conditions are in each family's docstring."""
        raise NotImplementedError

    def check(self, path: Path, initial: Any, expected: Any, recorded: Any, ok: bool,
              note: str | None = None) -> PathCheck:
        """A :class:`PathCheck` of this criterion for ``path``, ``pass`` when ``ok``; a
        recorded value that is absent gets the note "not in the recorded state" unless
        another note is given."""
        if recorded is ABSENT and note is None:
            note = "not in the recorded state"
        return PathCheck(self.criterion, format_path(path), "pass" if ok else "fail",
                         initial, expected, recorded, note)


@evaluator("state_matches")
class StateMatches(StateEvaluator):
    """The recorded state equals ``expected.state``.

    ``mode: whole`` — equal; ``mode: subset`` — every leaf of the expected state equals the
    recorded leaf. With ``paths``, only those paths are compared (a path the case's expected
    state does not mention is skipped). Numeric leaves match within ``tolerance``. No
    ``expected.state`` (or nothing left to compare) → excluded (``no_expected_state``).
    """

    config_model = StateMatchesConfig
    config: StateMatchesConfig

    def __init__(self, config: StateMatchesConfig):
        super().__init__(config)
        paths = config.paths
        self._roots: list[Path] = [()] if paths is None else [parse_path(p) for p in paths]

    def default_criterion(self) -> str:
        return "state_matches"

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        cfg: StateMatchesConfig = self.config
        if "state" not in case.expected:
            return excluded("no_expected_state"), []
        if case.state is NO_STATE:
            return missing("no_state_recorded"), []
        expected_state, recorded, initial = case.expected["state"], case.state, case.initial_state
        roots = self._roots
        checks: list[PathCheck] = []
        tol = cfg.tolerance
        for root in roots:
            exp = resolve(expected_state, root)
            if exp is ABSENT:
                continue
            rec = resolve(recorded, root)
            if cfg.mode == "subset":
                crit = self.criterion
                for path, leaf, got, before in walk_leaves(exp, rec, resolve(initial, root), format_path(root)):
                    ok = got is not ABSENT and equal(leaf, got, tol)
                    checks.append(PathCheck(crit, path, "pass" if ok else "fail", before, leaf, got,
                                            None if got is not ABSENT else "not in the recorded state"))
            else:
                checks.extend(self._whole(root, exp, rec, initial, tol))
        if not checks:
            return excluded("no_expected_state"), []
        return (PASS if all(c.verdict == "pass" for c in checks) else FAIL), checks

    def _whole(self, root: Path, exp: Any, rec: Any, initial: Any, tol: float) -> list[PathCheck]:
        if rec is ABSENT:
            return [self.check(root, resolve(initial, root), exp, ABSENT, False)]
        if equal(exp, rec, tol):
            return [self.check(root, resolve(initial, root), exp, rec, True)]
        checks = []
        seen = set()
        for sub, leaf in leaves(exp):
            got = resolve(rec, sub)
            seen.add(sub)
            path = root + sub
            checks.append(self.check(path, resolve(initial, path), leaf, got,
                                     got is not ABSENT and equal(leaf, got, tol)))
        for sub, leaf in leaves(rec):
            if sub not in seen and resolve(exp, sub) is ABSENT:
                path = root + sub
                checks.append(self.check(path, resolve(initial, path), ABSENT, leaf, False,
                                         "not in the expected state"))
        if all(c.verdict == "pass" for c in checks):  # e.g. a container leaf vs nested values
            checks.append(self.check(root, resolve(initial, root), exp, rec, False))
        return checks


@evaluator("state_unchanged")
class StateUnchanged(StateEvaluator):
    """Every listed path still holds its ``initial_state`` value.

    A path absent from the case's ``initial_state`` is listed but not compared; when no path
    can be compared the case is excluded (``path_not_in_initial_state``).
    """

    config_model = StateUnchangedConfig
    config: StateUnchangedConfig

    def __init__(self, config: StateUnchangedConfig):
        super().__init__(config)
        self._paths = [(parse_path(p), format_path(parse_path(p))) for p in config.paths]

    def default_criterion(self) -> str:
        return "state_unchanged"

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        cfg: StateUnchangedConfig = self.config
        if case.state is NO_STATE:
            return missing("no_state_recorded"), []
        checks = []
        compared = 0
        crit, tol = self.criterion, cfg.tolerance
        for path, text in self._paths:
            before = resolve(case.initial_state, path)
            after = resolve(case.state, path)
            if before is ABSENT:
                checks.append(PathCheck(crit, text, "excluded", recorded=after, note="not in initial_state"))
                continue
            compared += 1
            ok = after is not ABSENT and equal(before, after, tol)
            checks.append(PathCheck(crit, text, "pass" if ok else "fail", before, before, after,
                                    None if after is not ABSENT else "not in the recorded state"))
        if not compared:
            return excluded("path_not_in_initial_state"), checks
        return (PASS if all(c.verdict != "fail" for c in checks) else FAIL), checks
