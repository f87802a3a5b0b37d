"""The launcher's side: import Ferry once, then fork a process for each command that
arrives on the socket, which takes on the caller's descriptors, folder, environment and
limits, runs the command and reports its exit code (see :mod:`ferry.launcher`)."""

from __future__ import annotations

import contextlib
import marshal
import os
import socket
import sys
from typing import Any

from ferry.launcher import PROTOCOL, files_changed, socket_path

# What a command imports on its way: the launcher imports it once, for every command.
_PRELOAD = (
    "ferry.cli.main",
    "ferry.cli.run",
    "ferry.cli._follow",
    "ferry.spec",
    "ferry.config",
    "ferry.controller",
    "ferry.controller.jobs",
    "ferry.controller.budget",
    "ferry.store",
    "ferry.store.sqlite",
    "ferry.backends.registry",
    "ferry.backends.local",
    "ferry.packaging.snapshot",
    "ferry.storage.logs",
    "ferry.followers",
    "ferry.supervisor",
    "ferry.watcher",
    "yaml",
)


def serve(idle_s: float) -> int:
    """Run the launcher until it has been idle for ``idle_s``, its files changed, or its
    socket was taken away. Returns the exit code."""
    import gc
    import importlib
    import time

    path = socket_path()
    if path is None:
        return 1
    for module in _PRELOAD:
        importlib.import_module(module)
    from ferry.cli.main import build_parser
    from ferry.supervisor import prepare_launch

    build_parser()  # imports every command's module
    prepare_launch()
    files = _module_files()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ferry/
    own = {f: s for f, s in files.items() if f.startswith(package + os.sep)}

    folder = os.path.dirname(path)
    if not os.path.isdir(os.path.dirname(folder)):
        return 0  # FERRY_HOME was removed meanwhile: never make it again
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(64)
    os.replace(tmp, path)  # (a launcher already there sees its socket gone, and ends)
    mine = os.stat(path).st_ino
    gc.collect()
    gc.freeze()  # commands never scan (or copy, writing to them) the objects imported here
    server = _Server(listener, own)
    last_used = time.monotonic()
    checked = time.monotonic()
    try:
        while not server.stale:
            if server.poll(1.0):
                last_used = time.monotonic()
            server.reap()
            now = time.monotonic()
            if server.busy():
                last_used = now
            elif now - last_used >= idle_s:
                break
            if now - checked >= 2.0:
                checked = now
                try:
                    if os.stat(path).st_ino != mine:
                        break  # replaced
                except FileNotFoundError:
                    break  # removed
                if files_changed(files):
                    break
    finally:
        server.close()
        with contextlib.suppress(OSError):  # (gone, or another launcher's now)
            if os.stat(path).st_ino == mine:
                os.unlink(path)
    while server.busy():  # the commands running still have their callers to answer
        server.poll(1.0)
        server.reap()
    return 0


def _module_files() -> dict[str, tuple[int, int]]:
    """Each imported module's file, with its modification time and size."""
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            try:
                st = os.stat(path)
            except OSError:
                continue
            found[path] = (st.st_mtime_ns, st.st_size)
    return found


class _Server:
    """The listening socket, and one connection per command running (watched for its
    caller going away)."""

    def __init__(self, listener: socket.socket, own_files: dict[str, tuple[int, int]]) -> None:
        import select

        self.listener = listener
        self.own_files = own_files
        self.stale = False
        self.running: dict[int, tuple[socket.socket, int]] = {}  # fd -> (connection, pid)
        self.children: set[int] = set()
        self._poll = select.poll()
        self._poll.register(listener.fileno(), select.POLLIN)

    def busy(self) -> bool:
        return bool(self.children)

    def close(self) -> None:
        """Take no more commands."""
        if self.listener.fileno() >= 0:
            self._poll.unregister(self.listener.fileno())
            self.listener.close()

    def poll(self, timeout_s: float) -> bool:
        """Serve what arrived within ``timeout_s``; whether a command started."""
        import select

        started = False
        for fd, events in self._poll.poll(timeout_s * 1000):
            if fd == self.listener.fileno():
                started |= self._accept()
            elif events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
                self._caller_gone(fd)
        return started

    def _accept(self) -> bool:
        import select
        import struct

        try:
            conn, _ = self.listener.accept()
        except OSError:
            return False
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():  # another user: never
            conn.close()
            return False
        if files_changed(self.own_files):  # Ferry was edited or upgraded: let the caller run it
            self.stale = True
            try:
                conn.sendall(b"stale\n")
            finally:
                conn.close()
            return False
        pid = os.fork()
        if pid == 0:
            _command(conn, [self.listener, *(c for c, _ in self.running.values())])
        self.children.add(pid)
        self.running[conn.fileno()] = (conn, pid)
        self._poll.register(conn.fileno(), select.POLLRDHUP)
        return True

    def _caller_gone(self, fd: int) -> None:
        """The caller hung up (it was killed, or its terminal closed): so does its command."""
        import signal

        conn, pid = self.running.pop(fd)
        self._poll.unregister(fd)
        if pid in self.children:  # not reaped: alive, or a zombie (its pid still ours)
            os.kill(pid, signal.SIGHUP)
            os.kill(pid, signal.SIGCONT)  # (one stopped by Ctrl-Z takes the hangup too)
        conn.close()

    def reap(self) -> None:
        """Collect ended commands; tell their callers how each ended if it did not say."""
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if not done:
                continue
            self.children.discard(pid)
            for fd, (conn, owner) in list(self.running.items()):
                if owner == pid:
                    code = os.waitstatus_to_exitcode(status)
                    with contextlib.suppress(OSError):  # (the caller went away too)
                        conn.sendall(f"ended {128 - code if code < 0 else code}\n".encode())
                    self._poll.unregister(fd)
                    del self.running[fd]
                    conn.close()


def _command(conn: socket.socket, inherited: list[socket.socket]) -> None:
    """In the fork: become the caller's command, run it, report its exit code, end."""
    code = 1
    try:
        for other in inherited:
            other.close()
        argv = _become_caller(conn)
        conn.sendall(f"pid {os.getpid()}\n".encode())
        code = _run(argv)
    except KeyboardInterrupt:  # a Ctrl-C before the command had its own handling
        print("ferry: interrupted", file=sys.stderr)
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
    with contextlib.suppress(OSError, ValueError):  # (a closed pipe, a closed stream)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    import signal

    # the caller hangs up once it has the code: that must not cut the exit handlers short
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    with contextlib.suppress(OSError):  # (the caller went away)
        conn.sendall(f"exit {code}\n".encode())
    _at_exit()
    os._exit(code)


def _become_caller(conn: socket.socket) -> list[str]:
    """Take on the caller's descriptors, folder, environment, umask and limits; returns
    its arguments."""
    import random
    import resource
    import signal
    import struct
    import time

    os.setpgid(0, 0)  # out of the launcher's group: signals to one never reach the other
    for name in ("SIGINT",):
        signal.signal(getattr(signal, name), signal.default_int_handler)
    for name in ("SIGTERM", "SIGHUP", "SIGCHLD", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGTSTP"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    size = socket.CMSG_SPACE(4 * 4)
    data, ancillary, _, _ = conn.recvmsg(4, size)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(payload) // 4}i", payload))
    if len(data) != 4 or len(fds) != 4:
        raise RuntimeError("a malformed request")
    (length,) = struct.unpack("!I", data)
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise RuntimeError("the caller went away")
        body += chunk
    request = marshal.loads(body)
    if request.get("protocol") != PROTOCOL:
        raise RuntimeError("a request of another protocol")
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(request["umask"])
    # (what cannot be taken on is part of the launcher's identity: see socket_path)
    for name, limit in request["limits"].items():
        with contextlib.suppress(ValueError, OSError, AttributeError):
            resource.setrlimit(getattr(resource, name), limit)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, request["nice"])
    if request["cpus"] and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):  # (a CPU this machine no longer has)
            os.sched_setaffinity(0, request["cpus"])
    time.tzset()  # (TZ may differ from the launcher's)
    for name in request["ignored"]:  # as the caller (nohup, a background job)
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    _streams(request["stdio"])
    sys.argv = [request["argv0"], *request["argv"]]
    random.seed()  # (the launcher's state would repeat in every command)
    return list(request["argv"])


def _streams(stdio: list[tuple[str, str, bool, bool] | None]) -> None:
    """Standard streams on descriptors 0-2 as the caller's Python set up its own."""
    import io

    made = []
    for fd, how in enumerate(stdio):
        encoding, errors, line_buffering, write_through = how or ("utf-8", "strict", False, False)
        raw: Any
        if fd == 0:
            raw = open(fd, "rb", closefd=False)  # noqa: SIM115
        else:
            raw = open(fd, "wb", buffering=0 if write_through else -1, closefd=False)  # noqa: SIM115
        made.append(
            io.TextIOWrapper(
                raw,
                encoding=encoding,
                errors=errors,
                newline="\n",
                line_buffering=line_buffering,
                write_through=write_through,
            )
        )
    sys.stdin, sys.stdout, sys.stderr = made
    for name, stream in zip(("__stdin__", "__stdout__", "__stderr__"), made, strict=True):
        setattr(sys, name, stream)  # (what code restoring the originals finds)


def _run(argv: list[str]) -> int:
    from ferry.cli.main import main

    try:
        return main(argv)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1


def _at_exit() -> None:
    """What the interpreter does on the way out: wait for threads, run exit handlers."""
    import atexit
    import threading

    with contextlib.suppress(BaseException):  # (the exit code is sent: nothing to report to)
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ferry.launcher")
    parser.add_argument("--idle", type=float, default=600.0, help="seconds idle before ending")
    args = parser.parse_args(argv)
    return serve(args.idle)
