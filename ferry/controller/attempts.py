"""A job's attempts, run by its detached supervisor: inputs staged, the command launched
under the contract, watched (heartbeat, cancel, max_runtime, live output sync), retried,
and ended with the outputs delivered before the job is marked finished."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config, defaults
from ferry.backends.base import RunningAttempt
from ferry.controller.budget import CostCap, attempts_so_far_cost
from ferry.controller.here import NotReady, after_here, prepare_here
from ferry.controller.jobs import (
    _S,
    _finish_job,
    _kill_orphans,
    followable,
    submitted_env,
    take_preempt_request,
)
from ferry.controller.observe import Observer
from ferry.controller.policy import Counter, History, Limits, decide
from ferry.controller.trackers import collect_trackers, start_tracker
from ferry.controller.watch import Control, ended_of, watch
from ferry.errors import FerryError, TransitionError
from ferry.procs import hostname, start_time
from ferry.runner.machine import (
    LiveSync,
    command_argv,
)
from ferry.status import AttemptStatus, JobStatus
from ferry.store import Attempt, Job, Store, open_store

if TYPE_CHECKING:
    from ferry.backends.base import Exit
    from ferry.packaging.environments import Held
    from ferry.storage.outputs import OutputSync
    from ferry.telemetry.notify import Notifier


def _launch_env(job: Job) -> dict[str, str]:
    env = submitted_env(job) or dict(os.environ)
    # `python` in the command means the interpreter Ferry runs with (environment: current).
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = bin_dir + os.pathsep + path
    return env


def supervise(
    job_id: str,
    control: Control,
    store: Store | None = None,
    on_crash: Callable[[str, Exception], None] | None = None,
) -> bool:
    """Run a job's attempts to the end. Called in the detached supervisor process. An
    unexpected error is handed to ``on_crash`` (which finishes the job) and gives False."""
    from ferry.telemetry.notify import JobInfo, Notifier, end_alert, targets_for

    store = store or open_store()
    job = store.get_job(job_id)
    alerts = job.plan.alerts
    env = _launch_env(job)
    try:
        notifier = Notifier(targets_for(alerts), JobInfo(job_id, job.name), env)
    except FerryError as exc:  # a config file edited by hand into nonsense
        store.add_event(job_id, f"alerts are off: {exc}")
        notifier = Notifier([], JobInfo(job_id, job.name), {})
    ok = True
    holding: list[Held] = []  # the job's environment, held while it is followed here
    try:
        start_tracker(store, job, env)
        finished_here = _run_attempts(job, control, store, notifier, env, holding)
    except Exception as exc:
        if on_crash is None:
            raise
        on_crash(job_id, exc)
        ok, finished_here = False, True
    finally:
        for held in holding:
            held.release()
    try:
        job = store.get_job(job_id)
        ending = end_alert(job.status.value, job.reason, alerts)
        if finished_here and job.status.is_terminal() and ending:  # else whoever finished it
            notifier.send(ending, job.status.value)
        for outcome in notifier.detach():  # the rest is recorded when the supervisor exits
            store.add_event(job_id, outcome)
        collect_trackers()
    except Exception:  # the store itself failed (a full disk): the job is already recorded
        import traceback

        traceback.print_exc()
        return False
    return ok


def _run_attempts(
    job: Job,
    control: Control,
    store: Store,
    notifier: Notifier,
    base_env: dict[str, str],
    holding: list[Held],
) -> bool:
    """The attempts of the job (as just read from the store; ``base_env``: the environment
    it was submitted with; ``holding``: where the environment it runs in is kept once
    had), until it ends. Returns whether this supervisor finished the job (rather than a
    command that declared it lost meanwhile)."""
    from ferry.backends.base import LaunchRequest
    from ferry.backends.local import run_folder
    from ferry.backends.registry import get_backend
    from ferry.contract.env import JobDirs
    from ferry.runner.gang import procs_per_node
    from ferry.runner.spawn import become_subreaper
    from ferry.storage.outputs import OutputSync
    from ferry.storage.workdir import WORKDIR, WorkdirState

    job_id = job.id
    # Recorded with each attempt; before the first, START_TIMEOUT covers a vanished supervisor.
    me: dict[str, Any] = {
        "supervisor_pid": os.getpid(),
        "supervisor_host": hostname(),
        "supervisor_started": start_time(os.getpid()),
    }
    backend = get_backend(job.backend)
    here = backend.runs_here  # else the runner makes the other machine ready itself
    if here:
        become_subreaper()
    plan = job.plan
    sync = OutputSync.for_outputs(job.outputs, Path(job.job_dir))
    dirs = JobDirs.under(str(sync.local))
    limits = Limits.of(plan.retries)
    grace = backend.stop_grace(job)
    max_runtime = plan.limits.max_runtime
    state = WorkdirState(
        Path(job.job_dir) / WORKDIR,
        dirs.checkpoints,
        plan.checkpoint.paths,
        Path(job.job_dir) / "code",
    )
    try:
        if plan.outputs_exist_ok:  # what the place held before this job wrote
            from ferry.storage.occupancy import record_before

            record_before(job.outputs, Path(job.job_dir))
        if here:
            dirs.create()
    except OSError as exc:
        _finish_job(store, job_id, _S.FAILED, f"cannot create outputs in {sync.local}: {exc}")
        return True
    follow = None if here else _attempt_to_follow(store, job_id)
    while True:
        job = store.get_job(job_id)  # (a cancel may have come while it got ready)
        if job.status is _S.CANCELLING:
            when = "between attempts" if store.attempts(job_id) else "before it started"
            _finish_job(store, job_id, _S.CANCELLED, f"cancelled {when}")
            return True
        if job.status.is_terminal():  # declared lost while this supervisor was starting
            return False
        max_cost = plan.limits.max_cost
        following = follow is not None
        if follow is not None:  # an attempt elsewhere that outlived its supervisor
            attempt, follow = follow, None
            store.update_job(job_id, **me)  # this supervisor follows it now
            others = [a for a in store.attempts(job_id) if a.number != attempt.number]
            spent = sum(a.cost_at(time.time()) for a in others) if max_cost else 0.0
        else:
            price = backend.price(job)
            spent = attempts_so_far_cost(store, job_id) if max_cost else 0.0
            if max_cost and spent + price * grace / 3600 >= max_cost:
                reason = f"budget reached: {max_cost:.2f} USD"  # spent by the earlier attempts
                _finish_job(store, job_id, _S.FAILED, reason)
                return True
            attempt = store.add_attempt(
                job_id,
                backend=backend.name,
                host=hostname(),
                log_dir=job.job_dir,
                price=price,
                offering=backend.offering(job),
                **me,
            )
        metrics_file = Path(job.job_dir) / f"metrics-{attempt.number}.jsonl"
        if here:
            try:
                prepared = prepare_here(
                    store, job, attempt.number, state, dirs, sync, base_env, holding
                )
            except NotReady as exc:
                Path(attempt.log_path).write_text("")
                failed = AttemptStatus.FAILED
                _end(store, job_id, attempt.number, failed, _S.FAILED, exc.reason, None, sync)
                return True
            env, argv, failure_file, hypertune = prepared
            machine = None
        else:
            env = _remote_env(job, base_env)
            argv = command_argv(plan)
            failure_file = hypertune = Path(job.job_dir) / "hypertune" / "none"
            machine = _machine(job)
        if not following:  # one left from the last attempt is not for this one
            take_preempt_request(job)
        observer = Observer(
            store,
            job,
            attempt.number,
            metrics_file,
            Path(attempt.log_path),
            dirs.tensorboard,
            notifier,
            hypertune,
        )
        if following:
            observer.skip_existing()  # (stored by the supervisor that was lost)
            running_again = backend.reattach(
                job, attempt.number, attempt.handle, attempt.log_path, str(metrics_file)
            )
            if running_again is None:  # nothing to follow: lost after all, and counted so
                _kill_orphans(job, attempt)
                # billed to its last sign of life, not to when it was found gone
                beat = max(attempt.started_at, job.heartbeat_at or time.time())
                running: RunningAttempt = _Gone(
                    attempt.handle,
                    "its supervisor was lost, and its backend could not find it again",
                    min(time.time(), beat + defaults.HEARTBEAT_INTERVAL),
                )
            else:
                running = running_again
                store.add_event(
                    job_id,
                    f"following attempt {attempt.number} again: its supervisor was lost, the "
                    f"attempt runs on ({backend.name})",
                )
        else:
            request = LaunchRequest(
                job=job,
                attempt=attempt.number,
                argv=argv,
                cwd=str(state.workdir),
                env=env,
                log_path=attempt.log_path,
                run_folder=str(run_folder(job, attempt.number)),
                grace=grace,
                procs_per_node=procs_per_node(plan),
                machine=machine,
                metrics_path=str(metrics_file),
            )
            try:
                running = backend.launch(request)
            except FerryError as exc:
                Path(attempt.log_path).write_text("")
                failed = AttemptStatus.FAILED
                _end(store, job_id, attempt.number, failed, _S.FAILED, str(exc), None, sync)
                return True
        try:
            job = store.transition(
                job_id,
                _S.RUNNING,
                expected={_S.STARTING, _S.RECOVERING},
                started_at=job.started_at or time.time(),
                heartbeat_at=time.time(),
                attempt=(
                    attempt.number,
                    {"status": AttemptStatus.RUNNING, "handle": running.handle},
                ),
            )
        except TransitionError:
            store.update_attempt(
                job_id, attempt.number, status=AttemptStatus.RUNNING, handle=running.handle
            )
            job = store.get_job(job_id)  # cancelled while launching: _watch stops it at once
            if job.status.is_terminal():  # or finished elsewhere (declared lost): stop now
                _abandon(store, job_id, attempt.number, running)
                return False
        cap = CostCap(max_cost, spent, attempt.price, attempt.started_at)
        outcome, ended_as = watch(
            store,
            job,
            attempt.number,
            running,
            control,
            grace,
            max_runtime,
            LiveSync(sync, state) if here else None,
            observer,
            plan.preempt_every,
            cap,
        )
        if ended_as.billed is not None:  # what the provider billed, as it said
            store.update_attempt(job_id, attempt.number, cost=ended_as.billed, billed=True)
        elif attempt.price:  # what it cost, as it ended (a free one stays at 0)
            now = next(a for a in store.attempts(job_id) if a.number == attempt.number)
            store.update_attempt(job_id, attempt.number, cost=now.cost_at(_ended_at(running)))
        observer.finish()  # what the script reported last
        if here:  # (a runner elsewhere did these itself)
            after_here(store, job_id, state, sync, hypertune)
        if outcome == "abandoned":
            if not here and store.get_job(job_id).status.is_active():
                return False  # another supervisor follows it now: it runs on
            _abandon(store, job_id, attempt.number, running)
            return False
        if outcome == "detached":  # a shutdown here: the attempt elsewhere runs on
            name = signal.Signals(control.terminated).name
            store.add_event(
                job_id,
                f"its supervisor was stopped by {name}; attempt {attempt.number} runs on, "
                "and the next ferry command or ferry agent follows it again",
            )
            return False
        code = ended_as.code
        if outcome == "stopped":  # a shutdown or reboot: the job resumes afterwards
            reason = f"its supervisor was stopped by {signal.Signals(control.terminated).name}"
            store.update_attempt(
                job_id,
                attempt.number,
                status=AttemptStatus.LOST,
                ended_at=time.time(),
                exit_code=code,
                reason=reason,
            )
            with contextlib.suppress(TransitionError):  # left with this (soon dead) supervisor
                store.transition(
                    job_id,
                    _S.RECOVERING,
                    expected={_S.RUNNING},
                    reason=f"{reason}; the next ferry command or ferry agent resumes it",
                )
            if here:
                with contextlib.suppress(Exception):
                    sync.sync(("checkpoints",))
            return False
        if outcome == "exited" and ended_as.outcome == ended_as.NOT_STARTED:  # as at launch
            failed = AttemptStatus.FAILED
            _end(store, job_id, attempt.number, failed, _S.FAILED, ended_as.reason, None, sync)
            return True
        ended = ended_of(outcome, ended_as, plan.contract, failure_file, max_runtime, observer, cap)
        # (the job as this supervisor last changed it: only it counts retries meanwhile)
        decision = decide(ended, History(job.preemptions, job.retries, job.code_retries), limits)
        if decision.job is not None:
            # the working folder is kept for the next job before the room is given back
            _end(
                store,
                job_id,
                attempt.number,
                decision.attempt,
                decision.job,
                decision.reason,
                code,
                sync,
                recycle=state.recycle if here else None,
                ended_at=_ended_at(running),
            )
            return True
        why = decision.why
        if decision.charge is Counter.PREEMPTIONS:
            why = f"{why}; starting attempt {attempt.number + 1}"
        assert decision.charge is not None
        counter = decision.charge.value
        ended_fields = {
            "status": decision.attempt,
            "ended_at": _ended_at(running),
            "exit_code": code,
            "reason": decision.reason,
        }
        try:
            store.transition(
                job_id,
                _S.RECOVERING,
                expected={_S.RUNNING},
                reason=why,
                attempt=(attempt.number, ended_fields),
                **{counter: getattr(job, counter) + 1},
            )
        except TransitionError:  # cancelled meanwhile: the loop's first check finishes it
            store.update_attempt(job_id, attempt.number, **ended_fields)
            continue
        if decision.backoff:  # capacity comes back at once; errors wait a little
            _backoff(store, job_id, decision.backoff, control)


def _sent_elsewhere(
    store: Store, job: Job, number: int, status: JobStatus
) -> list[dict[str, Any]] | None:
    """What the runners of the job's attempts on other machines sent to its outputs (their
    listings, a later attempt's entry for a file winning); None when every attempt ran
    here. Raises FerryError when the attempt ``number`` that ends the job successfully
    left no listing: its outputs were not delivered."""
    from ferry.backends.registry import get_backend

    merged: dict[str, dict[str, Any]] = {}
    elsewhere = False
    for attempt in store.attempts(job.id):
        backend = get_backend(attempt.backend)
        if backend.runs_here:
            continue
        elsewhere = True
        listed = backend.outputs_sent(job, attempt.number, attempt.handle)
        if listed is None and attempt.number == number and status is _S.SUCCEEDED:
            raise FerryError(
                f"the runner of attempt {number} did not say what it sent",
                f"see its events and log: ferry status {job.id}",
            )
        for entry in listed or []:
            if isinstance(entry, dict) and "path" in entry:
                merged[str(entry["path"])] = entry
    return list(merged.values()) if elsewhere else None


def _attempt_to_follow(store: Store, job_id: str) -> Attempt | None:
    """The job's last attempt when it has not ended: launched elsewhere by a supervisor
    that was lost, it runs on, to be followed again rather than started anew."""
    attempts = store.attempts(job_id)
    last = attempts[-1] if attempts else None
    return last if followable(last) else None


def _ended_at(running: RunningAttempt) -> float:
    """When the attempt ended, as billed: when its provider says, or an attempt found
    gone's last sign of life, else now."""
    said = running.ended_at
    return said if said is not None else time.time()


class _Gone(RunningAttempt):
    """An attempt elsewhere that could not be followed again (its backend found nothing
    under its handle): it ended as lost, which the retry policy counts like any other."""

    def __init__(self, handle: str | None, reason: str, lost_at: float) -> None:
        from ferry.backends.base import Exit

        self.handle = handle or ""
        self.lost_at = lost_at  # its last sign of life
        self._exit = Exit(Exit.LOST, None, reason)

    @property
    def ended_at(self) -> float:
        return self.lost_at

    def poll(self) -> Exit:
        return self._exit

    def stop(self) -> None:
        return None

    def kill(self) -> None:
        return None


def _remote_env(job: Job, base_env: dict[str, str]) -> dict[str, str]:
    """What a job on another machine gets of the submitter's environment: its spec's
    ``env`` and ``secrets`` (this machine's PATH or HOME mean nothing there)."""
    names = [*job.plan.env, *job.plan.secrets]
    return {name: base_env[name] for name in names if name in base_env}


def _machine(job: Job) -> dict[str, Any]:
    """The job as a runner on another machine needs it (:class:`Machine`'s fields)."""
    from ferry.accelerators import parse_accelerator
    from ferry.runner.machine import Machine

    plan = job.plan
    acc = plan.resources.accelerator
    return Machine(
        job_id=job.id,
        outputs=job.outputs,
        inputs=plan.inputs,
        hyperparameters=plan.hyperparameters,
        contract=plan.contract,
        checkpoint_every=plan.checkpoint.every,
        checkpoint_keep=plan.checkpoint.keep,
        checkpoint_paths=list(plan.checkpoint.paths),
        collect=list(plan.collect),
        cpus=plan.resources.cpus or 1.0,
        gpus=parse_accelerator(acc).count if acc else 0,
        sync_interval=float(config.get("outputs.sync_interval")),
        requirements=plan.requirements or "",
    ).fields()


def _abandon(store: Store, job_id: str, number: int, running: RunningAttempt) -> None:
    """The job was finished by someone else (declared lost): stop its attempt, record why."""
    running.kill()
    give_up = time.monotonic() + _ABANDON_WAIT
    while running.poll() is None and time.monotonic() < give_up:
        time.sleep(0.05)
    store.update_attempt(
        job_id,
        number,
        status=AttemptStatus.LOST,
        ended_at=time.time(),
        reason="the job was declared lost while this attempt ran; it was stopped",
    )


def _end(
    store: Store,
    job_id: str,
    number: int,
    attempt_status: AttemptStatus,
    status: JobStatus,
    reason: str,
    code: int | None,
    sync: OutputSync,
    recycle: Callable[[], object] | None = None,
    ended_at: float | None = None,
) -> None:
    """Send the outputs (manifest last), then record how the attempt ended (``ended_at``:
    now unless given) and finish the
    job in one transaction: a finished job's outputs are complete. ``recycle`` keeps the
    working folder for another job (once what is collected from it has been), before the
    job's room is given back: the next job, admitted then, can take it. Attempts that ran
    elsewhere sent their files themselves (and collected them): their runners' listings
    make the manifest."""
    ended: dict[str, Any] = {
        "status": attempt_status,
        "ended_at": ended_at or time.time(),
        "exit_code": code,
    }
    try:
        job = store.get_job(job_id)
        sent = _sent_elsewhere(store, job, number, status)
        patterns = list(job.plan.collect)
        if patterns and sent is None:
            from ferry.storage.workdir import WORKDIR

            sync.collect(Path(job.job_dir) / WORKDIR, patterns)
        from ferry.storage.occupancy import read_before

        logs = [Path(a.log_path) for a in store.attempts(job_id)]
        manifest = sync.finish(logs, job_id, read_before(Path(job.job_dir)), sent)
        store.add_event(job_id, f"outputs: {len(manifest['files'])} files in {sync.target.uri}")
    except Exception as exc:  # a bucket that refused, a full disk: the job did not deliver
        status = _S.FAILED if status is _S.SUCCEEDED else status
        reason = f"{reason}; outputs could not be written to {sync.target.uri}: {exc}"
    if recycle is not None:
        with contextlib.suppress(Exception):  # (only a saving for the next job)
            recycle()
    if attempt_status is not AttemptStatus.SUCCEEDED:
        ended["reason"] = reason
    _finish_job(store, job_id, status, reason, attempt=(number, ended), exit_code=code)


def _backoff(store: Store, job_id: str, n: int, control: Control) -> None:
    """Wait before retry ``n`` (1 s, 2 s, 4 s ... at most 30 s), or until a cancel arrives."""
    import selectors

    end = time.monotonic() + min(2 ** (n - 1), 30)
    selector = selectors.DefaultSelector()
    selector.register(control.wake_read, selectors.EVENT_READ)
    while time.monotonic() < end:
        selector.select(min(defaults.CONTROL_POLL, end - time.monotonic()))
        if store.get_job(job_id).status is _S.CANCELLING or control.terminated:
            break
    selector.close()


_ABANDON_WAIT = 600.0  # s an abandoned attempt is waited for after its kill
