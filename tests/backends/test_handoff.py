"""A supervisor whose job ended takes the next job submitted within a moment, over a real
Unix socket, when it is like the one the submitter would start; otherwise a fresh one
supervises it. Real `ferry` commands and supervisors throughout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.backends.test_local import pid_alive, wait_status
from tests.conftest import FERRY, ferry, submit, wait_for

pytestmark = pytest.mark.slow


def idle_sockets(home: Path) -> list[str]:
    run = home / "run"
    return sorted(n for n in os.listdir(run) if n.startswith("idle-")) if run.is_dir() else []


@pytest.fixture(autouse=True)
def linger(home: Path) -> None:
    """Idle supervisors wait 10 s here (2 s by default): a loaded machine may take longer
    than that to start the next `ferry` command."""
    assert ferry("config", "set", "local.linger", "10s").returncode == 0


def supervisor_of(job_id: str) -> int:
    from ferry.store import open_store

    pid = open_store().get_job(job_id).supervisor_pid
    assert pid is not None
    return pid


def test_the_next_job_goes_to_the_supervisor_of_the_last_one(home: Path, project: Path) -> None:
    first = submit("--", "python", "-c", "pass", cwd=project)
    wait_status(first, "SUCCEEDED")
    wait_for(lambda: idle_sockets(home), 5, "the idle supervisor's socket")
    second = submit("--", "python", "-c", "print('second')", cwd=project)
    assert wait_status(second, "SUCCEEDED")["status"] == "SUCCEEDED"
    assert supervisor_of(second) == supervisor_of(first)
    assert ferry("logs", second).stdout == "second\n"
    # with nothing more to do it ends, and takes its socket with it
    wait_for(lambda: not pid_alive(supervisor_of(first)), 30, "the idle supervisor to end")
    assert idle_sockets(home) == []


def test_local_linger_0_keeps_no_supervisor_waiting(home: Path, project: Path) -> None:
    assert ferry("config", "set", "local.linger", "0").returncode == 0
    first = submit("--", "python", "-c", "pass", cwd=project)
    wait_status(first, "SUCCEEDED")
    wait_for(lambda: not pid_alive(supervisor_of(first)), 30, "the supervisor to end")
    assert idle_sockets(home) == []
    second = submit("--", "python", "-c", "pass", cwd=project)
    wait_status(second, "SUCCEEDED")
    assert supervisor_of(second) != supervisor_of(first)


SHOW = """
import os, resource
mask = os.umask(0)
print("umask", oct(mask), "nice", os.nice(0), "files", resource.getrlimit(resource.RLIMIT_NOFILE)[0],
      "profile", os.environ.get("AWS_PROFILE"))
"""


@pytest.mark.parametrize(
    ("caller", "seen"),
    [
        ("umask 027; exec nice -n 3", "umask 0o27 nice 3"),
        ("ulimit -S -n 512; exec", "files 512"),
        ("AWS_PROFILE=other exec", "profile other"),
    ],
)
def test_a_submitter_unlike_the_idle_supervisor_gets_its_own(
    home: Path, project: Path, caller: str, seen: str
) -> None:
    first = submit("--", "python", "-c", "pass", cwd=project)
    wait_status(first, "SUCCEEDED")
    wait_for(lambda: idle_sockets(home), 5, "the idle supervisor's socket")
    # what the job (or the supervisor's own staging and uploads) would take on from its
    # supervisor: so one started from here
    (project / "show.py").write_text(SHOW)
    result = subprocess.run(
        f"{caller} {FERRY} run --detach -- python show.py",
        shell=True,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    second = result.stdout.strip()
    wait_status(second, "SUCCEEDED")
    assert supervisor_of(second) != supervisor_of(first)
    assert seen in ferry("logs", second).stdout


def test_a_supervisor_running_changed_ferry_files_takes_no_job(tmp_path: Path) -> None:
    # a copy of the package, so that editing it touches no other test's Ferry
    import shutil

    import ferry

    copy = tmp_path / "site"
    shutil.copytree(Path(ferry.__file__).parent, copy / "ferry")
    probe = (
        "import os, time, ferry.handoff as h\n"
        "before = h._current()\n"
        "os.utime(os.path.join(os.path.dirname(h.__file__), 'handoff.py'))  # an edit\n"
        "print(before, h._current())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.split() == ["True", "False"], result.stderr


def test_an_idle_supervisor_that_never_answers_is_passed_over(home: Path, project: Path) -> None:
    from ferry import handoff

    # a listener at an idle supervisor's place that accepts and then says nothing
    run = home / "run"
    run.mkdir(parents=True, mode=0o700, exist_ok=True)
    # (a `ferry` started from here has this process's identity: same interpreter, user,
    # limits, umask and the rest)
    path = run / f"idle-{handoff._identity()}-99999999.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with handoff._short(str(path)) as short:
        mute.bind(short)
    mute.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        mute.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(mute.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        job = submit("--", "python", "-c", "pass", cwd=project)
        assert wait_status(job, "SUCCEEDED")["status"] == "SUCCEEDED"
        assert held, "the submitter offered the job to the mute listener first"
        # passed over after the reply timeout, not stuck on it
        assert time.monotonic() - started < handoff.REPLY_TIMEOUT_S + 20
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        mute.close()


def test_a_socket_left_by_a_killed_supervisor_is_removed(home: Path, project: Path) -> None:
    first = submit("--", "python", "-c", "pass", cwd=project)
    wait_status(first, "SUCCEEDED")
    sockets = wait_for(lambda: idle_sockets(home), 5, "the idle supervisor's socket")
    supervisor = supervisor_of(first)
    os.kill(supervisor, 9)  # its socket stays behind, with no one listening
    wait_for(lambda: not pid_alive(supervisor), 10, "the supervisor to die")
    assert idle_sockets(home) == sockets
    second = submit("--", "python", "-c", "pass", cwd=project)
    assert wait_status(second, "SUCCEEDED")["status"] == "SUCCEEDED"
    assert supervisor_of(second) != supervisor
    assert sockets[0] not in idle_sockets(home)


def test_a_stopped_idle_supervisor_ends_at_once(home: Path, project: Path) -> None:
    first = submit("--", "python", "-c", "pass", cwd=project)
    wait_status(first, "SUCCEEDED")
    wait_for(lambda: idle_sockets(home), 5, "the idle supervisor's socket")
    supervisor = supervisor_of(first)
    os.kill(supervisor, 15)
    wait_for(lambda: not pid_alive(supervisor), 1.5, "the idle supervisor to end on SIGTERM")
    assert idle_sockets(home) == []
