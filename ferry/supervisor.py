"""The detached supervisor process: it runs one job at a time, a job whose attempts run on
this machine (a job that runs elsewhere is followed by :mod:`ferry.watcher`; what to start
for a job is :func:`ferry.followers.start`'s choice).

It runs in its own session (closing the terminal does not touch it), writes its own errors
to ``<job dir>/supervisor.log``, and runs :func:`ferry.controller.supervise`. When its job
ends it admits queued jobs into the room it held and goes on to supervise the first of them
itself (starting a process per job would cost more than a tiny job); with none queued, it
waits a moment for a job handed over by the next submission (:mod:`ferry.handoff`). It is
started by forking the submitting process when that is safe (single-threaded: the CLI,
scripts), which costs a millisecond, and otherwise by executing ``python -m
ferry.supervisor JOB`` (Jupyter kernels and other threaded hosts, where forking is unsafe).
``ferry run`` forks one before it even validates the spec (:func:`start_standby`): that
supervisor imports what it needs while the command imports pydantic and submits, then is
handed the job, or ends with the command if there is none for it.

A supervisor holds the secrets of the job it follows, and forgets them when the job ends,
before it goes on (:func:`follow_secrets`, :mod:`ferry.held_secrets`).

The watcher starts and runs the same way, with the helpers here (:func:`detach`,
:func:`quiet_descriptors`, :func:`execute`, :func:`write_to`, :func:`install_signals`,
:func:`follow_secrets`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.store import Job, Store

if TYPE_CHECKING:
    from ferry.controller import Control


# The modules a supervisor imports on its way to starting the job's command: a standby
# imports them while it waits.
_PRELOAD = (
    "ferry.controller.attempts",
    "ferry.backends.local",
    "ferry.runner.run",
    "ferry.contract.env",
    "ferry.contract.sagemaker",
    "ferry.logs",
    "ferry.storage.occupancy",
    "ferry.storage.outputs",
    "ferry.storage.workdir",
    "ferry.telemetry.sampler",
    "ferry.telemetry.tensorboard",
    "psutil",
)
_standby: int | None = None  # the pipe to this process's standby supervisor, until used


def start_standby() -> None:
    """Fork a supervisor that prepares itself while this process submits a job, and waits
    for :func:`start` to hand it one (``ferry run``, before its slow imports).
    It ends by itself when this process hands it nothing (an invalid spec, a queued job)."""
    global _standby
    if _standby is not None or threading.active_count() != 1 or not hasattr(os, "fork"):
        return
    from ferry.handoff import waiting

    if waiting():  # a supervisor whose job just ended will take the job
        return
    wait_read, wait_write = os.pipe()
    if detach():
        os.close(wait_read)
        _standby = wait_write
        return
    try:
        os.close(wait_write)
        quiet_descriptors(keep=wait_read)
        prepare_launch()
        with os.fdopen(wait_read, "rb") as wait:
            handed = wait.read().decode().split("\n")
        if len(handed) < 3:  # the submitting process ended without a job for us
            os._exit(0)
        from ferry import held_secrets

        # the submitter's secrets, declared after this fork: it may be handed another's job
        held_secrets.declare(handed[2].split())
        code = _supervise_forked(handed[0], Path(handed[1]))
    except BaseException:
        code = 1
    os._exit(code)


def release_standby() -> None:
    """Let this process's standby supervisor go, if no job was handed to it."""
    global _standby
    if _standby is not None:
        os.close(_standby)
        _standby = None


def start(job: Job) -> None:
    """Have a supervisor of its own follow an admitted job: one whose job just ended takes
    it, else the standby one, else a new one. (A job that runs elsewhere goes to the
    watcher, :func:`ferry.followers.start`; a supervisor would follow it too, alone.)"""
    global _standby
    from ferry.controller.jobs import SUPERVISOR_LOG
    from ferry.handoff import hand

    if hand(job.id):  # a supervisor whose job just ended takes it
        release_standby()
        return
    log_path = Path(job.job_dir) / SUPERVISOR_LOG
    if _standby is not None:
        from ferry import held_secrets

        wait_write, _standby = _standby, None
        secrets = " ".join(held_secrets.names())
        try:
            os.write(wait_write, f"{job.id}\n{log_path}\n{secrets}\n".encode())
            handed = True
        except OSError:  # it is gone: start another
            handed = False
        finally:
            os.close(wait_write)
        if handed:
            return
    if threading.active_count() == 1 and hasattr(os, "fork"):
        prepare_launch()  # once here, rather than in each supervisor forked from here
        _fork_supervisor(job.id, log_path)
        return
    execute("ferry.supervisor", job.id, log_path)


def execute(module: str, job_id: str, log_path: Path) -> None:
    """Start ``python -m MODULE JOB_ID`` in a session of its own, writing to ``log_path``
    (from a threaded process, where forking is unsafe)."""
    from ferry import held_secrets

    with open(log_path, "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", module, job_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            env=held_secrets.environment(),  # (it takes its job's secrets from the job)
        )


def prepare_launch() -> None:
    """Import what a supervisor needs and find out how the local backend starts commands
    (a probe, the first time): done once in a process that forks supervisors, rather than
    in each of them."""
    import importlib

    for module in _PRELOAD:
        try:
            importlib.import_module(module)
        except Exception:  # only a head start: the job imports what it needs itself
            continue
    with contextlib.suppress(Exception):
        from ferry.runner.spawn import prepare

        prepare()


def _fork_supervisor(job_id: str, log_path: Path) -> None:
    if detach():
        return
    try:
        quiet_descriptors()
        code = _supervise_forked(job_id, log_path)
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def detach() -> bool:
    """Fork a detached process; True in this one, False in the new one (never returns
    there: it must end with ``os._exit``).

    Double fork: the middle process exits at once, so the new one is never a zombie of this
    process, which waits only for that first, instant child. A supervisor (a child
    subreaper) forking another must not adopt it as an orphan: it would count as one of its
    job's processes and be killed with them.
    """
    from ferry.runner.spawn import not_subreaper

    with not_subreaper():
        pid = os.fork()
        if pid:
            os.waitpid(pid, 0)
            return True
    try:
        from ferry.procs import SUPERVISOR_NAME, name_this_process

        # named before the second fork, so the supervisor carries the name from its first
        # instant: a job's clean-up (which spares supervisors) may run as soon as we return
        name_this_process(SUPERVISOR_NAME)
        os.setsid()
        if os.fork():
            os._exit(0)
        from ferry import held_secrets
        from ferry.runner.spawn import forget_subreaper

        forget_subreaper()
        held_secrets.forget_followed()
        gc.freeze()  # never collect (and close) objects inherited from the submitter
        gc.enable()  # (`ferry run` submits with the collector off)
    except BaseException:
        os._exit(1)
    return False


def quiet_descriptors(keep: int = -1) -> None:
    """Read nothing, write nowhere yet, and drop the submitter's other descriptors (pipes of
    whoever runs it must see EOF). Objects that own them stay referenced and are never
    finalized: a forked supervisor ends with ``os._exit``."""
    from ferry.procs import close_fds_except

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    close_fds_except(keep)


def write_to(log_path: Path) -> None:
    """This process's output (descriptors 1 and 2, ``sys.stdout`` and ``sys.stderr``) to
    the end of ``log_path``."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _supervise_forked(job_id: str, log_path: Path) -> int:
    """In a forked supervisor: write to the job's supervisor log, run the job."""
    write_to(log_path)
    try:
        return run(job_id)
    except BaseException:
        traceback.print_exc()
        return 1


def run(job_id: str) -> int:
    """The supervisor's body: signals, then the controller's loop for this job and for each
    queued job it adopts when this one ends. Returns the exit code."""
    from ferry.controller import supervise
    from ferry.procs import SUPERVISOR_NAME, name_this_process
    from ferry.storage.logs import library_logs
    from ferry.store import open_store

    name_this_process(SUPERVISOR_NAME)
    library_logs("log")  # the storage libraries' warnings go to supervisor.log, with times
    control = install_signals()
    store = open_store()
    code = 0
    current: str | None = job_id
    while current is not None:
        follow_secrets(store, current)
        if not supervise(current, control, store, on_crash=_record_crash):
            code = 1
        unfollow_secrets(current)  # before it forks supervisors for queued jobs
        # a supervisor that failed or was told to stop hands queued jobs to fresh ones
        adopt = code == 0 and not control.terminated
        current = _next_job(store, current, adopt=adopt)
        if current is None and adopt:  # none queued: wait a moment for one handed over
            from ferry import config
            from ferry.handoff import wait_for_job

            try:
                linger = float(config.get("local.linger"))
            except Exception:  # (a config file edited by hand into nonsense: no waiting)
                linger = 0.0
            current = wait_for_job(control.wake_read, lambda: bool(control.terminated), linger)
            if current is not None:
                try:
                    _log_to(current, store)
                except Exception:  # (its folder gone, the store failing: supervise says so)
                    traceback.print_exc()
    from ferry.telemetry.notify import finish_all

    for done_job, outcome in finish_all(timeout=60.0):  # alerts still on their way
        store.add_event(done_job, outcome)
    return code


def follow_secrets(store: Store, job_id: str) -> None:
    """Hold the secrets of job ``job_id``, which this process follows from now on, and
    only those of the jobs it follows (:mod:`ferry.held_secrets`)."""
    from ferry import held_secrets
    from ferry.controller.jobs import submitted_env

    try:
        job = store.get_job(job_id)
    except Exception:  # (the store failing: following the job says so)
        traceback.print_exc()
        return
    secrets = job.plan.secrets
    # (the job's environment is read only where a secret is known here: its own, or one
    # another job declared, which this job's environment may hold too)
    environ = (submitted_env(job) or {}) if secrets or held_secrets.names() else {}
    _forgotten(held_secrets.follow(job_id, environ, secrets))


def unfollow_secrets(job_id: str) -> None:
    """Job ``job_id`` is no longer followed here: forget the secrets no job followed here
    holds (:mod:`ferry.held_secrets`)."""
    from ferry import held_secrets

    _forgotten(held_secrets.unfollow(job_id))


def _forgotten(names: list[str]) -> None:
    """Secrets ``names`` were just forgotten: so goes what was made while they were held,
    and keeps them (storage clients with their credentials, the runner, forked with this
    process's memory while a job ran and idle now)."""
    if not names:
        return
    from ferry.backends.local import end_runner
    from ferry.storage.registry import forget_filesystems

    forget_filesystems()
    end_runner()


def install_signals() -> Control:
    """This process's signals as a supervisor's (and the watcher's): SIGUSR1 wakes it
    (``woken``), SIGTERM and SIGINT ask it to stop (``terminated``), SIGHUP is ignored;
    each also writes to the returned control's ``wake_read`` pipe."""
    from ferry.controller import Control

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    control = Control(wake_read=wake_read)

    def on_wake(signum: int, frame: object) -> None:
        control.woken = True

    def on_terminate(signum: int, frame: object) -> None:
        control.terminated = signum

    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGUSR1, on_wake)
    signal.signal(signal.SIGTERM, on_terminate)
    signal.signal(signal.SIGINT, on_terminate)
    # A handler rather than SIG_IGN: an ignored signal stays ignored in the job after exec.
    signal.signal(signal.SIGHUP, lambda signum, frame: None)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return control


def _record_crash(job_id: str, exc: Exception) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor failed:", file=sys.stderr)
    traceback.print_exc()
    from ferry.procs import kill_descendants

    with contextlib.suppress(Exception):  # the attempt under way, and its runner
        from ferry.backends.local import end_runner

        end_runner()
    kill_descendants()
    end_crashed(job_id, exc)


def end_crashed(job_id: str, exc: Exception) -> None:
    """End a job whose supervision failed (:func:`ferry.controller.jobs.end_crashed`),
    saying on this process's output what failed instead, when the store is what failed."""
    from ferry.controller.jobs import end_crashed as end
    from ferry.store import open_store

    try:
        end(open_store(), job_id, exc)
    except Exception:  # (the store itself, a job ended meanwhile)
        traceback.print_exc()


def _next_job(store: Store, job_id: str, adopt: bool) -> str | None:
    """The job ended: admit queued jobs into the room it held (jobs of its backend: jobs
    that run here). With ``adopt``, return the first of them for this process to supervise
    next (its output now goes to that job's supervisor log); the others get supervisors of
    their own."""
    from ferry.controller import schedule

    kept: list[Job] = []

    def start_or_keep(job: Job) -> None:
        if adopt and not kept:
            kept.append(job)
        else:
            start(job)

    try:
        schedule(store, store.get_job(job_id).backend, start=start_or_keep)
    except Exception:  # (one kept before the failure is still this process's to follow)
        traceback.print_exc()
    if not kept:
        return None
    _log_to(kept[0].id, store, kept[0])
    return kept[0].id


def _log_to(job_id: str, store: Store, job: Job | None = None) -> None:
    """Write this supervisor's output to the supervisor log of the job it goes on with."""
    from ferry.controller.jobs import SUPERVISOR_LOG

    job = job or store.get_job(job_id)
    log = os.open(Path(job.job_dir) / SUPERVISOR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m ferry.supervisor JOB_ID")
    sys.exit(run(sys.argv[1]))
