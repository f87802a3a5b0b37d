"""The local backend: attempts run on this machine, each under a runner process.

The supervisor (one detached process per job) keeps a runner (:mod:`ferry.runner`) as its
child and hands it each attempt's order; the runner starts the command (or the gang), tees
its output into the attempt's log, delivers the stop notice, and records the attempt in
its run folder (``<job folder>/runs/<attempt>``), telling the supervisor the end as it
does. Both die with their parent (a parent-death signal), and both are child subreapers,
so nothing the job started outlives it untracked.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ferry import config, defaults
from ferry.backends.base import (
    Backend,
    Exit,
    LaunchRequest,
    RunningAttempt,
    event_messages,
    exit_of,
)
from ferry.backends.local_inventory import Inventory, local_inventory
from ferry.errors import DoesNotFit, FerryError, SpecError
from ferry.procs import close_fds_except, kill_descendants
from ferry.runner.spawn import check_executable, die_with_parent, forget_subreaper, spawn
from ferry.store.records import Allocation, Job
from ferry.units import format_size

if TYPE_CHECKING:
    from ferry.runner.order import RunOrder
    from ferry.runner.record import RunFolderReader
    from ferry.spec import JobSpec


class LocalRun(RunningAttempt):
    """An attempt on this machine, run by this process's runner (:class:`_Runner`), and
    the run folder the runner records it in."""

    def __init__(self, request: LaunchRequest) -> None:
        from ferry.runner.order import RunOrder
        from ferry.runner.record import RunFolderReader

        # refused here as before launching: the same check the runner makes, without
        # sending it a command that is not there
        check_executable(request.argv[0], request.env, request.cwd)
        self.folder = Path(request.run_folder)
        order = RunOrder(
            attempt=request.attempt,
            argv=request.argv,
            cwd=request.cwd,
            env=request.env,
            grace=request.grace,
            log_file=request.log_path,
            procs_per_node=request.procs_per_node,
            gpus=list(request.job.allocation.gpus),
            durable=False,  # the store is the truth here; state.json needs no sync
            job_env=sorted(request.job.plan.env),
        )
        try:  # (the order is handed over in memory: no order.json to write)
            self._runner = _Runner.send(self.folder, order)
        except OSError as exc:
            hint = "check the job's folder and this machine's limits"
            raise FerryError(f"cannot start the attempt's runner: {exc}", hint) from None
        self.pid: int = self._runner.pid
        self.handle = str(self.pid)
        self._reader = RunFolderReader(str(self.folder))
        self._exit: Exit | None = None

    def fileno(self) -> int | None:
        return self._runner.replies if self._exit is None else None

    def poll(self) -> Exit | None:
        if self._exit is None:
            ended = self._runner.ended()
            if ended is not None:
                self._exit = _exit_from(self._reader, *ended)
        return self._exit

    def events(self) -> list[str]:
        return event_messages(self._reader)

    def stop(self) -> None:
        if self.poll() is None:  # the notice, for this attempt (not one sent after it)
            self._runner.tell(b"stop\n")

    def kill(self) -> None:
        if self.poll() is None:
            self._runner.signal(signal.SIGKILL)  # its processes die with it (parent-death)


class _Runner:
    """This process's runner: a child that runs its attempts one at a time (an order
    down a socket, ``done`` and the end's state back up a pipe), started at the first
    attempt and again after it died. Forked when this process has one thread (a
    millisecond, once), else ``python -m ferry.runner --serve``. It dies with this
    process, and its attempts' processes die with it."""

    _current: _Runner | None = None

    def __init__(self) -> None:
        import socket

        from ferry.procs import SPAWN_LOCK, spare

        self.owner = os.getpid()  # a process forked from it (a supervisor) has none yet
        # a socket, not a pipe: a send to a runner that died fails instead of raising
        # SIGPIPE (which ends a supervisor)
        self.orders, theirs = socket.socketpair()
        orders_read = theirs.detach()
        self.replies, replies_write = os.pipe()
        os.set_blocking(self.replies, False)
        self._answer = b""
        self._proc: subprocess.Popen[bytes] | None = None
        self.dead: int | None = None  # its exit status, once it has ended
        try:
            if threading.active_count() == 1 and hasattr(os, "fork"):
                # (no other thread here to reap it before it is spared; and no lock held
                # across the fork, which the child would inherit held)
                self.pid = _fork_runner(orders_read, replies_write)
                spare(self.pid)  # not one of an attempt's processes, to kill or reap
            else:
                command = [sys.executable, "-m", "ferry.runner", "--serve"]
                with SPAWN_LOCK:
                    self._proc = spawn(
                        [*command, str(orders_read), str(replies_write)],
                        {"stdin": subprocess.DEVNULL, "pass_fds": (orders_read, replies_write)},
                    )
                    self.pid = self._proc.pid
                    spare(self.pid)
        except BaseException:
            self.orders.close()
            os.close(self.replies)
            raise
        finally:
            os.close(orders_read)
            os.close(replies_write)

    @classmethod
    def send(cls, folder: Path, order: RunOrder) -> _Runner:
        """Hand ``order`` to this process's runner (started now when there is none)."""
        import json

        message = json.dumps({"folder": str(folder), "order": order.fields()}).encode() + b"\n"
        runner = cls._current
        if runner is not None and runner.owner != os.getpid():
            # inherited by a fork: the parent's, whose descriptor numbers may now be this
            # process's other files; let go of the socket without closing anything
            runner.orders.detach()
            runner = None
        if runner is None or runner.dead is not None:
            runner = cls._current = cls()
        if not runner.tell(message):  # it died since its last attempt: a new one
            runner.ended()  # (reaps it)
            runner.close()
            runner = cls._current = cls()
            if not runner.tell(message):
                raise OSError("the runner ended as it started")
        return runner

    @classmethod
    def end_current(cls) -> None:
        """Kill this process's runner, and what it runs (a supervisor that failed)."""
        runner = cls._current
        if runner is not None and runner.owner == os.getpid() and runner.dead is None:
            runner.signal(signal.SIGKILL)
            runner._reap()

    def tell(self, message: bytes) -> bool:
        """Send ``message``; False when the runner is gone."""
        import socket

        try:
            self.orders.sendall(message, socket.MSG_NOSIGNAL)
        except OSError:
            return False
        return True

    def ended(self) -> tuple[int, bytes] | None:
        """None while the attempt it was sent runs; once it has ended, (0, the end's
        state as JSON, or nothing when it could not record it), or (the runner's exit
        status, nothing) when the runner itself ended (killed) before answering."""
        while True:
            try:
                chunk = os.read(self.replies, 1 << 16)
            except BlockingIOError:
                return None
            except OSError:  # (closed here: it was reaped)
                chunk = b""
            if not chunk:
                break
            self._answer += chunk
            if self._answer.endswith(b"\n"):
                answer, self._answer = self._answer, b""
                return 0, answer.removeprefix(b"done").strip()
        self._reap()  # end of the pipe: the runner is gone
        assert self.dead is not None
        return self.dead, b""

    def _reap(self) -> None:
        from ferry.procs import unspare

        if self.owner == os.getpid() and self.orders.fileno() >= 0:
            if self._proc is not None:
                self.dead = self._proc.wait()
            else:
                try:
                    self.dead = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
                except ChildProcessError:
                    self.dead = -signal.SIGKILL
            unspare(self.pid)
            self.close()
            kill_descendants()  # what a killed runner left, re-parented to this process

    def signal(self, sig: int) -> None:
        if self.dead is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def close(self) -> None:
        self.orders.close()
        with contextlib.suppress(OSError):
            os.close(self.replies)
        self.replies = -1
        if self.dead is None:
            self.dead = -signal.SIGKILL


def end_runner() -> None:
    """Kill this process's runner and what it runs: a supervisor that failed, or one whose
    job ended and whose runner holds what it must not keep (see ferry.held_secrets); the
    next attempt starts a fresh one."""
    _Runner.end_current()


def _fork_runner(orders: int, replies: int) -> int:
    """Fork the runner; in the child, serve the orders and never return."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        # what it inherited is never collected: the collector would walk (and copy, page
        # by page) the supervisor's objects at every full collection
        gc.freeze()
        die_with_parent()
        if os.getppid() != parent:  # this process died before prctl took effect
            os._exit(137)
        os.setpgid(0, 0)  # signals to the supervisor's group are not the job's
        forget_subreaper()  # (the runner becomes one of its own)
        close_fds_except(orders, replies)  # the standard streams and its two channels stay
        from ferry.runner.run import serve

        code = serve(orders, replies)
    except BaseException:
        import traceback

        with contextlib.suppress(BaseException):
            traceback.print_exc()
    os._exit(code)


def _exit_from(reader: RunFolderReader, runner_code: int, told: bytes) -> Exit:
    """How the attempt ended: as the runner ``told`` (the end's state), else as its run
    folder says (the runner that recorded it has ended with ``runner_code``)."""
    from ferry.runner.record import RunFolderError, RunState
    from ferry.status import describe_exit

    try:
        state = RunState.from_json(told, "the runner's answer") if told else reader.state()
    except RunFolderError:
        state = None
    if state is None or not state.ended:
        if runner_code == 0:  # (it said so on its standard error, in supervisor.log)
            return Exit(Exit.LOST, None, "its runner could not record the attempt's end")
        how = describe_exit(runner_code)
        return Exit(Exit.LOST, None, f"its runner ended ({how}) before recording the end")
    return exit_of(state)


class LocalBackend(Backend):
    """Runs attempts on this machine, sharing its CPUs, memory and GPUs between jobs."""

    name = "local"
    # buckets in and out; spot, TPUs and multi-node come with later backends
    features = frozenset(
        {
            "inputs.remote",
            "inputs.stream",
            "outputs.remote",
            "paths.container",
            "environment.requirements",
        }
    )

    @property
    def inventory(self) -> Inventory:
        """This machine's resources (cached until the config changes)."""
        return local_inventory()

    def price(self, job: Job) -> float:
        """``local.price_hour``: what this machine costs, if the user says (0 by default)."""
        return float(config.get("local.price_hour"))

    def default_grace(self) -> float:
        """``local.stop_grace`` (30 s by default)."""
        return float(config.get("local.stop_grace"))

    def _check(self, spec: JobSpec) -> None:
        if spec.command and not spec.shell:
            # as the job will see it: PATH led by this interpreter's folder, in the snapshot
            path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
            try:
                check_executable(spec.command[0], {"PATH": path}, spec.code)
            except FerryError as exc:
                raise SpecError(exc.message, exc.hint) from None
        inv = self.inventory
        res = spec.resources
        acc = res.accelerator_request
        problems = []
        if res.cpus and res.cpus > inv.cpus:
            problems.append(f"{res.cpus:g} CPUs")
        if res.memory and res.memory > inv.memory:
            problems.append(f"{format_size(res.memory)} memory")
        if acc and acc.count > inv.gpus:
            problems.append(f"{acc.count} GPU{'s' if acc.count != 1 else ''}")
        if problems:
            fix = "ask for less in resources"
            if acc and acc.count > inv.gpus:
                fix += ", or declare GPUs with: ferry config set local.gpus N"
            raise DoesNotFit(
                f"the job asks for {' and '.join(problems)}, but this machine has {inv.describe()}",
                fix,
            )
        if acc and inv.gpu_type and acc.name != inv.gpu_type:
            raise DoesNotFit(
                f"the job asks for {acc.name} GPUs, but this machine has {inv.gpu_type}",
                f"ask for {inv.gpu_type}:{acc.count}, or run on a cloud backend",
            )

    def needs(self, job: Job) -> Allocation:
        """What the job takes from the inventory while it runs."""
        res = job.plan.resources
        cpus = res.cpus or min(defaults.DEFAULT_CPUS, self.inventory.cpus)
        acc = res.accelerator
        gpus = 0
        if acc:
            from ferry.accelerators import parse_accelerator

            gpus = parse_accelerator(acc).count
        return Allocation(cpus=float(cpus), memory=res.memory or 0, gpus=tuple(range(gpus)))

    def never_fits(self, need: Allocation) -> bool:
        """Whether a job needing ``need`` could not run here even on an idle machine."""
        inv = self.inventory
        return need.cpus > inv.cpus or need.memory > inv.memory or len(need.gpus) > inv.gpus

    def admit(self, queued: Sequence[Job], active: Sequence[Job]) -> list[tuple[str, Allocation]]:
        """FIFO with reservation: a job that does not fit yet holds back what it needs from
        the jobs behind it, so small jobs fill idle room but never starve a large one."""
        inv = self.inventory
        cpus = inv.cpus - sum(j.allocation.cpus for j in active)
        memory = inv.memory - sum(j.allocation.memory for j in active)
        used = {i for j in active for i in j.allocation.gpus}
        free_gpus = [i for i in range(inv.gpus) if i not in used]
        chosen: list[tuple[str, Allocation]] = []
        for job in queued:
            if cpus <= 1e-9:  # every job needs some CPU: nothing further can start
                break
            need = self.needs(job)
            n_gpus = len(need.gpus)
            if self.never_fits(need):
                continue  # the config changed since it was submitted: it holds nothing back
            if need.cpus <= cpus + 1e-9 and need.memory <= memory and n_gpus <= len(free_gpus):
                gpus, free_gpus = free_gpus[:n_gpus], free_gpus[n_gpus:]
                chosen.append((job.id, Allocation(need.cpus, need.memory, tuple(gpus))))
            else:
                free_gpus = free_gpus[n_gpus:]
            cpus -= need.cpus
            memory -= need.memory
        return chosen

    def launch(self, request: LaunchRequest) -> LocalRun:
        return LocalRun(request)

    def cancel(self, job: Job, attempt: int, handle: str | None) -> None:
        """SIGKILL the process groups of the attempt's processes, as its run folder records
        them: every process that stayed in them dies at once. (Its runner, the handle,
        serves its supervisor's attempts and dies with that supervisor.)"""
        from ferry.procs import kill_job_group
        from ferry.runner.record import RunFolderError, RunFolderReader

        with contextlib.suppress(RunFolderError, OSError):
            state = RunFolderReader(str(run_folder(job, attempt))).state()
            for pgid in state.pids if state is not None else []:
                kill_job_group(pgid, job.id)


RUNS = "runs"  # <job folder>/runs/<attempt>: the run folders of local attempts


def run_folder(job: Job, attempt: int) -> Path:
    """Where attempt ``attempt`` of ``job`` records itself on this machine."""
    return Path(job.job_dir) / RUNS / str(attempt)
