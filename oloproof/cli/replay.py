"""``oloproof replay --fault TOOL:KIND``: replay a stored run's cases with one tool result
faulted, each after a control replay, over :func:`oloproof.app.replay.replay_run` (SPEC §7.1)."""

from __future__ import annotations

import sys
from typing import Any

import click

from oloproof.cli.common import (
    DB_HELP,
    check_output_path,
    console,
    handled,
    json_option,
    open_log,
    resolve_run,
    write_json,
)
from oloproof.cli.run import executor_options


@click.command("replay")
@click.option("--fault", "fault_specs", required=True, multiple=True, metavar="TOOL:KIND",
              help="The call to fault and how: KIND is error, timeout, malformed, timeout_after_effect or "
                   "denied (one fault a replay).")
@click.option("--case", "case_ids", multiple=True, metavar="ID", help="Only these cases (repeatable).")
@click.option("--run", "run", default="latest", show_default=True, help="The stored run to replay.")
@click.option("--escalate", "escalate", multiple=True, metavar="TOOL",
              help="Tools that count as escalating (default: from a fault_recovery evaluator on TOOL).")
@json_option("Write the per-case results as JSON to FILE.")
@click.option("--allow-version-change", is_flag=True,
              help="Replay a run recorded by another version of the system with the installed one.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding oloproof.yaml.")
@executor_options
@handled
def command(fault_specs: tuple[str, ...], case_ids: tuple[str, ...], run: str, escalate: tuple[str, ...],
            json_path: str | None, allow_version_change: bool, db: str | None, project_dir: str,
            concurrency: int | None, workers: int | None, executor: str | None, scheduler: str | None) -> None:
    """Replay a stored run with one tool result faulted, after a control replay.

    For each case that made the call: the checkpoint, whether the control replay reproduced
    the recording, what the agent did after the fault, and the verdict. Replays are cached by
    system version: asking again runs nothing.

    \b
    Example:
      oloproof replay --fault issue_refund:error --case ord-001
    """
    from oloproof.app.replay import replay_run
    from oloproof.app.run import interruptible, make_executor
    from oloproof.errors import UsageError

    if len(fault_specs) > 1:  # one primary fault per replay
        raise UsageError(f"--fault was given {len(fault_specs)} times ({', '.join(fault_specs)}); "
                         "replay one fault at a time")
    fault_spec = fault_specs[0]
    if json_path:
        check_output_path(json_path)

    pool = make_executor(concurrency=concurrency, workers=workers, executor=executor, scheduler=scheduler)
    store = None
    try:
        store = open_log(db, write=True)
        run_id = resolve_run(store, run)
        with interruptible():
            report = replay_run(store, project_dir, run_id, fault_spec, case_ids=case_ids,
                                escalate=escalate, allow_version_change=allow_version_change, executor=pool)
    finally:
        if store is not None:
            store.close()
    _render(report, console(stderr=json_path == "-"))  # `--json -`: stdout holds the JSON alone
    if json_path:
        write_json(json_path, report)
    sys.exit(0)


def _render(report: dict[str, Any], out: Any) -> None:
    from rich.text import Text

    from oloproof.report.terminal import interval_text, pct, plural, replay_table
    from oloproof.stats.intervals import RateInterval

    f = report["fault"]
    out.print(Text(f"run {report['run_id']} · fault {f['tool']}:{f['kind']} · "
                   f"{plural(report['executed'], 'replay')} executed, {report['cached']} from the cache",
                   style="bold"))
    out.print(replay_table(report["cases"]))
    s, i = report["summary"], report["interval"]
    r = RateInterval(s["passed"], s["observed"], s["missing"], s["excluded"], i["rate"], i["low"], i["high"],
                     i["method"], i.get("clusters"))
    line = (f"{s['criterion']}: {pct(r.rate)} {interval_text(r)} · {s['passed']} / {s['observed']} observed · "
            f"{s['missing']} missing · {s['excluded']} excluded")
    if r.approximate:
        line += f" · ≈ {plural(r.clusters or 0, 'cluster')} (design-effect adjusted interval)"
    out.print(Text(line))
