"""``ferry metrics JOB``: what the script reported, per metric: last, minimum, maximum."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

from ferry.cli._common import add_command, eprint, find_job, store_now

EXAMPLE = """\
  ferry metrics digits-cnn-3f9a
  ferry metrics dig --json
  ferry metrics dig --csv > metrics.csv
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "metrics",
        help="a job's reported metrics: last, min, max",
        description="Summarise the metrics a job reported with ferry.runtime.report(): for "
        "each, the number of points, the last value and its step, the minimum and maximum.",
        example=EXAMPLE,
    )
    p.add_argument("job", help="job id or unique prefix")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON for scripts")
    out.add_argument("--csv", action="store_true", help="print CSV")
    p.set_defaults(handler=metrics)


def _fmt(value: float | None) -> str:
    return "nan" if value is None else f"{value:.6g}"


def metrics(args: argparse.Namespace) -> int:
    store = store_now()
    job = find_job(store, args.job)
    rows = store.metric_summaries(job.id)
    fields = ("name", "points", "last", "last_step", "minimum", "maximum")
    if args.json:
        print(json.dumps([{f: getattr(r, f) for f in fields} for r in rows], indent=2))
        return 0
    if args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(fields)
        for r in rows:
            writer.writerow([getattr(r, f) for f in fields])
        return 0
    if not rows:
        eprint(f"ferry: {job.id} has reported no metrics (use ferry.runtime.report in the script)")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("METRIC", "LAST", "STEP", "MIN", "MAX", "POINTS"):
        table.add_column(column, justify="left" if column == "METRIC" else "right")
    for r in rows:
        step = "" if r.last_step is None else str(r.last_step)
        table.add_row(r.name, _fmt(r.last), step, _fmt(r.minimum), _fmt(r.maximum), str(r.points))
    Console().print(table)
    return 0
