"""``ferry ray status|stop``: the Ray cluster the ray backend uses, and the head Ferry
started on this machine."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferry.cli._common import add_command

EXAMPLE = """\
  ferry ray status                 # which cluster ray jobs go to, and what it has
  ferry ray status --json
  ferry ray stop                   # stop the head Ferry started on this machine
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "ray",
        help="show the Ray cluster ray jobs go to, or stop the head Ferry started",
        description="Jobs with backend: ray go to the cluster that ray.address (or "
        "RAY_ADDRESS) names; with neither set, to a head Ferry starts on this machine "
        "at the first such job. Show which, or stop that head.",
        example=EXAMPLE,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    status = add_command(
        sub,
        "status",
        help="the cluster, its Ray version and resources",
        description="The cluster ray jobs go to, its Ray version and its resources. Starts "
        "nothing: a head Ferry would start is reported as not running.",
        example="  ferry ray status --json\n",
    )
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    stop = add_command(
        sub,
        "stop",
        help="stop the Ray head Ferry started on this machine",
        description="Stop the Ray head Ferry started on this machine. While jobs run on "
        "it, it is stopped only with --force (they are lost, and resume on a new head). A "
        "cluster named by ray.address or RAY_ADDRESS is never stopped.",
        example="  ferry ray stop\n  ferry ray stop --force   # even with jobs running on it\n",
    )
    stop.add_argument(
        "--force", action="store_true", help="stop it even while jobs run on it (they are lost)"
    )
    p.set_defaults(handler=ray_cmd)


def ray_cmd(args: argparse.Namespace) -> int:
    import os

    from ferry import config
    from ferry.backends.ray_cluster import LocalHead, dashboard_url, describe_cluster

    head = LocalHead()
    if args.action == "stop":
        url = head.running()
        if url and not args.force:
            _refuse_if_busy(url)
        stopped = head.stop()
        print("stopped the Ray head Ferry started here" if stopped else "no Ray head to stop")
        return 0
    given = config.get("ray.address") or os.environ.get("RAY_ADDRESS")
    url = dashboard_url(str(given)) if given else head.running()
    info: dict[str, Any] = {
        "address": url,
        "started_by_ferry": not given,
        "running": False,
    }
    if url:
        from ferry.backends.ray_jobs import RayJobs
        from ferry.errors import FerryError

        try:
            info["ray_version"] = RayJobs(url, timeout=5).version()
            info["resources"] = describe_cluster(url)
            info["running"] = True
        except (FerryError, OSError, ValueError, KeyError) as exc:
            info["error"] = str(exc)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    if not url:
        print("no Ray head running; the first ray job starts one on this machine")
        return 0
    whose = "started by Ferry on this machine" if info["started_by_ferry"] else "named by you"
    if info["running"]:
        print(f"{url}  Ray {info['ray_version']}  {info['resources']}  ({whose})")
    else:
        print(f"{url}  not answering: {info.get('error')}  ({whose})")
    return 0


def _refuse_if_busy(url: str) -> None:
    """Refuse to stop the head at ``url`` while jobs of this Ferry run on it."""
    from ferry.errors import UsageError
    from ferry.status import ACTIVE
    from ferry.store import open_store

    store = open_store()
    busy = []
    for job in store.list_jobs(ACTIVE):
        attempts = store.attempts(job.id) if job.backend == "ray" else []
        if attempts and (attempts[-1].handle or "").endswith(f"@{url}"):
            busy.append(job.id)
    if busy:
        raise UsageError(
            f"the Ray head Ferry started here runs {len(busy)} job(s) ({', '.join(busy[:5])}); "
            "stopping it would lose them",
            "cancel them first (ferry cancel JOB), or stop it anyway: ferry ray stop --force",
        )
