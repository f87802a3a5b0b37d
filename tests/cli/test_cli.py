"""The CLI as people use it: listings with --json, status, config, many concurrent submits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FERRY, ferry, ferry_json, job_status, submit, wait_for

pytestmark = pytest.mark.slow


def test_twenty_parallel_submits_lose_nothing(home: Path, project: Path) -> None:
    ferry("config", "set", "local.cpus", "4")
    procs = [
        subprocess.Popen(
            [FERRY, "run", "--detach", "--name", f"p{i}", "--", "python", "-c", f"print({i})"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(20)
    ]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        ids.append(out.strip())
    assert len(set(ids)) == 20
    jobs = wait_for(
        lambda: (js := ferry_json("jobs")) and all(j["status"] == "SUCCEEDED" for j in js) and js,
        120,
        "all 20 jobs to succeed",
    )
    assert sorted(j["id"] for j in jobs) == sorted(ids)
    for i, job_id in enumerate(ids):
        assert ferry("logs", job_id).stdout == f"{i}\n"
        assert [a["number"] for a in job_status(job_id)["attempts"]] == [1]


def test_jobs_table_filters_and_json(home: Path, project: Path) -> None:
    ok = submit("--name", "good", "--", "true", cwd=project)
    bad = submit("--name", "bad", "--", "false", cwd=project)
    assert ferry("wait", ok, bad).returncode == 1
    table = ferry("jobs").stdout
    assert ok in table and bad in table and "SUCCEEDED" in table and "FAILED" in table
    failed = ferry_json("jobs", "--status", "failed")
    assert [j["id"] for j in failed] == [bad]
    assert failed[0]["reason"].startswith("exit code 1")
    assert len(ferry_json("jobs", "--limit", "1")) == 1


def test_status_shows_attempts_outputs_and_events(home: Path, project: Path) -> None:
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'x' * 2048)\n"
    )
    job_id = submit("--name", "saver", "--", "python", "save.py", cwd=project)
    ferry("wait", job_id)
    text = ferry("status", job_id).stdout
    for piece in (
        job_id,
        "SUCCEEDED",
        "python save.py",
        "model/ 1 file, 2.0 KB",
        "Attempts",
        "Events",
        "admitted",
    ):
        assert piece in text, piece
    data = job_status(job_id)
    assert data["attempts"][0]["exit_code"] == 0
    assert [e["to"] for e in data["events"] if e["to"]] == [
        "QUEUED",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]


def test_dry_run_prints_the_resolved_spec(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text(
        "name: dry\ncommand: python train.py\nresources: {memory: 1GiB}\n"
    )
    result = ferry("run", "job.yaml", "--dry-run", "--cpus", "1", cwd=project)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["backend"] == "local"
    assert data["spec"]["resources"] == {
        "accelerator": None,
        "cpus": 1.0,
        "memory": 1024**3,
        "spot": False,
        "nodes": 1,
        "procs_per_node": None,  # one per GPU (none here: 1)
        "providers": [],
        "regions": [],
    }
    assert data["plan"]["usd_per_hour"] == 0.0
    assert ferry_json("jobs") == []


def test_unsupported_fields_are_refused_not_ignored(home: Path, project: Path) -> None:
    cases = {
        ("--spot",): "spot capacity",
        ("--nodes", "2"): "multi-node",
        ("--accelerator", "tpu-v5e-8"): "TPUs",
    }
    for flags, words in cases.items():
        result = ferry("run", *flags, "--", "true", cwd=project)
        assert result.returncode == 1, (flags, result.stderr)
        assert words in result.stderr and "does not support" in result.stderr, result.stderr
    (project / "job.yaml").write_text("command: python t.py\nenvironment: {image: 'torch:2'}\n")
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 1 and "environment.image (torch:2)" in result.stderr


def test_local_input_path_is_given_to_the_job(home: Path, project: Path) -> None:
    data = project.parent / "data"
    data.mkdir()
    (data / "x.csv").write_text("1,2\n")
    (project / "read.py").write_text(
        "import os\nprint(open(os.path.join(os.environ['FERRY_INPUT_TRAIN'], 'x.csv')).read().strip(), os.environ['SM_CHANNEL_TRAIN'] == os.environ['FERRY_INPUT_TRAIN'])\n"
    )
    result = ferry("run", "--input", f"train={data}", "--", "python", "read.py", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1,2 True\n"
    missing = ferry("run", "--input", "train=./nope", "--", "true", cwd=project)
    assert missing.returncode == 2 and "input 'train'" in missing.stderr


def test_help_lists_every_command() -> None:
    out = ferry("--help").stdout
    for name in ("run", "jobs", "status", "logs", "cancel", "wait", "config"):
        assert name in out
    assert ferry("--version").stdout.startswith("ferry ")


def test_jobs_watch_is_live_until_ctrl_c(home: Path, project: Path) -> None:
    import os
    import pty
    import signal

    from tests.conftest import read_terminal_until

    first = submit("--name", "first", "--", "true", cwd=project)
    ferry("wait", first)
    pid, fd = pty.fork()
    if pid == 0:  # the child: `ferry jobs --watch` on a terminal
        os.execv(FERRY, [FERRY, "jobs", "--watch"])
    seen = read_terminal_until(fd, first.encode())
    second = submit("--name", "second", "--", "true", cwd=project)
    read_terminal_until(fd, second.encode(), seen)  # the table refreshed by itself
    os.kill(pid, signal.SIGINT)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0


def test_hyperparameters_typed_like_numbers_are_numbers(home: Path, project: Path) -> None:
    result = ferry(
        "run",
        "-p",
        "lr=1e-3",
        "-p",
        "steps=100",
        "-p",
        "name=resnet",
        "--dry-run",
        "--",
        "true",
        cwd=project,
    )
    assert json.loads(result.stdout)["spec"]["hyperparameters"] == {
        "lr": 0.001,
        "steps": 100,
        "name": "resnet",
    }


def test_logs_of_an_attempt_that_does_not_exist(home: Path, project: Path) -> None:
    from tests.conftest import assert_one_line_error

    job_id = submit("--", "true", cwd=project)
    ferry("wait", job_id)
    assert "has no attempt 99" in assert_one_line_error(
        ferry("logs", "-f", job_id, "--attempt", "99"), 1
    )
    assert "--tail" in assert_one_line_error(ferry("logs", job_id, "--tail", "-5"), 2)


def test_relative_outputs_root_is_stored_absolute(home: Path, project: Path) -> None:
    assert ferry("config", "set", "outputs_root", "out", cwd=project).returncode == 0
    assert ferry("config", "get", "outputs_root").stdout.strip() == str(project / "out")
