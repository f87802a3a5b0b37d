"""``ferry agent``: a watcher that resumes jobs whose supervisor was lost (kill -9, a
crash, a reboot) and starts queued jobs, without waiting for someone to run ``ferry``."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ferry.cli._common import add_command, eprint

UNIT_NAME = "ferry-agent.service"

DESCRIPTION = """\
Every `ferry` command notices a job whose supervisor has gone and resumes it in a new
attempt (from its latest checkpoint) while retries.on_preemption allows. The agent does the
same every --interval, so jobs carry on after a reboot or a crash with nobody at the
keyboard. --install writes a systemd user unit that starts the agent at login (or at boot,
with lingering enabled) and prints how to enable it.
"""

EXAMPLE = """\
  ferry agent                   # watch in this terminal (Ctrl-C to stop)
  ferry agent --install         # as a systemd user service
  ferry agent --once            # one pass, e.g. from cron
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "agent",
        help="resume jobs whose supervisor was lost, and start queued ones, in the background",
        description=DESCRIPTION,
        example=EXAMPLE,
    )
    p.add_argument(
        "--interval", default="10s", metavar="DURATION", help="how often to look (default 10s)"
    )
    p.add_argument("--once", action="store_true", help="look once and exit")
    p.add_argument("--install", action="store_true", help="write a systemd user unit for the agent")
    p.set_defaults(handler=agent)


def unit_text(ferry_home: Path) -> str:
    """The systemd user unit running ``ferry agent`` for this FERRY_HOME."""
    command = shlex.join([sys.executable, "-m", "ferry.cli.main", "agent"])
    return (
        "[Unit]\n"
        "Description=Ferry agent: resumes jobs whose supervisor was lost\n\n"
        "[Service]\n"
        f"Environment={shlex.quote('FERRY_HOME=' + str(ferry_home))}\n"
        f"ExecStart={command}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        # the supervisors it starts are detached: stopping the agent must leave them running
        "KillMode=process\n\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _install() -> int:
    from ferry import config

    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    unit = base / "systemd" / "user" / UNIT_NAME
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(unit_text(config.ferry_home()))
    print(f"wrote {unit}")
    print("enable it with:")
    print(f"  systemctl --user daemon-reload && systemctl --user enable --now {UNIT_NAME}")
    print("and to keep it running after logout and start it at boot:")
    print("  loginctl enable-linger $USER")
    return 0


def _look(store: Any) -> None:
    """One pass: resume lost jobs, admit queued ones; say what changed."""
    from ferry.controller import reconcile, supervisor_alive
    from ferry.followers import start
    from ferry.status import ACTIVE

    lost = [j for j in store.list_jobs(ACTIVE) if j.backend == "local" and not supervisor_alive(j)]
    reconcile(store, start=start)
    for job in lost:
        now = store.get_job(job.id)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(
            f"{stamp} {job.id}: supervisor lost; now {now.status.value} ({now.reason})", flush=True
        )


def agent(args: argparse.Namespace) -> int:
    from ferry.store import open_store
    from ferry.units import parse_duration

    if args.install:
        return _install()
    try:
        interval = parse_duration(args.interval)
    except ValueError as exc:
        from ferry.errors import UsageError

        raise UsageError(f"--interval: {exc}") from None
    store = open_store()  # (not store_now: the first look should report what it finds)
    if args.once:
        _look(store)
        return 0
    stop: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, f: stop.append(s))
    eprint(f"ferry: agent watching every {args.interval} (Ctrl-C to stop)")
    while not stop:
        _look(store)
        end = time.monotonic() + interval
        while not stop and time.monotonic() < end:
            time.sleep(min(0.2, interval))
    return 0
