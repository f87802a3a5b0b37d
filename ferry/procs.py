"""Small process facts read straight from /proc (Linux), with psutil as the fallback, and
secrets blanked in this process's own environment block (:func:`blank_environment`).

These sit on the hot path of every job (start, end, liveness checks), where importing
psutil would cost more than the work itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Collection
from functools import cache


@cache
def boot_time() -> float:
    """When this machine started (epoch seconds), from /proc/stat."""
    with open("/proc/stat", "rb") as file:
        for line in file:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name, the state first (field 3
    of proc(5) at index 0). Raises OSError (FileNotFoundError once the process is gone)."""
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    return stat[stat.rindex(b")") + 2 :].split()


def start_time(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), or None if it does not exist."""
    try:
        fields = stat_fields(pid)
        if fields[0] == b"Z":  # a zombie has ended
            return None
        return boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError):  # no /proc here: ask psutil below
        ...
    try:
        import psutil

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except Exception:  # psutil.NoSuchProcess, AccessDenied
        return None


def children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    try:
        found: list[int] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                found += [int(c) for c in file.read().split()]
        return found
    except OSError:  # no /proc children files (an older kernel): ask psutil below
        ...
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children()]
    except Exception:
        return []


# The name supervisors give themselves (at most 15 characters, the kernel's limit), so that
# cleaning up after one job never kills the supervisor of another started from inside it.
SUPERVISOR_NAME = "ferry-supervise"


def name_this_process(name: str) -> None:
    """Set this process's name as ps and /proc/<pid>/comm show it (Linux)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as file:
        file.write(name[:15])


RUNNER_NAME = "ferry-runner"


def _named(pid: int, name: str) -> bool:
    """Whether process ``pid`` carries the name ``name`` (see :func:`name_this_process`)."""
    try:
        with open(f"/proc/{pid}/comm") as file:
            return file.read().strip() == name
    except OSError:
        return False


def is_runner(pid: int) -> bool:
    """Whether ``pid`` is a Ferry runner (a supervisor's, or one a backend started)."""
    return _named(pid, RUNNER_NAME)


def is_supervisor(pid: int) -> bool:
    """Whether ``pid`` is a Ferry supervisor."""
    return _named(pid, SUPERVISOR_NAME)


# Helpers the supervisor starts itself (an alert command, the MLflow tracker): not part of
# any job, so neither killed nor reaped by the cleanup below; whoever started one waits for
# it and then unspares it (until then its pid cannot be reused: it is not reaped).
_spared: set[int] = set()
SPAWN_LOCK = threading.Lock()  # held while starting a helper and while killing leftovers


def spare(pid: int) -> None:
    """Keep ``pid`` out of :func:`kill_descendants` and :func:`reap_children`; call while
    holding :data:`SPAWN_LOCK` since before the process was started."""
    _spared.add(pid)


def unspare(pid: int) -> None:
    _spared.discard(pid)


def kill_descendants() -> None:
    """SIGKILL every process below this one and reap them (this process is a subreaper, so
    that includes those that left the job's process group). Supervisors of other jobs, and
    what runs under them, are spared: a job may submit jobs of its own."""
    with SPAWN_LOCK:
        for _ in range(10):  # killed processes' orphans re-parent to us: repeat until none
            pending = [
                pid
                for pid in children(os.getpid())
                if pid not in _spared and not is_supervisor(pid)
            ]
            if not pending:
                break
            stack = list(pending)
            while stack:
                pid = stack.pop()
                stack += [c for c in children(pid) if not is_supervisor(c)]
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            for pid in pending:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)


def reap_children() -> None:
    """Collect every child that has exited (zombies still count as members of their group),
    except spared helpers, whose exit status belongs to whoever started them."""
    if _spared:
        for pid in children(os.getpid()):
            if pid not in _spared:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        return
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            continue


def hostname() -> str:
    """This machine's name (as ``socket.gethostname()``, without importing socket)."""
    return os.uname().nodename


def total_memory() -> int:
    """Physical memory of this machine in bytes."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        import psutil

        return int(psutil.virtual_memory().total)


def environ_of(pid: int) -> list[bytes]:
    """The environment entries of a process (``b'KEY=value'``), empty if unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            return file.read().split(b"\0")
    except OSError:
        return []


def blank_environment(names: Collection[str]) -> None:
    """Overwrite the entries for ``names`` in the environment block this process was
    started with: ``/proc/PID/environ`` (and so ``ps e``) shows that block to this user's
    other processes for as long as this one runs, and ``os.environ`` is only a copy of it,
    whose changes never reach it. Call once ``names`` are out of ``os.environ``: the C
    library then points at none of those entries. Linux only; elsewhere, or where the
    kernel refuses, nothing changes."""
    if not names:
        return
    try:
        fields = stat_fields(os.getpid())
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5))
        fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    except (OSError, ValueError, IndexError):
        return
    try:
        prefixes = tuple(os.fsencode(f"{name}=") for name in names)
        offset = start
        for entry in os.pread(fd, end - start, start).split(b"\0"):
            if entry.startswith(prefixes):
                os.pwrite(fd, bytes(len(entry)), offset)
            offset += len(entry) + 1
    except OSError:
        return
    finally:
        os.close(fd)


def max_fd() -> int:
    """One more than the highest descriptor this process has open."""
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 1024


def close_fds_except(*keep: int) -> None:
    """Close every descriptor above the standard streams but those in ``keep``."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max_fd())


def rss_bytes(maxrss: int) -> float:
    """``ru_maxrss`` in bytes (the kernel counts KiB on Linux, bytes on macOS)."""
    return float(maxrss * (1 if sys.platform == "darwin" else 1024))


def kill_job_group(pgid: int, job_id: str) -> None:
    """SIGKILL the process group ``pgid`` of job ``job_id``'s attempt, if it is still that.
    The group id is its leader's pid: while any member lives, Linux does not reuse it, and
    a live process that has that pid must carry the job's FERRY_JOB_ID to be killed."""
    marker = f"FERRY_JOB_ID={job_id}".encode()
    if start_time(pgid) is not None and marker not in environ_of(pgid):
        return
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
