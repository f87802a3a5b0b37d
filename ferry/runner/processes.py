"""An attempt's processes on one node: one process group per local rank, their output
teed line by line, with timestamps, into the attempt's log.

Each line is written as ``<UTC timestamp> <tag> <text>``: the tag is ``O`` (stdout) or
``E`` (stderr), followed by the process's rank when it is not rank 0 (``O1``, ``E3``), so
one log holds a whole gang and a reader can take one rank's lines.

Every process is started in a process group of its own with a parent-death signal: it
dies with the runner. The runner is a child subreaper, so what a process leaves behind
(a data loader worker that left the group) is found and ended too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ferry import defaults
from ferry.errors import FerryError
from ferry.procs import (
    SPAWN_LOCK,
    kill_descendants,
    reap_children,
    rss_bytes,
    spare,
    unspare,
)
from ferry.runner.spawn import Timestamps, check_executable, spawn

# A line without a newline is written out after this long, so prompts and progress show.
PARTIAL_FLUSH = 0.5
# After the processes exit, output still buffered in pipes is read for at most this long.
DRAIN_TIMEOUT = 2.0


def tag(stream: str, rank: int) -> bytes:
    """The log tag of ``stream`` ("O" or "E") for ``rank``."""
    return (stream + (str(rank) if rank else "")).encode()


@dataclass
class Member:
    """One rank's process (the leader of its process group)."""

    rank: int
    proc: subprocess.Popen[bytes]
    pidfd: int | None = None
    code: int | None = None  # once its main process has ended and been reaped
    ended_at: float | None = None  # (wall clock) when it was reaped
    tail: list[str] = field(default_factory=list)  # its last lines, for a failure reason

    @property
    def pid(self) -> int:
        return self.proc.pid

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


class Processes:
    """The processes of one node of an attempt, started together. ``write`` takes the
    log's bytes (a file, or the run folder's log stream)."""

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        envs: Sequence[tuple[int, dict[str, str]]],
        write: Callable[[bytes], None],
    ) -> None:
        """Start ``argv`` once for each (rank, environment) of ``envs``; raise FerryError
        when it cannot start (what started is ended first)."""
        check_executable(argv[0], envs[0][1], cwd)
        self._write = write
        self._stamps = Timestamps()
        self._selector = selectors.DefaultSelector()
        self._streams: dict[int, tuple[Member, bytes]] = {}  # fd -> (member, tag)
        self._pidfds: dict[int, Member] = {}
        self._partial: dict[int, tuple[bytes, float]] = {}
        self.members: list[Member] = []
        self.killed = False  # whether they were sent SIGKILL (not just the notice)
        # what the ended members used (with what they waited for): CPU seconds, and the
        # peak resident memory of the largest
        self.cpu_seconds = 0.0
        self.peak_rss = 0.0
        try:
            for rank, env in envs:
                self._start(rank, argv, cwd, env)
        except BaseException:
            self.kill()
            self.finish()
            raise

    def _start(self, rank: int, argv: list[str], cwd: str, env: dict[str, str]) -> None:
        options: dict[str, Any] = {
            "cwd": cwd,
            "env": env,
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "close_fds": True,
        }
        with SPAWN_LOCK:  # spared until its own status is taken: reaping orphans skips it
            try:
                proc = spawn(argv, options)
            except OSError as exc:
                hint = "check the command and its environment"
                if exc.errno == errno.E2BIG:
                    hint = "the command line and environment are too large; pass data in files"
                raise FerryError(f"cannot start the command: {exc.strerror}", hint) from None
            spare(proc.pid)
        member = Member(rank, proc)
        self.members.append(member)
        assert proc.stdout is not None and proc.stderr is not None
        for stream, pipe in (("O", proc.stdout), ("E", proc.stderr)):
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            self._streams[fd] = (member, tag(stream, rank))
            self._selector.register(fd, selectors.EVENT_READ)
        # a pidfd becomes readable when the process exits: no polling for its end
        with contextlib.suppress(OSError, AttributeError):
            member.pidfd = os.pidfd_open(proc.pid)
            self._pidfds[member.pidfd] = member
            self._selector.register(member.pidfd, selectors.EVENT_READ)

    # -- output ----------------------------------------------------------------------------

    def _emit(self, fd: int, lines: Sequence[bytes]) -> None:
        member, label = self._streams[fd]
        stamp = self._stamps.now()
        self._write(b"".join(stamp + b" " + label + b" " + line + b"\n" for line in lines))
        keep = defaults.REASON_LOG_LINES
        member.tail.extend(line.decode("utf-8", "replace") for line in lines[-keep:])
        del member.tail[:-keep]

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:  # end of stream
            pending, _ = self._partial.pop(fd, (b"", 0.0))
            if pending:
                self._emit(fd, [pending])
            self._selector.unregister(fd)
            return
        pending, since = self._partial.get(fd, (b"", 0.0))
        data = (pending + chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = data.split(b"\n")
        if lines:
            self._emit(fd, lines)
        if rest:
            self._partial[fd] = (rest, since if pending and not lines else time.monotonic())
        else:
            self._partial.pop(fd, None)

    def _flush_partials(self, force: bool = False) -> None:
        now = time.monotonic()
        for fd, (pending, since) in list(self._partial.items()):
            if force or now - since >= PARTIAL_FLUSH:
                self._emit(fd, [pending])
                del self._partial[fd]

    def _open_streams(self) -> list[int]:
        registered = self._selector.get_map()
        return [fd for fd in self._streams if fd in registered]

    # -- life ------------------------------------------------------------------------------

    def running(self) -> list[Member]:
        """The members whose main process has not ended."""
        return [m for m in self.members if m.code is None]

    def pump(self, timeout: float, wake_fds: tuple[int, ...] = ()) -> list[Member]:
        """Move output to the log for up to ``timeout`` seconds, or until a member ends,
        one of ``wake_fds`` becomes readable, or every member has ended and closed its
        output.
        Returns the members that ended meanwhile (reaped, with their codes; what they left
        in their groups has been sent SIGTERM)."""
        deadline = time.monotonic() + timeout
        for fd in wake_fds:
            self._selector.register(fd, selectors.EVENT_READ)
        try:
            while True:
                ended = self._reap()
                remaining = deadline - time.monotonic()
                if ended or remaining <= 0 or not (self._open_streams() or self.running()):
                    return ended  # (the last: nothing left to wait for)
                if self._partial:
                    remaining = min(remaining, PARTIAL_FLUSH)
                if any(m.pidfd is None for m in self.running()):
                    remaining = min(remaining, 0.01)  # no pidfd (old kernel): poll
                woke = False
                for key, _ in self._selector.select(max(0.0, remaining)):
                    if key.fd in wake_fds:
                        woke = True
                    elif key.fd in self._pidfds:
                        self._selector.unregister(key.fd)
                    else:
                        self._read(key.fd)
                self._flush_partials()
                if woke:
                    return self._reap()
        finally:
            for fd in wake_fds:
                self._selector.unregister(fd)

    def _reap(self) -> list[Member]:
        ended = []
        for member in self.running():
            try:
                pid, status, usage = os.wait4(member.pid, os.WNOHANG)
            except ChildProcessError:  # (taken already: the code Popen kept, if any)
                pid, status, usage = member.pid, None, None
                if member.proc.returncode is None:
                    member.proc.returncode = -signal.SIGKILL
            if pid == 0:
                continue
            if status is not None:
                member.proc.returncode = os.waitstatus_to_exitcode(status)
            code = member.proc.returncode
            member.code = code if code is not None else -signal.SIGKILL
            member.ended_at = time.time()
            if usage is not None:
                self.cpu_seconds += usage.ru_utime + usage.ru_stime
                self.peak_rss = max(self.peak_rss, rss_bytes(usage.ru_maxrss))
            unspare(member.pid)
            if member.pidfd is not None:
                self._pidfds.pop(member.pidfd, None)
                with contextlib.suppress(KeyError):
                    self._selector.unregister(member.pidfd)
                os.close(member.pidfd)
                member.pidfd = None
            member.signal_group(signal.SIGTERM)  # what its main process left in its group
            ended.append(member)
        if ended:  # orphans that were re-parented here (members are spared); the rest
            reap_children()  # are reaped in finish()
        return ended

    def stop(self) -> None:
        """The notice: SIGTERM to every member's whole group."""
        for member in self.members:
            member.signal_group(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to every member's whole group. (Descendants that left their groups are
        killed in :meth:`finish`, once the members have been reaped: reaping here could
        take a member's exit status from it.)"""
        self.killed = True
        for member in self.members:
            member.signal_group(signal.SIGKILL)

    def finish(self) -> None:
        """Every member has ended (or was killed): read their last output for a moment,
        end what they left behind, and close the pipes."""
        while self.running():
            self.pump(1.0)
        end = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < end:
            if self._open_streams():
                self.pump(min(0.05, end - time.monotonic()))
            else:
                reap_children()
                if not any(m.group_alive() for m in self.members):
                    break
                time.sleep(0.01)
        if self._open_streams() or any(m.group_alive() for m in self.members):
            for member in self.members:
                member.signal_group(signal.SIGKILL)
            kill_descendants()
            end = time.monotonic() + DRAIN_TIMEOUT
            while self._open_streams() and time.monotonic() < end:
                self.pump(min(0.05, end - time.monotonic()))
        self._flush_partials(force=True)
        kill_descendants()
        for fd in self._open_streams():
            self._selector.unregister(fd)
        self._selector.close()
        for member in self.members:
            for pipe in (member.proc.stdout, member.proc.stderr):
                if pipe is not None:
                    pipe.close()
