"""Incidents into trials: ``oloproof trial create RUN CASE --fault TOOL:KIND`` (issue 28;
seeds/fault-injection-release-gate: "turn every production incident into a sanitised
regression trial: keep the shape of the input, inject the smallest causal condition, remove
secrets and customer data, and add the strongest outcome oracle available").

:func:`create_trial` reads a stored case — a run's, or one imported from production traces —
and writes one case line:

* **the same input shape**: the case's ``input``, ``initial_state``, ``metadata`` and ``tags``
  as they were recorded (keys kept; only redacted values change);
* **the smallest causal condition**: one declared ``fault`` on the named tool, at the call the
  incident shows — the call of that tool whose result was an error (it raised, carried a
  fault, or answered ``{"error": …}``), or the call the case's own fault was on; ``--call N``
  names another, and with no failed call the first is taken (and said so). A ``denied`` fault
  keeps the ``required_scope`` the recorded denial named;
* **secrets and customer data removed** with the prefix redaction rules
  (:func:`oloproof.app.prefix.redact_record`): each ``--redact`` path (and the project's
  ``prefix.redact``) replaces values with ``[REDACTED]`` — rooted at ``input``,
  ``initial_state`` (``state`` as in prefix files), ``expected`` or ``metadata``, ``*`` for any
  one level, ``**`` for any depth — and every other copy of a replaced value, in any of them,
  goes too;
* **the strongest outcome oracle the case has**: the environment's — ``expected.state`` and
  ``expected.state_delta`` — when it has one, else its other expectations (``answer`` and the
  like); the transcript's path (``tools``, ``tool_calls``, ``route``) never, since under a fault
  the right path differs (a retry, an escalation). What was left out is said. The trial is
  judged by the project's evaluators, ``release_class`` on the evidence the sandbox records
  included.

The line is validated as a case file line before it is written: appended to a case file
(``--out``; a file that does not validate, or already holds the id, is refused), or printed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from oloproof.config.locate import did_you_mean
from oloproof.errors import UsageError
from oloproof.store.base import EventStore

#: what a trial's redaction path may be rooted at (``state`` is ``initial_state``, as the
#: prefix rules call it)
ROOTS = ("input", "initial_state", "state", "expected", "metadata")
#: expectations of the environment: the outcome oracle a trial keeps when the case has one
OUTCOME_KEYS = ("state", "state_delta")
#: expectations of the path the agent took: never carried into a trial
TRANSCRIPT_KEYS = ("tools", "tool_calls", "route")


@dataclass(frozen=True)
class CreatedTrial:
    """A trial made by :func:`create_trial`: the case object and its JSON line, where it was
    appended (None: printed), the fault it declares, what its ``expected`` kept, and notes
    (expectations left out, a first call taken for want of a failed one…)."""

    case: dict[str, Any]
    line: str
    path: Path | None
    fault: dict[str, Any]
    oracle: tuple[str, ...]
    notes: tuple[str, ...] = ()


def _checked_path(path: str) -> list[str]:
    parts = path.split(".")
    if len(parts) < 2 or any(not p for p in parts) or parts[-1] == "**":
        raise UsageError(f"--redact {path!r}: a path of keys separated by dots, rooted at input, initial_state, "
                         "expected or metadata (or **), ending with a key: e.g. input.customer.email, "
                         "initial_state.customers.*.card, **.email")
    root = parts[0]
    if root in ("steps", "snapshot"):
        raise UsageError(f"--redact {path!r}: a trial holds no {root} (it starts from the case's input and "
                         "initial_state); root the path at input, initial_state, expected or metadata")
    if root != "**" and not any(fnmatchcase(r, root) for r in ROOTS):
        raise UsageError(f"--redact {path!r}: {root!r} is none of input, initial_state, expected, metadata (or ** "
                         f"for all of them){did_you_mean(root, ROOTS)}")
    return parts


def _prefix_form(parts: list[str]) -> str:
    """A trial path in the prefix rules' roots: ``initial_state`` is their ``state``, and
    ``expected`` rides in their ``snapshot`` slot (which a trial has no other use for)."""
    root = {"initial_state": "state", "expected": "snapshot"}.get(parts[0], parts[0])
    return ".".join([root, *parts[1:]])


def redact_trial(case: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """``case`` (``input``, ``initial_state``, ``expected``, ``metadata``) with ``paths``
    redacted by the prefix rules: the values at each path, then every other copy of them.

    Raises:
        UsageError: a path that is not one (its message says what a path is).
    """
    from oloproof.app.prefix import redact_record

    checked = [_checked_path(p) for p in paths]
    if not checked:
        return case
    record = {"input": case["input"], "state": case.get("initial_state"), "snapshot": case.get("expected") or {},
              "steps": [], "metadata": case.get("metadata") or {}}
    done = redact_record(record, [_prefix_form(p) for p in checked])
    out = {**case, "input": done["input"], "metadata": done["metadata"]}
    if case.get("initial_state") is not None:
        out["initial_state"] = done["state"]
    if case.get("expected"):
        out["expected"] = done["snapshot"]
    return out


def _is_error(step: Any) -> bool:
    return bool(step.raised or step.fault is not None or (isinstance(step.result, dict) and "error" in step.result))


def incident_call(view: Any, tool: str, call: int | None) -> tuple[int, Any, list[str]]:
    """Which call of ``tool`` the trial faults (1-based), the recorded result of that call
    (None when unknown), and notes. ``call`` given: that one, checked against the calls made.

    Raises:
        UsageError: the case made no call of ``tool`` (a model call, or a tool it never
            called: the tools it called are named), or ``call`` is out of range.
    """
    steps = view.trajectory.steps if view.trajectory is not None else ()
    calls = [s for s in steps if s.kind == "tool_call" and s.tool_name == tool]
    results = [s for s in steps if s.kind == "tool_result" and s.tool_name == tool]
    if not calls:
        if any(s.kind == "decision" and s.tool_name == tool for s in steps):
            raise UsageError(f"--fault {tool}:…: {tool!r} is a model call in case {view.case_id!r}; model calls "
                             "are never faulted (name a tool)")
        called = sorted({s.tool_name for s in steps if s.kind == "tool_call" and s.tool_name})
        raise UsageError(f"--fault {tool}:…: case {view.case_id!r} never called {tool!r}, so the incident shows "
                         f"no call to fault{did_you_mean(tool, called)} (it called: {', '.join(called) or 'no tool'})")
    notes: list[str] = []
    if call is not None:
        if not 1 <= call <= len(calls):
            raise UsageError(f"--call {call}: case {view.case_id!r} called {tool!r} {len(calls)} "
                             f"time{'s' if len(calls) != 1 else ''}; give a call from 1 to {len(calls)}")
        return call, results[call - 1] if call <= len(results) else None, notes
    declared = (view.started.fault if view.started is not None else None) or {}
    if declared.get("tool") == tool and int(declared.get("call", 1)) <= len(calls):
        n = int(declared.get("call", 1))
        return n, results[n - 1] if n <= len(results) else None, notes
    failed = next((i for i, r in enumerate(results) if _is_error(r)), None)
    if failed is not None:
        return failed + 1, results[failed], notes
    notes.append(f"the incident shows no failed call of {tool!r}: the fault is on its first call (of {len(calls)}); "
                 "give --call N for another")
    return 1, results[0] if results else None, notes


def outcome_oracle(expected: Any) -> tuple[dict[str, Any], list[str], list[str]]:
    """The trial's ``expected``: the environment's expectations when the case has any, else
    everything but the transcript's path; with the keys kept and the keys left out."""
    expected = dict(expected or {})
    environment = {k: expected[k] for k in OUTCOME_KEYS if k in expected}
    if environment:
        kept = environment
    else:
        kept = {k: v for k, v in expected.items() if k not in TRANSCRIPT_KEYS}
    dropped = [k for k in expected if k not in kept]
    return kept, list(kept), dropped


def trial_id(view: Any, tool: str, kind: str) -> str:
    """The default id of a trial: the case's (its source's, for a trial ``c/2`` or a derived
    case ``c~t``), the tool and the fault kind — ``ord-001-issue_refund-timeout``."""
    from oloproof.config.limits import MAX_ID_LENGTH, split_trial

    base = split_trial(view.case_id)[0].replace("~", "-")
    suffix = f"-{tool}-{kind}"
    return base[:max(1, MAX_ID_LENGTH - len(suffix))] + suffix


def create_trial(store: EventStore, project_root: Path | str, run_ref: str, case_id: str, *, fault: str,
                 redact_paths: list[str] | None = None, call: int | None = None, new_id: str | None = None,
                 out: str | None = None) -> CreatedTrial:
    """Turn stored case ``case_id`` of run ``run_ref`` into a fault trial (the module
    docstring says what it holds); append it to ``out`` or leave it to be printed.

    Raises:
        UsageError: a bad ``--fault``, ``--redact``, ``--call`` or ``--id``; an unknown run or
            case; a prefix run; a case with no trajectory or that never called the tool; an
            ``out`` that is no case file, does not validate or already holds the id.
        CorruptLogError: the run fails its audit (nothing is made from it).
    """
    from oloproof.app.audit import require_intact
    from oloproof.app.replay import parse_fault
    from oloproof.app.runs import case_view, is_prefix_run, load_run, resolve_run
    from oloproof.config.limits import case_id_problem

    tool, kind = parse_fault(fault)
    paths = list(redact_paths or [])
    for p in paths:
        _checked_path(p)  # every bad path refused before the log is read
    if new_id is not None and (problem := case_id_problem(new_id)) is not None:
        raise UsageError(f"--id {new_id!r}: a case id {problem}")
    if call is not None and (isinstance(call, bool) or call < 1):
        raise UsageError(f"--call {call}: calls of a tool count from 1")
    configured = _project_redactions(Path(project_root))
    run_id = resolve_run(store, run_ref)
    run = load_run(store, run_id)
    if is_prefix_run(run.started):
        raise UsageError(f"run {run_id} is a prefix run (oloproof prefix run): make trials from an end-to-end run or "
                         "an imported one ('oloproof runs' lists them)")
    require_intact(store, run_id)
    view = case_view(store, run_id, case_id)
    if view.started is not None and view.started.prefix is not None:
        raise UsageError(f"case {case_id!r} of run {run_id} is a prefix case; make trials from the run it came from")
    if view.trajectory is None:
        raise UsageError(f"case {case_id!r} of run {run_id} recorded no trajectory: the incident shows no tool call "
                         "to fault (the system needs records: [agent_trajectory/v1])")
    n, result, notes = incident_call(view, tool, call)
    declared: dict[str, Any] = {"tool": tool, "kind": kind, "call": n}
    if kind == "denied" and isinstance(result, dict) and isinstance(result.get("error"), dict):
        scope = result["error"].get("required_scope")
        if isinstance(scope, str) and scope:
            declared["scope"] = scope
    expected, kept, dropped = outcome_oracle(view.expected)
    if dropped:
        notes.append(f"expected.{', expected.'.join(dropped)} left out: "
                     + ("the trial keeps the environment's oracle, expected." + ", expected.".join(kept)
                        if set(kept) & set(OUTCOME_KEYS) else "they describe the path, and a fault changes it"))
    if not set(kept) & set(OUTCOME_KEYS):
        notes.append("the case has no expected.state or expected.state_delta: the trial's outcome is judged by the "
                     "project's evaluators alone (release_class on the sandbox's evidence, constraints…); add "
                     "the state the world must be in")
    case: dict[str, Any] = {
        "id": new_id or trial_id(view, tool, kind),
        "input": view.input,
        **({"initial_state": view.initial_state} if view.initial_state is not None else {}),
        "expected": expected,
        "metadata": {**dict(view.metadata or {}), "incident": f"{run_id}/{view.case_id}",
                     "condition": f"{kind} on {tool}, call {n}"},
        **({"tags": list(view.tags)} if view.tags else {}),
        "fault": declared,
    }
    case = redact_trial(case, [*configured, *paths])
    if configured or paths:
        case["metadata"] = {**case["metadata"], "redacted": [*configured, *paths]}
    line = json.dumps(case, ensure_ascii=False)
    _validate_line(line)
    target = None
    if out is not None:
        target = append_case(Path(out), case["id"], line)
    return CreatedTrial(case, line, target, declared, tuple(kept), tuple(notes))


def _project_redactions(root: Path) -> list[str]:
    """``prefix.redact`` of the project in ``root`` (none without one), the paths a trial can
    hold: those rooted at input, state, metadata or any root (``**``, ``*``)."""
    from oloproof.app.project import CONFIG_FILE
    from oloproof.config.models import load_project_config

    if not (root / CONFIG_FILE).is_file():
        return []
    config, _, _ = load_project_config(root / CONFIG_FILE)
    out = []
    for path in (config.prefix.redact if config.prefix else []):
        root_name = path.split(".", 1)[0]
        if root_name in ("steps", "snapshot"):
            continue  # of a prefix's frozen steps and goal: a trial has neither
        try:
            _checked_path(path)
        except UsageError:
            continue
        out.append(path)
    return out


def _validate_line(line: str) -> None:
    """Read ``line`` back as a case file line (the fast path and the located checks)."""
    import tempfile

    from oloproof.config.cases import CaseFile
    from oloproof.errors import CaseFileError

    with tempfile.TemporaryDirectory(prefix="oloproof-trial-") as folder:
        path = Path(folder) / "trial.jsonl"
        path.write_text(line + "\n", encoding="utf-8")
        try:
            CaseFile(path).validate()
        except CaseFileError as e:
            raise UsageError(f"the trial does not validate as a case: {str(e).split(': ', 1)[-1]}") from e


def append_case(path: Path, case_id: str, line: str) -> Path:
    """Append ``line`` to the case file ``path`` (made when it does not exist), after checking
    that the file validates and does not hold ``case_id``. The file is replaced whole (a
    temporary file, then a rename): a failure leaves it as it was, never half a line.

    Raises:
        UsageError: ``path`` is a folder, an event log or no valid case file, its folder is
            missing, or it already holds ``case_id``.
    """
    from oloproof.config.cases import CaseFile
    from oloproof.errors import CaseFileError
    from oloproof.store.sqlite import is_event_log

    target = path.resolve() if path.is_symlink() else path
    if target.is_dir():
        raise UsageError(f"--out {path}: is a folder; name a case file (.jsonl)")
    if is_event_log(target):
        raise UsageError(f"--out {path}: is an Oloproof event log; name a case file (.jsonl)")
    if not target.parent.is_dir():
        raise UsageError(f"--out {path}: folder {target.parent} does not exist")
    old = b""
    if target.exists():
        old = target.read_bytes()
        if old.strip():
            try:
                ids = CaseFile(target).validate(keep_ids=True).ids
            except CaseFileError as e:
                raise UsageError(f"--out {path}: not a valid case file, so nothing was appended: {e}") from e
            if case_id in ids:
                raise UsageError(f"--out {path}: already holds a case {case_id!r}; give the trial another id with --id")
    data = old + (b"\n" if old and not old.endswith(b"\n") else b"") + line.encode("utf-8") + b"\n"
    _replace(target, data)
    return path


def _replace(target: Path, data: bytes) -> None:
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        mode = (target.stat().st_mode & 0o777) if target.exists() else (0o666 & ~_umask())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
