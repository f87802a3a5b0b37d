"""``ferry top``: a live view of running jobs: progress, rate, ETA, latest metrics, CPU/GPU."""

from __future__ import annotations

import argparse
from typing import Any

from ferry.cli._common import add_command, live_view, runtime, store_now
from ferry.status import JobStatus
from ferry.units import format_size

EXAMPLE = """\
  ferry top
  ferry top --once        # print the table once (for scripts and logs)
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "top",
        help="live view of running jobs: progress, ETA, metrics, GPU",
        description="Running jobs with their step, step rate and ETA (when the script "
        "reports its total, e.g. epoch=3/20 or steps_total), latest metrics, CPU, memory "
        "and GPU use. Refreshes every 2 seconds until Ctrl-C.",
        example=EXAMPLE,
    )
    p.add_argument("--once", action="store_true", help="print once and exit")
    p.set_defaults(handler=top)


def _row(store: Any, job: Any) -> list[str]:
    from ferry.cli._progress import progress_of

    progress = progress_of(store, job.id)
    summaries = progress.summaries
    step, rate, eta = progress.step_text, progress.rate_text, progress.eta_text
    shown = progress.metrics_text()
    cpu = summaries.get("sys/cpu_percent")
    rss = summaries.get("sys/rss_bytes")
    use = []
    if cpu and cpu.last is not None:
        use.append(f"CPU {cpu.last:.0f}%")
    if rss and rss.last is not None:
        use.append(format_size(rss.last))
    for name, s in sorted(summaries.items()):
        if name.startswith("gpu") and name.endswith("/util_percent") and s.last is not None:
            gpu = name.split("/")[0]
            memory = summaries.get(f"{gpu}/memory_used_bytes")
            used = f" {format_size(memory.last)}" if memory and memory.last is not None else ""
            use.append(f"{gpu.upper()} {s.last:.0f}%{used}")
    return [job.id, runtime(job), step, rate, eta, shown, " ".join(use)]


def table(store: Any) -> Any:
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for column in ("JOB", "RUNTIME", "STEP", "RATE", "ETA", "METRICS", "USE"):
        t.add_column(column, overflow="fold")
    running = store.list_jobs([JobStatus.RUNNING])
    for job in running:
        t.add_row(*_row(store, job))
    if not running:
        t.add_row("(no running jobs)", "", "", "", "", "", "")
    return t


def top(args: argparse.Namespace) -> int:
    store = store_now()
    live_view(store, lambda: table(store), 2.0, once=args.once)
    return 0
