"""``ferry run``: submit a job and follow it (or ``--detach``)."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from ferry.cli._common import add_command, eprint
from ferry.cli.spec_flags import add_spec_flags, overrides_from
from ferry.errors import UsageError

DESCRIPTION = """\
Run a job: from a spec file, a command after --, or both (flags and the command override
the file). The code folder is snapshotted, the job waits for room on its backend, then
its output streams here and ferry exits with the job's exit code.

Ctrl-C cancels the job (SIGTERM to its processes, SIGKILL after the grace) and shows its
last output; a second Ctrl-C stops watching while the cancel completes. Closing the
terminal leaves the job running: pick it up with `ferry logs -f JOB`. Jobs read no
terminal input (their stdin is empty): pass data as arguments, files or inputs.
"""

EXAMPLE = """\
  ferry run -- python train.py --epochs 1
  ferry run job.yaml --accelerator A100:1 --max-runtime 6h
  ferry run --notify webhook='${SLACK_WEBHOOK}' --on-alert stop -- python train.py
  JOB=$(ferry run --detach job.yaml) && ferry logs -f "$JOB"
  ferry run --procs-per-node 2 -- python ddp_train.py   # two ranks, as torchrun would start
  ferry run job.yaml --backend vertex --accelerator T4:1 --spot --dry-run   # the request
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "run",
        help="run a job (here or on a backend) and follow it",
        description=DESCRIPTION,
        example=EXAMPLE,
    )
    p.add_argument("spec", nargs="?", help="job spec file (YAML)")
    p.add_argument(
        "--yes", "-y", action="store_true", help="launch without asking, whatever the price"
    )
    p.add_argument(
        "--detach", "-d", action="store_true", help="print the job id and return at once"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the resolved spec and plan; submit nothing"
    )
    add_spec_flags(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import gc

    # Importing pydantic and the controller makes objects by the hundred thousand, which the
    # collector would scan over and over (and once more at exit) for no garbage: it is off
    # until the job is submitted, then all of them are frozen out of its sight.
    gc.disable()
    from ferry import supervisor

    if not args.dry_run:
        supervisor.start_standby()  # it gets ready to run the job while this one submits it
    from ferry.controller import exit_status, submit
    from ferry.followers import start
    from ferry.spec import load_spec

    spec = load_spec(args.spec, overrides_from(args, args.command))
    if args.dry_run:
        return _dry_run(spec)
    from ferry.store import open_store

    store = open_store()
    job = submit(
        spec, start=start, store=store, confirm=lambda ready: _price_check(ready, store, args.yes)
    )
    supervisor.release_standby()  # (when the job waits in the queue)
    gc.freeze()
    gc.enable()  # following a job for days makes garbage
    if args.detach:
        print(job.id)
        eprint(f"ferry: submitted {job.id}; follow it with: ferry logs -f {job.id}")
        return 0
    eprint(f"ferry: {job.id} on {job.backend}, outputs in {job.outputs}")
    if job.status.value == "QUEUED":
        eprint(f"ferry: {job.id} waits for room on {job.backend} (see: ferry jobs --status QUEUED)")
    job = _follow_with_interrupts(store, job.id)
    _summary(job)
    return exit_status(job)


def _follow_with_interrupts(store: Any, job_id: str) -> Any:
    from ferry.cli._follow import follow
    from ferry.controller import cancel
    from ferry.followers import start

    presses = 0

    def on_interrupt(signum: int, frame: object) -> None:
        # Only note it here: cancelling writes to the store, which must not happen in the
        # middle of the follow loop's own store calls.
        nonlocal presses
        presses += 1
        if presses > 1:
            raise KeyboardInterrupt

    def on_tick() -> None:
        if presses == 1 and not asked:
            asked.append(True)
            eprint(f"\nferry: cancelling {job_id} (Ctrl-C again to stop watching; it still stops)")
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                cancel(store, store.get_job(job_id), start=start)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    asked: list[bool] = []
    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        return follow(store, job_id, on_tick=on_tick, progress=True)
    except KeyboardInterrupt:
        eprint(f"ferry: stopped watching {job_id}; see it with: ferry status {job_id}")
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGINT, previous)


def _summary(job: Any) -> None:
    from ferry.cli._common import runtime

    status = job.status.value
    took = runtime(job)
    if status == "SUCCEEDED":
        eprint(f"ferry: {job.id} SUCCEEDED in {took}; {_model_landed(job.outputs)}")
    elif job.started_at is None:  # (it never ran: an environment, an input, a cancel)
        eprint(f"ferry: {job.id} {status} before it started: {job.reason}")
    else:
        eprint(f"ferry: {job.id} {status} after {took}: {job.reason}")


def _model_landed(outputs: str) -> str:
    """What the job left in its model folder: ``'model: model.pt (1.2 MB) in …/model'``, or
    that it left nothing there (and where its outputs are)."""
    from ferry.cli.outputs_cmd import delivered, files_text
    from ferry.errors import FerryError

    try:
        files = delivered(outputs, "model")
    except (FerryError, OSError, ValueError):  # the job is done: a hiccup reading its list
        return f"outputs in {outputs}"
    if not files:
        return (
            "the model folder is empty (the script wrote nothing to FERRY_MODEL_DIR); "
            f"outputs in {outputs}"
        )
    return f"model: {files_text(files)} in {outputs}/model"


def _price_check(spec: Any, store: Any, yes: bool) -> None:
    """Print the offering and its price before launching anything that costs money, and
    ask above ``cost.confirm_above`` USD/h (``--yes`` and ``cost.when_not_interactive``
    decide when there is no one to ask). Called by submit once the job has passed every
    check: a job that is refused prints no plan."""
    import sys

    from ferry import config

    backend = spec.backend or str(config.get("backend"))
    if backend == "ray" or (backend == "local" and not float(config.get("local.price_hour"))):
        # free (a Ray cluster is the user's own): nothing to say, and no time spent pricing it
        return
    from ferry.catalog.estimate import quote

    found = quote(spec, backend=backend, store=store)
    if found.option is None:
        return  # (the backend's check found an offering; the catalog has none to price)
    eprint(f"ferry: plan: {found.line()}")
    for other in found.plan.options[1:3]:
        eprint(f"ferry:   next: {other.describe()} · {other.price:,.2f} USD/h")
    for skipped in found.plan.skipped[:2]:
        if skipped.price < found.price:
            eprint(
                f"ferry:   skipped: {skipped.describe()} · {skipped.price:,.2f} USD/h, "
                f"{skipped.skipped}"
            )
    limit = float(config.get("cost.confirm_above"))
    if yes or found.price <= limit:
        return
    above = f"{found.price:,.2f} USD/h is above cost.confirm_above ({limit:,.2f})"
    if not sys.stdin.isatty():
        if config.get("cost.when_not_interactive") == "refuse":
            raise UsageError(f"not launched: {above}", "pass --yes to launch it")
        return
    try:
        answer = input(f"ferry: {above}; launch it? [y/N] ").strip().lower()
    except EOFError:
        answer = ""
    if answer not in ("y", "yes"):
        raise UsageError("not launched", "pass --yes to launch without asking")


def _dry_run(spec: Any) -> int:
    import json

    from ferry import config
    from ferry.backends.registry import get_backend
    from ferry.catalog.estimate import quote

    backend_name = spec.backend or config.get("backend")
    found = quote(spec, backend=backend_name, offline=True)  # (a dry run asks no provider)
    if backend_name == "auto":
        from ferry.controller.jobs import choose_backend

        backend_name = choose_backend(spec)
    backend = get_backend(backend_name)
    request = backend.dry_run(spec)
    plan = {"offering": found.line(), "usd_per_hour": found.price, "estimate_usd": found.total}
    shown: dict[str, Any] = {"backend": backend_name, "plan": plan}
    if request is not None:
        shown["request"] = request
    shown["spec"] = spec.to_json()
    print(json.dumps(shown, indent=2))
    for item in (request or {}).get("placeholders", []):
        eprint(f"ferry: {item['placeholder']}: {item['filled_by']}")
    eprint(f"ferry: dry run: the {backend_name} backend accepts this job; nothing was submitted")
    return 0


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``[..., '--', cmd...]`` -> (options, command)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


__all__ = ["register", "run", "split_command"]
