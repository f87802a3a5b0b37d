"""Handing an admitted job to a supervisor that has nothing to do.

A supervisor whose job ended, and which found no queued job to go on with, waits
``local.linger`` (2 s by default) for a new one before it ends: it listens on
``FERRY_HOME/run/idle-<identity>-<pid>.sock``. A process about to start a supervisor for a
job it admitted (:func:`ferry.supervisor.start`) hands the job to such a
supervisor when there is one. When tiny jobs come one after another (a sweep, a script
submitting in a loop), that spares a process per job: the fork of a large process, the new
process's start and its end cost more than supervising a tiny job.

Only a supervisor that a fork of the handing process would be like takes the job: the same
Ferry installation, user, groups, priority, hard limits, control group and namespaces
(:func:`ferry.launcher.identity`), umask and CPU affinity, all of which the job's processes
inherit from their supervisor, and environment, secrets aside (a supervisor takes a job's
from the job, :mod:`ferry.held_secrets`). The folder is private and the peer's user is
checked.

The hand-over has two steps, so a job never has two supervisors: the supervisor answers
``ready`` to the job's id and takes the job only on the ``go`` that follows; a handing
process without an answer within :data:`REPLY_TIMEOUT_S` starts a supervisor of its own and
never says ``go``. At worst (a supervisor killed just after ``go``) a job has no supervisor
for a while, which the next command finds (``START_TIMEOUT``) and resumes, as it would a
forked supervisor killed before it started the job.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferry.storage.watch import FolderWatch

REPLY_TIMEOUT_S = 1.0  # an idle supervisor answers in microseconds; one that does not is stuck
GO_TIMEOUT_S = 10.0  # how long a supervisor that said ready waits for the go
_PREFIX = "idle-"
WATCHER = "watch-"  # the sockets of watchers (ferry.watcher), which take jobs elsewhere
# Unix sockets whose peer's user can be asked (Linux); elsewhere every job gets a new process
_USABLE = hasattr(socket, "AF_UNIX") and hasattr(socket, "SO_PEERCRED")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def waiting() -> bool:
    """Whether an idle supervisor like the one this process would start is waiting."""
    return bool(_idle())


def hand(job_id: str, kind: str = "idle-") -> bool:
    """Hand the admitted job ``job_id`` to a process of ``kind`` (an idle supervisor, or a
    watcher with ``WATCHER``) like the one this process would start; whether one took it."""
    return any(_offer(path, job_id) for path in _idle(kind))


def _idle(kind: str = "idle-") -> list[str]:
    """The sockets of the processes of ``kind`` like the one this process would start."""
    if not _USABLE:
        return []
    folder = _folder()
    try:
        names = os.listdir(folder)
    except OSError:  # (no folder yet: no idle supervisor)
        return []
    if not any(name.startswith(kind) for name in names):
        return []
    from ferry.launcher import private_folder

    prefix = f"{kind}{_identity()}-"
    found = [os.path.join(folder, name) for name in names if name.startswith(prefix)]
    return found if found and private_folder(folder) else []


def _offer(path: str, job_id: str) -> bool:
    from ferry.launcher import peer_is_me

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(REPLY_TIMEOUT_S)
        try:
            with _short(path) as short:
                conn.connect(short)
        except ConnectionRefusedError:  # its supervisor was killed before it could remove it
            with contextlib.suppress(OSError):
                os.unlink(path)
            return False
        if not peer_is_me(conn):
            return False
        conn.sendall(f"{job_id}\n".encode())
        if _line(conn) != "ready":
            return False
        conn.sendall(b"go\n")
        return True
    except OSError:  # gone, busy, or too slow: this process starts a supervisor itself
        return False
    finally:
        conn.close()


def wait_for_job(wake_fd: int, stopped: Callable[[], bool], seconds: float) -> str | None:
    """In a supervisor without a job: wait up to ``seconds`` for one handed over by
    :func:`hand`; its id, or None (time is up, or ``stopped()`` became true: the
    supervisor's signal pipe ``wake_fd`` wakes the wait)."""
    if seconds <= 0:
        return None
    desk = Desk(_PREFIX)
    if not desk.open():
        return None
    try:
        deadline = time.monotonic() + seconds
        while not stopped():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([desk.fileno(), wake_fd], [], [], left)
            if wake_fd in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_fd, 4096)
            if desk.fileno() in ready:
                job_id = desk.take(stopped)
                if job_id is not None:
                    return job_id
        return None
    except OSError:  # (a folder taken away: end as before)
        return None
    finally:
        desk.close()


class Desk:
    """Where a process takes the jobs :func:`hand` offers under ``kind`` (``idle-``: an
    idle supervisor; ``watch-``: a watcher of jobs elsewhere): a socket listening under
    the name the offering side looks for, from :meth:`open` to :meth:`close`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._listener: socket.socket | None = None
        self._path = ""

    def open(self) -> bool:
        """Start taking jobs; False where jobs cannot be handed over (not Linux, a Ferry
        whose files changed since it was imported, a folder that is not private)."""
        if not _USABLE or not _current():
            return False
        folder = _folder()
        # (unique: a process may open several, one for each watcher it forks)
        name = f"{self.kind}{_identity()}-{os.getpid()}-{os.urandom(4).hex()}.sock"
        self._path = os.path.join(folder, name)
        from ferry.launcher import private_folder

        # listening before it is found under its name (a submitter refused a connection
        # takes the name for a dead process's, and removes it)
        tmp = os.path.join(folder, f"tmp-{os.getpid()}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not private_folder(folder):
                listener.close()
                return False
            with contextlib.suppress(FileNotFoundError):  # left by a killed process of this pid
                os.unlink(tmp)
            with _short(tmp) as short:
                listener.bind(short)
            listener.listen(16)
            os.replace(tmp, self._path)
        except OSError:  # (no room for the socket, a folder taken away)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            listener.close()
            return False
        self._listener = listener
        return True

    def fileno(self) -> int:
        """The listening socket, readable when a job is offered (-1 when not open)."""
        return self._listener.fileno() if self._listener is not None else -1

    def take(self, stopped: Callable[[], bool]) -> str | None:
        """The job offered now, taken; None when there is none or it is declined."""
        if self._listener is None:
            return None
        try:
            self._listener.settimeout(0)
            conn, _ = self._listener.accept()
        except OSError:  # (the offering side gave up already)
            return None
        with conn:
            return _take(conn, stopped)

    def leave(self) -> None:
        """Close this process's descriptor only: the socket, under its name, is a forked
        process's now."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def close(self) -> None:
        """Take no more jobs: whoever offers one from now on starts a process of its own."""
        if self._listener is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._path)
        self._listener.close()
        self._listener = None


def _take(conn: socket.socket, stopped: Callable[[], bool]) -> str | None:
    """The job offered on ``conn``, taken; None when it is not (this supervisor was told to
    stop, or runs Ferry files that have changed since: the offer is declined at once, and
    the other process starts a supervisor of its own)."""
    from ferry.launcher import peer_is_me

    try:
        conn.settimeout(GO_TIMEOUT_S)
        if not peer_is_me(conn):
            return None
        job_id = _line(conn)
        if not _JOB_ID.fullmatch(job_id):
            return None
        if stopped() or not _current():
            conn.sendall(b"no\n")
            return None
        conn.sendall(b"ready\n")
        return job_id if _line(conn) == "go" else None
    except OSError:
        return None


_own: dict[str, tuple[int, int]] | None = None  # Ferry's files this process runs, as loaded
_watching: FolderWatch | None = None  # the kernel's watch on their folders, where there is one


def _current() -> bool:
    """Whether the Ferry this process runs is what is installed: none of its files changed
    since Ferry was imported (an upgrade, an edit of a checkout), as the launcher checks.
    Once the files were looked at, the kernel's watch on their folders says so (a
    supervisor asks at every job handed to it); without one, each file is looked at."""
    global _own, _watching
    if _own is not None:
        if _watching is not None and _watching.quiet():
            return True
        from ferry.launcher import files_changed

        return not files_changed(_own)
    import sys

    import ferry
    from ferry.storage.watch import watch

    package = os.path.dirname(os.path.abspath(ferry.__file__)) + os.sep
    since = ferry._imported_ns - 50_000_000  # (file times lag the clock by up to a tick)
    loaded = [
        path
        for module in list(sys.modules.values())
        if isinstance(path := getattr(module, "__file__", None), str) and path.startswith(package)
    ]
    folders = {os.path.dirname(path)[len(package) :] for path in loaded} - {""}
    watching = watch(package[:-1], sorted(folders))  # (before the look: nothing slips by)
    own: dict[str, tuple[int, int]] = {}
    for path in loaded:
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is None or st.st_mtime_ns >= since:  # gone, or changed after it was imported
            if watching is not None:
                watching.close()
            return False
        own[path] = (st.st_mtime_ns, st.st_size)
    _own, _watching = own, watching
    return True


def _line(conn: socket.socket) -> str:
    """One line from ``conn`` (without its newline); what came before EOF otherwise."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(256 - len(data))
        if not chunk:
            break
        data += chunk
    return data.rstrip(b"\n").decode(errors="replace")


@contextlib.contextmanager
def _short(path: str) -> Iterator[str]:
    """``path`` as a Unix socket can take it (108 bytes at most, where FERRY_HOME may be
    deep): through the descriptor of its folder, on Linux."""
    if len(os.fsencode(path)) < 100 or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def _folder() -> str:
    from ferry.config import ferry_home
    from ferry.launcher import FOLDER

    return os.path.join(str(ferry_home()), FOLDER)


_VOLATILE = frozenset({"PWD", "OLDPWD", "_", "SHLVL"})  # what a shell changes as it goes


def _identity() -> str:
    """:func:`ferry.launcher.identity`, with what a job and its supervisor's own work
    (staging, uploads: the providers' credential chains read the environment) take on from
    the supervisor besides: the environment (but the secrets), the soft limits, the umask,
    the CPUs it may run on and its standing with the out-of-memory killer."""
    import resource

    from ferry import held_secrets
    from ferry.launcher import _LIMITS, identity

    env = sorted((k, v) for k, v in held_secrets.environment().items() if k not in _VOLATILE)
    soft = [resource.getrlimit(getattr(resource, n))[0] for n in _LIMITS if hasattr(resource, n)]
    oom = ""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj") as file:
        oom = file.read()

    umask = ""
    with contextlib.suppress(OSError), open("/proc/self/status") as file:
        umask = next((line for line in file if line.startswith("Umask:")), "")
    if not umask:  # (not Linux: set and put back)
        mask = os.umask(0o077)
        os.umask(mask)
        umask = oct(mask)
    cpus = ""
    with contextlib.suppress(AttributeError, OSError):
        cpus = repr(sorted(os.sched_getaffinity(0)))
    return identity(umask, cpus, oom, repr(soft), repr(env))
