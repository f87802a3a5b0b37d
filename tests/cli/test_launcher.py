"""The launcher (ferry.launcher): a command run there behaves as one run here: its folder,
environment, terminal, signals, exit code. It is started by a command that found none,
ends when idle, steps aside when Ferry's files change, and is never used when turned off.

Each test has a FERRY_HOME with a short path (a Unix socket's path has a limit) and turns
the launcher on (tests/conftest.py turns it off for every other test)."""

from __future__ import annotations

import hashlib
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ferry.procs import SUPERVISOR_NAME
from tests.conftest import (
    FERRY,
    ferry,
    ferry_json,
    job_status,
    read_terminal_until,
    showing,
    stop_leftovers,
    submit,
    wait_for,
)
from tests.conftest import wait_status_slowly as wait_status

pytestmark = pytest.mark.slow


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fl-", dir="/tmp"))
    monkeypatch.setenv("FERRY_HOME", str(path))
    monkeypatch.setenv("FERRY_LAUNCHER", "on")
    yield path
    stop_leftovers(path)  # (through Python: a `ferry` command would start a launcher again)
    for proc in launchers(path):
        proc.terminate()
    psutil.wait_procs(launchers(path), timeout=10)
    shutil.rmtree(path, ignore_errors=True)


def launchers(home: Path) -> list[psutil.Process]:
    """The launcher processes serving ``home`` (not the forks running commands)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "ferry.launcher" not in cmdline:
                continue
            if proc.environ().get("FERRY_HOME") != str(home):
                continue
            if proc.name() == SUPERVISOR_NAME:  # forked from a command, by its name
                continue
            parent = psutil.Process(proc.info["ppid"])
            if "ferry.launcher" in (parent.cmdline() or []):
                continue  # a command's fork
            found.append(proc)
        except psutil.Error:
            continue
    return found


def started(home: Path) -> psutil.Process:
    """The one launcher of ``home``, once it is listening."""
    procs = wait_for(lambda: launchers(home), 30, "a launcher")
    assert len(procs) == 1
    wait_for(lambda: list((home / "run").glob("launcher-*.sock")), 30, "its socket")
    return procs[0]


def command_of(launcher: psutil.Process) -> psutil.Process:
    """The process the launcher forked to run the command under way."""

    def running() -> list[psutil.Process]:
        found = []
        for child in launcher.children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
            except psutil.Error:
                continue
        return found

    forks = wait_for(running, 30, "the launcher to run the command")
    assert len(forks) == 1
    return forks[0]


def following(project: Path, **options: Any) -> subprocess.Popen[str]:
    """`ferry run` following a job that runs for a minute, once the job's output shows."""
    sleeper = "import time; print('up', flush=True); time.sleep(60)"
    cli = subprocess.Popen(
        [FERRY, "run", "--", "python", "-c", sleeper],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )
    assert cli.stdout is not None
    assert cli.stdout.readline() == "up\n"
    return cli


def test_a_command_starts_one_and_the_next_runs_in_it(home: Path, project: Path) -> None:
    first = ferry("run", "--", "python", "-c", "print('first')", cwd=project)
    assert first.returncode == 0 and first.stdout == "first\n", first.stderr
    launcher = started(home)

    (project / "data.txt").write_text("from the caller's folder")
    (project / "show.py").write_text(
        "import os, sys, time\n"
        "print(open('data.txt').read(), os.environ['TOKEN'], oct(os.umask(0)))\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)))\n"
        "time.sleep(float(sys.argv[1]))\n"
    )
    caller = f"umask 027 && exec taskset -c 0 {FERRY} run --secret TOKEN"
    cli = subprocess.Popen(
        ["sh", "-c", f"{caller} -- python show.py 2"],
        cwd=project,
        env={**os.environ, "TOKEN": "s3cret"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the command runs in a fork of the launcher, not in the process that was started
    command_of(launcher)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert out == "from the caller's folder s3cret 0o27\n0 [0]\n"  # and its CPUs
    job = ferry_json("jobs")[0]
    assert f"ferry: {job['id']} SUCCEEDED" in err

    failing = ferry("run", "--", "sh", "-c", "echo oops >&2; exit 3", cwd=project)
    assert failing.returncode == 3
    assert failing.stdout == "" and "oops" in failing.stderr  # streams kept apart
    detached = ferry("run", "--detach", "--", "true", cwd=project)
    assert detached.returncode == 0 and detached.stdout.strip().startswith("true-")
    assert "ferry: submitted" in detached.stderr
    bad = ferry("run", "--max-runtime", "soon", "--", "true", cwd=project)
    assert (
        bad.returncode == 2 and bad.stderr.startswith("ferry: ") and "Traceback" not in bad.stderr
    )
    assert launchers(home) == [launcher]  # one launcher served them all


def test_no_process_holds_a_secret_once_its_job_has_ended(home: Path, project: Path) -> None:
    """The command that passes a secret starts the launcher; a later command's job goes to
    the supervisor that ran the secret's job (waiting for one): neither they, the launcher
    nor the processes forked from it show the value to this user's other processes."""
    value = f"value-{os.urandom(12).hex()}"
    off = {"FERRY_LAUNCHER": "off"}
    assert ferry("config", "set", "local.linger", "60", env=off).returncode == 0
    reads = (
        "import hashlib, os; print(hashlib.sha256(os.environ['MY_API_KEY'].encode()).hexdigest())"
    )
    first = ferry(
        *("run", "--secret", "MY_API_KEY", "--", "python", "-c", reads),
        cwd=project,
        env={"MY_API_KEY": value},
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{hashlib.sha256(value.encode()).hexdigest()}\n"  # it had it
    launcher = started(home)  # started by that command, as it ended
    gate = project / "go"
    waits = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    later = submit("--", "python", "-c", waits, cwd=project)
    try:
        wait_for(lambda: job_status(later)["status"] == "RUNNING", 30, "the later job to run")
        assert launcher.is_running()
        assert showing(value) == []
        from ferry.store import open_store

        store = open_store()
        (secrets_job,) = [job["id"] for job in ferry_json("jobs") if job["id"] != later]
        supervisor = store.get_job(secrets_job).supervisor_pid
        assert supervisor is not None and store.get_job(later).supervisor_pid == supervisor
    finally:
        gate.write_text("")
    assert wait_status(later, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    os.kill(supervisor, signal.SIGTERM)  # (rather than waiting a minute for another job)


def test_ctrl_c_reaches_the_command(home: Path, project: Path) -> None:
    ferry("jobs", cwd=project)
    started(home)
    cli = following(project, start_new_session=True)
    cli.send_signal(signal.SIGINT)
    _out, err = cli.communicate(timeout=30)
    assert cli.returncode == 130, err
    assert "cancelling" in err
    assert ferry_json("jobs")[0]["status"] == "CANCELLED"


def test_a_caller_that_dies_takes_its_command_along_not_the_job(home: Path, project: Path) -> None:
    ferry("jobs", cwd=project)
    launcher = started(home)
    cli = following(project)
    command = command_of(launcher)
    cli.kill()  # as a closed terminal or kill -9 would
    cli.wait()
    psutil.wait_procs([command], timeout=30)
    assert not command.is_running()
    assert ferry_json("jobs")[0]["status"] == "RUNNING"  # the job goes on, as with a hangup
    assert launcher.is_running()


def test_a_prompt_on_the_callers_terminal(home: Path, project: Path) -> None:
    ferry("config", "set", "local.price_hour", "20")  # above cost.confirm_above (10 USD/h)
    started(home)
    pid, fd = pty.fork()
    if pid == 0:  # `ferry run` on a terminal, asked whether to launch
        os.chdir(project)
        os.execv(FERRY, [FERRY, "run", "--", "python", "-c", "print('launched')"])
    seen = read_terminal_until(fd, b"launch it? [y/N]")
    os.write(fd, b"y\n")
    read_terminal_until(fd, b"launched", seen)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ferry_json("jobs")[0]["status"] == "SUCCEEDED"


def test_it_ends_when_idle(home: Path, project: Path) -> None:
    ferry("config", "set", "launcher.idle", "1s")
    launcher = started(home)
    psutil.wait_procs([launcher], timeout=30)
    assert not launcher.is_running()
    assert not list((home / "run").glob("launcher-*.sock"))


def test_turned_off_it_is_neither_started_nor_used(home: Path, project: Path) -> None:
    off = {"FERRY_LAUNCHER": "off"}
    assert ferry("jobs", cwd=project, env=off).returncode == 0
    time.sleep(1)
    assert launchers(home) == []
    ferry("config", "set", "launcher.idle", "0")
    assert ferry("jobs", cwd=project).returncode == 0
    time.sleep(1)
    assert launchers(home) == []


def test_an_edited_ferry_is_run_fresh_and_replaces_the_launcher(
    home: Path, project: Path, tmp_path: Path
) -> None:
    """A copy of Ferry's package (first on PYTHONPATH) stands for an installation that is
    then edited: the launcher serving the old files must not run the next command."""
    import ferry as package

    copy = tmp_path / "site"
    shutil.copytree(Path(package.__file__).parent, copy / "ferry")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    argv = [sys.executable, "-c", "import sys; from ferry.cli.main import main; sys.exit(main())"]
    run = [*argv, "run", "--", "python", "-c", "print('ok')"]
    assert subprocess.run(run, cwd=project, env=env, capture_output=True).returncode == 0
    old = started(home)
    assert old.environ().get("PYTHONPATH") == str(copy)

    spec = copy / "ferry" / "spec.py"
    spec.write_text(spec.read_text().replace("Invalid\ninput raises", "Invalid\n input raises"))
    edited = subprocess.run(run, cwd=project, env=env, capture_output=True, text=True)
    assert edited.returncode == 0 and edited.stdout == "ok\n", edited.stderr
    psutil.wait_procs([old], timeout=30)  # it declined the command, and ended
    assert not old.is_running()
    new = wait_for(lambda: [p for p in launchers(home) if p.pid != old.pid], 30, "a new launcher")
    assert len(new) == 1


@pytest.mark.parametrize("then", ["fg", "the caller dies"])
def test_ctrl_z_stops_the_command_with_the_caller(home: Path, project: Path, then: str) -> None:
    ferry("jobs", cwd=project)
    launcher = started(home)
    # a process group of its own whose parent is in another group of the session, as a
    # shell's job is: a group without one (orphaned) is never stopped by SIGTSTP
    cli = following(project, process_group=0)
    command = command_of(launcher)
    cli.send_signal(signal.SIGTSTP)
    wait_for(lambda: command.status() == psutil.STATUS_STOPPED, 10, "the command to stop")
    wait_for(lambda: psutil.Process(cli.pid).status() == psutil.STATUS_STOPPED, 10, "ferry")
    if then == "fg":
        cli.send_signal(signal.SIGCONT)  # what the shell's fg sends
        wait_for(lambda: command.status() != psutil.STATUS_STOPPED, 10, "the command to go on")
        cli.send_signal(signal.SIGINT)
        cli.communicate(timeout=30)
        assert cli.returncode == 130
    else:
        cli.kill()
        cli.wait()
        psutil.wait_procs([command], timeout=30)
        assert not command.is_running()  # it took the hangup, though stopped
        wait_for(lambda: not launcher.children(), 10, "the launcher to reap it")


def test_a_command_of_lower_priority_is_never_run_at_the_launchers(
    home: Path, project: Path
) -> None:
    """A fork cannot take on every difference (a higher priority, other groups, higher
    hard limits): a command that differs runs in a launcher of its own kind."""
    ferry("jobs", cwd=project)
    launcher = started(home)
    show = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    niced = ["nice", "-n", "7", FERRY, "run", "--", "python", "-c", show]
    first = subprocess.run(niced, cwd=project, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0 and first.stdout == "7\n", first.stderr
    assert not launcher.children()
    wait_for(lambda: len(launchers(home)) == 2, 30, "a launcher for niced commands")
    again = subprocess.run(niced, cwd=project, capture_output=True, text=True, timeout=60)
    assert again.stdout == "7\n"
    plain = ferry("run", "--", "python", "-c", show, cwd=project)
    assert plain.stdout == "0\n"


def test_a_caller_that_ignores_hangups_keeps_its_command(home: Path, project: Path) -> None:
    ferry("jobs", cwd=project)
    launcher = started(home)
    gate = project / "go"
    script = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    cli = subprocess.Popen(
        ["nohup", FERRY, "run", "--", "python", "-c", script],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    command = command_of(launcher)
    wait_for(lambda: ferry_json("jobs") and ferry_json("jobs")[0]["status"] == "RUNNING")
    cli.send_signal(signal.SIGHUP)  # ignored by the caller (nohup): so by its command
    time.sleep(0.5)
    assert command.is_running() and cli.poll() is None
    gate.write_text("")
    _out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err


def test_a_launcher_taken_away_answers_its_running_commands_first(
    home: Path, project: Path
) -> None:
    ferry("jobs", cwd=project)
    launcher = started(home)
    gate = project / "go"
    script = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    cli = subprocess.Popen(
        [FERRY, "run", "--", "python", "-c", f"{script}raise SystemExit(5)"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    command_of(launcher)
    for socket_file in (home / "run").glob("launcher-*.sock"):
        socket_file.unlink()  # as a launcher that replaced it, or FERRY_HOME removed
    time.sleep(3)  # it notices within 2 s, and takes no more commands
    assert launcher.is_running()
    gate.write_text("")
    cli.communicate(timeout=60)
    assert cli.returncode == 5  # still answered, with the command's own exit code
    psutil.wait_procs([launcher], timeout=30)
    assert not launcher.is_running()


def test_a_socket_in_a_folder_others_can_write_is_never_used(home: Path, project: Path) -> None:
    ferry("jobs", cwd=project)
    launcher = started(home)
    (home / "run").chmod(0o777)  # another user could have put a socket there
    assert ferry("run", "--", "true", cwd=project).returncode == 0
    # run on its own (the fork that took the connection got nothing, and ended), then it
    # started a launcher of its own, in the folder made private again
    assert (home / "run").stat().st_mode & 0o777 == 0o700
    psutil.wait_procs([launcher], timeout=30)  # (replaced)
    assert not launcher.is_running()
    assert len(launchers(home)) == 1


def test_turning_it_off_ends_the_running_launcher(home: Path, project: Path) -> None:
    ferry("jobs", cwd=project)
    launcher = started(home)
    assert ferry("config", "set", "launcher.idle", "0").returncode == 0
    psutil.wait_procs([launcher], timeout=30)
    assert not launcher.is_running()
    ferry("jobs", cwd=project)
    time.sleep(1)
    assert launchers(home) == []


def test_a_relative_ferry_home(home: Path, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_HOME", os.path.relpath(home, project))
    ferry("jobs", cwd=project)
    launcher = started(home)
    cli = following(project)
    command_of(launcher)
    cli.send_signal(signal.SIGINT)
    cli.communicate(timeout=30)
