"""``ferry compare JOB JOB…``: several jobs' metrics side by side, and overlaid in one chart."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferry.cli._common import add_command, eprint, find_job, store_now
from ferry.errors import UsageError
from ferry.telemetry import is_telemetry

EXAMPLE = """\
  ferry compare digits-cnn-3f9a digits-cnn-77c1
  ferry compare dig-3f dig-77 --metric loss --metric val_acc -o loss.png
  ferry compare dig-3f dig-77 --json
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "compare",
        help="compare jobs' metrics side by side (and in one chart)",
        description="The last value of each metric for several jobs, side by side, with their "
        "hyperparameters; with -o, one chart per metric with a line per job.",
        example=EXAMPLE,
    )
    p.add_argument(
        "jobs", nargs="+", metavar="JOB", help="job ids or unique prefixes (two or more)"
    )
    p.add_argument("--metric", "-m", action="append", help="only these metrics (repeatable)")
    p.add_argument("-o", "--output", metavar="FILE.png", help="write an overlaid PNG chart here")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=compare)


def compare(args: argparse.Namespace) -> int:
    if len(args.jobs) < 2:
        raise UsageError("compare needs two jobs or more", "name them: ferry compare JOB JOB")
    store = store_now()
    jobs = [find_job(store, ref) for ref in args.jobs]
    summaries = {j.id: {s.name: s for s in store.metric_summaries(j.id)} for j in jobs}
    names = args.metric or sorted({n for s in summaries.values() for n in s if not is_telemetry(n)})
    if args.json:
        print(
            json.dumps(
                {
                    j.id: {
                        "hyperparameters": j.plan.hyperparameters,
                        "status": j.status.value,
                        "metrics": {
                            n: summaries[j.id][n].last for n in names if n in summaries[j.id]
                        },
                    }
                    for j in jobs
                },
                indent=2,
            )
        )
        return 0
    if args.output:
        _overlay(store, jobs, names, args.output)
        eprint(f"ferry: wrote {args.output}")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    table.add_column("")
    for j in jobs:
        table.add_column(j.id, justify="right")
    table.add_row("status", *[j.status.value for j in jobs])
    keys = sorted({k for j in jobs for k in j.plan.hyperparameters})
    for key in keys:
        table.add_row(
            f"[dim]{key}[/]",
            *[str(j.plan.hyperparameters.get(key, "")) for j in jobs],
        )
    for name in names:
        cells = []
        for j in jobs:
            s = summaries[j.id].get(name)
            cells.append("" if s is None else ("nan" if s.last is None else f"{s.last:.6g}"))
        table.add_row(name, *cells)
    Console().print(table)
    return 0


def _overlay(store: Any, jobs: list[Any], names: list[str], path: str) -> None:
    from ferry.cli.plot_cmd import _figure

    panels = {name: {j.id: store.metric_series(j.id, name) for j in jobs} for name in names[:6]}
    _figure("compare: " + ", ".join(j.id for j in jobs), panels, path)
