"""``ferry cancel``, ``ferry preempt`` and ``ferry wait``: stop jobs, preempt them, or block
until they end."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ferry.cli._common import add_command, eprint, find_job, store_now
from ferry.errors import FerryError


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "cancel",
        help="stop jobs (queued ones at once, running ones gracefully)",
        description="Cancel jobs. A queued job is cancelled at once; a running one gets SIGTERM, "
        "then SIGKILL after the grace (config local.stop_grace), with everything it started. "
        "A sweep's id cancels the sweep: it asks for no more trials, and every running trial "
        "is cancelled (ferry sweep resume goes on with it).",
        example="  ferry cancel digits-cnn-3f9a\n  ferry cancel dig train-0a1b --wait\n"
        "  ferry cancel digits-sw3f2a\n",
    )
    p.add_argument(
        "jobs", nargs="+", metavar="JOB", help="job ids or unique prefixes, or sweep ids"
    )
    p.add_argument("--wait", action="store_true", help="return once the jobs have stopped")
    p.set_defaults(handler=cancel)

    p = add_command(
        subparsers,
        "preempt",
        help="preempt a running job as a spot provider would (rehearse resuming)",
        description="Send the job the notice a provider sends when it takes spot capacity "
        "back: SIGTERM, the grace (limits.stop_grace, 30 s by default), then SIGKILL. The job "
        "then starts a new attempt, which resumes from its latest checkpoint, while "
        "retries.on_preemption allows (20 by default). `simulate: {preempt_every: 90s}` in the "
        "spec does this at random.",
        example="  ferry preempt digits-cnn-3f9a\n  ferry preempt dig && ferry logs -f dig\n",
    )
    p.add_argument("job", metavar="JOB", help="job id or unique prefix")
    p.set_defaults(handler=preempt)

    p = add_command(
        subparsers,
        "wait",
        help="wait for jobs to end; exit with the job's exit code",
        description="Block until the jobs end. The exit code is that of the job (of the first "
        "one that did not succeed, for several): 0 for success, 130 if cancelled, 124 at "
        "max_runtime.",
        example="  ferry wait digits-cnn-3f9a && echo trained\n  ferry wait dig --timeout 2h\n",
    )
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job ids or unique prefixes")
    p.add_argument("--timeout", metavar="DURATION", help="give up after this long (exit code 1)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing")
    p.set_defaults(handler=wait)


def cancel(args: argparse.Namespace) -> int:
    from ferry.controller import cancel as cancel_job
    from ferry.followers import start

    store = store_now()
    jobs, waited = [], []
    for ref in args.jobs:
        stopped = _cancel_sweep(store, ref) if _is_sweep(ref) else None
        if stopped is None:  # (not a sweep: a job, or a prefix of one)
            jobs.append(find_job(store, ref))
        else:
            waited += stopped
    waited += [j.id for j in jobs]
    for job in jobs:
        if job.status.is_terminal():
            eprint(f"ferry: {job.id} already ended ({job.status.value})")
            continue
        after = cancel_job(store, job, start=start)
        eprint(f"ferry: {job.id} {after.status.value}")
    if args.wait:
        _wait_all(store, waited, None)
    return 0


def _is_sweep(ref: str) -> bool:
    from ferry import config
    from ferry.sweeps.records import is_sweep_id

    return is_sweep_id(ref, config.ferry_home())


def _cancel_sweep(store: Any, sweep_id: str) -> list[str] | None:
    """Cancel a sweep and its running trials; their jobs' ids (None: no such sweep)."""
    from ferry import config
    from ferry.errors import UsageError
    from ferry.followers import start
    from ferry.sweeps.driver import Driver
    from ferry.sweeps.records import load
    from ferry.sweeps.study import require_optuna

    require_optuna()
    try:
        sweep, study = load(sweep_id, config.ferry_home())
    except UsageError:
        return None
    stopped = Driver(sweep, study, store, start).cancel()
    shown = f": {len(stopped)} running trial{'s' if len(stopped) != 1 else ''} stopping"
    eprint(f"ferry: sweep {sweep.id} cancelled{shown if stopped else ''}")
    return stopped


def preempt(args: argparse.Namespace) -> int:
    from ferry.controller import preempt as preempt_job

    store = store_now()
    job = find_job(store, args.job)
    preempt_job(store, job)
    eprint(f"ferry: preemption notice sent to {job.id}")
    return 0


def _wait_all(store: Any, ids: list[str], timeout: float | None) -> list[Any]:
    from ferry.controller import reconcile
    from ferry.followers import start

    end = None if timeout is None else time.monotonic() + timeout
    last = time.monotonic()
    while True:
        jobs = [store.get_job(i) for i in ids]
        if all(j.status.is_terminal() for j in jobs):
            return jobs
        if end is not None and time.monotonic() >= end:
            running = [j for j in jobs if not j.status.is_terminal()]
            raise FerryError(
                f"{running[0].id} is still {running[0].status.value} after {args_timeout(timeout)}",
                "wait longer, or cancel it with: ferry cancel " + running[0].id,
            )
        if time.monotonic() - last > 2:
            reconcile(store, start=start)
            last = time.monotonic()
        time.sleep(0.05)


def args_timeout(seconds: float | None) -> str:
    from ferry.units import format_duration

    return format_duration(seconds or 0)


def wait(args: argparse.Namespace) -> int:
    from ferry.controller import exit_status
    from ferry.units import parse_duration

    timeout = None
    if args.timeout:
        try:
            timeout = parse_duration(args.timeout)
        except ValueError as exc:
            from ferry.errors import UsageError

            raise UsageError(f"--timeout: {exc}") from None
    store = store_now()
    ids = [find_job(store, ref).id for ref in args.jobs]
    jobs = _wait_all(store, ids, timeout)
    code = 0
    for job in jobs:
        if not args.quiet:
            tail = "" if job.status.value == "SUCCEEDED" else f": {job.reason}"
            eprint(f"ferry: {job.id} {job.status.value}{tail}")
        code = code or exit_status(job)
    return code
