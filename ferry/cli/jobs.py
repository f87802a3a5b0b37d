"""``ferry jobs``: the table of jobs, once or live."""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from ferry.cli._common import (
    STATUS_STYLE,
    add_command,
    age,
    job_json,
    live_view,
    resources,
    runtime,
    store_now,
)
from ferry.errors import UsageError
from ferry.status import JobStatus

EXAMPLE = """\
  ferry jobs
  ferry jobs --watch --status RUNNING,QUEUED
  ferry jobs --json | jq -r '.[] | select(.status=="FAILED") | .id'
  ferry jobs --sweep digits-sw3f2a          # one sweep's trials
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "jobs",
        help="list jobs (newest first)",
        description="List jobs, newest first, with their status, resources and runtime.",
        example=EXAMPLE,
    )
    p.add_argument(
        "--status", "-s", help="only these statuses, comma-separated (e.g. RUNNING,QUEUED)"
    )
    p.add_argument(
        "--limit", "-n", type=int, default=50, help="at most this many jobs (default 50)"
    )
    p.add_argument("--sweep", metavar="SWEEP", help="only the trials of this sweep")
    p.add_argument("--watch", "-w", action="store_true", help="keep the table live until Ctrl-C")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=jobs)


def parse_statuses(text: str | None) -> list[JobStatus] | None:
    """``'running,queued'`` -> the statuses, or a usage error naming the valid ones."""
    if not text:
        return None
    out = []
    for part in text.split(","):
        try:
            out.append(JobStatus(part.strip().upper()))
        except ValueError:
            valid = ", ".join(s.value for s in JobStatus)
            raise UsageError(f"unknown status {part.strip()!r}", f"choose from {valid}") from None
    return out


def table(rows: list[Any]) -> Any:
    from rich.table import Table

    now = time.time()
    t = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("JOB", "STATUS", "BACKEND", "RESOURCES", "SUBMITTED", "RUNTIME", "RESULT"):
        t.add_column(column, no_wrap=column != "RESULT", overflow="ellipsis")
    for job in rows:
        status = job.status.value
        result = job.reason or ""
        if job.status is JobStatus.SUCCEEDED:
            result = "exit 0"
        t.add_row(
            job.id,
            f"[{STATUS_STYLE[status]}]{status}[/]",
            job.backend,
            resources(job),
            age(job.created_at, now),
            runtime(job, now),
            result,
        )
    if not rows:
        t.add_row("(no jobs)", "", "", "", "", "", "")
    return t


def jobs(args: argparse.Namespace) -> int:
    statuses = parse_statuses(args.status)
    store = store_now()

    def listed() -> list[Any]:
        if not args.sweep:
            return store.list_jobs(statuses, args.limit)
        trial = re.compile(re.escape(args.sweep) + r"-\d+")  # (its trials' names)
        found = [j for j in store.list_jobs(statuses) if trial.fullmatch(j.name)]
        return found[: args.limit] if args.limit is not None else found

    if args.json:
        print(json.dumps([job_json(j) for j in listed()], indent=2))
        return 0
    live_view(store, lambda: table(listed()), 1.0, once=not args.watch)
    return 0
