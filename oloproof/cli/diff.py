"""``oloproof diff BASE CANDIDATE``: two stored runs compared case by case, over
:func:`oloproof.app.diff.diff_runs`; runs that pair no case compare nothing (exit 2)."""

from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, check_output_path, console, handled, json_option, open_log, write_json


@click.command("diff")
@click.argument("base")
@click.argument("candidate")
@json_option("Write the comparison as JSON to FILE.")
@click.option("--allow-unpaired", is_flag=True,
              help="Compare runs of different systems, or with no case in common, side by side.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(base: str, candidate: str, json_path: str | None, allow_unpaired: bool, db: str | None) -> None:
    """Compare two stored runs of one suite case by case: BASE, then CANDIDATE.

    Each is a run id, 'latest', 'version:V' (the latest finished run of version V) or
    'pin:NAME' (see 'oloproof runs --pin'). Cases pair by id and fingerprint; for each
    criterion the table gives both rates, the flips (pass→fail first) and McNemar's exact
    p-value on them. Each run is judged under the rules it ran with, from its events.

    Two runs of different systems, or with no case that pairs, compare nothing: exit 2
    unless --allow-unpaired.

    Exit code: 0 (the comparison is descriptive; gate on it with a no_regression rule),
    2 bad input (runs that do not pair included).

    \b
    Example:
      oloproof diff version:v1 latest --json diff.json
    """
    from oloproof.app.diff import diff_runs
    from oloproof.report.compare import diff_dict, diff_view

    if json_path:
        check_output_path(json_path)
    store = open_log(db)
    try:
        d = diff_runs(store, base, candidate, allow_unpaired=allow_unpaired)
    finally:
        store.close()
    console(stderr=json_path == "-").print(diff_view(d))
    if json_path:
        write_json(json_path, diff_dict(d))
