"""``ferry status JOB``: everything about one job: attempts, timings, reason, outputs."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path
from typing import Any

from ferry.cli._common import (
    STATUS_STYLE,
    add_command,
    find_job,
    job_json,
    local_time,
    resources,
    runtime,
    store_now,
)
from ferry.status import PROVIDER_JOB_PREFIX, describe_exit, exit_fields, shell_code, signal_name
from ferry.telemetry import ALERT_PREFIX, is_alert
from ferry.units import format_usd

EXAMPLE = """\
  ferry status digits-cnn-3f9a
  ferry status dig            # a unique prefix is enough
  ferry status digits-cnn-3f9a --json
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "status",
        help="show one job: attempts, timings, reason, outputs",
        description="Show one job in detail: its status and reason, attempts with their exit "
        "codes, timings, events, and where its outputs are.",
        example=EXAMPLE,
    )
    p.add_argument("job", help="job id or unique prefix")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=status)


def _exit_cell(code: int | None) -> str:
    """``'143 SIGTERM'`` for the attempts table (128+N for signal N, as a shell says)."""
    if code is None:
        return ""
    name = signal_name(code)
    return f"{shell_code(code)}" + (f" {name}" if name else "")


def _outputs_summary(outputs: str) -> str:
    root = Path(outputs)
    if "://" in outputs or not root.is_dir():
        return outputs
    from ferry.cli.outputs_cmd import delivered
    from ferry.units import format_size

    parts = []
    for name in ("model", "checkpoints", "tensorboard", "output"):
        files = delivered(outputs, name)
        if files:
            size = format_size(sum(size for _, size in files))
            parts.append(f"{name}/ {len(files)} file{'s' if len(files) != 1 else ''}, {size}")
    return outputs + (f"  ({'; '.join(parts)})" if parts else "  (empty)")


def _why_queued(store: Any, job: Any) -> str:
    """``'needs 1 CPU; 0 of 2 CPUs free; 3 jobs ahead'``: why a job still waits."""
    from ferry.backends.registry import get_backend
    from ferry.status import ACTIVE, JobStatus

    backend = get_backend(job.backend)
    ahead = sum(1 for j in store.list_jobs([JobStatus.QUEUED]) if j.seq < job.seq)
    queue = f"{ahead} job{'s' if ahead != 1 else ''} ahead of it"
    needs = getattr(backend, "needs", None)
    inventory = getattr(backend, "inventory", None)
    if needs is None or inventory is None:
        return f"for room on {job.backend}; {queue}"
    need = needs(job)
    if backend.never_fits(need):  # type: ignore[attr-defined]
        return (
            f"it can never start here now: this machine has {inventory.describe()} "
            f"(cancel it, or change the local.* settings back)"
        )
    active = [j for j in store.list_jobs(ACTIVE) if j.backend == job.backend]
    free_cpus = inventory.cpus - sum(j.allocation.cpus for j in active)
    used_gpus = sum(len(j.allocation.gpus) for j in active)
    parts = [f"needs {need.cpus:g} CPU{'s' if need.cpus != 1 else ''}"]
    if need.gpus:
        parts[0] += f" and {len(need.gpus)} GPU{'s' if len(need.gpus) != 1 else ''}"
    parts.append(f"{max(free_cpus, 0):g} of {inventory.cpus:g} CPUs free")
    if inventory.gpus:
        parts.append(f"{inventory.gpus - used_gpus} of {inventory.gpus} GPUs free")
    parts.append(queue)
    return "; ".join(parts)


def status(args: argparse.Namespace) -> int:
    store = store_now()
    job = find_job(store, args.job)
    attempts = store.attempts(job.id)
    events = store.events(job.id)
    now = time.time()
    spent = sum(a.cost_at(now) for a in attempts)
    if args.json:
        data = job_json(job)
        data["attempts"] = [
            {
                k: getattr(a, k)
                for k in (
                    "number",
                    "status",
                    "backend",
                    "host",
                    "handle",
                    "started_at",
                    "ended_at",
                    "reason",
                    "log_path",
                    "price",
                    "offering",
                )
            }
            | exit_fields(a.exit_code)
            | {"cost": round(a.cost_at(now), 6)}
            for a in attempts
        ]
        data["cost"] = round(sum(a.cost_at(now) for a in attempts), 6)
        data["events"] = [
            {
                "at": e.at,
                "kind": e.kind,
                "from": e.old_status,
                "to": e.new_status,
                "message": e.message,
            }
            for e in events
        ]
        print(json.dumps(data, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("Job", f"{job.id}  (name {job.name})")
    head.add_row(
        "Status",
        f"[{STATUS_STYLE[job.status.value]}]{job.status.value}[/]"
        + (f"  {describe_exit(job.exit_code)}" if job.exit_code is not None else ""),
    )
    if job.reason and job.status.is_terminal():
        head.add_row("Reason", job.reason)
    head.add_row("Backend", f"{job.backend}  ({resources(job)})")
    head.add_row("Command", shlex.join(job.command))
    if job.status.value == "QUEUED":
        head.add_row("Waiting", _why_queued(store, job))
    head.add_row("Submitted", local_time(job.created_at))
    if job.started_at:
        head.add_row("Started", local_time(job.started_at))
    if job.ended_at:
        head.add_row("Ended", local_time(job.ended_at))
    head.add_row("Runtime", runtime(job))
    max_cost = job.plan.limits.max_cost
    if spent or max_cost:
        cap = f" of max_cost {max_cost:,.2f}" if max_cost else ""
        price = attempts[-1].price if attempts else 0.0
        head.add_row("Cost", f"{format_usd(spent)} USD{cap}  ({price:,.2f} USD/h)")
    alerts = [e.message.removeprefix(ALERT_PREFIX) for e in events if is_alert(e.message)]
    if alerts:
        more = f" (and {len(alerts) - 1} more below)" if len(alerts) > 1 else ""
        head.add_row("Alerts", f"[red]{alerts[-1]}[/]{more}")
    head.add_row("Outputs", _outputs_summary(job.outputs))
    head.add_row(
        "Logs",
        f"ferry logs {job.id}" + ("  (-f to follow)" if not job.status.is_terminal() else ""),
    )
    console.print(head)
    if attempts:
        t = Table(title="Attempts", title_justify="left", box=None, header_style="bold")
        columns = ["#", "STATUS", "HOST", "STARTED", "ENDED", "EXIT", "REASON"]
        if spent:
            columns.insert(-1, "USD")
        for col in columns:
            t.add_column(col, overflow="fold")
        for a in attempts:
            cells = [
                str(a.number),
                a.status.value,
                a.host,
                local_time(a.started_at),
                local_time(a.ended_at),
                _exit_cell(a.exit_code),
                a.reason or "",
            ]
            if spent:
                cells.insert(-1, format_usd(a.cost_at(now)))
            t.add_row(*cells)
        console.print()
        console.print(t)
    if events:
        t = Table(title="Events", title_justify="left", box=None, header_style="bold")
        for col in ("TIME", "CHANGE", "WHY"):
            t.add_column(col, overflow="fold")
        for e in events:
            change = (
                f"{e.old_status or ''} → {e.new_status}".strip(" →") if e.new_status else "note"
            )
            message = e.message
            if is_alert(message):
                change, message = "[red]alert[/]", message.removeprefix(ALERT_PREFIX)
            elif message.startswith(PROVIDER_JOB_PREFIX):
                change, message = "provider", message.removeprefix(PROVIDER_JOB_PREFIX)
            t.add_row(local_time(e.at), change.lstrip("→ ").strip(), message)
        console.print()
        console.print(t)
    return 0
