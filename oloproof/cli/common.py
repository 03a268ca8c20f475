"""Shared CLI plumbing: error handling, the console, opening the log."""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from oloproof.errors import Interrupted, OloproofError, UsageError

DB_HELP = ("Path of the event log, or its URL (postgresql://USER@HOST/DB) (default: OLOPROOF_DB, else "
           ".oloproof/log.db in the current folder, or in the nearest parent folder that has one).")
JSON_HELP = "Without FILE (or with '-'): standard output, and the tables go to stderr."


def json_option(help: str) -> Callable:
    """``--json [FILE]``, the same on every command: FILE, or standard output without it. A
    FILE with neither a suffix nor a folder in it is refused: it is most often the command's
    own argument taken as the file (``show --json case_007``)."""

    def check(ctx: Any, param: Any, value: str | None) -> str | None:
        if value is not None and value != "-" and "." not in value and "/" not in value and \
                not Path(value).exists():  # an existing one is judged by check_output_path
            raise click.BadParameter(f"{value!r} names no file (no suffix): to print JSON, put --json after "
                                     f"the arguments ('... {value} --json'); to write a file, name it "
                                     f"'{value}.json'", param_hint="'--json'")
        return value

    return click.option("--json", "json_path", metavar="[FILE]", is_flag=False, flag_value="-", default=None,
                        callback=check, help=f"{help} {JSON_HELP}")


def find_log(start: Path | None = None) -> Path | None:
    """The log a read command opens without --db: ``.oloproof/log.db`` here or in the nearest
    parent folder (as pytest finds its rootdir), or None."""
    from oloproof.store import DEFAULT_LOG

    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_LOG
        if candidate.exists():
            return candidate
    return None


def console(stderr: bool = False) -> Any:
    """A rich console on stdout (or stderr): styled on a terminal; otherwise plain — no
    colour, no highlighting, ``$COLUMNS`` wide (200 when unset) — so piped output is stable."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream)
    return Console(file=stream, width=int(os.environ.get("COLUMNS", "0")) or 200, no_color=True,
                   highlight=False)


def fail(message: str, code: int = 2) -> None:
    """``error: MESSAGE`` on stderr, then exit with ``code`` (never 1: that means a gate blocked)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def non_utf8_argument(args: Any) -> str | None:
    """Why one of the command-line ``args`` cannot be taken, or None. Python hands a byte that
    is not UTF-8 over as a lone surrogate (``surrogateescape``); run ids, case ids, queries and
    the log's paths are stored and shown as UTF-8 text, so such an argument is refused here,
    before any command runs, rather than fail deep inside one (exit 2, not 3)."""
    for n, arg in enumerate(args or (), start=1):
        if not isinstance(arg, str):
            continue
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as e:
            try:
                raw = arg.encode("utf-8", "surrogateescape")
                shown = raw.decode("utf-8", "backslashreplace")
                byte = f"the byte 0x{raw[len(arg[:e.start].encode('utf-8', 'surrogateescape'))]:02x}"
            except UnicodeEncodeError:
                shown = arg.encode("utf-8", "backslashreplace").decode("ascii")
                byte = f"U+{ord(arg[e.start]):04X}"
            return (f"argument {n} ('{shown}') is not valid UTF-8 ({byte} at position {e.start}); "
                    "Oloproof takes its arguments as UTF-8 text: rename the file, or pass the value in UTF-8")
    return None


# Exit codes of every command (SPEC §17). 1 is reserved for a blocked gate (or a failed
# `audit verify`): no error ever exits 1.
EXIT_OK, EXIT_BLOCKED, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# An OSError with one of these is the machine's or the operator's (a full disk, a path that is
# not writable, a closed pipe...), not an Oloproof bug: one line, exit 2.
ENVIRONMENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EIO", "EPIPE", "ENOENT", "ENOTDIR", "EISDIR",
    "EEXIST", "ENAMETOOLONG", "ELOOP", "EMFILE", "ENFILE", "EFBIG", "EADDRINUSE", "EADDRNOTAVAIL",
    "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH") if hasattr(errno, name))


def debug_enabled() -> bool:
    """The global ``--debug`` flag, or ``OLOPROOF_DEBUG=1``: print tracebacks of errors."""
    if os.environ.get("OLOPROOF_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return True
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("debug"))


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def os_error_message(e: OSError) -> str:
    """One line for an OSError caused by the machine (``No space left on device: out.json``)."""
    reason = e.strerror or _one_line(str(e)) or type(e).__name__
    if e.errno == errno.EPIPE:
        return "the output was closed before it was written in full (broken pipe)"
    names = [str(n) for n in (e.filename, getattr(e, "filename2", None)) if n is not None]
    return f"{reason}: {' -> '.join(names)}" if names else reason


def _disk_failure(e: BaseException) -> bool:
    import sqlite3

    return isinstance(e, sqlite3.OperationalError) and any(
        m in str(e).lower() for m in ("database or disk is full", "disk i/o error"))


def show_plugin_warnings() -> None:
    """A plugin that fails to load is one line, ``warning: …`` on stderr (never a traceback,
    never a crash of a configuration that does not use it)."""
    import warnings

    previous = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        # a plugin warning comes from the evaluators' registry: until it is imported there is
        # none (importing it here would cost every command, `--help` too, the evaluate package)
        base = sys.modules.get("oloproof.evaluate.base")
        if base is not None and isinstance(category, type) and issubclass(category, base.PluginWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show


class OutputState:
    """What the command's standard output went through: ``closed`` once a reader closed the
    pipe (``oloproof gate latest | head -1``), ``decided`` once the command reached its own
    exit code (a gate's 0 or 1). A closed pipe never turns into 1, the gate's code (SPEC
    §18.1): the command goes on, its output dropped, and ends with the code it decided — or
    with 2 when it decided nothing (its output, the result, did not reach its reader)."""

    closed = False
    decided = False


def decided_exit(code: int) -> NoReturn:
    """End a command with the code it decided (the gate's): kept even if stdout was closed."""
    OutputState.decided = True
    sys.exit(code)


class PipeSafeStdout:
    """Standard output that survives its reader going away: a write or flush into a closed
    pipe marks :class:`OutputState` closed, points the file at /dev/null and drops the text —
    so rich, click and the interpreter's last flush never turn a broken pipe into an exit."""

    def __init__(self, stream: Any):
        self._stream = stream

    def _closed(self) -> None:
        OutputState.closed = True
        _silence_stdout(self._stream)

    def write(self, text: str) -> int:
        """Write to the real stream; once the pipe is closed, drop the text (counted as written)."""
        if not OutputState.closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._closed()
        return len(text)

    def flush(self) -> None:
        """Flush the real stream; a broken pipe marks the output closed instead of raising."""
        if not OutputState.closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout(stream: Any = None) -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's last flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (click's CliRunner)
        pass


def _traceback_file(exc: BaseException) -> str | None:
    """Write an internal error's traceback to a file in the system temp folder; its path, or
    None when it cannot be written (never raises)."""
    import platform
    import tempfile
    import time
    import traceback

    try:
        from oloproof import __version__
    except Exception:  # noqa: BLE001 - a broken installation still gets its line
        __version__ = "unknown"
    try:
        fd, name = tempfile.mkstemp(prefix=time.strftime("oloproof-error-%Y%m%dT%H%M%S-"), suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(f"oloproof {__version__} · Python {platform.python_version()} · {platform.platform()}\n")
            fh.write(f"command: {' '.join(sys.argv)}\n\n")
            fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return name
    except Exception:  # noqa: BLE001 - the one line still tells what happened
        return None


def internal_error_message(exc: BaseException, *, debug: bool) -> str:
    """The one line an internal error prints; the traceback goes to stderr (debug) or a file."""
    what = f"internal error ({type(exc).__name__}: {_one_line(str(exc))})" if str(exc) else \
        f"internal error ({type(exc).__name__})"
    if debug:
        return f"{what}; this is a bug in Oloproof, please report it with the traceback above"
    path = _traceback_file(exc)
    if path is None:
        return f"{what}; this is a bug in Oloproof: run again with --debug for the traceback and report it"
    return f"{what}; this is a bug in Oloproof: the traceback is in {path}, please report it with that file"


def handled(fn: Callable) -> Callable:
    """Turn every error into ONE line on stderr and its exit code (SPEC §17): 2 for bad input,
    a log that cannot be written or a machine problem (full disk, path not writable), 3 for an
    internal error (its traceback written to a file the line names; printed with ``--debug``),
    130 for Ctrl-C. Never 1: that is a blocked gate's. ``oloproof --debug`` (or
    ``OLOPROOF_DEBUG=1``) prints the traceback of any error."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
            _flush_stdout()
            return result
        except SystemExit:
            _flush_stdout()  # what was printed must have reached its destination
            raise
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise  # click's own: the group shows them (usage errors exit 2)
        except (Interrupted, KeyboardInterrupt):
            fail("interrupted", EXIT_INTERRUPTED)
        except Exception as e:  # noqa: BLE001 - every error ends as one line and an exit code
            debug = debug_enabled()
            if debug:
                import traceback

                traceback.print_exc(file=sys.stderr)
            if isinstance(e, OloproofError):
                code = e.exit_code if e.exit_code in (EXIT_INPUT, EXIT_INTERNAL) else EXIT_INPUT
                fail(str(e), code)
            if isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS:
                if e.errno == errno.EPIPE:
                    _silence_stdout()
                fail(os_error_message(e), EXIT_INPUT)
            if _disk_failure(e):  # an SQLite full disk the store did not translate
                fail(f"the event log cannot be written: {_one_line(str(e))}", EXIT_INPUT)
            fail(internal_error_message(e, debug=debug), EXIT_INTERNAL)

    return wrapper


def _flush_stdout() -> None:
    """Flush stdout now, so that a full disk (or a closed pipe) behind it is an error with
    its exit code rather than a lost result and a 0."""
    try:
        sys.stdout.flush()
    except OSError as e:
        _silence_stdout()
        if e.errno == errno.EPIPE:
            OutputState.closed = True
            return  # the command's own code decides (see OutputState)
        click.echo(f"error: {os_error_message(e)} (writing to stdout)", err=True)
        sys.exit(EXIT_INPUT)


_TAKEN_KEY: list[str | None] = [None]


def take_log_key() -> None:
    """Take ``OLOPROOF_LOG_KEY`` out of ``os.environ`` for the command's duration (a system under
    test imported later does not find it there; spawned workers do not inherit it)."""
    key = os.environ.pop("OLOPROOF_LOG_KEY", None)
    if key is not None:
        _TAKEN_KEY[0] = key


def restore_log_key() -> None:
    """Put back the ``OLOPROOF_LOG_KEY`` that :func:`take_log_key` took, if it took one."""
    if _TAKEN_KEY[0] is not None:
        os.environ["OLOPROOF_LOG_KEY"] = _TAKEN_KEY[0]
        _TAKEN_KEY[0] = None


def stdout_to_stderr() -> Any:
    """While a system under test runs under ``--json -``: whatever it prints (``print``,
    ``os.write(1, …)``, its worker processes) goes to stderr, so stdout holds the JSON alone."""
    import contextlib

    @contextlib.contextmanager
    def redirect() -> Any:
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, ValueError, OSError):  # not a real file (click's CliRunner)
            with contextlib.redirect_stdout(sys.stderr):
                yield
            return
        sys.stdout.flush()
        saved = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
        try:
            yield
        finally:
            try:
                sys.stdout.flush()
            except OSError:
                pass
            os.dup2(saved, fd)
            os.close(saved)

    return redirect()


def log_key() -> bytes | None:
    """``OLOPROOF_LOG_KEY``: the key of the log's HMAC chain (never stored in the log)."""
    key = _TAKEN_KEY[0] if _TAKEN_KEY[0] is not None else os.environ.get("OLOPROOF_LOG_KEY")
    if key is None:
        return None
    if not key:
        raise UsageError("OLOPROOF_LOG_KEY is set but empty; unset it, or set the key the log is chained with")
    return key.encode("utf-8", "surrogateescape")  # the variable's own bytes, UTF-8 or not


def _sqlite_path(url: str) -> Path:
    """The file an ``sqlite:///PATH`` URL names (``sqlite:////abs`` absolute)."""
    rest = url.partition("://")[2]
    if not rest.startswith("/"):
        raise UsageError(f"--db {url}: an SQLite URL is sqlite:///PATH (three slashes, then the path)")
    return Path(rest[1:])


def open_log(db: str | None, *, must_exist: bool = True, durability: str = "full", write: bool = False) -> Any:
    """The event log. Read commands open it read-only (nothing created or changed, a writer
    never waited on); ``write=True`` for the commands that append (run, replay, rebuild)."""
    from oloproof.store import DEFAULT_LOG, SQLiteStore, open_store, scheme_of_url

    if db is not None and scheme_of_url(db) == "memory":
        raise UsageError("--db memory: an in-memory log holds nothing once this command ends; pass a file")
    if db is not None and scheme_of_url(db) != "sqlite":  # a server log: the backend checks it
        server = open_store(db, durability=durability, create=not must_exist, readonly=not write, key=log_key())
        if write and getattr(server, "projections_stale", False):  # made by an older Oloproof: derived again
            from oloproof.app.projections import rebuild_projections

            click.echo("rebuilding the log's projection tables from its events…", err=True)
            rebuild_projections(server)
        return server
    if db is not None and db.startswith("sqlite://"):
        db = str(_sqlite_path(db))
    path = Path(db or DEFAULT_LOG)
    if db is None and must_exist and not path.exists():
        path = find_log() or path
    if must_exist and not path.exists():
        raise UsageError(f"no event log at {path}; run 'oloproof run' first or pass --db")
    if must_exist and not path.is_file():
        raise UsageError(f"--db {path}: is not a file")
    if must_exist and path.stat().st_size == 0:
        raise UsageError(f"{path}: an empty file: an Oloproof log whose creation was interrupted (or no log at "
                         "all); delete it, or run 'oloproof run' to create the log in it")
    store = open_store(path, durability=durability, create=not must_exist, readonly=not write, key=log_key())
    if not write:
        return store
    # written by an older Oloproof: derive the tables again
    if isinstance(store, SQLiteStore) and store.projections_stale:
        from oloproof.app.projections import rebuild_projections

        click.echo("rebuilding the log's projection tables from its events…", err=True)
        rebuild_projections(store)
    return store


def incomplete_note(summary: Any) -> str | None:
    """The line that says a run is not sealed (printed above its tables), or None."""
    if summary.complete:
        return None
    return (f"INCOMPLETE RUN: {summary.cases_committed} of {summary.cases_expected} cases recorded, no seal "
            "(crashed, killed or still running). Unrecorded cases count as missing; the gate cannot pass.")


def log_args(db_path: Any) -> str:
    """What a printed hint needs to run where it is printed: `` --db PATH`` (or `` --db URL``
    without its password) unless the log is the one a command here finds by itself: the one
    ``OLOPROOF_DB`` names, or (without it) ``.oloproof/log.db`` in this folder."""
    import shlex

    from oloproof.store import DEFAULT_LOG, scheme_of_url

    if db_path is None:
        return ""
    env = os.environ.get("OLOPROOF_DB", "").strip() or None  # as the CLI reads it (main._db_from_environment)
    if env is not None and same_log(str(db_path), env):
        return ""
    if scheme_of_url(db_path) != "sqlite":
        return f" --db {shlex.quote(log_label(db_path))}"
    try:
        if env is None and Path(db_path).resolve() == (Path.cwd() / DEFAULT_LOG).resolve():
            return ""
    except OSError:
        pass
    return f" --db {shlex.quote(str(db_path))}"


def log_label(db_path: Any) -> str:
    """A log as messages name it: its path, or its URL without the password."""
    from oloproof.store import printable_url

    return printable_url(str(db_path))


def same_log(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one log: the same file (by path or ``sqlite:///`` URL), or
    the same server URL."""
    from oloproof.store import scheme_of_url

    if scheme_of_url(a) != "sqlite" or scheme_of_url(b) != "sqlite":
        return a == b
    try:
        return Path(a.removeprefix("sqlite:///")).resolve() == Path(b.removeprefix("sqlite:///")).resolve()
    except OSError:
        return False


def resolve_run(store: Any, run: str) -> str:
    """A run id, or ``latest`` (:func:`oloproof.app.runs.resolve_run`, imported when used)."""
    from oloproof.app.runs import resolve_run as resolve

    return resolve(store, run)


def _check_parent(path: str, option: str, target: Path) -> None:
    parent = target.parent  # Path("x").parent is Path(".")
    if parent.is_dir():
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {path}: folder {parent} is not writable")
        return
    existing = next((p for p in parent.parents if p.exists()), None)
    blocking = parent if parent.exists() else existing
    if blocking is not None and not blocking.is_dir():
        raise UsageError(f"{option} {path}: {blocking} is a file, not a folder")
    raise UsageError(f"{option} {path}: folder {parent} does not exist")


def check_output_path(path: str, option: str = "--json") -> None:
    """Refuse, before anything runs, an output FILE that could not be written at the end: a
    folder, a missing parent folder, a path under a regular file, a read-only place. Raises a
    :class:`UsageError` (exit 2) naming the option. ``-`` (stdout) is always fine."""
    if path == "-":
        return
    target = Path(path)
    if not path or target.is_dir():
        raise UsageError(f"{option} {path}: is a folder; name a file")
    _refuse_log(path, option)
    _refuse_inputs(path, option, target)
    _check_parent(path, option, target)
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{option} {path}: file is not writable")


#: files an output never replaces: a project's code and configuration (a results file named
#: app.py or oloproof.yaml is a slip of the keyboard, and the project would be lost)
NEVER_REPLACED = (".py", ".pyw", ".yaml", ".yml", ".toml", ".cfg", ".ini")


def _refuse_inputs(path: str, option: str, target: Path) -> None:
    suffix = target.suffix.lower()
    protected = suffix in NEVER_REPLACED or (suffix == ".jsonl" and option == "--json")  # a case file
    if protected and (target.exists() or suffix in (".py", ".pyw")):
        raise UsageError(f"{option} {printable_path(path)}: refusing to write results over a "
                         f"{'Python' if suffix.startswith('.py') else suffix[1:].upper()} file "
                         "(a project's code, configuration or cases); name a .json file")


def _refuse_log(path: str, option: str) -> None:
    from oloproof.store.sqlite import is_event_log

    if is_event_log(Path(path)):
        raise UsageError(f"{option} {printable_path(path)}: is an Oloproof event log; writing there would replace "
                         "it. Name another file")


def printable_path(path: str) -> str:
    """A path as a message may show it: on one line, controls escaped
    (:func:`oloproof.report.terminal.one_line`)."""
    from oloproof.report.terminal import one_line

    return one_line(path)


def check_output_folder(path: str, option: str = "--out") -> None:
    """Refuse, before anything runs, an output FOLDER that could not be written at the end: a
    regular file, a folder that is not empty, a missing parent folder, a path under a regular
    file. Raises a :class:`UsageError` (exit 2) naming the option."""
    target = Path(path)
    if not path:
        raise UsageError(f"{option}: name a new or empty folder")
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            raise UsageError(f"{option} {path}: is a file; name a new or empty folder")
        if any(target.iterdir()):
            raise UsageError(f"{option} {path}: {target} is not empty; choose a new folder for the report")
        if not os.access(target, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {path}: folder is not writable")
        return
    _check_parent(path, option, target)


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, then a
    rename): a failure (a full disk) leaves neither a partial file nor a temporary one.
    ``-`` writes to stdout."""
    import tempfile

    if path == "-":
        click.echo(text, nl=False)
        sys.stdout.flush()  # a full disk behind stdout is an error, not a silent loss
        return
    target = Path(path)
    _refuse_log(path, "output")  # checked again at the end: never replace the log
    if target.exists() and not target.is_file():  # a device or a pipe: written in place, never replaced
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str, data: Any) -> None:
    """Write ``data`` as indented JSON (non-ASCII kept) with :func:`write_text`: atomically,
    ``-`` for stdout."""
    import json

    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
