"""Which Ray cluster the ray backend uses, and the one Ferry starts on this machine.

``ray.address`` (a Ferry setting) or ``RAY_ADDRESS`` names the cluster: its dashboard
(``http://host:8265``, the Jobs API), or ``ray://host:10001`` / ``host:port`` as Ray
accepts them. With neither set, Ferry uses a head it started on this machine, starting
one when there is none (as ``ray.init()`` would): bound to 127.0.0.1, with the GPUs of
``local.gpus`` when declared, its session files under ``/tmp/ferry-ray-<uid>-<home>``.
It stops by itself once no job has run on it for ``ray.idle`` (30 minutes by default),
and on ``ferry ray stop``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ferry import config, held_secrets
from ferry.errors import FerryError, Unsupported, UsageError, install_hint
from ferry.units import format_size

if TYPE_CHECKING:
    import psutil

DASHBOARD_PORT = 8265  # Ray's default dashboard (Jobs API) port
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})
# the ports `ray start` otherwise takes at fixed numbers
_OWN_PORTS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
    "ray-client-server-port",
)
_START_TIMEOUT = 120.0  # s for a head to start and its Jobs API to answer
_STOP_GRACE = 10.0  # s between SIGTERM and SIGKILL for the head's processes
# starts the command in its argv in a session of its own, its output to this one's stderr,
# prints its PID and ends: the command is left to init (or the nearest subreaper)
_DETACH = (
    "import subprocess, sys; "
    "print(subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL, "
    "stdout=sys.stderr).pid)"
)


@dataclass(frozen=True)
class Cluster:
    """A Ray cluster as Ferry reaches it."""

    dashboard: str  # http://host:port: the Jobs API
    local: bool  # on this machine (its nodes see this machine's files)
    started_by_ferry: bool = False


def dashboard_url(address: str) -> str:
    """The Jobs API address for what ``ray.address`` or ``RAY_ADDRESS`` says."""
    text = address.strip()
    if text.startswith(("http://", "https://")):
        return text.rstrip("/")
    if text.startswith("ray://"):  # Ray Client's port; the dashboard is on its usual one
        host = urlsplit(text).hostname or "127.0.0.1"
        return f"http://{host}:{DASHBOARD_PORT}"
    if text == "auto" or not text:
        raise UsageError(
            f"ray.address {address!r} does not say where the cluster's dashboard is",
            "give it as http://HEAD:8265 (the Jobs API), or unset it to let Ferry start a head",
        )
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return f"http://{text}:{DASHBOARD_PORT}"
    if port == "6379":  # the GCS port, as `ray start` prints it: the dashboard is beside it
        return f"http://{host}:{DASHBOARD_PORT}"
    return f"http://{text}"


def cluster() -> Cluster:
    """The cluster jobs go to: the one named, else Ferry's own head (started now if
    needed)."""
    given = config.get("ray.address") or os.environ.get("RAY_ADDRESS")
    if given:
        url = dashboard_url(str(given))
        return Cluster(url, (urlsplit(url).hostname or "") in LOCAL_HOSTS)
    return Cluster(LocalHead().ensure(), True, started_by_ferry=True)


class LocalHead:
    """The Ray head Ferry starts on this machine (one per FERRY_HOME)."""

    def __init__(self) -> None:
        home = config.ferry_home()
        self.folder = home / "ray"
        self.record = self.folder / "head.json"
        tag = hashlib.sha1(str(home).encode(), usedforsecurity=False).hexdigest()[:8]
        # Ray's sockets live under its temp folder: a short path keeps them under the
        # 107 bytes a socket path may have
        self.temp_dir = Path(f"/tmp/ferry-ray-{os.getuid()}-{tag}")
        self.session: int | None = None  # the session of the head this object started

    def running(self) -> str | None:
        """The dashboard of the head this home started, if it answers."""
        try:
            known = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        url = str(known.get("dashboard", ""))
        return url if url and _answers(url) else None

    def ensure(self) -> str:
        """The dashboard of this home's head, started first when there is none."""
        if url := self.running():
            return url
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.folder / "head.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one start, however many jobs ask at once
            if url := self.running():
                return url
            return self._start()

    def _start(self) -> str:
        import importlib.util

        from ferry.runner.run import free_port

        if importlib.util.find_spec("ray") is None:
            raise FerryError(
                "starting a Ray head on this machine needs Ray, which is not installed",
                f"{install_hint('ray')}, or set ray.address to a cluster's dashboard",
            )

        gcs_port, dashboard_port = free_port(), free_port()
        argv = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard_port}",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
            # Ray's fixed default ports would clash with another cluster on this machine
            *(f"--{name}={free_port()}" for name in _OWN_PORTS),
        ]
        gpus = config.get("local.gpus")  # declared GPUs (real ones Ray finds itself)
        if gpus is not None:
            argv.append(f"--num-gpus={int(gpus)}")
            gpu_type = config.get("local.gpu_type")
            if gpu_type and int(gpus):
                label = f"accelerator_type:{ray_label(str(gpu_type))}"
                argv.append(f"--resources={json.dumps({label: 1})}")
        log = self.folder / "head.log"
        from ferry.runner.spawn import not_subreaper

        try:
            # `ray start` returns once the head runs: its processes are left to init, not
            # to this process (a supervisor that kills what it leaves would kill the head).
            # It starts a session of its own, which every process of the head inherits (Ray
            # starts its daemons, agents, client proxy and workers without setsid): the
            # session's number is how `stop` finds them all, whatever they are called.
            with open(log, "ab") as out, not_subreaper():
                starter = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    env=held_secrets.environment(),  # (it outlives the job that started it)
                )
                self.session = starter.pid
                code = starter.wait(timeout=_START_TIMEOUT)
            if code != 0:
                raise FerryError(
                    f"could not start a Ray head on this machine (exit code {code})",
                    f"see {log}, or start a cluster yourself and set ray.address",
                )
            url = f"http://127.0.0.1:{dashboard_port}"
            deadline = time.monotonic() + _START_TIMEOUT
            while not _answers(url):
                if time.monotonic() > deadline:
                    raise FerryError(
                        f"the Ray head started on this machine did not answer at {url}",
                        f"see {log} and {self.temp_dir}/session_latest/logs",
                    )
                time.sleep(0.25)
        except subprocess.TimeoutExpired:
            self.stop()
            raise FerryError(
                f"a Ray head did not start on this machine within {_START_TIMEOUT:g}s",
                f"see {log}, or start a cluster yourself and set ray.address",
            ) from None
        except FerryError:
            self.stop()  # nothing half started is left behind
            raise
        record: dict[str, object] = {
            "dashboard": url,
            "gcs": f"127.0.0.1:{gcs_port}",
            "session": self.session,
            "started": _members(self.session),  # (what proves the session is still the head's)
        }
        self._write(record)
        idle = float(config.get("ray.idle"))
        if idle > 0:  # a watcher, left to init, stops the head once no job has run for `idle`
            self._write({**record, "watcher": self._start_watcher(url, idle, log)})
        return url

    def _write(self, record: dict[str, object]) -> None:
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.record)

    def _start_watcher(self, url: str, idle: float, log: Path) -> tuple[int, float]:
        """Start the idle watcher, left to init; returns its PID and start time."""
        from ferry.procs import start_time
        from ferry.runner.spawn import not_subreaper

        watcher = [sys.executable, "-m", "ferry.backends.ray_cluster", url, f"{idle:g}"]
        with open(log, "ab") as out, not_subreaper():
            done = subprocess.run(  # (through a process that ends at once: no child of ours)
                [sys.executable, "-c", _DETACH, *watcher],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=out,
                env={**held_secrets.environment(), "FERRY_HOME": str(config.ferry_home())},
                timeout=60,
                check=True,
            )
        pid = int(done.stdout)
        return pid, start_time(pid) or 0.0

    def stop(self) -> bool:
        """Stop the head this home started: every process of the session its ``ray start``
        began, anything those started in sessions of their own, and its idle watcher, by
        the numbers recorded when it started. Returns whether any was running."""
        import psutil

        try:
            known = json.loads(self.record.read_text())
        except (OSError, ValueError):
            known = {}
        session = known.get("session", self.session)
        found = []
        if session and _still_the_heads(int(session), known.get("started")):
            found = [p for pid, _ in _members(int(session)) if (p := _process(pid))]
            found += [c for proc in list(found) for c in _children(proc)]
        watcher = known.get("watcher")
        if watcher and watcher[0] != os.getpid() and _alive(int(watcher[0]), watcher[1]):
            found += [p for p in [_process(int(watcher[0]))] if p]
        for proc in found:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(found, timeout=_STOP_GRACE)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=_STOP_GRACE)
        self.record.unlink(missing_ok=True)
        return bool(found)


def _members(session: int) -> list[tuple[int, float]]:
    """The processes of ``session`` now, as (PID, start time) pairs."""
    from ferry.procs import start_time

    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        with contextlib.suppress(OSError):
            if os.getsid(pid) == session and (started := start_time(pid)) is not None:
                found.append((pid, started))
    return found


def _still_the_heads(session: int, started: list[tuple[int, float]] | None) -> bool:
    """Whether ``session`` still holds a process that was part of the head when it started
    (a session's number is free again once all its processes are gone)."""
    if started is None:  # (stopping a start that failed half way: nothing recorded yet)
        return True
    return any(_alive(int(pid), at) for pid, at in started)


def _alive(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started at ``started``."""
    from ferry.procs import start_time

    now = start_time(pid)
    return now is not None and abs(now - started) < 1.0


def _process(pid: int) -> psutil.Process | None:
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _children(proc: psutil.Process) -> list[psutil.Process]:
    """Every descendant of ``proc`` (Ray's jobs run in sessions of their own)."""
    import psutil

    try:
        return list(proc.children(recursive=True))
    except psutil.Error:
        return []


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def ray_label(name: str) -> str:
    """Ray's accelerator_type label for Ferry's canonical accelerator ``name``."""
    from ferry.backends.ray_names import RAY_LABELS

    for label, canonical in RAY_LABELS.items():
        if canonical == name:
            return label
    raise Unsupported(
        f"Ray has no accelerator_type label for {name}",
        f"ask for one of: {', '.join(sorted(set(RAY_LABELS.values())))}",
    )


def describe_cluster(dashboard: str) -> str:
    """The cluster's total resources in words (``/api/cluster_status``)."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"{dashboard}/api/cluster_status", timeout=10) as answer:
        data = json.loads(answer.read())
    usage = data["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
    parts = []
    for key, label in (("CPU", "CPU"), ("GPU", "GPU")):
        if key in usage:
            parts.append(f"{usage[key][1]:g} {label}")
    if "memory" in usage:
        parts.append(f"{format_size(int(usage['memory'][1]))} memory")
    types = sorted(k.split(":", 1)[1] for k in usage if k.startswith("accelerator_type:"))
    if types:
        parts.append(f"accelerators {', '.join(types)}")
    return ", ".join(parts) or "no resources"


def idle_since(url: str) -> float | None:
    """When the cluster's last job ended (its start, for a head without jobs); None while
    a job is pending or running."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/jobs/", timeout=10) as answer:
        jobs = json.loads(answer.read())
    last = 0.0
    for job in jobs:
        if job.get("status") in ("PENDING", "RUNNING"):
            return None
        last = max(last, float(job.get("end_time") or 0) / 1000)
    return last


def watch_idle(url: str, idle: float, poll: float = 30.0) -> int:
    """Stop this home's head once no job has run on it for ``idle`` seconds, or exit
    when it has gone (stopped by hand, or by another watcher)."""
    head = LocalHead()
    quiet_since = time.time()
    while True:
        time.sleep(min(poll, idle))
        if head.running() != url:
            return 0
        try:
            since = idle_since(url)
        except (OSError, ValueError):
            continue
        if since is None:
            quiet_since = time.time()
            continue
        quiet_since = max(quiet_since, since)
        if time.time() - quiet_since >= idle:
            print(f"ferry: the Ray head at {url} was idle for {idle:g}s: stopping it", flush=True)
            head.stop()
            return 0


if __name__ == "__main__":
    sys.exit(watch_idle(sys.argv[1], float(sys.argv[2])))
