"""The ``oloproof`` command: a thin click layer over the library, one module per command.

Exit codes of every command (SPEC §17): 0 the gate passed (or nothing to gate), 1 the gate
blocked (FAIL or INSUFFICIENT_EVIDENCE; for ``audit verify``: a broken chain), 2 bad input or
usage (including a path that cannot be written, a port in use, a full disk), 3 an internal
error (one line naming a file with the traceback; ``--debug`` prints it), 130 interrupted.
"""

from __future__ import annotations

import errno
import sys
from typing import Any

import click

from oloproof import __version__
from oloproof.cli import (
    audit,
    diff,
    evaluate,
    export,
    gate,
    init,
    replay,
    run,
    runs,
    show,
    view,
)
from oloproof.cli.common import EXIT_INPUT, EXIT_INTERRUPTED


class OloproofGroup(click.Group):
    """A click group whose own failures keep to the exit codes: click exits 1 for ``Abort``
    (Ctrl-C while parsing), for a broken pipe and for a bare ``ClickException``; here those
    are 130, 2 and 2. Commands report their own errors through ``common.handled``."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
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

    Exit codes: 0 gate passed (or nothing to gate), 1 gate blocked, 2 bad input or usage,
    3 internal error, 130 interrupted.

    \b
    Example:
      oloproof init --example support-agent demo && cd demo && oloproof run
    """


for module in (init, run, runs, show, evaluate, gate, diff, replay, view, export, audit):
    cli.add_command(module.command)


def main() -> None:  # console-script entry point
    cli(prog_name="oloproof")
