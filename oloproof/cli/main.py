"""The ``oloproof`` command: a thin click layer over the library, one module per command."""

from __future__ import annotations

import click

from oloproof import __version__
from oloproof.cli import (
    audit,
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oloproof")
def cli() -> None:
    """Oloproof: check the world, not the transcript.

    \b
    Example:
      oloproof init --example support-agent demo && cd demo && oloproof run
    """


for module in (init, run, runs, show, evaluate, gate, replay, view, export, audit):
    cli.add_command(module.command)


def main() -> None:  # console-script entry point
    cli(prog_name="oloproof")
