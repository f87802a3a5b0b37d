"""The watcher: one process that follows many jobs whose attempts run elsewhere.

A job on this machine needs a supervisor of its own: its processes are that supervisor's
children. A job whose attempts run on other machines (a Ray cluster, and the clouds after
it) needs none of that: its supervision is polls, copies from its run folder and a few
writes to the store. So every such job admitted here is followed by one watcher process,
each job in a thread of its own that runs the same controller loop a supervisor runs
(:func:`ferry.controller.supervise`): one process of Python, Ferry and the store instead
of one per job. Two hundred jobs cost it a few megabytes more than one (``make bench``).

- It is the jobs' supervisor as the store sees it (``supervisor_pid``): ``ferry cancel``
  wakes it with SIGUSR1 and every thread looks at its job; ``kill -9`` of the watcher makes
  every job it followed lost, and ``reconcile`` gives them to a new watcher, which follows
  their attempts again (they ran on meanwhile).
- It beats for all its jobs at once, every :data:`ferry.defaults.HEARTBEAT_INTERVAL`.
- A job is handed to a running watcher like the one the submitter would start (same
  installation, user and environment) as jobs are to idle supervisors
  (:mod:`ferry.handoff`, sockets ``FERRY_HOME/run/watch-*.sock``); with none, the
  submitter starts one, forked when it is single-threaded, else ``python -m
  ferry.watcher JOB``.
- SIGTERM (a shutdown) leaves every attempt running for the next watcher and ends it.
- With no job left, it waits ``local.linger`` for another, then ends.
- It holds the secrets of the jobs it follows, and no others (:mod:`ferry.held_secrets`).
- Its own messages go to ``FERRY_HOME/run/watcher.log``; a job whose supervision failed
  gets the traceback in its ``supervisor.log`` too.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferry.controller import Control
    from ferry.handoff import Desk
    from ferry.store import Job, Store

LOG = "watcher.log"  # in FERRY_HOME/run
# Between a watched job's own looks at the store: SIGUSR1 announces a cancel at once; this
# only bounds how late a job declared lost elsewhere, or asked to preempt, is noticed.
CONTROL_POLL = 2.0


def follows(job: Job) -> bool:
    """Whether a watcher, rather than a supervisor of its own, follows ``job``: its
    backend runs attempts elsewhere."""
    from ferry.backends.registry import get_backend
    from ferry.errors import FerryError

    try:
        return not get_backend(job.backend).runs_here
    except FerryError:  # (an extra uninstalled since: its supervisor says so)
        return False


def follow(job: Job) -> None:
    """Have a watcher follow the admitted ``job``: a running one takes it, else one starts."""
    from ferry.handoff import WATCHER, hand

    if hand(job.id, WATCHER):
        return
    start(job.id)


def start(job_id: str) -> None:
    """Start a watcher whose first job is ``job_id``."""
    from ferry.handoff import WATCHER, Desk
    from ferry.supervisor import detach, execute, quiet_descriptors

    log_path = _log_path()
    if threading.active_count() == 1 and hasattr(os, "fork"):
        # its socket listens before the fork: a job this process hands over next (reconcile
        # finding several jobs lost) waits there for the watcher, rather than starting another
        desk = Desk(WATCHER)
        desk.open()
        try:
            detached = detach()
        except BaseException:
            desk.close()
            raise
        if detached:
            desk.leave()
            return
        try:
            quiet_descriptors(keep=desk.fileno())
            code = _run_logged(job_id, log_path, desk)
        except BaseException:
            code = 1
        os._exit(code)
    execute("ferry.watcher", job_id, log_path)


def _log_path() -> Path:
    from ferry.config import ferry_home
    from ferry.launcher import FOLDER

    folder = Path(ferry_home()) / FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder / LOG


def _run_logged(job_id: str, log_path: Path, desk: Desk | None = None) -> int:
    from ferry.supervisor import write_to

    write_to(log_path)
    try:
        return run(job_id, desk)
    except BaseException:
        traceback.print_exc()
        return 1


@dataclass
class _Followed:
    """One job this watcher follows: its thread, and the controls it looks at."""

    thread: threading.Thread
    control: Control
    wake_write: int  # written to when the watcher is signalled: wakes the thread's waits


def run(job_id: str, desk: Desk | None = None) -> int:
    """The watcher's body: follow ``job_id``, then every job handed over (at ``desk``, when
    it was opened for it), until none is left (and none came within ``local.linger``) or
    SIGTERM. Returns the exit code."""
    from ferry.procs import SUPERVISOR_NAME, name_this_process
    from ferry.storage.logs import library_logs
    from ferry.store import open_store
    from ferry.supervisor import install_signals

    # named as supervisors are: a local job's clean-up spares it
    name_this_process(SUPERVISOR_NAME)
    library_logs("log")
    _more_descriptors()
    watcher = Watcher(open_store(), install_signals())
    code = watcher.serve(job_id, desk)
    from ferry.telemetry.notify import finish_all

    for done_job, outcome in finish_all(timeout=60.0):  # alerts still on their way
        with contextlib.suppress(Exception):
            watcher.store.add_event(done_job, outcome)
    return code


class Watcher:
    """The jobs one watcher process follows (see the module's text)."""

    def __init__(self, store: Store, control: Control) -> None:
        self.store = store
        self.control = control  # the process's own: its signal handlers set it
        self.jobs: dict[str, _Followed] = {}
        self._again: set[str] = set()  # handed over again while their thread here ends
        self._unended: set[str] = set()  # ended here, not recorded as ended: tried again
        self.failed = False
        self._ended_read, self._ended_write = os.pipe()  # a thread's job ended
        os.set_blocking(self._ended_read, False)
        os.set_blocking(self._ended_write, False)

    def serve(self, first: str, desk: Desk | None = None) -> int:
        """Follow ``first`` and the jobs handed over at ``desk`` (opened here when None)
        until none is left."""
        from ferry import config, defaults
        from ferry.handoff import WATCHER, Desk

        self.add(first)
        if desk is None or desk.fileno() < 0:
            desk = Desk(WATCHER)
            desk.open()
        taking = desk.fileno() >= 0
        try:
            linger = float(config.get("local.linger"))
        except Exception:  # (a config file edited by hand into nonsense: no waiting)
            linger = 0.0
        idle_since: float | None = None
        next_beat = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= next_beat:
                    self._beat()
                    next_beat = now + defaults.HEARTBEAT_INTERVAL
                if self.jobs:
                    idle_since = None
                elif self.control.terminated or not taking:
                    return 1 if self.failed else 0
                else:
                    idle_since = idle_since or now
                    if now - idle_since >= linger:
                        desk.close()  # (an offer that came meanwhile is refused: its
                        taking = False  # process starts a watcher of its own)
                wait = max(0.0, next_beat - time.monotonic())
                if not self.jobs and taking and idle_since is not None:
                    wait = min(wait, max(0.0, idle_since + linger - time.monotonic()))
                watched = [self.control.wake_read, self._ended_read]
                if taking or desk.fileno() >= 0:
                    watched.append(desk.fileno())
                try:
                    ready, _, _ = select.select(watched, [], [], wait)
                except InterruptedError:
                    ready = []
                if self.control.wake_read in ready:
                    _drain(self.control.wake_read)
                self._pass_signals()
                if desk.fileno() in ready:
                    job_id = desk.take(self._full)
                    if job_id is not None:
                        self._take(job_id)
                if self._ended_read in ready:
                    _drain(self._ended_read)
                self._reap()
        finally:
            desk.close()

    def _full(self) -> bool:
        """Whether to decline a job offered now: told to stop, or following all it can."""
        return bool(self.control.terminated) or len(self.jobs) >= _capacity()

    def _take(self, job_id: str) -> None:
        """Follow a job handed over; one that cannot be followed is left without a
        supervisor, for the next ``ferry`` command to give to another."""
        try:
            self.add(job_id)
        except Exception:  # (out of descriptors or threads, after all)
            traceback.print_exc()

    def add(self, job_id: str) -> None:
        """Follow ``job_id`` in a thread of its own (once its thread here has ended, when
        it is handed over again while that one still runs)."""
        from ferry.controller import Control
        from ferry.supervisor import follow_secrets

        if job_id in self.jobs:
            self._again.add(job_id)
            self._reap()
            return
        follow_secrets(self.store, job_id)  # (here: the threads never change os.environ)
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        control = Control(
            wake_read=wake_read,
            terminated=self.control.terminated,
            beat=False,
            control_poll=CONTROL_POLL,
        )
        thread = threading.Thread(
            target=self._follow, args=(job_id, control), name=f"job {job_id}", daemon=True
        )
        self.jobs[job_id] = _Followed(thread, control, wake_write)
        thread.start()

    def _follow(self, job_id: str, control: Control) -> None:
        from ferry.controller import supervise

        try:
            if not supervise(job_id, control, self.store, on_crash=_crashed):
                self.failed = True
        except BaseException:  # (the store itself failed before the job could be ended)
            traceback.print_exc()
            self.failed = True
        finally:
            with contextlib.suppress(OSError):
                os.write(self._ended_write, b".")

    def _pass_signals(self) -> None:
        """What the process was signalled, to every job it follows (SIGUSR1: look at the
        store now; SIGTERM: stop following, leaving the attempts running)."""
        woken, self.control.woken = self.control.woken, False
        terminated = self.control.terminated
        if not woken and not terminated:
            return
        for followed in self.jobs.values():
            if woken:
                followed.control.woken = True
            if terminated:
                followed.control.terminated = terminated
            with contextlib.suppress(OSError):
                os.write(followed.wake_write, b".")

    def _reap(self) -> None:
        """Forget the jobs whose threads ended, and admit queued jobs into the room each
        held (this watcher follows those that run elsewhere; the others get supervisors)."""
        from ferry.supervisor import unfollow_secrets
        from ferry.telemetry.notify import finish_done

        for job_id, followed in list(self.jobs.items()):
            if followed.thread.is_alive():
                continue
            followed.thread.join()
            del self.jobs[job_id]
            os.close(followed.wake_write)
            os.close(followed.control.wake_read)
            if job_id in self._again:  # claimed again meanwhile: followed anew
                self._again.discard(job_id)
                self._take(job_id)
                continue
            unfollow_secrets(job_id)  # before a supervisor is forked for a queued job
            if self.control.terminated:
                continue
            self._unended.add(job_id)
            self._admit_after(job_id)
        for job_id in list(self._unended):
            if self._settle(job_id):
                self._unended.discard(job_id)
        for done_job, outcome in finish_done():  # alerts sent for jobs that ended
            with contextlib.suppress(Exception):
                self.store.add_event(done_job, outcome)

    def _settle(self, job_id: str) -> bool:
        """A job whose thread ended: when it is still active and this watcher's (its
        following failed, and so did recording that: a store that failed), it is ended
        as a failed supervisor's job is. False while that cannot be written (tried again
        at the next beat): while the watcher runs, nothing else would see it lost."""
        from ferry.controller.jobs import end_crashed

        try:
            job = self.store.get_job(job_id)
            if not self._mine(job):
                return True
            why = RuntimeError("following it ended without recording its end")
            end_crashed(self.store, job_id, why)
            return not self._mine(self.store.get_job(job_id))
        except Exception:
            traceback.print_exc()
            return False

    @staticmethod
    def _mine(job: Job) -> bool:
        from ferry.procs import hostname

        return (
            job.status.is_active()
            and job.supervisor_pid == os.getpid()
            and job.supervisor_host == hostname()
        )

    def _admit_after(self, job_id: str) -> None:
        """Admit queued jobs into the room ``job_id`` held: jobs of its backend, which run
        elsewhere, followed here (one that does not would get a supervisor of its own)."""
        from ferry import supervisor
        from ferry.controller import schedule

        def take(job: Job) -> None:
            if follows(job):
                self._take(job.id)
            else:
                supervisor.start(job)

        try:
            schedule(self.store, self.store.get_job(job_id).backend, start=take)
        except Exception:
            traceback.print_exc()

    def _beat(self) -> None:
        """The heartbeat of every job followed here, in one write."""
        if not self.jobs:
            return
        from ferry.procs import hostname

        try:
            self.store.beat(list(self.jobs), os.getpid(), hostname(), time.time())
        except Exception:  # (a store failing now fails the jobs' own writes too)
            traceback.print_exc()


_MAX_JOBS = 2000  # jobs one watcher follows at most; more go to another


def _capacity() -> int:
    """How many jobs this watcher can follow: each holds about four descriptors (its wake
    pipe, its wait, a connection now and then)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, min(_MAX_JOBS, (soft - 64) // 4))


def _more_descriptors() -> None:
    """Raise this process's soft limit on open files to its hard limit (up to what
    ``_MAX_JOBS`` needs)."""
    import resource

    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 64 + 4 * _MAX_JOBS
        if soft < want:
            limit = want if hard == resource.RLIM_INFINITY else min(hard, want)
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, limit), hard))


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, OSError):
        os.read(fd, 4096)


def _crashed(job_id: str, exc: Exception) -> None:
    """A job's supervision failed: the traceback to its supervisor log as well as the
    watcher's, then the job is ended (its attempt elsewhere stopped)."""
    from ferry.controller.jobs import SUPERVISOR_LOG
    from ferry.supervisor import end_crashed

    text = traceback.format_exc()
    with contextlib.suppress(Exception):  # (a full disk: the job is still ended below)
        sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} following {job_id} failed:\n")
        sys.stderr.write(text)
    with contextlib.suppress(Exception):
        from ferry.store import open_store

        folder = Path(open_store().get_job(job_id).job_dir)
        with open(folder / SUPERVISOR_LOG, "a") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor failed:\n{text}")
    end_crashed(job_id, exc)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m ferry.watcher JOB_ID")
    sys.exit(run(sys.argv[1]))  # (its output goes to the log it was started with)
