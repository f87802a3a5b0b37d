"""What the commands share: the argument parser, job look-up, and formatting."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ferry.errors import UsageError

if TYPE_CHECKING:
    from ferry.store import Job, Store


# How each status is coloured in tables.
STATUS_STYLE = {
    "QUEUED": "yellow",
    "STARTING": "cyan",
    "RUNNING": "bold cyan",
    "RECOVERING": "magenta",
    "CANCELLING": "yellow",
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
}


class Parser(argparse.ArgumentParser):
    """argparse with one-sentence errors that say where help is (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, f"see: {self.prog} --help")


def whole_number(text: str) -> int:
    """A whole number of 0 or more (an argparse type)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, not {text!r}")
    return int(text)


def add_spot_flag(parser: argparse.ArgumentParser) -> None:
    """``--spot``/``--no-spot`` and ``--flex-start`` (one of them), into ``args.spot``:
    True, False, ``"flex"`` (``resources.spot: flex``), or None when none is given."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--spot", action=argparse.BooleanOptionalAction, default=None, help="spot capacity"
    )
    group.add_argument(
        "--flex-start",
        dest="spot",
        action="store_const",
        const="flex",
        help="flex-start capacity: waits for the machines, then runs without preemption "
        "(Vertex AI's Dynamic Workload Scheduler; resources.spot: flex)",
    )


def add_command(
    subparsers: Any, name: str, *, help: str, description: str, example: str
) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with an example."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=f"example:\n{example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def live_view(store: Store, render: Callable[[], Any], every: float, once: bool = False) -> None:
    """Show ``render()`` (a rich renderable), redrawn every ``every`` seconds until Ctrl-C,
    noticing lost supervisors between redraws; with ``once``, print it once."""
    from rich.console import Console
    from rich.live import Live

    from ferry.controller import reconcile
    from ferry.followers import start

    console = Console()
    if once:
        console.print(render())
        return
    live = Live(render(), console=console, auto_refresh=False)
    with live, contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the view
        while True:
            time.sleep(every)
            reconcile(store, start=start)
            live.update(render(), refresh=True)


def store_now() -> Store:
    """The job store, with lost supervisors already noticed."""
    from ferry.controller import reconcile
    from ferry.followers import start
    from ferry.store import open_store

    store = open_store()
    reconcile(store, start=start)
    return store


def find_job(store: Store, ref: str) -> Job:
    """The job named by an id or unique prefix."""
    from ferry.api import resolve_job

    return resolve_job(store, ref)


def age(then: float | None, now: float | None = None) -> str:
    """``'3m ago'``."""
    if then is None:
        return "-"
    from ferry.units import format_duration

    seconds = max(0.0, (now or time.time()) - then)
    return "just now" if seconds < 1 else f"{format_duration(seconds)} ago"


def runtime(job: Job, now: float | None = None) -> str:
    """How long the job has run (so far)."""
    if job.started_at is None:
        return "-"
    from ferry.units import format_duration

    end = job.ended_at or (now or time.time())
    return format_duration(max(0.0, end - job.started_at))


def resources(job: Job) -> str:
    """``'1 CPU, GPU 0,1'``: what the job holds or asks for."""
    from ferry.units import format_size

    res = job.plan.resources
    alloc = job.allocation
    cpus = alloc.cpus or res.cpus or 1
    parts = [f"{cpus:g} CPU{'s' if cpus != 1 else ''}"]
    if res.memory:
        parts.append(format_size(res.memory))
    if alloc.gpus:
        parts.append(f"GPU {','.join(str(g) for g in alloc.gpus)}")
    elif res.accelerator:
        parts.append(res.accelerator)
    return ", ".join(parts)


def local_time(t: float | None) -> str:
    """``'2026-12-03 05:11:02'`` in local time."""
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def eprint(*args: object) -> None:
    """Print a status line for people (stderr), keeping stdout for data."""
    print(*args, file=sys.stderr, flush=True)


def job_json(job: Job) -> dict[str, Any]:
    """A job as JSON for --json output (no secret values are ever stored); ``exit_code`` is
    128+N for a death by signal N, whose name is in ``signal``."""
    from ferry.status import exit_fields

    return {
        "id": job.id,
        "name": job.name,
        "status": job.status.value,
        "backend": job.backend,
        "command": job.command,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        **exit_fields(job.exit_code),
        "reason": job.reason,
        "outputs": job.outputs,
        "allocation": job.allocation.to_json(),
        # what its attempts used of retries.on_preemption, on_error and on_exit_codes
        "retries_used": {
            "preemptions": job.preemptions,
            "on_error": job.retries,
            "on_exit_codes": job.code_retries,
        },
        "spec": job.spec,
    }
