"""The runner as a process of its own (``python -m ferry.runner RUN_FOLDER``): a gang of
real processes, their log, the notice, a failing rank, and its record in the run folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ferry.logs import parse_line
from ferry.runner.order import ORDER, RunOrder
from ferry.runner.record import RunFolderReader, RunState
from tests.backends.test_local import wait_status
from tests.conftest import ferry, ferry_json, job_status, submit, wait_for

# Each rank says who it is, then does what its rank's word in argv says.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    rank = int(os.environ.get("RANK", "0"))
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SECRET")
    print(" ".join(f"{k}={os.environ.get(k, '')}" for k in keys), flush=True)
    what = sys.argv[1 + rank] if len(sys.argv) > 1 + rank else "ok"
    if what == "stubborn":
        signal.signal(signal.SIGTERM, lambda *a: print("ignoring the notice", flush=True))
    else:
        signal.signal(signal.SIGTERM, lambda *a: (print("notice", flush=True), sys.exit(0)))
    if what.startswith("fail"):
        time.sleep(0.3)
        print("something broke", file=sys.stderr, flush=True)
        sys.exit(int(what[4:] or 1))
    if what in ("wait", "stubborn"):
        while True:
            time.sleep(0.05)
    """
)


def _order(tmp_path: Path, args: list[str], procs: int = 1, grace: float = 5.0) -> Path:
    (tmp_path / "job.py").write_text(SCRIPT)
    folder = tmp_path / "run"
    RunOrder(
        attempt=1,
        argv=[sys.executable, "job.py", *args],
        cwd=str(tmp_path),
        env={},
        grace=grace,
        log_file=str(tmp_path / "attempt.log"),
        procs_per_node=procs,
    ).write(folder)
    return folder


def _start(folder: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SECRET": "s3cr3t"}
    return subprocess.Popen([sys.executable, "-m", "ferry.runner", str(folder)], env=env)


def _state(folder: Path) -> RunState:
    state = RunFolderReader(str(folder)).state()
    assert state is not None
    return state


def _pids(folder: Path) -> list[int]:
    """The processes the runner says it started (none until it has said)."""
    state = RunFolderReader(str(folder)).state()
    return state.pids if state is not None else []


def _lines(tmp_path: Path) -> list[tuple[int, str, str]]:
    log = tmp_path / "attempt.log"
    raw = log.read_bytes().splitlines() if log.exists() else []
    return [(line.rank, line.stream, line.text) for line in map(parse_line, raw)]


def test_a_gang_gets_torchruns_variables_and_one_log(tmp_path: Path) -> None:
    folder = _order(tmp_path, [], procs=3)
    assert _start(folder).wait(60) == 0
    state = _state(folder)
    assert (state.state, state.exit_code, state.reason) == ("ended", 0, None)
    assert len(state.pids) == 3 and state.cpu_seconds and state.peak_rss
    said = {rank: text for rank, stream, text in _lines(tmp_path) if "RANK=" in text}
    assert sorted(said) == [0, 1, 2]
    fields = {r: dict(w.split("=", 1) for w in text.split()) for r, text in said.items()}
    ports = {f["MASTER_PORT"] for f in fields.values()}
    assert len(ports) == 1 and ports.pop().isdigit()
    for rank, f in fields.items():
        assert (f["RANK"], f["LOCAL_RANK"], f["WORLD_SIZE"]) == (str(rank), str(rank), "3")
        assert f["MASTER_ADDR"] == "127.0.0.1"
        assert f["SECRET"] == "s3cr3t"  # the runner's environment is the job's
    # the secret went to the processes, never into the run folder
    for path in folder.rglob("*"):
        assert not path.is_file() or b"s3cr3t" not in path.read_bytes(), path
    assert "env" not in json.loads((folder / ORDER).read_text())


def test_a_failing_rank_stops_the_others_and_is_named(tmp_path: Path) -> None:
    folder = _order(tmp_path, ["wait", "fail3", "wait"], procs=3, grace=30)
    started, wall = time.monotonic(), time.time()
    assert _start(folder).wait(60) == 0
    assert time.monotonic() - started < 20  # the others took the notice, not the grace
    state = _state(folder)
    assert state.exit_code == 3
    # it failed of itself: when (a gang over nodes names the node that failed first)
    assert state.failed_at is not None and state.ended_at is not None
    assert wall + 0.3 <= state.failed_at <= state.ended_at
    assert state.reason is not None
    assert state.reason.startswith("rank 1: exit code 3 (last log lines:")
    assert "something broke" in state.reason
    lines = _lines(tmp_path)
    assert (0, "stdout", "notice") in lines and (2, "stdout", "notice") in lines
    assert (1, "stderr", "something broke") in lines
    events = RunFolderReader(str(folder)).read("events").decode()
    assert "rank 1 failed (exit code 3): stopping the other ranks" in events


def test_the_notice_reaches_every_rank(tmp_path: Path) -> None:
    folder = _order(tmp_path, ["wait", "wait"], procs=2)
    runner = _start(folder)
    wait_for(lambda: len(_pids(folder)) == 2, 30, "the gang")
    wait_for(lambda: len([x for x in _lines(tmp_path) if "RANK=" in x[2]]) == 2, 30, "both")
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(30) == 0
    state = _state(folder)
    assert (state.exit_code, state.reason) == (0, None)  # both took the notice and exited 0
    assert [r for r, _, text in _lines(tmp_path) if text == "notice"] in ([0, 1], [1, 0])
    events = RunFolderReader(str(folder)).read("events").decode()
    assert "notice (SIGTERM): SIGTERM to 2 process groups, SIGKILL after 5s" in events


def test_a_rank_that_ignores_the_notice_is_killed_after_the_grace(tmp_path: Path) -> None:
    folder = _order(tmp_path, ["stubborn"], grace=0.5)
    runner = _start(folder)
    wait_for(lambda: any("RANK=" in x[2] for x in _lines(tmp_path)), 30, "the process")
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(30) == 0
    state = _state(folder)
    assert state.exit_code == -signal.SIGKILL
    assert state.failed_at is None  # its end came from the notice: not a failure of its own
    assert state.reason is not None and state.reason.startswith("exit code 137 (SIGKILL)")
    assert "out of memory" not in state.reason  # it was the runner's own SIGKILL
    assert "ignoring the notice" in state.reason


def test_a_command_that_cannot_start_is_recorded(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    RunOrder(attempt=2, argv=["no-such-program-here"], cwd=str(tmp_path), env={}, grace=1).write(
        folder
    )
    assert _start(folder).wait(30) == 0
    state = _state(folder)
    assert (state.attempt, state.outcome, state.exit_code) == (2, "not_started", None)
    assert state.reason is not None and "command not found: no-such-program-here" in state.reason


def test_the_processes_die_with_a_killed_runner(tmp_path: Path) -> None:
    folder = _order(tmp_path, ["wait", "wait"], procs=2)
    runner = _start(folder)
    wait_for(lambda: len(_pids(folder)) == 2, 30, "the gang")
    pids = _pids(folder)
    runner.kill()
    runner.wait(10)

    def gone() -> bool:
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if stat.split(") ", 1)[1][:1] != "Z":
                return False
        return True

    wait_for(gone, 10, "the ranks to die with their runner")
    assert _state(folder).state == "running"  # no end recorded: the controller sees it lost


def test_the_runner_refuses_a_folder_without_an_order(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "ferry.runner", str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "holds no run order (order.json)" in run.stderr
    usage = subprocess.run([sys.executable, "-m", "ferry.runner"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: python -m ferry.runner RUN_FOLDER" in usage.stderr


def test_a_job_whose_runner_is_killed_resumes_under_a_new_one(home: Path, project: Path) -> None:
    (project / "nap.py").write_text(
        "import os, time\ntime.sleep(60 if os.environ['FERRY_ATTEMPT'] == '1' else 0)\n"
    )
    job_id = submit("--", "python", "nap.py", cwd=project)
    wait_status(job_id, "RUNNING")
    runner = int(job_status(job_id)["attempts"][0]["handle"])
    wait_for(lambda: Path(f"/proc/{runner}/comm").read_text().strip() == "ferry-runner", 10)
    os.kill(runner, signal.SIGKILL)
    assert wait_status(job_id, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"
    first, second = job_status(job_id)["attempts"]
    assert first["status"] == "LOST"
    assert first["reason"] == (
        "lost (its runner ended (exit code 137 (SIGKILL)) before recording the end); 1 of 20"
    )
    assert second["status"] == "SUCCEEDED" and int(second["handle"]) != runner


def test_a_gang_job_names_its_failing_rank_and_shows_each_ranks_lines(
    home: Path, project: Path
) -> None:
    (project / "job.py").write_text(SCRIPT)
    result = ferry(
        "run", "--procs-per-node", "2", "--", "python", "job.py", "wait", "fail3", cwd=project
    )
    assert result.returncode == 3
    job_id = ferry_json("jobs", "--json")[0]["id"]
    reason = job_status(job_id)["reason"]
    assert reason.startswith("rank 1: exit code 3 (last log lines:") and "something broke" in reason
    lines = ferry("logs", job_id).stdout.splitlines()
    assert "[0] notice" in lines  # rank 0 took the notice when rank 1 failed
    assert any(line.startswith("[1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2") for line in lines)
    assert ferry("logs", job_id, "--rank", "1", "--stream", "stderr").stdout == "something broke\n"
    bad = ferry("logs", job_id, "--rank", "2")
    assert bad.returncode == 2 and "has no rank 2; it has ranks 0 to 1" in bad.stderr


def test_cancelling_a_gang_gives_every_rank_the_notice(home: Path, project: Path) -> None:
    (project / "job.py").write_text(SCRIPT)
    job_id = submit(
        "--procs-per-node", "3", "--", "python", "job.py", "wait", "wait", "wait", cwd=project
    )
    wait_for(lambda: ferry("logs", job_id).stdout.count("WORLD_SIZE=3") == 3, 30, "three ranks")
    assert ferry("cancel", job_id).returncode == 0
    assert wait_status(job_id, "CANCELLED")["status"] == "CANCELLED"
    notices = [line for line in ferry("logs", job_id).stdout.splitlines() if "notice" in line]
    assert sorted(notices) == ["[0] notice", "[1] notice", "[2] notice"]
