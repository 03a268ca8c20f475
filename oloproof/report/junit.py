"""``oloproof run --junit FILE``: a sealed run as a JUnit XML report, for the CI systems that
show one (Jenkins, GitLab, GitHub Actions' test reporters).

One ``<testsuite>`` (the run) inside ``<testsuites>``; one ``<testcase>`` per case stream (a
case, or a trial ``c/2`` under ``trials: k``), named by its case id, its ``classname`` the
system's name; then one more test case, ``release gate`` (``classname`` ``oloproof.gate``).
A case is

* a ``<failure>`` when it failed any criterion: ``type`` the first failed criterion, the
  message every failed criterion with its reason, the text one line per criterion (an error
  the case also ended with, after them);
* an ``<error>`` when its system raised (or its worker died, it overran its timeout …) and it
  failed nothing: ``type`` the error kind, the message the error, the text its traceback;
* a ``<skipped>`` when it neither failed nor errored but a criterion could not observe it
  (``missing``): a case not observed is never shown as passed;
* passed otherwise (every criterion passed or did not apply).

A case run again after an infrastructure error (``retries:``) carries its earlier attempts as
``<flakyError>`` (its last attempt did not error) or ``<rerunError>`` elements (Maven
Surefire's names, which Jenkins and GitLab read). The gate test case fails on ``FAIL`` and on
``INSUFFICIENT_EVIDENCE`` (both block: exit 1), is skipped when the run has no release rules.

Whatever the log holds, the file is well-formed XML 1.0: characters XML cannot carry (the
C0 controls but tab and newline, lone surrogates, U+FFFE/U+FFFF) are written as ``\\xNN`` /
``\\uNNNN`` text, and attribute values are single lines. Case times are ``0``: a case's wall
time is not recorded (the suite's time is the run's, from its start to its seal).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from oloproof.views import CaseView

#: what XML 1.0 cannot hold, even escaped: every other control, lone surrogates, U+FFFE/U+FFFF
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: characters of a traceback or a message kept in an element's text
MAX_TEXT = 16_000

GATE_CLASSNAME = "oloproof.gate"
GATE_NAME = "release gate"


def xml_text(value: Any, *, one_line: bool = False) -> str:
    """Recorded text as XML can carry it: the characters XML 1.0 forbids written out as
    ``\\xNN``/``\\uNNNN``; ``one_line`` (attribute values) also escapes newlines, tabs and
    carriage returns, so that a message cannot be split or reflowed."""
    text = "" if value is None else str(value)
    text = _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)
    if one_line:
        text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"… ({len(text) - MAX_TEXT} more characters)"
    return text


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: Any) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: xml_text(v, one_line=True) for k, v in attrs.items()})
    if text:
        element.text = xml_text(text)
    return element


def _timestamp(iso: str) -> str:
    """An ISO 8601 time as the JUnit schema writes it (no zone, seconds)."""
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return iso[:19]


def _seconds(started: str, finished: str | None) -> str:
    if not finished:
        return "0"
    try:
        delta = datetime.fromisoformat(finished) - datetime.fromisoformat(started)
    except ValueError:
        return "0"
    return f"{max(0.0, delta.total_seconds()):.3f}"


def _case(suite: ET.Element, classname: str, view: CaseView,
          verdicts: dict[str, tuple[str, str | None]]) -> str:
    """One case's ``<testcase>``; returns its outcome: failure, error, skipped or passed."""
    case = _sub(suite, "testcase", name=view.case_id, classname=classname, time="0")
    failed = [(c, reason) for c, (v, reason) in verdicts.items() if v == "fail"]
    missing = [(c, reason) for c, (v, reason) in verdicts.items() if v == "missing"]
    outcome = "passed"
    if failed:
        lines = [f"{c}: fail" + (f" ({reason})" if reason else "") for c, reason in failed]
        if view.error is not None:
            lines.append(f"the case also ended with {view.error_kind or 'an error'}: {view.error}")
        _sub(case, "failure", "\n".join(lines), message="; ".join(lines[:len(failed)]), type=failed[0][0])
        outcome = "failure"
    elif view.error is not None:
        _sub(case, "error", view.traceback or view.error, message=view.error, type=view.error_kind or "system_error")
        outcome = "error"
    elif missing:
        _sub(case, "skipped", message="not observed (missing, never counted as passed): " + "; ".join(
            f"{c} ({reason or 'missing'})" for c, reason in missing))
        outcome = "skipped"
    rerun = "rerunError" if view.error is not None else "flakyError"
    for n, attempt in enumerate(view.attempts, start=1):
        _sub(case, rerun, attempt.traceback or attempt.error, type=attempt.error_kind or "system_error",
             message=f"attempt {n}: {attempt.error or ''}")
    return outcome


def junit_xml(run: Any, cases: Iterable[tuple[CaseView, dict[str, tuple[str, str | None]]]], gate: Any,
              exit_line: str) -> str:
    """The JUnit XML document of a stored run (a :class:`~oloproof.app.runs.StoredRun`), its
    judged cases in suite order (:func:`oloproof.app.reports.judged_cases`), its gate (a
    :class:`~oloproof.evaluate.gate.GateResult`, None without release rules) and the line
    saying what the exit code means."""
    s = run.started
    root = ET.Element("testsuites", {"name": "oloproof"})
    suite = _sub(root, "testsuite", name=f"{s.system_name} {s.system_version}", tests="0", failures="0",
                 errors="0", skipped="0", timestamp=_timestamp(s.started_at), hostname="oloproof",
                 time=_seconds(s.started_at, run.finished.finished_at if run.finished is not None else None),
                 id="0", package=s.system_name)
    properties = _sub(suite, "properties")
    for name, value in (("run_id", s.run_id), ("system", s.system_name), ("version", s.system_version),
                        ("code_digest", s.code_digest), ("cases", s.cases_path),
                        ("log_digest", run.sealed.digest if run.sealed is not None else "not sealed")):
        _sub(properties, "property", name=name, value=value)
    counts = {"failure": 0, "error": 0, "skipped": 0, "passed": 0}
    for view, verdicts in cases:
        counts[_case(suite, s.system_name, view, verdicts)] += 1
    gate_case = _sub(suite, "testcase", name=GATE_NAME, classname=GATE_CLASSNAME, time="0")
    if gate is None:
        _sub(gate_case, "skipped", message="no release rules: nothing to gate")
        counts["skipped"] += 1
    elif gate.decision != "PASS":
        rules = [f"{r.name} ({r.criterion}): {r.status}" + (f" {r.reason}" if r.reason else "")
                 + (f" · {r.detail}" if r.detail else "") for r in gate.rules]
        _sub(gate_case, "failure", "\n".join([exit_line, *rules]), message=exit_line, type=gate.decision)
        counts["failure"] += 1
    else:
        counts["passed"] += 1
    suite.set("tests", str(sum(counts.values())))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, suite.get(key) or "0")
    root.set("time", suite.get("time") or "0")
    _sub(suite, "system-out", f"oloproof run {s.run_id}: {exit_line}")
    _sub(suite, "system-err")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def build_junit(store: Any, run_id: str, gate: Any) -> str:
    """The JUnit XML of a stored run, its cases judged from their events under the run's own
    rules (``gate``: the run's gate result, as the command that ran it decided it)."""
    from oloproof.app.reports import judged_cases
    from oloproof.app.runs import load_run
    from oloproof.report.terminal import exit_line

    return junit_xml(load_run(store, run_id), judged_cases(store, run_id), gate, exit_line(gate))
