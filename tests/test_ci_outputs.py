"""CI outputs (issue 31, SPEC §18.8): ``oloproof gate RUN --format markdown`` (a pull-request
comment, read back with a Markdown parser: recorded text can add no link, mention, image,
HTML or table cell), ``oloproof run --junit FILE`` (JUnit XML, parsed, against the schema's
required attributes, whatever the recorded text holds) and ``examples/ci/github-actions.yml``
(its YAML parses, it names only commands and options that exist, and its steps run here)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_in, write

# ---- the pull-request comment ------------------------------------------------------------------

HOSTILE = ["[click me](javascript:alert(1))", "@octocat <img src=x onerror=alert(1)>",
           "tick`s ``double`` | pipe", "*bold* _it_ #12 ![i](evil.example.png)", "-rf", "a\\|b [z](x)",
           "see www.evil.example"]

APP = '''\
from oloproof import current_case, system

BROKEN = False  # a pull request sets it: the hostile cases regress


@system(name="comment", version="1", records=("agent_trajectory/v1",))
def run(case):
    broken = BROKEN and case.input["regresses"]
    current_case().finish("success")
    return {"answer": "no" if broken else "ok"}
'''

CONFIG = '''\
system: {name: comment, version: "1", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
release: release.yaml
'''

RELEASE = '''\
rules:
  - {name: "no-regress [x](https://evil.example) @team", criterion: answer_correct,
     no_regression: {baseline: "pin:main", max_regressions: 0}}
  - {name: "rate|rule `q`\\e[31m", criterion: answer_correct, min_rate: 0.4}
'''


def comment_project(p: Path) -> Path:
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "release.yaml", RELEASE)
    ids = HOSTILE + ["steady-1", "steady-2", "steady-3", "steady-4", "steady-5", "steady-6"]
    write(p / "cases.jsonl", "".join(json.dumps({"id": c, "input": {"regresses": c in HOSTILE},
                                                 "expected": {"answer": "ok"}}) + "\n" for c in ids))
    return p


@pytest.fixture(scope="module")
def regressed(tmp_path_factory):
    """A baseline run pinned as main, then a run where every hostile case regresses."""
    p = comment_project(tmp_path_factory.mktemp("comment") / "p")
    first = run_in(p, "run")
    assert first.exit_code == 1, first.output  # no baseline yet: INSUFFICIENT_EVIDENCE
    assert run_in(p, "runs", "--pin", "latest", "main").exit_code == 0
    break_it(p)
    second = run_in(p, "run", "--json", "r.json")
    assert second.exit_code == 1, second.output
    return p


def break_it(p: Path) -> None:
    """The change under review: the hostile cases now fail (new code: no run of it is known)."""
    (p / "app.py").write_text(APP.replace("BROKEN = False", "BROKEN = True"))


def code_spans(md: str) -> tuple[list[str], str]:
    """CommonMark's inline code spans, found by hand (a backtick run closed by one of the same
    length): their contents, and the text left outside them."""
    spans, outside, i = [], [], 0
    while i < len(md):
        if md[i] == "`" and (i == 0 or md[i - 1] != "\\"):
            n = len(md[i:]) - len(md[i:].lstrip("`"))
            fence = "`" * n
            j = i + n
            while True:
                k = md.find(fence, j)
                if k < 0:
                    break
                if md[k + n:k + n + 1] != "`" and (k == 0 or md[k - 1] != "`"):
                    break
                j = k + len(md[k:]) - len(md[k:].lstrip("`"))
            if k < 0:
                outside.append(md[i:i + n])
                i += n
                continue
            content = md[i + n:k].replace("\n", " ")
            if content.startswith(" ") and content.endswith(" ") and content.strip(" "):
                content = content[1:-1]
            spans.append(content)
            i = k + n
            continue
        outside.append(md[i])
        i += 1
    return spans, "".join(outside)


def markdown_tokens(md: str) -> list | None:
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # the structural checks below still run
        return None
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    flat = []
    for t in tokens:
        flat.append(t)
        flat.extend(t.children or [])
    return flat


def test_the_gate_comment_parses_and_recorded_text_stays_text(regressed, cli):
    r = cli("gate", "--format", "markdown", cwd=regressed)
    assert r.exit_code == 1  # the gate's code, whatever the format
    md = r.output
    results = json.loads((regressed / "r.json").read_text())
    run_id = results["run_id"]
    # by hand: outside code spans, nothing recorded is left — no link, mention, image, HTML
    spans, outside = code_spans(md)
    for needle in ("evil.example", "octocat", "onerror", "<img", "](", "![", "@team", "\x1b"):
        assert needle not in outside, (needle, outside)
    for case_id in HOSTILE:
        assert case_id in spans, case_id
    assert "rate\\x7crule `q`\\x1b[31m" in spans  # the rule's pipe and escape sequence, inert
    assert results["log_digest"] in spans
    assert md.startswith("### Oloproof release gate: FAIL\n")
    tokens = markdown_tokens(md)
    if tokens is None:
        return
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "image", "html_inline", "html_block", "autolink"}, kinds
    assert {"table_open", "bullet_list_open", "heading_open", "code_inline"} <= kinds
    text = " ".join(t.content for t in tokens if t.type == "text")
    assert not any(n in text for n in ("evil.example", "octocat", "onerror", "@team"))
    inline = [t.content for t in tokens if t.type == "code_inline"]
    assert set(HOSTILE) <= set(inline)
    # the tables: every row has its header's cells (no recorded pipe split one); one row a rule
    tables, rows, row = [], None, None
    for t in tokens:
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(t)
        elif t.type == "tr_close" and rows is not None:
            rows.append(row)
            row = None
        elif t.type == "table_close":
            tables.append(rows)
            rows = None
    by_head = {x[0][0].content: x for x in tables}
    assert set(by_head) == {"rule", "criterion"}
    for head, table in by_head.items():
        assert all(len(r) == len(table[0]) for r in table), head
    rules = by_head["rule"][1:]
    assert [r[0].children[0].content for r in rules] == ["no-regress [x](https://evil.example) @team",
                                                         "rate\\x7crule `q`\\x1b[31m"]
    assert [r[2].content for r in rules] == ["**FAIL**", "PASS"]
    # each regressed case comes with the command that opens it, and the command works
    shows = [c for c in inline if c.startswith("oloproof show ")]
    assert len(shows) == len(HOSTILE)
    for command in shows:
        args = shlex.split(command)
        assert args[:3] == ["oloproof", "show", run_id]
        shown = cli(*args[1:], cwd=regressed)
        assert shown.exit_code == 0, shown.output
        case_id = args[-1]
        assert case_id in HOSTILE and f"case {case_id}" in shown.output
    assert any(c == f"oloproof audit verify --expect {results['log_digest']}" for c in inline)


def test_the_comment_of_a_passing_gate_without_a_baseline_rule(cli, tmp_path):
    p = comment_project(tmp_path / "p")
    write(p / "release.yaml", "rules:\n  - {name: rate, criterion: answer_correct, min_rate: 0.5}\n")
    assert cli("run", cwd=p).exit_code == 0
    r = cli("gate", "latest", "--format", "markdown", "--json", "g.json", cwd=p)
    assert r.exit_code == 0
    assert r.output.startswith("### Oloproof release gate: PASS\n")
    assert "**exit 0**: the gate passed" in r.output
    assert "No `no_regression` rule: this run was compared with no baseline." in r.output
    assert json.loads((p / "g.json").read_text())["gate"]["decision"] == "PASS"
    assert cli("gate", "--format", "markdown", "--json", cwd=p).exit_code == 2  # stdout holds one of them
    assert cli("gate", "--format", "html", cwd=p).exit_code == 2


# ---- JUnit XML ----------------------------------------------------------------------------------

JAPP = '''\
from oloproof import current_case, system

NASTY = "ctl \\x00\\x01\\x08\\x0b\\x0c\\x1b[31m\\x7f <b>&amp;</b> ]]> \\"q\\" \\ud800 end"


@system(name="junit-demo", version="2", records=("agent_trajectory/v1",))
def run(case):
    what = case.input["what"]
    if what == "raise":
        raise RuntimeError(NASTY)
    if what != "untraced":
        current_case().finish("success")
    return {"answer": "ok" if what != "fail" else NASTY.replace("\\ud800", "")}  # a lone surrogate: no output
'''

JCONFIG = '''\
system: {name: junit-demo, version: "2", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: agent_max_steps, max_steps: 5}
release: release.yaml
'''

#: what the JUnit schema (Ant's, as Jenkins and GitLab read it) requires of each element
REQUIRED = {"testsuite": ("name", "tests", "failures", "errors", "time", "timestamp", "hostname"),
            "testcase": ("name", "classname", "time"), "failure": ("type",), "error": ("type",),
            "property": ("name", "value")}


def check_schema(root: ET.Element) -> None:
    assert root.tag == "testsuites"
    for suite in root.findall("testsuite"):
        for element in suite.iter():
            for attribute in REQUIRED.get(element.tag, ()):
                assert element.get(attribute) is not None, (element.tag, attribute)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", suite.get("timestamp"))
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("errors")) == sum(c.find("error") is not None for c in cases)
        assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)
        for c in cases:  # at most one outcome each, as the strictest readers require
            assert len([x for x in c if x.tag in ("failure", "error", "skipped")]) <= 1
            float(c.get("time"))
        assert suite.find("properties") is not None and suite.find("system-out") is not None


@pytest.fixture(scope="module")
def junit_run(tmp_path_factory):
    p = tmp_path_factory.mktemp("junit") / "p"
    write(p / "app.py", JAPP)
    write(p / "oloproof.yaml", JCONFIG)
    write(p / "release.yaml", "rules:\n  - {name: correct, criterion: answer_correct, max_failures: 0}\n")
    write(p / "cases.jsonl", "".join(json.dumps({"id": w, "input": {"what": w}, "expected": {"answer": "ok"}}) + "\n"
                                     for w in ("pass", "fail", "raise", "untraced")))
    (p / "out").mkdir()
    rec = run_in(p, "run", "--json", "r.json", "--junit", "out/junit.xml")
    return p, rec


def test_junit_has_a_test_case_per_case_and_the_gate(junit_run):
    p, rec = junit_run
    assert rec.exit_code == 1, rec.output  # the gate blocks; the file is written anyway
    raw = (p / "out" / "junit.xml").read_bytes()
    root = ET.fromstring(raw)  # well-formed, whatever the system raised or answered
    check_schema(root)
    suite = root.find("testsuite")
    assert suite.get("name") == "junit-demo 2"
    props = {x.get("name"): x.get("value") for x in suite.iter("property")}
    results = json.loads((p / "r.json").read_text())
    assert props["run_id"] == results["run_id"] and props["log_digest"] == results["log_digest"]
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["pass", "fail", "raise", "untraced", "release gate"]
    assert all(c.get("classname") == "junit-demo" for n, c in cases.items() if n != "release gate")
    assert len(cases["pass"]) == 0  # passed: no child
    failure = cases["fail"].find("failure")
    assert failure.get("type") == "answer_correct" and "answer_correct: fail" in failure.get("message")
    error = cases["raise"].find("error")
    assert error.get("type") == "system_error"
    message = error.get("message")
    # the recorded controls are written out, never carried (XML 1.0 cannot carry them)
    assert "\\x00\\x01\\x08\\x0b\\x0c\\x1b[31m" in message and "<b>&amp;</b> ]]>" in message
    assert "RuntimeError" in error.text
    skipped = cases["untraced"].find("skipped")  # not observed: never a pass
    assert "agent_steps_le_5 (no_trajectory_recorded)" in skipped.get("message")
    gate = cases["release gate"]
    assert gate.get("classname") == "oloproof.gate"
    assert gate.find("failure").get("type") == "FAIL" and "correct" in gate.find("failure").text
    counts = (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped"))
    assert counts == ("5", "2", "1", "1")


def test_junit_text_survives_any_character():
    from oloproof.report.junit import xml_text

    every = "".join(chr(c) for c in range(0, 0x110000, 97)) + "\ud800\udfff\ufffe\uffff\x00"
    document = f"<a b=\"{xml_text('x', one_line=True)}\">{xml_text(every)}</a>"
    root = ET.fromstring(document.encode("utf-8", "surrogatepass"))
    assert "\\ud800" in root.text and "\\x00" in root.text and "\\ufffe" in root.text


def test_junit_path_is_checked_before_the_run(cli, tmp_path):
    p = tmp_path / "p"
    write(p / "app.py", JAPP)
    write(p / "oloproof.yaml", JCONFIG.replace("release: release.yaml\n", ""))
    write(p / "cases.jsonl", json.dumps({"id": "pass", "input": {"what": "pass"}, "expected": {"answer": "ok"}}) + "\n")
    r = cli("run", "--junit", str(tmp_path / "missing" / "j.xml"), cwd=p)
    assert r.exit_code == 2 and "--junit" in r.output
    assert not (p / ".oloproof" / "log.db").exists()
    r = cli("run", "--junit", "app.py", cwd=p)
    assert r.exit_code == 2 and "--junit" in r.output


# ---- the GitHub Actions workflow ----------------------------------------------------------------

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
SHELL_WORDS = {"&&", "||", ";", "|", "if", "then", "else", "elif", "fi", "do", "done", "while", "!"}


def workflow() -> dict:
    import yaml

    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def oloproof_commands(script: str) -> list[list[str]]:
    """Every ``oloproof …`` command of a step's script, as its words (shell operators and
    keywords end a command; a redirection and its target are no part of it)."""
    out = []
    for line in script.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        current: list[str] = []
        skip = False
        for w in [*lex, ";"]:
            if skip:
                skip = False
            elif w in SHELL_WORDS or set(w) <= set(";&|()"):
                if current and current[0] == "oloproof":
                    out.append(current)
                current = []
            elif set(w) <= set("<>") or w in ("2>", "2>>"):
                skip = True  # the redirection's target
            else:
                current.append(w)
    return out


def test_the_workflow_parses_and_names_only_what_exists():
    import click

    from oloproof.cli.main import cli as group

    wf = workflow()
    assert set(wf["on"]) == {"pull_request", "push"} and wf["permissions"]["pull-requests"] == "write"
    steps = wf["jobs"]["evaluate"]["steps"]
    assert wf["jobs"]["evaluate"]["runs-on"]
    commands = []
    for step in steps:
        assert ("uses" in step) != ("run" in step), step
        if "uses" in step:
            assert re.fullmatch(r"[\w-]+/[\w-]+@v\d+", step["uses"]), step["uses"]
            continue
        assert "${{" not in step["run"], step["name"]  # expressions reach scripts through env: only
        commands += oloproof_commands(step["run"])
    names = {c[1] for c in commands}
    assert {"run", "gate", "view", "push", "runs"} <= names
    for args in commands:
        cmd = group
        rest = args[1:]
        while isinstance(cmd, click.Group):
            assert rest and rest[0] in cmd.commands, args
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        cmd.make_context(args[1], list(rest))  # raises on an option or argument that does not exist
    flags = {w for c in commands for w in c if w.startswith("--")}
    assert {"--json", "--junit", "--format", "--out", "--to", "--from", "--pin", "--db"} <= flags
    # what the steps hand each other: the comment the gate writes is the body the PR comment posts
    by_name = {s.get("name"): s for s in steps}
    assert "oloproof-gate.md" in by_name["Gate, as a pull-request comment"]["run"]
    assert "--body-file oloproof-gate.md" in by_name["Comment on the pull request"]["run"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    for path in ("oloproof-report", "oloproof-junit.xml", "oloproof-results.json", "oloproof-gate.md"):
        assert path in upload["with"]["path"]


def _expression(text: str, ctx: dict) -> str:
    """The few GitHub expressions the workflow uses: contexts, literals, ==, !=, &&, always()."""
    text = text.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2].strip()
    if "&&" in text:
        return "true" if all(_expression(p, ctx) == "true" for p in text.split("&&")) else "false"
    for op in ("==", "!="):
        if op in text:
            a, b = (_expression(x, ctx) for x in text.split(op, 1))
            return "true" if (a == b) == (op == "==") else "false"
    if text in ("always()", "success()"):
        return "true"
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1]
    return str(ctx.get(text, ""))


def run_workflow(project: Path, event: str, team_log: Path, tmp: Path) -> tuple[int, dict]:
    """The workflow's steps, run here as a job on ``event`` would run them (the ``uses:``
    steps and the pip install left out; ``gh`` is not called: its body file is checked)."""
    wf = workflow()
    job = wf["jobs"]["evaluate"]
    outputs = tmp / f"output-{event}"
    summary = tmp / f"summary-{event}"
    outputs.write_text("")
    summary.write_text("")
    ctx = {"secrets.OLOPROOF_TEAM_LOG": str(team_log), "secrets.PGPASSWORD": "", "github.token": "t",
           "github.event_name": event, "github.event.pull_request.number": "7"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLOPROOF_")}
    env.update(GITHUB_OUTPUT=str(outputs), GITHUB_STEP_SUMMARY=str(summary), GITHUB_EVENT_NAME=event,
               PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""), COLUMNS="200")
    for key, value in job["env"].items():
        env[key] = _expression(value, ctx)
        ctx[f"env.{key}"] = env[key]
    failed, ran = False, {}
    for step in job["steps"]:
        if "uses" in step or step.get("name") == "Install Oloproof":
            continue
        for line in outputs.read_text().splitlines():
            key, _, value = line.partition("=")
            ctx[f"steps.run.outputs.{key}"] = value
        if _expression(step.get("if", "success()"), ctx) != "true" or (failed and "always()" not in step.get("if", "")):
            continue
        if step["name"] == "Comment on the pull request":
            ran[step["name"]] = (project / "oloproof-gate.md").read_text()
            continue
        step_env = {**env, **{k: _expression(v, ctx) for k, v in step.get("env", {}).items()}}
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=project,
                           env=step_env, capture_output=True, text=True, timeout=120)
        ran[step["name"]] = r
        if r.returncode != 0:
            failed = True
            last = r.returncode
    return (last if failed else 0), ran


def test_the_workflow_steps_run_here(tmp_path):
    """A push to main (its run pushed and pinned as main in the team's log), then a pull
    request whose run regresses one case: the baseline is pulled, the comment names the
    regression, the report and the JUnit XML are written, the run is pushed, the job fails."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    team = tmp_path / "team.db"
    main = comment_project(tmp_path / "main")
    write(main / "release.yaml", "rules:\n  - {name: no-regress, criterion: answer_correct, "
                                 "no_regression: {baseline: 'pin:main', max_regressions: 0}}\n")
    code, ran = run_workflow(main, "push", team, tmp_path)
    assert code == 1  # the first run of main has no baseline: INSUFFICIENT_EVIDENCE
    assert "Pull main's baseline from the team's log" in ran  # it ran, found no pin, and said so
    assert "no run is pinned as main" in ran["Pull main's baseline from the team's log"].stdout
    pushed = ran["Push the sealed run to the team's log"]
    assert pushed.returncode == 0 and "seal verified on arrival" in pushed.stdout, pushed.stderr
    assert "Comment on the pull request" not in ran
    first = json.loads((main / "oloproof-results.json").read_text())["run_id"]
    # a pull request: a fresh checkout whose change regresses the hostile cases
    pr = tmp_path / "pr"
    shutil.copytree(main, pr, ignore=shutil.ignore_patterns(".oloproof", "oloproof-*", "__pycache__"))
    break_it(pr)
    code, ran = run_workflow(pr, "pull_request", team, tmp_path)
    assert code == 1, {k: (v.stdout, v.stderr) for k, v in ran.items() if not isinstance(v, str)}
    comment = ran["Comment on the pull request"]
    assert "### Oloproof release gate: FAIL" in comment and f"(run `{first}`)" in comment
    assert comment.count("pass → fail · `") == len(HOSTILE)
    assert (pr / "oloproof-report" / "index.html").exists()
    check_schema(ET.parse(pr / "oloproof-junit.xml").getroot())
    second = json.loads((pr / "oloproof-results.json").read_text())["run_id"]
    listed = subprocess.run([sys.executable, "-m", "oloproof", "runs", "--json", "--db", str(team)],
                            capture_output=True, text=True, timeout=60)
    runs = json.loads(listed.stdout)
    assert [r["run_id"] for r in runs] == [first, second]
    assert runs[0]["pins"] == ["main"] and runs[1]["pins"] == []  # a pull request pins nothing


def test_the_exit_line_is_one_text_in_the_terminal_and_the_comment():
    """The terminal's exit line and the Markdown comment's say the same of every gate; the
    comment bolds "exit N", puts each rule's name in a code span and leaves out the terminal's
    hint about a release without rules."""
    from types import SimpleNamespace as NS

    from oloproof.report.markdown import _exit_text
    from oloproof.report.terminal import exit_line

    def gate(decision, code, *rules):
        return NS(decision=decision, exit_code=code, rules=[NS(name=n, status=s) for n, s in rules])

    cases = [
        (None, "exit 0: nothing to gate (no release rules)", "**exit 0**: nothing to gate (no release rules)"),
        (gate("INSUFFICIENT_EVIDENCE", 1), "add rules to release.yaml", "so nothing was decided)"),
        (gate("PASS", 0, ("a", "PASS")), "exit 0: the gate passed (every rule passed)",
         "**exit 0**: the gate passed (every rule passed)"),
        (gate("FAIL", 1, ("no`del", "FAIL"), ("b", "PASS"), ("c", "FAIL")),
         "exit 1: the gate is blocked (FAIL: 2 rules failed: no`del, c)",
         "**exit 1**: the gate is blocked (FAIL: 2 rules failed: ``no`del``, `c`)"),
        (gate("INSUFFICIENT_EVIDENCE", 1, ("a", "PASS"), ("<b>", "INSUFFICIENT_EVIDENCE")),
         "could not be decided: <b>)", "(INSUFFICIENT_EVIDENCE: 1 rule could not be decided: `<b>`)"),
    ]
    for g, terminal, comment in cases:
        assert terminal in exit_line(g) and comment in _exit_text(g), (exit_line(g), _exit_text(g))
    assert "release.yaml" not in _exit_text(gate("INSUFFICIENT_EVIDENCE", 1))
