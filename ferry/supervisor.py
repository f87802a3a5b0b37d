"""The detached supervisor process: one per running job.

It runs in its own session (closing the terminal does not touch it), writes its own errors
to ``<job dir>/supervisor.log``, and runs :func:`ferry.controller.supervise`. It is started by
forking the submitting process when that is safe (single-threaded: the CLI, scripts), which
costs a millisecond, and otherwise by executing ``python -m ferry.supervisor JOB`` (Jupyter
kernels and other threaded hosts, where forking is unsafe).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from ferry.store import Job

SUPERVISOR_LOG = "supervisor.log"


def spawn_supervisor(job: Job) -> None:
    """Start a detached supervisor for an admitted job."""
    log_path = Path(job.job_dir) / SUPERVISOR_LOG
    if threading.active_count() == 1 and hasattr(os, "fork"):
        _fork_supervisor(job.id, log_path)
        return
    with open(log_path, "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "ferry.supervisor", job.id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
        )


def _fork_supervisor(job_id: str, log_path: Path) -> None:
    # Double fork: the middle process exits at once, so the supervisor is never a zombie of
    # the submitting process, and the submitter waits only for that first, instant child.
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        gc.freeze()  # never collect (and close) objects inherited from the submitter
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # Drop the submitter's other descriptors (pipes of whoever runs it must see EOF).
        # Objects that own them stay referenced and are never finalized: we _exit below.
        os.closerange(3, _max_fd())
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        code = run(job_id)
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 1024


def run(job_id: str) -> int:
    """The supervisor's body: signals, then the controller's loop. Returns the exit code."""
    from ferry.controller import Control, supervise

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
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        supervise(job_id, control)
    except Exception as exc:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor failed:", file=sys.stderr)
        traceback.print_exc()
        _record_crash(job_id, exc)
        return 1
    finally:
        _schedule_next(job_id)
    return 0


def _record_crash(job_id: str, exc: Exception) -> None:
    from ferry.controller import _finish_job
    from ferry.errors import TransitionError
    from ferry.procs import kill_descendants
    from ferry.status import JobStatus
    from ferry.store import open_store

    kill_descendants()
    try:
        store = open_store()
        job = store.get_job(job_id)
        _finish_job(
            store,
            job_id,
            JobStatus.FAILED,
            f"supervisor failed: {exc} (details in {Path(job.job_dir) / SUPERVISOR_LOG})",
        )
    except (TransitionError, Exception):  # the store itself may be what failed
        traceback.print_exc()


def _schedule_next(job_id: str) -> None:
    """The job ended: start queued jobs into the room it held."""
    from ferry.controller import schedule
    from ferry.store import open_store

    try:
        store = open_store()
        schedule(store, store.get_job(job_id).backend)
    except Exception:
        traceback.print_exc()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m ferry.supervisor JOB_ID")
    sys.exit(run(sys.argv[1]))
