"""Checks written in Python (SPEC §18.5): ``{type: python, criterion: NAME, function: module:fn}``.

The function receives a public :class:`oloproof.CaseView` (:func:`public_view`: a fresh,
frozen projection of the recorded case) and returns an :class:`oloproof.Verdict`.

* A case whose system raised is ``missing`` (its error kind) without calling the function,
  as for every evaluator; ``when:`` scopes it like any other.
* The function raising is ``missing`` with reason ``evaluator_error``, and its traceback (the
  user's frames; paths inside the project folder relative to it, so the same code gives the
  same text anywhere) travels with the verdict as a :class:`PathCheck` into the case result,
  which ``oloproof show RUN CASE`` and the HTML panel print. A return value that is not a
  ``Verdict`` is ``missing`` (``evaluator_error``) too, with a message naming what came back.
  Never ``pass``.
* The function is user code: this module never imports it. The app layer imports it (from
  ``oloproof.yaml``: a located configuration error, exit 2; for a stored run: see
  :mod:`oloproof.app.project`) and hands it over with :meth:`PythonCheck.bind`, with the
  digest of its code; a check that could not be imported is :meth:`PythonCheck.unbound` and
  judges every case ``missing`` (``evaluator_error``) with the reason.

Pure: no I/O (the digest and the folder come from the app layer).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from pydantic import Field, field_validator

from oloproof.errors import Interrupted
from oloproof.evaluate.base import (
    FAIL,
    PASS,
    Evaluator,
    EvaluatorConfig,
    PluginWarning,
    evaluator,
    missing,
)
from oloproof.evaluate.base import Verdict as VerdictTuple
from oloproof.evaluate.state import PathCheck
from oloproof.records import CaseView as PublicCaseView
from oloproof.records import Verdict, quoted
from oloproof.views import NO_STATE, CaseView, ReplayView

#: the reason of a check that raised, returned something else than a Verdict, or could not be
#: imported
EVALUATOR_ERROR = "evaluator_error"
#: what a check's error note starts with (see :func:`evaluator_errors`)
_ERROR_NOTE = EVALUATOR_ERROR + ": "

#: the memory address in a repr (``<generator object f at 0x7f…>``): it differs from run to run
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PythonConfig(EvaluatorConfig):
    """Config of ``type: python``: the criterion's name (required) and the ``function`` that
    judges a case, as ``module:function`` (a dotted module of the project folder or an installed
    package, and a dotted attribute of it)."""

    criterion: str = Field(min_length=1)
    function: str

    @field_validator("function")
    @classmethod
    def _check_spec(cls, v: str) -> str:
        if not _SPEC.fullmatch(v):
            raise ValueError("expected module:function (e.g. checks:transfer_is_right)")
        return v


class CheckWarning(PluginWarning):
    """A stored run re-judged with a python check whose code changed since the run was recorded,
    or that cannot be imported any more: shown as a ``warning: …`` line like a plugin's."""


def function_problem(fn: Any) -> str | None:
    """Why ``fn`` cannot be a check, or None: it must be callable, synchronous, and take the case
    as its one positional argument."""
    if not callable(fn):
        return f"is not callable (it is {type(fn).__name__} {quoted(fn)})"
    call = None if inspect.isroutine(fn) or isinstance(fn, type) else type(fn).__call__
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(call):
        return "is an async function; a check is a plain function: def check(case) -> oloproof.Verdict"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: it will tell when called
        return None
    try:
        signature.bind(object())
    except TypeError:
        return f"must take one argument, the case (its signature is {signature})"
    return None


@evaluator("python")
class PythonCheck(Evaluator):
    """A check written in Python: ``function(case: oloproof.CaseView) -> oloproof.Verdict``.

    The verdict is the function's; the rules around it are in the module docstring: a case
    whose system raised is missing without a call; the function raising, or returning anything
    but a Verdict, is missing (``evaluator_error``), its traceback or message reported beside
    the verdict. A truncated trace reaches the function with ``truncated`` set: the prefix rule
    is the function's to apply (return ``Verdict.missing("truncated")`` unless the prefix
    decides).
    """

    config_model = PythonConfig
    config: PythonConfig
    has_paths = True

    def __init__(self, config: PythonConfig):
        super().__init__(config)
        #: ``module:function``, as the configuration names it
        self.spec = config.function
        self._function: Callable[[PublicCaseView], Any] | None = None
        #: why the function is not there (it could not be imported): every case is missing
        self.problem: str | None = "its function was not imported (no configuration loaded it)"
        #: SHA-256 of the function's code (its module file) as bound; "" when unknown
        self.digest = ""
        self._root = ""
        #: runs this check's change (or import problem) was reported for (see :func:`changes`)
        self.reported: set[str] = set()

    def default_criterion(self) -> str:
        return self.config.criterion

    def bind(self, function: Callable[[PublicCaseView], Any], digest: str, root: str = "") -> None:
        """Hand the imported ``function`` over, with the ``digest`` of its code and the project
        folder (``root``: frames of files inside it are shown relative to it)."""
        self._function, self.digest, self._root, self.problem = function, digest, root, None

    def unbound(self, problem: str) -> None:
        """The function could not be imported (``problem`` says why): every case this check
        judges is missing (``evaluator_error``) with that message."""
        self._function, self.problem = None, problem

    @property
    def function(self) -> Callable[[PublicCaseView], Any] | None:
        """The bound function, or None when it is not (:attr:`problem` says why)."""
        return self._function

    def judge(self, case: CaseView) -> VerdictTuple:
        return self.evaluate_paths(case)[0]

    def evaluate_paths(self, case: CaseView) -> tuple[VerdictTuple, list[PathCheck]]:
        """The function's verdict on ``case``; on an error, ``missing`` (``evaluator_error``)
        and one :class:`PathCheck` carrying what went wrong (its ``note``) and the traceback
        (its ``recorded``), for the case panel."""
        if case.error is not None:
            return missing(case.error_kind or "system_error"), []
        fn = self._function
        if fn is None:
            return missing(EVALUATOR_ERROR), [self._error(self.problem or "not imported")]
        try:
            result = fn(public_view(case))
        except (KeyboardInterrupt, GeneratorExit, Interrupted):  # the operator's Ctrl-C
            raise
        except BaseException as e:  # noqa: BLE001 - the user's code: any error (SystemExit too) is missing
            tb = _traceback(e, self._root)
            return missing(EVALUATOR_ERROR), [self._error(f"{type(e).__name__}: {_one_line(e)}", tb)]
        if not isinstance(result, Verdict):
            if inspect.iscoroutine(result):
                result.close()  # never awaited: no warning about it
            return missing(EVALUATOR_ERROR), [self._error(
                f"{self.spec} returned {type(result).__name__} {_ADDRESS.sub('', quoted(result))}, not an "
                "oloproof.Verdict "
                "(return Verdict.pass_(), .fail(reason), .missing(reason) or .excluded(reason))")]
        return as_tuple(result), []

    def _error(self, message: str, traceback: str | None = None) -> PathCheck:
        return PathCheck(self.criterion, self.spec, "missing", initial=None, expected=None, recorded=traceback,
                         note=_ERROR_NOTE + message)


def as_tuple(v: Verdict) -> VerdictTuple:
    """A public :class:`~oloproof.Verdict` as the engine's ``(verdict, reason)`` tuple (shared,
    interned tuples: see :mod:`oloproof.evaluate.base`)."""
    from oloproof.evaluate.base import _verdict

    if v.reason is None:
        return PASS if v.verdict == "pass" else FAIL
    return _verdict(v.verdict, v.reason)


def evaluator_errors(paths: Iterable[Any]) -> list[PathCheck]:
    """The entries of a case result's ``paths`` that report a check's error (its message in
    ``note``, its traceback in ``recorded``), as :meth:`PythonCheck.evaluate_paths` made them."""
    return [p for p in paths if isinstance(p, PathCheck) and p.verdict == "missing"
            and isinstance(p.note, str) and p.note.startswith(_ERROR_NOTE)]


def changes(suite_evaluators: Iterable[Evaluator], run_id: str, stored: dict[str, Any]) -> list[str]:
    """What a command re-judging stored run ``run_id`` must say about its python checks: each
    check whose code changed since the run was recorded (its digest differs from the one
    ``stored`` — the run's configuration — holds), and each that could not be imported. Each is
    said once per run and check (the check remembers)."""
    recorded = stored.get("checks") or {}
    out = []
    for ev in suite_evaluators:
        if not isinstance(ev, PythonCheck) or run_id in ev.reported:
            continue
        name = f"python check {ev.criterion!r} ({ev.spec})"
        if ev.problem is not None:
            out.append(f"run {run_id}: {name}: {ev.problem}; its cases are missing ({EVALUATOR_ERROR})")
        elif ev.spec not in recorded:
            continue  # a check the run did not have (``oloproof eval`` with another configuration)
        elif recorded[ev.spec] != ev.digest:
            out.append(f"run {run_id}: {name}: its code changed since the run was recorded; judged with "
                       "the code as it is now")
        else:
            continue
        ev.reported.add(run_id)
    return out


# ---- the public view: what a check (and a model judge) sees -------------------------------

_encode = msgspec.json.Encoder().encode
_decode_view = msgspec.json.Decoder(PublicCaseView).decode


def public_view(case: CaseView) -> PublicCaseView:
    """The public :class:`oloproof.CaseView` of a recorded case (its evidence attached): a
    fresh deep copy, made in one encode and one typed decode (C speed), so no check can change
    what another evaluator sees. Pure; the fault replays' ``faithful`` is the fault evaluator's
    own test (:func:`oloproof.replay.plan.trustworthy`)."""
    t = case.trajectory
    state = case.state
    data = {
        "id": case.case_id, "input": case.input, "expected": dict(case.expected), "output": case.output,
        "steps": t.steps if t is not None else (), "initial_state": case.initial_state,
        "state": None if state is NO_STATE else state, "state_recorded": state is not NO_STATE,
        "metadata": dict(case.metadata), "tags": case.tags,
        "terminal_status": t.terminal_status if t is not None else None,
        "truncated": t.truncated if t is not None else False, "error": case.error,
        "replays": {f"{tool}:{fault}": _fault_replay(case, tool, fault, pair)
                    for (tool, fault), pair in case.replays.items()},
    }
    return _decode_view(_encode(data))


def _fault_replay(case: CaseView, tool: str, fault: str, pair: Any) -> dict[str, Any]:
    from oloproof.replay.plan import trustworthy

    control = pair.control
    faithful = control is not None and case.trajectory is not None and trustworthy(case, control, pair.plan)
    return {"tool": tool, "fault": fault, "faithful": faithful,
            "control": _replay(control), "faulted": _replay(pair.fault)}


def _replay(replay: ReplayView | None) -> dict[str, Any] | None:
    if replay is None:
        return None
    t = replay.trajectory
    return {"steps": t.steps if t is not None else (), "terminal_status": t.terminal_status if t is not None else None,
            "truncated": t.truncated if t is not None else False, "output": replay.output,
            "state": None if replay.state is NO_STATE else replay.state,
            "state_recorded": replay.state is not NO_STATE, "error": replay.error}


# ---- errors as the panel shows them ------------------------------------------------------

def _one_line(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - the user's exception cannot say what it is: its type does
        return "(its message could not be read: str() raised)"
    return " ".join(text.split())[:300] if text else "(no message)"


def _traceback(e: BaseException, root: str) -> str | None:
    """The traceback of the user's frames (Oloproof's own left out), with the files inside the
    project folder named relative to it: the same code gives the same text in any folder."""
    from oloproof.recorder.record import user_traceback

    tb = user_traceback(e)
    if tb is None or not root:
        return tb
    import os

    prefix = 'File "' + root.rstrip(os.sep) + os.sep
    return tb.replace(prefix, 'File "')
