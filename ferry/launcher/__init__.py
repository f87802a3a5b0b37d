"""A warm ``ferry`` for the next command: a process per user that has imported Ferry (and
pydantic, and the rest a command needs) and runs each command in a fork of itself.

Starting Python and importing what ``ferry run`` needs costs a quarter of a second, more
than the whole budget for launching a job. So a ``ferry`` command that finds no launcher
starts one as it ends, and the next commands hand it their arguments, environment, limits,
priority, CPU affinity, working folder and terminal (the file descriptors themselves, over
a Unix socket in ``FERRY_HOME/run``). It forks, and the fork runs the command: every
module is imported already and nothing else is carried over from one command to the next.
The command reads and writes the caller's terminal or pipes, its exit code is the
caller's, the signals the caller gets (Ctrl-C, a hangup, SIGTERM) are passed on to it,
Ctrl-Z stops it with the caller, and a caller that dies is a hangup. The launcher itself
starts with a few variables only (:func:`_launcher_env`): whatever the command that
started it held, a secret above all, stays out of it and of every process forked from it.

The launcher ends after ``launcher.idle`` (10 minutes by default) without a command, when
a Python file it imported changes (an upgrade, or an edit of Ferry itself: the command
that notices runs on its own and starts a new launcher), or when its socket is removed
(a new launcher took its place, or FERRY_HOME was deleted). ``FERRY_LAUNCHER=off`` in the
environment, or ``ferry config set launcher.idle 0``, turns it off.

This module is the caller's side, imported by every ``ferry`` command before anything
else: it imports nothing but the standard library's cheapest modules. The launcher's side
is :mod:`ferry.launcher.server`.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import socket
import sys
import zlib
from typing import Any

PROTOCOL = 1
FOLDER = "run"  # in FERRY_HOME: the launcher's socket and log
LOG = "launcher.log"
FIRST_REPLY_TIMEOUT_S = 30.0  # a launcher that does not start a command by then is stuck
_OFF = ("0", "off", "false", "no")
_RELAYED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
_LIMITS = (  # the caller's resource limits a command (and so its job) takes on
    *("RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_STACK", "RLIMIT_FSIZE", "RLIMIT_AS"),
    *("RLIMIT_DATA", "RLIMIT_NPROC", "RLIMIT_MEMLOCK", "RLIMIT_CPU", "RLIMIT_NICE"),
)
_NAMESPACES = ("mnt", "net", "pid", "user", "uts", "ipc")
# the caller's variables a launcher starts with (see _launcher_env): where programs, the
# home folder and temporary files are, the locale, and Python's own settings (PYTHON*)
_KEPT = ("PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "TZ")
_KEPT_PREFIXES = ("LC_", "PYTHON")
_missing = False  # this command found no launcher to run it


def enabled() -> bool:
    """Whether commands may use (and start) a launcher: FERRY_LAUNCHER is not off."""
    return os.environ.get("FERRY_LAUNCHER", "").strip().lower() not in _OFF


def socket_path() -> str | None:
    """The socket of the launcher for this FERRY_HOME, this Ferry installation (its
    interpreter, files, PYTHONPATH and locale) and this place on the machine (the control
    group and namespaces a command runs in, which a fork keeps from the launcher: a
    command started under ``systemd-run`` or in another container gets a launcher of its
    own). None where the path is too long for a Unix socket."""
    path = os.path.join(home(), FOLDER, f"launcher-{identity()}.sock")
    return path if len(os.fsencode(path)) < 100 else None


def home() -> str:
    """FERRY_HOME, absolute (as ``ferry.config.ferry_home`` has it, without importing it)."""
    found = os.environ.get("FERRY_HOME") or os.path.join(os.path.expanduser("~"), ".ferry")
    return os.path.abspath(os.path.expanduser(found))


def identity(*extra: str) -> str:
    """What a process forked from this one would share with it, as eight hex digits: this
    Ferry installation, and what a fork cannot take on from another process (ids, a
    higher priority, hard limits, control group, namespaces), plus ``extra``."""
    here = os.path.dirname(os.path.abspath(__file__))
    ident = [sys.executable, here, sys.version]
    ident += [os.environ.get(k, "") for k in ("PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE")]
    ident += [repr((os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()))]
    ident += [repr((os.getpriority(os.PRIO_PROCESS, 0), _hard_limits()))]
    with contextlib.suppress(OSError):  # (not Linux, or no /proc: one per installation)
        with open("/proc/self/cgroup") as file:
            ident.append(file.read())
        ident += [os.readlink(f"/proc/self/ns/{kind}") for kind in _NAMESPACES]
    code = zlib.crc32("\0".join([*ident, *extra]).encode(errors="surrogateescape"))
    return f"{code:08x}"


def private_folder(path: str) -> bool:
    """Whether ``path`` is a folder of this user's that no one else can write to."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


def files_changed(files: dict[str, tuple[int, int]]) -> bool:
    """Whether any of ``files`` (path -> modification time, size) changed or went."""
    for path, state in files.items():
        try:
            st = os.stat(path)
        except OSError:
            return True
        if (st.st_mtime_ns, st.st_size) != state:
            return True
    return False


def peer_is_me(conn: socket.socket) -> bool:
    """Whether the process at the other end of the Unix socket ``conn`` runs as this user."""
    import struct

    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):  # (no SO_PEERCRED: not Linux; no one is trusted)
        return False
    uid: int = struct.unpack("3i", creds)[1]
    return uid == os.getuid()


def _hard_limits() -> list[int]:
    import resource

    return [resource.getrlimit(getattr(resource, n))[1] for n in _LIMITS if hasattr(resource, n)]


def relay(argv: list[str]) -> int | None:
    """Run ``ferry ARGV`` in the launcher and return its exit code; None when no launcher
    took the command (then the caller runs it itself)."""
    global _missing
    if not enabled():
        return None
    path = socket_path()
    if path is None or _in_background():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        _missing = True
        return None
    if not _ours(conn, os.path.dirname(path)):  # run here, then start one to replace it
        conn.close()
        _missing = True
        return None
    relayed = _Signals()  # from now on: a Ctrl-C as the command starts is the command's
    try:
        pid = _hand_over(conn, argv, relayed.ignored)
    except OSError:
        pid = None
    if pid is None:  # nothing started there (it is out of date, and ends): run it here
        conn.close()
        _missing = True
        relayed.restore()  # (and a signal that came meanwhile is this process's again)
        return None
    relayed.to(pid)
    return _wait(conn)


def _in_background() -> bool:
    """Whether this process was started in the background of a terminal: there, the
    terminal's job control (a read stopping it) applies to this process only."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) != os.getpgrp()
    except OSError:
        return False


def _ours(conn: socket.socket, folder: str) -> bool:
    """Whether the launcher at the other end runs as this user, from a folder only this
    user can write to: this process's environment and descriptors go to no one else."""
    return peer_is_me(conn) and private_folder(folder)


def _hand_over(conn: socket.socket, argv: list[str], ignored: list[str]) -> int | None:
    """Send the command, with this process's descriptors 0-2 and working folder, and the
    signals it ignores (``nohup``); the pid of the process running it, or None if the
    launcher declined (out of date)."""
    import array
    import resource
    import struct

    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        umask = os.umask(0o077)
        os.umask(umask)
        limits = {}
        for name in _LIMITS:
            if hasattr(resource, name):
                limits[name] = resource.getrlimit(getattr(resource, name))
        request = marshal.dumps(
            {
                "protocol": PROTOCOL,
                "argv0": sys.argv[0],
                "argv": argv,
                "env": dict(os.environ),
                "umask": umask,
                "limits": limits,
                "nice": os.getpriority(os.PRIO_PROCESS, 0),
                "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
                "stdio": [_stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
                "ignored": ignored,
            }
        )
        fds = array.array("i", [0, 1, 2, cwd])
        header = struct.pack("!I", len(request))
        conn.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        conn.sendall(request)
    finally:
        os.close(cwd)
    conn.settimeout(FIRST_REPLY_TIMEOUT_S)
    line = _line(conn)
    conn.settimeout(None)
    if not line.startswith("pid "):
        return None  # "stale": the launcher is out of date, and ends
    return int(line[4:])


def _stream(stream: Any) -> tuple[str, str, bool, bool] | None:
    """How Python set up one of this process's standard streams."""
    try:
        return (stream.encoding, stream.errors, stream.line_buffering, stream.write_through)
    except AttributeError:  # closed, or replaced by something else
        return None


_pending = b""


def _line(conn: socket.socket) -> str:
    """The next line the launcher sent ('' at the end)."""
    global _pending
    while b"\n" not in _pending:
        chunk = conn.recv(4096)
        if not chunk:
            line, _pending = _pending, b""
            return line.decode(errors="replace")
        _pending += chunk
    line, _, _pending = _pending.partition(b"\n")
    return line.decode(errors="replace")


class _Signals:
    """Signals this process gets, passed on to the command once its process is known (held
    until then): Ctrl-C, SIGTERM, a hangup and the like as they are; Ctrl-Z stops the
    command, then this process, and the shell's ``fg`` or ``bg`` continues both."""

    def __init__(self) -> None:
        import signal

        self._signal = signal
        self._pid: int | None = None
        self._held: list[int] = []
        names = (*_RELAYED, "SIGTSTP")
        self._previous = {name: signal.getsignal(getattr(signal, name)) for name in names}
        # one this process ignores (nohup's SIGHUP, a background job's SIGINT) is ignored
        # by the command too, and not passed on
        self.ignored = [n for n, handler in self._previous.items() if handler is signal.SIG_IGN]
        for name in _RELAYED:
            if name not in self.ignored:
                signal.signal(getattr(signal, name), self._forward)
        if "SIGTSTP" not in self.ignored:
            signal.signal(signal.SIGTSTP, self._suspend)

    def to(self, pid: int) -> None:
        """The command's process is ``pid``: send what was held."""
        self._pid = pid
        held, self._held = self._held, []
        for signum in held:
            if signum == self._signal.SIGTSTP:
                self._suspend(signum, None)
            else:
                self._forward(signum, None)

    def restore(self) -> None:
        """Back to how this process handled them, and raise here what was held."""
        for name, handler in self._previous.items():
            self._signal.signal(getattr(self._signal, name), handler)
        for signum in self._held:
            self._signal.raise_signal(signum)

    def _forward(self, signum: int, frame: object) -> None:
        if self._pid is None:
            self._held.append(signum)
            return
        with contextlib.suppress(OSError):  # (ended meanwhile)
            os.kill(self._pid, signum)

    def _suspend(self, signum: int, frame: object) -> None:
        signal = self._signal
        if self._pid is None:
            self._held.append(signum)
            return
        self._forward(signal.SIGSTOP, frame)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here, until the shell's fg or bg
        signal.signal(signal.SIGTSTP, self._suspend)
        self._forward(signal.SIGCONT, frame)


def _wait(conn: socket.socket) -> int:
    """The command's exit code, once it has ended."""
    while True:
        line = _line(conn)
        if line.startswith(("exit ", "ended ")):
            return int(line.split()[1])
        if not line:
            print(
                "ferry: the process running this command was lost (see "
                f"{os.path.join(os.path.dirname(socket_path() or ''), LOG)})",
                file=sys.stderr,
            )
            return 1


def start(idle_s: float) -> None:
    """Start a launcher in the background (after a command that found none), unless one
    is turned off."""
    if not (_missing and enabled() and idle_s > 0):
        return
    path = socket_path()
    if path is None:
        return
    import subprocess

    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)  # (one made before, by hand or another umask: private again)
        log = os.open(os.path.join(folder, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return
    try:
        # -P and cwd /: nothing in the caller's folder shadows a module of the launcher's
        home = os.path.dirname(folder)  # (absolute: the launcher runs from /)
        subprocess.Popen(  # (a launcher that cannot start: the next command runs alone too)
            [sys.executable, "-P", "-m", "ferry.launcher", "--idle", str(idle_s)],
            cwd="/",
            env=_launcher_env(home),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
        )
    except OSError:
        return
    finally:
        os.close(log)


def _launcher_env(home: str) -> dict[str, str]:
    """The environment a launcher starts with: what decides how Python starts and what it
    imports (its identity among them), and nothing else. It lives for minutes, and every
    process forked from it shows this environment in ``/proc/PID/environ``, supervisors
    that run for hours included: the command that starts it must leave nothing there of
    its own (a secret above all). Each command's environment comes with the command."""
    env = {k: v for k, v in os.environ.items() if k in _KEPT or k.startswith(_KEPT_PREFIXES)}
    env["FERRY_HOME"] = home
    return env


def stop_all(home: str) -> int:
    """Take the sockets of the launchers of FERRY_HOME ``home`` away: each ends once its
    running commands have (``ferry config set launcher.idle 0``). Returns how many."""
    import glob

    stopped = 0
    for path in glob.glob(os.path.join(glob.escape(home), FOLDER, "launcher-*.sock")):
        try:
            os.unlink(path)
            stopped += 1
        except FileNotFoundError:
            continue
    return stopped
