"""The ``oloproof`` command: a thin click layer over the library, one module per command.

Exit codes of every command (SPEC §17): 0 the gate passed (or nothing to gate), 1 the gate
blocked (FAIL or INSUFFICIENT_EVIDENCE; for ``audit verify``: a broken chain), 2 bad input or
usage (including a path that cannot be written, a port in use, a full disk), 3 an internal
error (one line naming a file with the traceback; ``--debug`` prints it), 130 interrupted.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import click

from oloproof import __version__
from oloproof.cli import (
    attribute,
    audit,
    diff,
    evaluate,
    export,
    gate,
    history,
    imports,
    init,
    label,
    prefix,
    push,
    replay,
    run,
    runs,
    search,
    show,
    trial,
    view,
)
from oloproof.cli.common import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, restore_log_key, take_log_key


class OloproofGroup(click.Group):
    """A click group whose own failures keep to the exit codes: click exits 1 for ``Abort``
    (Ctrl-C while parsing), for a broken pipe and for a bare ``ClickException``; here those
    are 130, 2 and 2. Commands report their own errors through ``common.handled``."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        from oloproof.cli.common import fail, non_utf8_argument

        bad = non_utf8_argument(sys.argv[1:] if args is None else args)  # `show $'\xff'`: exit 2
        if bad is not None:
            if not standalone_mode:
                raise click.UsageError(bad)
            fail(bad)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        from oloproof.cli.common import OutputState, PipeSafeStdout, show_plugin_warnings

        show_plugin_warnings()
        real = sys.stdout
        OutputState.closed = OutputState.decided = False
        if real is None:  # started with its standard output closed (`oloproof gate >&-`)
            real = open(os.devnull, "w")
            OutputState.closed = True
        sys.stdout = PipeSafeStdout(real)  # a reader closing the pipe never decides the code
        try:
            self._standalone(args, prog_name, complete_var, **extra)
        except SystemExit as e:
            nothing_decided = e.code in (0, None) and not OutputState.decided
            if OutputState.closed and nothing_decided:
                raise SystemExit(EXIT_INPUT) from None  # the output did not reach its reader
            raise
        finally:
            sys.stdout.flush()
            sys.stdout = real

    def _standalone(self, args: Any, prog_name: str | None, complete_var: str | None, **extra: Any) -> None:
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except (click.exceptions.Abort, KeyboardInterrupt, EOFError):
            click.echo("error: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code if e.exit_code not in (0, 1) else EXIT_INPUT)
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            from oloproof.cli.common import _silence_stdout

            _silence_stdout()
            sys.exit(EXIT_INPUT)
        # without standalone mode click returns what the command returned, or an Exit's code
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


@click.group(cls=OloproofGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oloproof")
@click.option("--debug", is_flag=True,
              help="Print the traceback of an error (also: OLOPROOF_DEBUG=1). Without it an internal "
                   "error prints one line naming a file that holds the traceback.")
def cli(debug: bool) -> None:
    """Oloproof: check the world, not the transcript.

    OLOPROOF_LOG_KEY, when set, keys the log's hash chain (see the README).
    OLOPROOF_DB, when set, is the --db of every command not given one (a path, or a
    postgresql:// URL: docs/team-log.md).

    Exit codes: 0 gate passed (or nothing to gate), 1 gate blocked, 2 bad input or usage,
    3 internal error, 130 interrupted.

    \b
    Example:
      oloproof init --example support-agent demo && cd demo && oloproof run
    """
    # the log's key is taken out of the environment before any project code is imported: a
    # system under test (and the worker processes it runs in) does not find it there
    take_log_key()
    click.get_current_context().call_on_close(restore_log_key)
    _db_from_environment(click.get_current_context())


def _db_from_environment(ctx: click.Context) -> None:
    """``OLOPROOF_DB`` (SPEC §18.7), when set: the ``--db`` of every command that takes one
    and is not given it (a team's PostgreSQL log for a whole shell session or CI job)."""
    url = os.environ.get("OLOPROOF_DB", "").strip()
    if not url:
        return

    def defaults(command: click.Command) -> dict[str, Any]:
        out: dict[str, Any] = {"db": url} if any(p.name == "db" for p in command.params) else {}
        for name, sub in getattr(command, "commands", {}).items():
            if below := defaults(sub):
                out[name] = below
        return out

    ctx.default_map = {**defaults(ctx.command), **(ctx.default_map or {})}


for module in (init, run, runs, show, evaluate, gate, diff, replay, view, export, audit, attribute, prefix, trial,
               imports, search, push):
    cli.add_command(module.command)
cli.add_command(history.command)
cli.add_command(history.flaky_command)
cli.add_command(label.command)


def main() -> None:  # console-script entry point
    """Run the command, then end the process with ITS exit code: after flushing the output,
    ``os._exit`` — so that an ``atexit`` hook or a thread left behind by a system under test
    cannot change the code a CI job reads (a blocked gate stays 1)."""
    import os

    _fill_standard_descriptors()
    if sys.stderr is None:  # nowhere to say an error: say it to nothing, rather than crash
        sys.stderr = open(os.devnull, "w")
    try:
        cli(prog_name="oloproof")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) and not isinstance(e.code, bool) else \
            (0 if e.code is None else EXIT_INTERNAL)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout and code == 0:
                code = EXIT_INPUT  # the output did not reach its destination
    os._exit(code)


def _fill_standard_descriptors() -> None:
    """Standard input, output and error closed at start (``oloproof run >&-``): each is opened
    on /dev/null, so that the log — or any file Oloproof opens — can never land on
    descriptor 1 or 2, where a print would write into it."""
    import os

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
