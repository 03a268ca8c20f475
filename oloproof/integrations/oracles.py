"""Task-specific outcome oracles: check a deliverable in the world, then record it as
``deliverable(name, exists=, contract_ok=)`` evidence (``release_evidence/v1``) for
``{type: release_class}``.

The fault-injection guide (seeds/fault-injection-release-gate) asks for an oracle specific to
the task, not a search of the final message for "resolved": for a coding agent, run the tests
and inspect the repository's diff; for a report agent, ask for the file, its schema, its cited
sources and destination parity; for a support agent, read the case record (the sandbox's
state, ``state_matches``). This module holds the first two:

* :func:`code_deliverable` — the repository's diff against a :func:`snapshot_tree` taken before
  the agent acted (a folder, no git needed), the project's tests run, and **tests edited to go
  green** detected: a test file that existed before and was changed or deleted is a failed
  contract (``tests_edited``), and the tests as they were are run again against the new code in
  a scratch copy — when those fail, the edit is what made the suite green
  (``tests_edited_to_go_green``);
* :func:`report_deliverable` — the file exists, parses (JSON or YAML) and validates against a
  schema (any type pydantic validates: a model, a ``TypedDict``, ``dict[str, int]``…), cites
  at least ``min_sources`` sources, each one the agent actually had (``known_sources``, or a file
  under ``sources_dir``), and every destination holds the same report (parity).

Each returns a :class:`DeliverableCheck` — ``exists``, ``contract_ok`` and the problems found,
as codes with their details — and, inside a case, records it with
``current_case().deliverable(...)``. The classifier reads only ``exists`` and ``contract_ok``:
put :meth:`DeliverableCheck.as_dict` in the system's output to keep the problems in the log
beside it. A contract that could not be checked (the test command did not start) records
``contract_ok=None``, which the classifier leaves ``missing`` (``contract_not_checked``) —
never a pass.

Outside a case the helpers check and return, recording nothing, so they also serve in plain
tests. Imported on use: ``import oloproof`` does not load this module.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: folders a tree snapshot leaves out: version control, caches, virtual environments, logs
IGNORED_DIRS = (".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                ".oloproof", ".venv", "venv", "node_modules", ".tox")
#: what a test file is, as globs on its path relative to the repository (``*`` crosses ``/``)
TEST_FILES = ("test_*.py", "*/test_*.py", "*_test.py", "*/*_test.py", "conftest.py", "*/conftest.py",
              "tests/*", "*/tests/*", "test/*", "*/test/*", "__tests__/*", "*/__tests__/*",
              "*.test.js", "*.spec.js", "*.test.ts", "*.spec.ts", "*_test.go")
#: the most bytes a snapshot holds: a repository fixture, not a monorepo
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
#: the characters of the test command's output a check keeps (its end: where failures show)
OUTPUT_TAIL = 2000


@dataclass(frozen=True)
class DeliverableCheck:
    """What a deliverable oracle found: whether the deliverable ``exists``, whether it meets
    its contract (``contract_ok``: None when it does not exist or could not be checked), the
    ``problems`` (``code: detail`` each; none when the contract holds) and ``checks``, what was
    examined (the diff, the test runs, the sources…), JSON-ready."""

    name: str
    exists: bool
    contract_ok: bool | None
    problems: tuple[str, ...] = ()
    checks: Mapping[str, Any] = field(default_factory=dict)
    #: whether it was recorded as ``deliverable(...)`` evidence (False outside a case)
    recorded: bool = False

    @property
    def codes(self) -> tuple[str, ...]:
        """The problems' codes alone (``tests_failed``, ``unknown_source``…), in order."""
        return tuple(p.split(":", 1)[0] for p in self.problems)

    def as_dict(self) -> dict[str, Any]:
        """The check as plain JSON data (for the system's output, where ``show`` and the
        HTML case panel show it beside the recorded evidence)."""
        return {"name": self.name, "exists": self.exists, "contract_ok": self.contract_ok,
                "problems": list(self.problems), "checks": dict(self.checks)}


# ---- a repository before and after ---------------------------------------------------------

@dataclass(frozen=True)
class TreeDiff:
    """Files ``added``, ``modified`` and ``deleted`` between two snapshots (paths relative to
    the repository, POSIX separators, sorted)."""

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    @property
    def changed(self) -> tuple[str, ...]:
        """Every path the diff touches, sorted."""
        return tuple(sorted((*self.added, *self.modified, *self.deleted)))

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.deleted)


class TreeSnapshot(Mapping[str, bytes]):
    """The files of a folder at one moment: relative path → content. Take one with
    :func:`snapshot_tree` before the agent acts; :meth:`diff` compares it with a later one."""

    def __init__(self, root: Path, files: dict[str, bytes]):
        self.root = root
        self._files = files

    def __getitem__(self, path: str) -> bytes:
        return self._files[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def digest(self) -> str:
        """SHA-256 over every path and content, in path order: equal trees, equal digests."""
        h = hashlib.sha256()
        for path in sorted(self._files):
            h.update(path.encode() + b"\x00" + hashlib.sha256(self._files[path]).digest())
        return h.hexdigest()

    def diff(self, after: Mapping[str, bytes]) -> TreeDiff:
        """What changed from this snapshot to ``after``."""
        before = self._files
        return TreeDiff(added=tuple(sorted(set(after) - set(before))),
                        modified=tuple(sorted(p for p in before if p in after and after[p] != before[p])),
                        deleted=tuple(sorted(set(before) - set(after))))


def snapshot_tree(root: str | os.PathLike[str], *, ignore: Iterable[str] = IGNORED_DIRS) -> TreeSnapshot:
    """Every regular file under ``root`` with its content, leaving out the folders named in
    ``ignore`` (version control, caches, virtual environments). A symbolic link is kept as
    its target's text (never followed: a link out of the repository is not read).

    Raises:
        ValueError: ``root`` is not a folder, or the files hold more than
            :data:`MAX_SNAPSHOT_BYTES` (a fixture repository is small).
    """
    base = Path(root)
    if not base.is_dir():
        raise ValueError(f"snapshot_tree({str(root)!r}): not a folder")
    skip = set(ignore)
    files: dict[str, bytes] = {}
    total = 0
    for folder, dirs, names in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in names:
            path = Path(folder) / name
            rel = path.relative_to(base).as_posix()
            if path.is_symlink():
                content = b"symlink:" + os.readlink(path).encode()
            elif path.is_file():
                content = path.read_bytes()
            else:  # a socket, a fifo: no content to compare
                continue
            total += len(content)
            if total > MAX_SNAPSHOT_BYTES:
                raise ValueError(f"snapshot_tree({str(root)!r}): more than {MAX_SNAPSHOT_BYTES} bytes of files; "
                                 "snapshot a smaller fixture repository")
            files[rel] = content
    return TreeSnapshot(base, files)


def is_test_file(path: str, patterns: Iterable[str] = TEST_FILES) -> bool:
    """Whether ``path`` (relative, POSIX) is a test file under ``patterns``."""
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


@dataclass(frozen=True)
class TestRun:
    """One run of the test command: its exit code (None when it did not start or timed out),
    whether it passed, and the end of its output."""

    __test__ = False  # not a pytest test class, whatever its name

    command: tuple[str, ...]
    cwd: str
    returncode: int | None
    passed: bool
    output_tail: str
    problem: str | None = None  # "not_run: …" or "timed_out: …"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for :attr:`DeliverableCheck.checks`."""
        return {"command": list(self.command), "returncode": self.returncode, "passed": self.passed,
                "output_tail": self.output_tail, **({"problem": self.problem} if self.problem else {})}


def run_tests(command: Sequence[str] | str, cwd: str | os.PathLike[str], *, timeout: float = 300.0,
              env: Mapping[str, str] | None = None) -> TestRun:
    """Run the test ``command`` (an argument list; a string is split like a shell would,
    never run through one) in ``cwd``; it passes when it exits 0. No bytecode is written into
    the repository (``PYTHONDONTWRITEBYTECODE``)."""
    argv = tuple(shlex.split(command) if isinstance(command, str) else (str(a) for a in command))
    if not argv:
        raise ValueError("the test command is empty")
    environment = {**(os.environ if env is None else env), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(argv, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        return TestRun(argv, str(cwd), None, False, _tail(out), f"timed_out: after {timeout:g} s")
    except OSError as e:
        return TestRun(argv, str(cwd), None, False, "", f"not_run: {argv[0]}: {e.strerror or e}")
    return TestRun(argv, str(cwd), done.returncode, done.returncode == 0, _tail(done.stdout + done.stderr))


def _tail(out: bytes | str) -> str:
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    return text[-OUTPUT_TAIL:]


def code_deliverable(repo: str | os.PathLike[str], *, before: TreeSnapshot, test_command: Sequence[str] | str,
                     name: str = "code-change", test_files: Iterable[str] = TEST_FILES,
                     allowed_paths: Iterable[str] | None = None, allow_test_edits: bool = False,
                     require_change: bool = True, timeout: float = 300.0, env: Mapping[str, str] | None = None,
                     record: bool = True) -> DeliverableCheck:
    """A coding agent's deliverable: the repository ``repo`` as the agent left it, checked
    against ``before`` (a :func:`snapshot_tree` taken before it acted).

    In order: the diff (taken before any test runs, so test caches never count as changes);
    the test command run in ``repo``; then, when a test file that existed before was changed or
    deleted, the tests **as they were** run against the new code, in a scratch copy of the
    repository with the original test files put back.

    The deliverable exists when the diff is not empty (or ``require_change=False``). Problems
    (each fails the contract):

    * ``no_change`` — the agent changed nothing;
    * ``outside_allowed_paths`` — a changed file matches none of ``allowed_paths`` (globs on
      the relative path; None: any file may change);
    * ``tests_failed`` / ``tests_timed_out`` — the test command exited non-zero, or ran past
      ``timeout`` seconds;
    * ``tests_edited_to_go_green`` — test files were changed or deleted and the original tests
      fail against the new code: the edit, not the fix, made the suite green;
    * ``tests_edited`` — test files were changed or deleted (the original tests pass, or could
      not be told apart); with ``allow_test_edits=True`` an edit is allowed, as long as the
      original tests still pass.

    A test command that does not start (``not_run``) leaves the contract unchecked
    (``contract_ok=None``) unless another problem already fails it.

    Args:
        repo: the repository folder (no git needed).
        before: its snapshot before the agent acted.
        test_command: the command that runs the tests, as an argument list (e.g.
            ``[sys.executable, "-m", "pytest", "-q"]``); it passes when it exits 0.
        name: the deliverable's name in the evidence.
        test_files: globs that say which files are tests (default :data:`TEST_FILES`).
        allowed_paths: globs of the files the agent may change; None: any.
        allow_test_edits: accept changes to existing test files when the original tests
            still pass against the new code.
        require_change: an empty diff means there is no deliverable.
        timeout: seconds each test run may take.
        env: the environment of the test runs (default: this process's).
        record: record ``deliverable(name, …)`` in the case in progress (if any).
    """
    root = Path(repo)
    patterns = tuple(test_files)
    if not root.is_dir():
        return _finish(DeliverableCheck(name, False, None, (f"no_repository: {root} is not a folder",),
                                        {"repository": str(root)}), record)
    after = snapshot_tree(root)
    diff = before.diff(after)
    edited = [p for p in (*diff.modified, *diff.deleted) if is_test_file(p, patterns)]
    checks: dict[str, Any] = {"diff": {"added": list(diff.added), "modified": list(diff.modified),
                                       "deleted": list(diff.deleted)},
                              "tests_edited": edited}
    problems: list[str] = []
    unchecked: list[str] = []
    exists = bool(diff) or not require_change
    if not diff:
        problems.append("no_change: the repository is as it was before the agent acted")
    if allowed_paths is not None:
        allowed = tuple(allowed_paths)
        outside = [p for p in diff.changed if not any(fnmatch.fnmatchcase(p, g) for g in allowed)]
        if outside:
            problems.append(f"outside_allowed_paths: {', '.join(outside)}")
    run = run_tests(test_command, root, timeout=timeout, env=env)
    checks["tests"] = run.as_dict()
    _judge_run(run, "tests", problems, unchecked)
    if edited:
        original = _run_original_tests(root, before, edited, test_command, timeout, env)
        checks["original_tests"] = original.as_dict()
        if original.problem is not None and original.problem.startswith("not_run"):
            unchecked.append(f"original_tests_not_run: {original.problem}")
            if not allow_test_edits:
                problems.append(f"tests_edited: {', '.join(edited)}")
        elif not original.passed:
            problems.append(f"tests_edited_to_go_green: {', '.join(edited)} changed, and the tests as they were "
                            + ("time out" if original.returncode is None else f"fail (exit {original.returncode})")
                            + " against the new code")
        elif not allow_test_edits:
            problems.append(f"tests_edited: {', '.join(edited)}")
    if not exists:
        return _finish(DeliverableCheck(name, False, None, tuple(problems), checks), record)
    contract = False if problems else (None if unchecked else True)
    return _finish(DeliverableCheck(name, True, contract, tuple(problems + unchecked), checks), record)


def _judge_run(run: TestRun, label: str, problems: list[str], unchecked: list[str]) -> None:
    if run.problem is not None and run.problem.startswith("not_run"):
        unchecked.append(f"{label}_not_run: {run.problem.partition(': ')[2]}")
    elif run.problem is not None:
        problems.append(f"{label}_timed_out: {run.problem.partition(': ')[2]}")
    elif not run.passed:
        problems.append(f"{label}_failed: exit {run.returncode}")


def _run_original_tests(root: Path, before: TreeSnapshot, edited: list[str], command: Sequence[str] | str,
                        timeout: float, env: Mapping[str, str] | None) -> TestRun:
    """The tests as they were before the agent acted, against the code as it is now: a
    scratch copy of the repository with the original test files put back."""
    scratch = Path(tempfile.mkdtemp(prefix="oloproof-original-tests-"))
    try:
        copy = scratch / root.name
        shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns(*IGNORED_DIRS))
        for rel in edited:
            target = copy / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            target.write_bytes(before[rel])
        return run_tests(command, copy, timeout=timeout, env=env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---- a report, its sources and its destinations ---------------------------------------------

def report_deliverable(path: str | os.PathLike[str], *, name: str | None = None, schema: Any = None,
                       strict: bool = True, sources: str | Callable[[Any], Any] | None = "sources",
                       known_sources: Iterable[str] | None = None,
                       sources_dir: str | os.PathLike[str] | None = None, min_sources: int = 1,
                       destinations: Mapping[str, str | os.PathLike[str]] | Iterable[str | os.PathLike[str]] = (),
                       fmt: str | None = None, record: bool = True) -> DeliverableCheck:
    """A report agent's deliverable: the file at ``path``, its schema, its cited sources and
    its copies at every destination.

    Problems (each fails the contract):

    * ``not_parseable`` — the file is not valid JSON (``.json``) or YAML (``.yaml``/``.yml``);
      ``fmt`` (``json`` or ``yaml``) overrides the suffix;
    * ``schema_invalid`` — ``schema`` (a pydantic model or any type pydantic's ``TypeAdapter``
      takes) does not validate the parsed report (as JSON data, strictly unless
      ``strict=False``: the text ``"1050"`` is no number); the first errors are named;
    * ``too_few_sources`` — fewer than ``min_sources`` sources are cited;
    * ``unknown_source`` — a cited source is not among ``known_sources`` (the documents the
      agent had), or no file of that name (with or without its extension) is in
      ``sources_dir``: a citation of nothing;
    * ``destination_missing`` / ``destination_differs`` — a destination holds no copy, or a
      different one (copies compare as parsed data, so formatting alone is no difference).

    Args:
        path: the report's file.
        name: the deliverable's name in the evidence (default: the file's name).
        schema: the report's schema; None: not checked.
        strict: validate without coercion (pydantic's strict mode, on the report as JSON).
        sources: where the citations are — a dotted path into the report (``sources``,
            ``meta.citations``; items are texts, or objects with ``id``, ``url`` or ``source``),
            or a function of the parsed report returning them; None: not checked.
        known_sources: the sources the agent actually had.
        sources_dir: a folder each cited source must be a file in (instead of, or beside,
            ``known_sources``).
        min_sources: the fewest citations a report must have.
        destinations: files that must hold the same report (an outbox, a shared drive): a
            mapping of a name each (problems name it) to its file, or the files alone.
        fmt: ``json`` or ``yaml``; None: from the suffix.
        record: record ``deliverable(name, …)`` in the case in progress (if any).

    Raises:
        ValueError: the format cannot be told from the suffix and ``fmt`` is not given, or
            ``sources`` is not a valid path.
    """
    report = Path(path)
    label = name or report.name
    checks: dict[str, Any] = {"file": report.name}
    if not report.is_file():
        return _finish(DeliverableCheck(label, False, None, (f"missing: no file {report.name}",), checks), record)
    kind = _format(report, fmt)
    problems: list[str] = []
    try:
        data = _parse(report.read_bytes(), kind)
    except ValueError as e:
        problems.append(f"not_parseable: {kind}: {e}")
        return _finish(DeliverableCheck(label, True, False, tuple(problems), checks), record)
    if schema is not None:
        problem = _schema_problem(data, schema, strict)
        checks["schema"] = getattr(schema, "__name__", repr(schema))
        if problem is not None:
            problems.append(f"schema_invalid: {problem}")
    if sources is not None:
        cited = _cited(data, sources)
        checks["sources"] = cited
        if len(cited) < min_sources:
            problems.append(f"too_few_sources: {len(cited)} cited, at least {min_sources} needed")
        known = None if known_sources is None else set(known_sources)
        folder = None if sources_dir is None else Path(sources_dir)
        unknown = [s for s in cited if (known is not None and s not in known)
                   or (folder is not None and not _file_in(folder, s))]
        if unknown:
            problems.append(f"unknown_source: {', '.join(unknown)} (not among the sources the agent had)")
    parity: dict[str, str] = {}
    named = destinations.items() if isinstance(destinations, Mapping) else ((str(d), d) for d in destinations)
    for label_, dest in named:
        where = Path(dest)
        if not where.is_file():
            parity[label_] = "missing"
            problems.append(f"destination_missing: {label_}")
            continue
        same = where.read_bytes() == report.read_bytes()
        if not same:
            try:
                same = _parse(where.read_bytes(), _format(where, fmt)) == data
            except ValueError:
                same = False
        parity[label_] = "same" if same else "differs"
        if not same:
            problems.append(f"destination_differs: {label_} holds another report")
    if parity:
        checks["destinations"] = parity
    return _finish(DeliverableCheck(label, True, not problems, tuple(problems), checks), record)


def _format(path: Path, fmt: str | None) -> str:
    kind = fmt or {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(path.suffix.lower())
    if kind not in ("json", "yaml"):
        raise ValueError(f"report_deliverable: cannot tell the format of {path.name!r}; pass fmt='json' or 'yaml'")
    return kind


def _parse(raw: bytes, kind: str) -> Any:
    if kind == "json":
        import json

        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(str(e)) from None
    import yaml

    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ValueError(" ".join(str(e).split())) from None


def _schema_problem(data: Any, schema: Any, strict: bool) -> str | None:
    import json

    from pydantic import TypeAdapter, ValidationError

    try:
        # as JSON data: strict mode still reads an ISO instant as a datetime, and a YAML date
        # is its ISO text
        TypeAdapter(schema).validate_json(json.dumps(data, default=str), strict=strict)
    except ValidationError as e:
        shown = [f"{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()[:3]]
        more = f" (+{e.error_count() - 3} more)" if e.error_count() > 3 else ""
        return "; ".join(shown) + more
    return None


def _cited(data: Any, sources: str | Callable[[Any], Any]) -> list[str]:
    if callable(sources):
        found = sources(data)
    else:
        from oloproof.config.paths import ABSENT, PathError, parse_path, resolve

        try:
            found = resolve(data, parse_path(sources))
        except PathError as e:
            raise ValueError(f"report_deliverable(sources={sources!r}): {e}") from None
        if found is ABSENT:
            found = []
    if found is None:
        return []
    if isinstance(found, (str, dict)):
        found = [found]
    out = []
    for item in found:
        if isinstance(item, dict):
            item = next((item[k] for k in ("id", "url", "source") if k in item), None)
        if isinstance(item, str) and item.strip():
            out.append(item)
    return out


def _file_in(folder: Path, source: str) -> bool:
    """Whether ``source`` names a file inside ``folder`` — by its name, or by its name without
    the extension (a source cited as ``invoices-2026-01`` is ``invoices-2026-01.json``) — and
    never outside it (``../x`` is not in the folder)."""
    try:
        base = folder.resolve()
        target = (folder / source).resolve()
        if base not in target.parents:
            return False
        if target.is_file():
            return True
        return any(p.is_file() and p.stem == target.name for p in target.parent.glob(glob_escape(target.name) + ".*"))
    except (OSError, ValueError):
        return False


def glob_escape(text: str) -> str:
    """``text`` with the characters a glob reads (``*``, ``?``, ``[``) taken literally."""
    import glob

    return glob.escape(text)


# ---- recording -------------------------------------------------------------------------------

def _finish(check: DeliverableCheck, record: bool) -> DeliverableCheck:
    """Record ``check`` as ``deliverable(...)`` evidence when a case is running."""
    if not record:
        return check
    from oloproof.errors import RecordError
    from oloproof.system import current_case

    try:
        rec = current_case()
    except RecordError:  # outside a case: a plain check
        return check
    rec.deliverable(check.name, exists=check.exists, contract_ok=check.contract_ok)
    from dataclasses import replace

    return replace(check, recorded=True)
