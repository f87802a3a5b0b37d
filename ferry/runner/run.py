"""The runner's body: one node's share of one attempt, from its run order to its end.

It starts the command once per local rank (a gang: :mod:`ferry.runner.gang` says what each
process is told), tees their output into the log, beats in ``state.json``, and ends the
attempt as the job's machine sees it:

- SIGTERM (or SIGINT) to the runner is the stop notice: every rank's process group gets
  SIGTERM, and SIGKILL once the order's grace has passed;
- a rank that fails stops the others the same way, and the reason names that rank and
  its last lines;
- when every rank has ended, ``state.json`` records the exit code (the first failing
  rank's, else 0), the reason, and the CPU time and peak memory the processes used.

The runner never reads the job store, and exits 0 once it has recorded the end (the
attempt's own code is in the record).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ferry import defaults
from ferry.errors import FerryError
from ferry.procs import RUNNER_NAME, name_this_process
from ferry.runner.gang import Gang
from ferry.runner.order import RunOrder
from ferry.runner.processes import Member, Processes
from ferry.runner.record import RUNNING, STARTING, STOPPED, RunFolderWriter, RunState
from ferry.runner.spawn import become_subreaper
from ferry.status import describe_exit

EXITED = "exited"  # the outcome of an attempt whose processes ran and ended
NOT_STARTED = "not_started"  # the command could not be started (the reason says why)


@dataclass
class _Notice:
    """The stop notice: a signal to the runner, or ``stop`` from the supervisor that
    hands it orders (``channel``)."""

    read_fd: int
    asked: int = 0  # the signal that brought it (SIGTERM for a ``stop``)
    channel: _Lines | None = None

    def fds(self) -> tuple[int, ...]:
        """What to wait on for it."""
        if self.channel is None or self.channel.closed:
            return (self.read_fd,)
        return (self.read_fd, self.channel.fd)

    def take(self) -> None:
        """Take what came: signals, and lines from the channel (whose end, the supervisor
        gone, is a notice too)."""
        self.drain()
        if self.channel is not None and not self.channel.closed:
            lines = self.channel.ready()
            if b"stop" in (line.strip() for line in lines) or self.channel.closed:
                self.asked = self.asked or signal.SIGTERM

    @classmethod
    def install(cls) -> _Notice:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        notice = cls(read_fd)

        def on_notice(signum: int, frame: object) -> None:
            notice.asked = notice.asked or signum

        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, on_notice)
        signal.signal(signal.SIGINT, on_notice)
        # handlers rather than SIG_IGN, which would stay ignored in the job after exec
        for other in (signal.SIGHUP, signal.SIGUSR1):
            signal.signal(other, lambda signum, frame: None)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        return notice

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.read_fd, 4096)


class _Lines:
    """Lines from a pipe or socket, read as they come (``ready``) or waited for (``next``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._buffer = b""
        self.closed = False  # the other end has closed

    def _fill(self) -> None:
        while not self.closed:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self.closed = True
            self._buffer += chunk

    def ready(self) -> list[bytes]:
        """The complete lines there now."""
        self._fill()
        *lines, self._buffer = self._buffer.split(b"\n")
        return lines

    def next(self) -> bytes | None:
        """The next line, waited for; None once the other end has closed."""
        import selectors

        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                if self.closed:
                    return None
                selector.select()
                self._fill()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line


def failure_reason(code: int, tail: list[str], killed: bool, rank: int | None = None) -> str:
    """A failed process in words: its exit, a guess at an unexplained SIGKILL, and its last
    lines; ``rank`` leads when the process was one of a gang."""
    reason = describe_exit(code)
    if code == -signal.SIGKILL and not killed:
        reason += " (out of memory?)"
    lines = [line.strip()[:200] for line in tail if line.strip()]
    if lines:
        reason += " (last log lines: " + " | ".join(lines[-defaults.REASON_LOG_LINES :]) + ")"
    return f"rank {rank}: {reason}" if rank is not None else reason


def free_port() -> int:
    """A TCP port nothing on this machine listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def rank_envs(order: RunOrder) -> list[tuple[int, dict[str, str]]]:
    """Each local process's (global rank, environment): the order's environment, plus the
    gang's variables when the attempt has more than one process."""
    if order.world_size == 1:
        return [(0, dict(order.env))]
    gang = Gang(
        tuple(order.hosts),
        order.procs_per_node,
        order.node_rank,
        order.master_port or free_port(),
        tuple(order.gpus),
    )
    envs = [
        (gang.rank(local), {**order.env, **gang.env(local)})
        for local in range(order.procs_per_node)
    ]
    if order.procs_per_node > 1 and "OMP_NUM_THREADS" not in order.job_env:
        # as torchrun: processes sharing a node, one thread each, unless the job's spec says
        # how many. A value the machine's environment holds is replaced: Ray sets its CPU
        # share there, and a rank must see the same on every backend
        for _, env in envs:
            env["OMP_NUM_THREADS"] = "1"
    return envs


def _log_writer(order: RunOrder, record: RunFolderWriter) -> tuple[Callable[[bytes], None], int]:
    """Where the log goes, and the descriptor to close at the end (-1: none)."""
    if order.log_file:
        fd = os.open(order.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return lambda data: _write_all(fd, data), fd
    if order.echo:
        return lambda data: _echoed(record, data), -1
    return lambda data: record.write("log", data), -1


def _echoed(record: RunFolderWriter, data: bytes) -> None:
    """The job's output to the run folder's log and to this process's stdout."""
    record.write("log", data)
    with contextlib.suppress(OSError):  # (a closed stdout costs the provider's copy only)
        _write_all(1, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def run(folder: str | Path, order: RunOrder) -> int:
    """Run ``order`` and record it in the run folder ``folder``; returns the runner's own
    exit code (0 once the end is recorded)."""
    name_this_process(RUNNER_NAME)
    become_subreaper()
    run_attempt(folder, order, _Notice.install())
    return 0


@dataclass
class _Answer:
    """The answer to one order: the end, told to the supervisor before it is written."""

    fd: int
    told: bool = False

    def tell(self, state: RunState) -> None:
        _write_all(self.fd, b"done " + state.to_json() + b"\n")
        self.told = True


def serve(orders_fd: int, replies_fd: int) -> int:
    """Run the orders that arrive on ``orders_fd``, one at a time, answering ``done`` on
    ``replies_fd`` once each end is recorded, until the pipe closes. This is how a
    supervisor keeps one runner for its attempts: no process to start for each of them.

    An order is one line of JSON: ``{"folder": …, "order": {…}}``, the order with its
    environment (handed over in memory, never written). The answer is ``done`` and the
    end's state (JSON) on one line, sent just before ``state.json`` is written with it;
    a bare ``done`` when the runner could not run or record it. While an attempt runs,
    the line ``stop`` is its notice (as SIGTERM is); one that comes between attempts was
    for the one that ended, and is dropped."""
    name_this_process(RUNNER_NAME)
    become_subreaper()
    notice = _Notice.install()
    notice.channel = orders = _Lines(orders_fd)
    while (line := orders.next()) is not None:
        if not line.strip() or line.strip() == b"stop":
            continue
        notice.asked = 0  # (a signal between attempts was for the one that ended)
        answer = _Answer(replies_fd)
        try:
            message = json.loads(line)
            folder = Path(message["folder"])
            order = RunOrder.from_fields(message["order"])
            run_attempt(folder, order, notice, answer.tell)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            print(f"ferry runner: an order it cannot read ({exc})", file=sys.stderr)
        except Exception:  # (a full disk): the controller finds no end recorded
            import traceback

            traceback.print_exc()
        if not answer.told:
            _write_all(replies_fd, b"done\n")
    return 0


def run_attempt(
    folder: str | Path,
    order: RunOrder,
    notice: _Notice,
    tell: Callable[[RunState], None] | None = None,
) -> None:
    """Run one order to its end, recorded last in ``folder`` (``tell`` hears it first).
    An order with a machine plan is made ready here first (inputs, checkpoints, the
    contract) and its outputs sent when it ends (:mod:`ferry.runner.machine`)."""
    record = RunFolderWriter(str(folder), order.attempt, durable=order.durable, announce=False)
    machine = None
    if order.machine is not None:
        from ferry.runner.machine import Prepared

        record.beat(STARTING)
        try:
            machine = Prepared(order, record)
        except Exception as exc:  # (a full disk, an input that is not there)
            why = f"the machine could not be made ready: {exc}"
            record.end(None, NOT_STARTED, why, tell=tell)
            return
        order = replace(order, cwd=machine.cwd, env=machine.env, gpus=list(machine.gpus))
    write, log_fd = _log_writer(order, record)
    try:
        procs = Processes(order.argv, order.cwd, rank_envs(order), write)
    except FerryError as exc:
        if log_fd >= 0:
            os.close(log_fd)
        if machine is not None:
            machine.finish()
        record.end(None, NOT_STARTED, str(exc), tell=tell)
        return
    try:
        pids = [m.pid for m in procs.members]
        record.beat(RUNNING, pids=pids)
        failed, unprompted = _watch(
            procs, order, notice, record, pids, machine.tick if machine else None
        )
    except BaseException:  # (a full disk): nothing is left running for the next attempt
        procs.kill()
        if machine is not None:
            machine.discard()
        raise
    finally:
        procs.finish()
        if log_fd >= 0:
            os.close(log_fd)
    code = failed.code if failed is not None else 0
    reason = None
    if failed is not None and failed.code:
        rank = failed.rank if order.world_size > 1 else None
        reason = failure_reason(failed.code, failed.tail, procs.killed, rank)
    said = None
    if machine is not None:
        said = machine.failure()
        machine.finish()
    record.end(
        code,
        EXITED,
        reason,
        tell,
        cpu_seconds=procs.cpu_seconds,
        peak_rss=procs.peak_rss,
        said=said,
        failed_at=failed.ended_at if failed is not None and unprompted else None,
    )


def _watch(
    procs: Processes,
    order: RunOrder,
    notice: _Notice,
    record: RunFolderWriter,
    pids: list[int],
    tick: Callable[[], None] | None = None,
) -> tuple[Member | None, bool]:
    """Until every process has ended: deliver the notice, stop the gang when a rank fails,
    kill after the grace, beat. Returns the first member that failed, if any, and whether
    it failed of itself (before any notice)."""
    failed: Member | None = None
    unprompted = False
    kill_at: float | None = None
    next_beat = time.monotonic() + defaults.HEARTBEAT_INTERVAL
    gang = order.world_size > 1
    while procs.running():
        now = time.monotonic()
        timeout = next_beat - now
        if kill_at is not None and not procs.killed:
            timeout = min(timeout, kill_at - now)
        ended = procs.pump(max(0.0, timeout), notice.fds())
        notice.take()
        now = time.monotonic()
        if notice.asked and kill_at is None:
            name = signal.Signals(notice.asked).name
            record.event(
                f"notice ({name}): SIGTERM to {len(procs.members)} process groups, "
                f"SIGKILL after {order.grace:g}s"
            )
            procs.stop()
            kill_at = now + order.grace
        for member in ended:
            if member.code and failed is None:
                failed = member
                unprompted = not notice.asked
                if gang and kill_at is None and procs.running():
                    record.event(
                        f"rank {member.rank} failed ({describe_exit(member.code)}): stopping "
                        f"the other ranks, SIGKILL after {order.grace:g}s"
                    )
                    procs.stop()
                    kill_at = now + order.grace
        if kill_at is not None and now >= kill_at and not procs.killed and procs.running():
            record.event("the grace period is over: SIGKILL")
            procs.kill()
        if now >= next_beat:
            if tick is not None:
                tick()
            record.beat(RUNNING, pids=pids)
            next_beat = now + defaults.HEARTBEAT_INTERVAL
            told = record.remote or len(order.hosts) > 1  # (a gang's node 0 tells its nodes)
            if told and not notice.asked and record.stopped():
                # a cloud's own stop may come late or be abrupt: the controller's word in
                # the bucket is the notice, with the whole grace to save and send
                notice.asked = signal.SIGTERM
                next_beat = now
    return failed, unprompted


def main(argv: list[str] | None = None) -> int:
    """``python -m ferry.runner RUN_FOLDER``: run the order in a run folder on this machine.
    (``--serve ORDERS_FD REPLIES_FD``: a supervisor's runner, see :func:`serve`.)"""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 3 and args[0] == "--serve" and args[1].isdigit() and args[2].isdigit():
        return serve(int(args[1]), int(args[2]))
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m ferry.runner RUN_FOLDER", file=sys.stderr)
        return 2
    folder = args[0]
    order = take_order(folder, "ferry runner")
    if order is None:
        return 2
    return run(folder, order) if order.argv else 0


def take_order(folder: str, who: str) -> RunOrder | None:
    """The order in ``folder`` with the secrets left beside it; None (said on stderr)
    when there is none to read. An attempt stopped before this process started (placed
    late by its platform) is recorded as not started, and its order comes back with no
    command."""
    try:
        order = RunOrder.read(folder)
        order, stopped = _handed_over(folder, order)
    except FerryError as exc:
        print(f"{who}: {exc}", file=sys.stderr)
        return None
    if stopped:
        record = RunFolderWriter(folder, order.attempt, announce=False)
        record.end(None, NOT_STARTED, "stopped before it started")
        return replace(order, argv=[])
    return order


SECRETS = "secrets.json"  # in a run folder on the controller's machine: the job's secrets


def _handed_over(folder: str, order: RunOrder) -> tuple[RunOrder, bool]:
    """The order with the secrets the controller left in the run folder (a private
    folder of its own machine, or the job's bucket; the file is removed once read), and
    whether the attempt was stopped before this runner started."""
    from ferry.runner.record import _Place

    place = _Place(folder)
    if place.get(STOPPED) is not None:
        with contextlib.suppress(FerryError, OSError):  # (never to be read)
            place.remove(SECRETS)
        return order, True
    data = place.get(SECRETS)
    if data is None:
        return order, False
    with contextlib.suppress(FerryError, OSError):  # read once: gone from the folder (or bucket)
        place.remove(SECRETS)
    try:
        secrets = json.loads(data)
    except ValueError as exc:
        raise FerryError(f"{SECRETS} in {folder} is not JSON ({exc})", "submit again") from None
    os.environ.update(secrets)  # the runner reaches the job's bucket with them too
    return replace(order, env={**order.env, **secrets}), False
