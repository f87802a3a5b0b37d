"""Shared fixtures: a private FERRY_HOME per test, the real `ferry` command, and waiting on
conditions with a deadline (never sleeps as synchronisation)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

FERRY = str(Path(sys.executable).parent / "ferry")

# The start of a DDP script over gloo that resumes from rank 0's checkpoint: it joins the
# process group from the torchrun variables (set by torchrun, or by Ferry for a gang), and
# leaves `rank`, `world`, `model`, `ddp`, `opt` and the first `step` to run as `start`.
DDP_RESUMING = """
import os, time
import torch
import torch.distributed as dist
from ferry import runtime

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
ckpt = runtime.checkpoint.restore()
start = 0
if ckpt:
    model.load_state_dict(ckpt.state["model"])
    start = ckpt.state["step"] + 1"""

# Each test's commands run on their own: a launcher (ferry.launcher) per test's FERRY_HOME
# would outlive the test. tests/cli/test_launcher.py turns it on for its own tests.
os.environ["FERRY_LAUNCHER"] = "off"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh FERRY_HOME (also seen by every `ferry` process and supervisor started)."""
    path = tmp_path / "ferry-home"
    monkeypatch.setenv("FERRY_HOME", str(path))
    monkeypatch.setenv("FERRY_TEST_TMP", str(tmp_path))
    yield path
    stop_leftovers(path)


def stop_leftovers(path: Path) -> None:
    """Cancel whatever a failed test left running, so no process outlives the test."""
    if not (path / "ferry.db").exists():
        return
    subprocess.run(
        [sys.executable, "-c", _CANCEL_ALL],
        env={**os.environ, "FERRY_HOME": str(path)},
        capture_output=True,
        timeout=60,
    )


_CANCEL_ALL = """
import time
from ferry.store import open_store
from ferry.controller import cancel, reconcile
from ferry.followers import start
from ferry.status import ACTIVE, JobStatus
s = open_store()
for j in s.list_jobs([JobStatus.QUEUED, *ACTIVE]):
    cancel(s, j, start=start)
end = time.time() + 30
while time.time() < end and s.list_jobs([JobStatus.QUEUED, *ACTIVE]):
    reconcile(s, start=start)
    time.sleep(0.1)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty code folder to run jobs from."""
    path = tmp_path / "project"
    path.mkdir()
    return path


def ferry(
    *args: str,
    cwd: Path | str | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real `ferry` command."""
    return subprocess.run(
        [FERRY, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        input=input,
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup``, pytest-xdist keeps an ``xdist_group``'s tests on one
    worker by suffixing their ids with ``@group``; a pytest it cannot do that on would
    spread them silently (two Ray heads fighting for one port), so that stops the run."""
    if not getattr(session.config.option, "loadgroup", False):  # (a worker's; not the main)
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"{item.nodeid} is in an xdist_group but pytest-xdist could not group it "
                "(a pytest this pytest-xdist does not know): pin pytest as pyproject.toml says"
            )


def ferry_json(*args: str, cwd: Path | str | None = None) -> Any:
    """Run `ferry ... --json` and parse its output."""
    result = ferry(*args, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 30,
    what: str = "condition",
    every: float = 0.05,
    explain: Callable[[], object] | None = None,
) -> Any:
    """Poll ``condition`` every ``every`` s until it returns something truthy; fail after
    ``timeout`` s, saying what ``explain`` returns (the state that was waited on)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            said = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{said}")
        time.sleep(every)


def job_status(job_id: str) -> dict[str, Any]:
    """`ferry status JOB --json`."""
    data: dict[str, Any] = ferry_json("status", job_id)
    return data


def submit(*args: str, cwd: Path | str, env: dict[str, str] | None = None) -> str:
    """`ferry run --detach ...` (with ``env`` added to its variables); returns the job id."""
    result = ferry("run", "--detach", *args, cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """A user-facing failure: the exit code, one line starting with 'ferry:', no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ferry: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def read_terminal_until(fd: int, text: bytes, seen: bytes = b"", timeout: float = 30) -> bytes:
    """Read a pseudo-terminal's output until ``text`` has appeared in it; returns all of it
    (``seen``, what was read before, included)."""
    import select

    end = time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < end, f"never showed {text!r}: {seen[-500:]!r}"
        if select.select([fd], [], [], 0.1)[0]:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    return seen


def wait_status_slowly(job_id: str, *statuses: str, timeout: float = 30) -> dict[str, Any]:
    """Wait until the job is in one of ``statuses``, asking every half second (each ask is
    a process: a cluster under test needs the cores); a timeout says where the job was."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (s := job_status(job_id))["status"] in statuses and s,
        timeout,
        f"{job_id} to be {'/'.join(statuses)}",
        every=0.5,
        explain=lambda: explain_job(job_id),
    )


def until_logged(job_id: str, text: str, timeout: float, what: str) -> None:
    """Wait until the job's log has ``text``, asking every half second; fail at once if
    the job ended first."""

    def logged() -> bool:
        if text in job_logs(job_id):
            return True
        ended = job_status(job_id)["status"] in ("SUCCEEDED", "FAILED", "CANCELLED")
        assert not ended, explain_job(job_id)
        return False

    wait_for(logged, timeout, what, every=0.5, explain=lambda: explain_job(job_id))


def explain_job(job_id: str) -> str:
    """The job's status, reason, events and log tail: what a timed-out wait says."""
    status = job_status(job_id)
    events = "; ".join(e["message"] for e in status["events"])
    tail = job_logs(job_id)[-1500:]
    return f"{status['status']} ({status.get('reason')}); events: {events}; log: {tail}"


def showing(value: str) -> list[str]:
    """The processes that show ``value`` to this user's other processes: in the environment
    they were started with (``/proc/PID/environ``, what ``ps e`` prints) or in their
    command line. Each as its pid, where it shows, and its command line."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for part in ("environ", "cmdline"):
            try:
                shown = Path("/proc", entry, part).read_bytes()
            except OSError:  # ended meanwhile, or another user's
                continue
            if value.encode() in shown:
                command = b""
                with contextlib.suppress(OSError):
                    command = Path("/proc", entry, "cmdline").read_bytes()
                words = command.replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry} ({part}): {words}")
    return found


def job_logs(job_id: str, *args: str) -> str:
    """`ferry logs JOB ...`."""
    result = ferry("logs", job_id, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


# Storage servers over HTTP on 127.0.0.1, started once per test session (per xdist worker)
# by the tests that use them: S3 through moto's server mode, GCS through gcp-storage-emulator.


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    port = server._api._httpd.server_address[1]
    yield f"http://127.0.0.1:{port}"
    server.stop()
