from __future__ import annotations

from pathlib import Path

import click

from oloproof.app.examples import EXAMPLES, copy_example
from oloproof.cli.common import handled


@click.command("init")
@click.option("--example", "name", required=True, type=click.Choice(sorted(EXAMPLES)),
              help="Which packaged example to copy.")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@handled
def command(name: str, directory: str) -> None:
    """Copy a runnable example project into DIRECTORY (default: here).

    Refuses to overwrite existing files or to write outside DIRECTORY.

    \b
    Example:
      oloproof init --example support-agent demo
    """
    from oloproof.report.terminal import plural

    written = copy_example(name, Path(directory))
    click.echo(f"copied example {name!r} into {directory} ({plural(len(written), 'file')})")
    click.echo(f"next: cd {directory} && oloproof run")
