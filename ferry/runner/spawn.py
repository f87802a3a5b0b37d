"""Starting processes that die with whoever started them, and the kernel settings that
keep track of what they start in turn (Linux: a parent-death signal, a child subreaper).

Used by the runner for the job's processes, and by the supervisor for the runner and its
helpers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

from ferry.errors import FerryError

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@cache
def _libc() -> object:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        _libc().prctl(option, value, 0, 0, 0)  # type: ignore[attr-defined]


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the thread that started it ends."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_subreaper = False


def become_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it, not to init."""
    global _subreaper
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _subreaper = True


def forget_subreaper() -> None:
    """In a forked child: the flag is not inherited by the kernel, so drop ours too."""
    global _subreaper
    _subreaper = False


@contextlib.contextmanager
def not_subreaper() -> Iterator[None]:
    """Stop being a subreaper for a moment (while starting a process that must be left to
    init rather than adopted)."""
    if not _subreaper:
        yield
        return
    _prctl(_PR_SET_CHILD_SUBREAPER, 0)
    try:
        yield
    finally:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)


class Timestamps:
    """ISO-8601 UTC timestamps with milliseconds, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> bytes:
        t = time.time()
        second = int(t)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._prefix}.{int((t - second) * 1000):03d}Z".encode()


def spawn(argv: list[str], options: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a process group of its own that dies with this process."""
    wrapper = _pdeathsig_wrapper()
    if wrapper:
        # setpriv sets the parent-death signal and execs the command: far cheaper than
        # running Python in the forked child (preexec_fn), which also rules out vfork.
        if sys.version_info >= (3, 11):
            return subprocess.Popen([*wrapper, *argv], process_group=0, **options)
        # (Python 3.10, a cloud image's: a new group through the fork's child)
        return subprocess.Popen([*wrapper, *argv], preexec_fn=os.setpgrp, **options)
    parent = os.getpid()

    def child_setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(137)

    return subprocess.Popen(argv, preexec_fn=child_setup, **options)


def prepare() -> None:
    """Do now what starting the first command would otherwise do: probe for setpriv, and
    load the C library's prctl (the subreaper and parent-death settings)."""
    _pdeathsig_wrapper()
    if sys.platform.startswith("linux"):
        _libc()


@cache
def _pdeathsig_wrapper() -> tuple[str, ...]:
    """``setpriv --pdeathsig KILL --`` (util-linux) where available, else nothing."""
    import shutil

    setpriv = shutil.which("setpriv")
    if not setpriv or not sys.platform.startswith("linux"):
        return ()
    probe = subprocess.run(
        [setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, check=False
    )
    return (setpriv, "--pdeathsig", "KILL", "--") if probe.returncode == 0 else ()


def check_executable(name: str, env: dict[str, str], cwd: str) -> None:
    """Fail clearly if the command's first word names no program exec could run."""
    import shutil

    hint = "check the command's first word, or use shell: true for shell syntax"
    if "/" in name:
        path = os.path.join(cwd, name)
        if not os.path.exists(path):
            raise FerryError(f"command not found: {name}", hint)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise FerryError(
                f"cannot execute {name}: permission denied",
                f"make it executable (chmod +x {name}) or run it with its interpreter",
            )
    elif shutil.which(name, path=env.get("PATH", os.defpath)) is None:
        raise FerryError(f"command not found: {name}", hint)
