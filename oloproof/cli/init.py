"""``oloproof init``: copy a packaged example or the blank skeleton into a folder, over
:mod:`oloproof.app.examples` (never over existing files)."""

from __future__ import annotations

from pathlib import Path

import click

from oloproof.app.examples import BLANK, EXAMPLES, EXTRAS, copy_example
from oloproof.cli.common import handled


@click.command("init")
@click.option("--example", "name", type=click.Choice(sorted(EXAMPLES)),
              help="Which packaged example to copy.")
@click.option("--blank", is_flag=True,
              help="Write a blank project to start from: a Stateful system with one @tool, three cases, "
                   "two evaluators and a gate, with comments that point to the docs.")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@handled
def command(name: str | None, blank: bool, directory: str) -> None:
    """Copy a runnable example project (--example NAME) or a blank skeleton (--blank) into
    DIRECTORY (default: here).

    Refuses to overwrite existing files or to write outside DIRECTORY.

    \b
    Example:
      oloproof init --example support-agent demo
      oloproof init --blank my-agent && cd my-agent && oloproof run
    """
    from oloproof.errors import UsageError
    from oloproof.report.terminal import plural

    if blank == (name is not None):
        raise UsageError("give one of --example NAME (a packaged example) or --blank (a skeleton to "
                         f"start from); examples: {', '.join(sorted(EXAMPLES))}")
    written = copy_example(BLANK if name is None else name, Path(directory))  # no NAME: --blank (checked above)
    what = "a blank project" if blank else f"example {name!r}"
    click.echo(f"copied {what} into {directory} ({plural(len(written), 'file')})")
    if name in EXTRAS:
        click.echo(f"it needs: {EXTRAS[name]}")
    click.echo(f"next: cd {directory} && oloproof run")
    if blank:
        click.echo("then: edit app.py (your agent), cases.jsonl, oloproof.yaml; see docs/writing-a-system.md")
