"""``ferry logs JOB``: a job's output, whole, tailed or followed."""

from __future__ import annotations

import argparse
from typing import Any

from ferry.cli._common import add_command, find_job, store_now

EXAMPLE = """\
  ferry logs digits-cnn-3f9a
  ferry logs -f dig --tail 20     # the last 20 lines, then follow until it ends
  ferry logs digits-cnn-3f9a --attempt 1 --timestamps
  ferry logs dig | grep -i warning      # what the script printed and logged
  ferry logs dig --stream stderr        # only what it wrote to stderr
  ferry logs ddp --rank 1               # one process of a gang (all: each line led by [rank])
  ferry logs sm-job --provider --tail 50  # SageMaker's own log of it (CloudWatch Logs)
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "logs",
        help="print a job's output (-f to follow)",
        description="Print a job's output: its latest attempt unless --attempt says which. "
        "Lines the job wrote to stdout and to stderr (Python's logging, tracebacks) are both "
        "printed to stdout, in the order they were written, so a pipe (| grep) sees them "
        "all; --stream keeps one of them.",
        example=EXAMPLE,
    )
    p.add_argument("job", help="job id or unique prefix")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", "-n", type=int, metavar="N", help="only the last N lines")
    p.add_argument("--attempt", "-a", type=int, metavar="N", help="this attempt (default: latest)")
    p.add_argument(
        "--timestamps", "-t", action="store_true", help="prefix each line with its UTC time"
    )
    p.add_argument(
        "--stream",
        "-s",
        choices=("all", "stdout", "stderr"),
        default="all",
        help="which of the job's streams to print (default: all, to stdout)",
    )
    p.add_argument(
        "--rank",
        "-r",
        type=int,
        metavar="N",
        help="only this process of a gang (default: all, each line led by its rank)",
    )
    p.add_argument(
        "--provider",
        action="store_true",
        help="the provider's own log of the attempt instead (SageMaker: its CloudWatch "
        "streams; the last 1000 lines unless --tail says)",
    )
    p.set_defaults(handler=logs)


def logs(args: argparse.Namespace) -> int:
    from ferry.api import _attempt_log
    from ferry.cli._follow import Ranks, drain, follow, write_block
    from ferry.errors import UsageError
    from ferry.logs import tail_block

    if args.tail is not None and args.tail < 0:
        raise UsageError("--tail takes a number of lines, 0 or more")
    store = store_now()
    job = find_job(store, args.job)
    if args.provider:
        return _provider_log(store, job, args)
    if args.follow:
        follow(
            store,
            job.id,
            attempt=args.attempt,
            timestamps=args.timestamps,
            streams=args.stream,
            tail=args.tail,
            rank=args.rank,
        )
        return 0
    ranks = Ranks.of(job, args.rank)
    path = _attempt_log(store, job.id, args.attempt)
    if path is None:
        from ferry.cli._common import eprint

        eprint(
            f"ferry: {job.id} has not started yet ({job.status.value}); "
            f"wait for output with: ferry logs -f {job.id}"
        )
        return 0
    if args.tail is not None:
        only = None if args.stream == "all" else args.stream
        block, _ = tail_block(path, args.tail, only, ranks.only)
        write_block(block, args.timestamps, args.stream, ranks)
        return 0
    drain(path, 0, args.timestamps, args.stream, ranks)
    return 0


def _provider_log(store: Any, job: Any, args: argparse.Namespace) -> int:
    """Print the last lines of the provider's own log of the attempt (the latest that made
    a provider's job, unless --attempt says which)."""
    from ferry.backends.registry import get_backend
    from ferry.errors import UsageError

    for flag, given in (("-f", args.follow), ("--stream", args.stream != "all")):
        if given:
            raise UsageError(f"--provider prints the provider's log as it is, without {flag}")
    if args.rank is not None or args.timestamps:
        raise UsageError(
            "--provider prints the provider's log as it is, without --rank or --timestamps "
            "(its lines are led by their host)"
        )
    attempts = store.attempts(job.id)
    if args.attempt is not None:
        chosen = [a for a in attempts if a.number == args.attempt]
        if not chosen:
            raise UsageError(
                f"job {job.id} has no attempt {args.attempt}",
                f"it has attempts 1 to {len(attempts)}" if attempts else f"ferry status {job.id}",
            )
    else:
        chosen = [a for a in attempts if a.handle] or attempts
        if not chosen:
            raise UsageError(f"job {job.id} has not started yet", f"ferry status {job.id}")
    lines = args.tail if args.tail is not None else 1000
    if lines == 0:
        return 0
    for line in get_backend(job.backend).provider_log(job, chosen[-1].handle, lines):
        print(line)
    return 0
