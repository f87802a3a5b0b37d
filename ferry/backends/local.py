"""The local backend: attempts run as process groups on this machine.

The supervisor (one detached process per job) launches the command in its own process group
with a parent-death signal, tees stdout/stderr line by line with timestamps into the
attempt's log, and on stop sends SIGTERM to the whole group, then SIGKILL after the grace.
Being a child subreaper, the supervisor also finds descendants that left the group, so
nothing the job started outlives it untracked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config, defaults
from ferry.backends.base import Backend, LaunchRequest, RunningAttempt
from ferry.backends.local_inventory import Inventory, local_inventory
from ferry.errors import DoesNotFit, FerryError, SpecError
from ferry.procs import kill_descendants, reap_children
from ferry.store.records import Allocation, Job
from ferry.units import format_size

if TYPE_CHECKING:
    from ferry.spec import JobSpec

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# A line without a newline is written out after this long, so prompts and progress show.
_PARTIAL_FLUSH = 0.5
# After the main process exits, output still buffered in pipes is read for at most this long.
_DRAIN_TIMEOUT = 2.0


@cache
def _libc() -> object:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        _libc().prctl(option, value, 0, 0, 0)  # type: ignore[attr-defined]


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


class _Timestamps:
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


def _spawn(argv: list[str], options: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a process group of its own that dies with this process."""
    wrapper = _pdeathsig_wrapper()
    if wrapper:
        # setpriv sets the parent-death signal and execs the command: far cheaper than
        # running Python in the forked child (preexec_fn), which also rules out vfork.
        return subprocess.Popen([*wrapper, *argv], process_group=0, **options)
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


def _check_executable(name: str, env: dict[str, str], cwd: str) -> None:
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


class LocalAttempt(RunningAttempt):
    """A process group on this machine and the log it writes."""

    def __init__(self, request: LaunchRequest, wake_fd: int | None) -> None:
        self._log = os.open(request.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            _check_executable(request.argv[0], request.env, request.cwd)
        except FerryError:
            os.close(self._log)
            raise
        common: dict[str, Any] = {
            "cwd": request.cwd,
            "env": request.env,
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "close_fds": True,
        }
        try:
            self._proc = _spawn(request.argv, common)
        except OSError as exc:
            os.close(self._log)
            hint = "check the command and its environment"
            if exc.errno == errno.E2BIG:
                hint = "the command line and environment are too large; pass data in files"
            raise FerryError(f"cannot start the command: {exc.strerror}", hint) from None
        self.pid = self._proc.pid
        self.handle = str(self.pid)  # the group id equals the leader's pid
        self._stamps = _Timestamps()
        self._selector = selectors.DefaultSelector()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._streams = {
            self._proc.stdout.fileno(): b"O",
            self._proc.stderr.fileno(): b"E",
        }
        self._partial: dict[int, tuple[bytes, float]] = {}
        for fd in self._streams:
            os.set_blocking(fd, False)
            self._selector.register(fd, selectors.EVENT_READ)
        self._wake_fd = wake_fd
        if wake_fd is not None:
            self._selector.register(wake_fd, selectors.EVENT_READ)
        # A pidfd becomes readable when the main process exits: no polling for its end.
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(self.pid)
            self._selector.register(self._pidfd, selectors.EVENT_READ)
        self._tail: list[str] = []
        self.returncode: int | None = None
        self._killed = False

    # -- output ----------------------------------------------------------------------------

    def _emit(self, tag: bytes, lines: Sequence[bytes]) -> None:
        stamp = self._stamps.now()
        out = b"".join(stamp + b" " + tag + b" " + line + b"\n" for line in lines)
        os.write(self._log, out)
        for line in lines[-defaults.REASON_LOG_LINES :]:
            self._tail.append(line.decode("utf-8", "replace"))
        del self._tail[: -defaults.REASON_LOG_LINES]

    def _read(self, fd: int) -> bool:
        """Read what is there; False at end of stream."""
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if not chunk:
            pending, _ = self._partial.pop(fd, (b"", 0.0))
            if pending:
                self._emit(self._streams[fd], [pending])
            self._selector.unregister(fd)
            return False
        pending, since = self._partial.get(fd, (b"", 0.0))
        data = (pending + chunk).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = data.split(b"\n")
        if lines:
            self._emit(self._streams[fd], lines)
        if rest:
            self._partial[fd] = (rest, since if pending and not lines else time.monotonic())
        else:
            self._partial.pop(fd, None)
        return True

    def _flush_partials(self, force: bool = False) -> None:
        now = time.monotonic()
        for fd, (pending, since) in list(self._partial.items()):
            if force or now - since >= _PARTIAL_FLUSH:
                self._emit(self._streams[fd], [pending])
                del self._partial[fd]

    def _open_streams(self) -> list[int]:
        return [fd for fd in self._streams if fd in self._selector.get_map()]

    def _poll_io(self, timeout: float, until_exit: bool) -> None:
        """Move output to the log for up to ``timeout`` seconds.

        Returns early on a wake-up (a signal for the supervisor), when ``until_exit`` and the
        main process has exited, or when every stream has closed.
        """
        deadline = time.monotonic() + timeout
        while True:
            if not until_exit and not self._open_streams():
                return
            remaining = deadline - time.monotonic()
            if self._partial:
                remaining = min(remaining, _PARTIAL_FLUSH)
            if self._pidfd is None and until_exit:
                # no pidfd (old kernel): notice the exit by polling, a little at a time
                if self._proc.poll() is not None:
                    return
                remaining = min(remaining, 0.01)
            woke = exited = False
            for key, _ in self._selector.select(max(0.0, remaining)):
                if key.fd == self._wake_fd:
                    woke = True
                    with contextlib.suppress(BlockingIOError):
                        os.read(key.fd, 4096)
                elif key.fd == self._pidfd:
                    exited = True
                    self._selector.unregister(key.fd)
                    os.close(key.fd)
                    self._pidfd = None
                else:
                    self._read(key.fd)
            self._flush_partials()
            if woke or (exited and until_exit) or time.monotonic() >= deadline:
                return

    # -- life ------------------------------------------------------------------------------

    def wait(self, timeout: float) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._poll_io(timeout, until_exit=True)
        code: int | None = self._proc.poll()
        if code is None:
            return None
        self._finish()
        self.returncode = code
        return code

    def _finish(self) -> None:
        """The main process ended: end what it left behind, then read the last output."""
        if self._pidfd is not None:
            self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._signal_group(signal.SIGTERM)  # whatever the main process left in its group
        end = time.monotonic() + _DRAIN_TIMEOUT
        while time.monotonic() < end:
            if self._open_streams():
                self._poll_io(min(0.05, end - time.monotonic()), until_exit=False)
            else:
                reap_children()
                if not self._group_alive():
                    break
                time.sleep(0.01)
        if self._open_streams() or self._group_alive():
            self._signal_group(signal.SIGKILL)
            kill_descendants()
            self._poll_io(_DRAIN_TIMEOUT, until_exit=False)
        self._flush_partials(force=True)
        kill_descendants()
        for fd in self._open_streams():
            self._selector.unregister(fd)
        self._selector.close()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._proc.stdout.close()
        self._proc.stderr.close()
        os.close(self._log)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self._killed = True
        self._signal_group(signal.SIGKILL)
        # Descendants that left the group are killed in _finish, once the main process has
        # been reaped: reaping here could steal its exit status from Popen.

    def tail(self, lines: int) -> list[str]:
        return self._tail[-lines:]


class LocalBackend(Backend):
    """Runs attempts on this machine, sharing its CPUs, memory and GPUs between jobs."""

    name = "local"
    # buckets in and out; spot, TPUs and multi-node come with later backends
    features = frozenset({"inputs.remote", "inputs.stream", "outputs.remote", "paths.container"})

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
                _check_executable(spec.command[0], {"PATH": path}, spec.code)
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
        res = job.spec.get("resources", {})
        cpus = res.get("cpus") or min(defaults.DEFAULT_CPUS, self.inventory.cpus)
        acc = res.get("accelerator")
        gpus = 0
        if acc:
            from ferry.accelerators import parse_accelerator

            gpus = parse_accelerator(acc).count
        return Allocation(
            cpus=float(cpus), memory=int(res.get("memory") or 0), gpus=tuple(range(gpus))
        )

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

    def launch(self, request: LaunchRequest, wake_fd: int | None = None) -> LocalAttempt:
        return LocalAttempt(request, wake_fd)
