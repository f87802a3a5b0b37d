"""The local backend and its supervisor, driven through the real `ferry` command: real
processes, signals and files; every wait is on a condition with a deadline."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import FERRY, ferry, ferry_json, job_status, submit, wait_for

pytestmark = pytest.mark.slow


def script(project: Path, name: str, body: str) -> str:
    (project / name).write_text(textwrap.dedent(body))
    return name


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_status(job_id: str, *statuses: str, timeout: float = 30) -> dict:
    return wait_for(
        lambda: (s := job_status(job_id))["status"] in statuses and s,
        timeout,
        f"{job_id} to be {'/'.join(statuses)}",
    )


def test_run_streams_output_and_exits_zero(home: Path, project: Path) -> None:
    script(
        project,
        "hello.py",
        """
        import sys
        print("to stdout")
        print("to stderr", file=sys.stderr)
    """,
    )
    result = ferry("run", "--", "python", "hello.py", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "to stdout\n"
    assert "to stderr" in result.stderr
    jobs = ferry_json("jobs")
    assert [j["status"] for j in jobs] == ["SUCCEEDED"]
    assert jobs[0]["id"].startswith("hello-")


def test_failure_exit_code_and_reason_with_last_lines(home: Path, project: Path) -> None:
    script(
        project,
        "fail.py",
        """
        import sys
        for i in range(10):
            print(f"line {i}")
        print("boom: the data loader broke", file=sys.stderr)
        sys.exit(3)
    """,
    )
    result = ferry("run", "--", "python", "fail.py", cwd=project)
    assert result.returncode == 3
    job = ferry_json("jobs")[0]
    assert job["status"] == "FAILED"
    assert job["exit_code"] == 3
    assert job["reason"].startswith("exit code 3")
    assert "boom: the data loader broke" in job["reason"]
    assert "line 9" in job["reason"] and "line 0" not in job["reason"]


def test_killed_by_signal_is_reported(home: Path, project: Path) -> None:
    script(project, "segv.py", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = ferry("run", "--", "python", "segv.py", cwd=project)
    assert result.returncode == 128 + 9
    assert "exit code 137 (SIGKILL)" in ferry_json("jobs")[0]["reason"]


def test_command_not_found_is_refused_at_submit(home: Path, project: Path) -> None:
    from tests.conftest import assert_one_line_error

    result = ferry("run", "--", "no-such-program-xyz", cwd=project)
    assert "command not found: no-such-program-xyz" in assert_one_line_error(result, 2)
    (project / "run.sh").write_text("echo hi\n")  # not executable
    result = ferry("run", "--", "./run.sh", cwd=project)
    assert "permission denied" in assert_one_line_error(result, 2)
    assert ferry_json("jobs") == []
    (project / "run.sh").chmod(0o755)
    assert ferry("run", "--", "./run.sh", cwd=project).stdout == "hi\n"


def test_max_runtime_sends_sigterm_then_sigkill(home: Path, project: Path) -> None:
    ferry("config", "set", "local.stop_grace", "1s")
    script(
        project,
        "stubborn.py",
        """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *a: print("got SIGTERM, ignoring", flush=True))
        print("started", flush=True)
        time.sleep(60)
    """,
    )
    began = time.monotonic()
    result = ferry("run", "--max-runtime", "1s", "--", "python", "stubborn.py", cwd=project)
    took = time.monotonic() - began
    assert result.returncode == 124
    assert "got SIGTERM, ignoring" in result.stdout
    assert took < 15
    job = ferry_json("jobs")[0]
    assert job["status"] == "FAILED"
    assert job["reason"] == "max_runtime 1.0s reached"
    detail = job_status(job["id"])
    assert detail["attempts"][0]["status"] == "TIMED_OUT"
    assert detail["attempts"][0]["exit_code"] == 137


def test_cancel_running_job_stops_whole_group(home: Path, project: Path) -> None:
    script(
        project,
        "tree.py",
        """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "pids"), "w").write(f"{os.getpid()} {child.pid}")
        time.sleep(120)
    """,
    )
    job_id = submit("--", "python", "tree.py", cwd=project)
    status = wait_status(job_id, "RUNNING")
    pids_file = Path(status["outputs"]) / "output" / "pids"
    wait_for(pids_file.exists, 30, "the job to write its pids")
    pids = [int(p) for p in pids_file.read_text().split()]
    result = ferry("cancel", job_id, "--wait")
    assert result.returncode == 0, result.stderr
    final = job_status(job_id)
    assert final["status"] == "CANCELLED"
    assert final["attempts"][0]["status"] == "CANCELLED"
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "the job's processes to end")
    assert ferry("wait", job_id).returncode == 130


def test_cancel_queued_job(home: Path, project: Path) -> None:
    ferry("config", "set", "local.cpus", "1")
    script(project, "sleep.py", "import time\ntime.sleep(60)\n")
    first = submit("--", "python", "sleep.py", cwd=project)
    second = submit("--", "python", "sleep.py", cwd=project)
    wait_status(first, "RUNNING")
    assert job_status(second)["status"] == "QUEUED"
    shown = ferry("status", second, env={"COLUMNS": "200"}).stdout
    assert "needs 1 CPU; 0 of 1 CPUs free; 0 jobs ahead of it" in shown, shown
    ferry("cancel", second)
    assert job_status(second)["status"] == "CANCELLED"
    assert job_status(second)["attempts"] == []
    ferry("cancel", first, "--wait")


def test_job_survives_terminal_closing(home: Path, project: Path) -> None:
    script(
        project,
        "slow.py",
        """
        import time
        for i in range(3):
            print("tick", i, flush=True)
            time.sleep(0.5)
    """,
    )
    cli = subprocess.Popen(
        [FERRY, "run", "--", "python", "slow.py"],
        cwd=project,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    job_id = wait_for(lambda: ferry_json("jobs"), 30, "the job to be stored")[0]["id"]
    wait_status(job_id, "RUNNING")
    os.killpg(cli.pid, signal.SIGHUP)  # what closing the terminal does
    cli.wait(10)
    assert cli.returncode == -signal.SIGHUP
    assert wait_status(job_id, "SUCCEEDED", "FAILED", "CANCELLED")["status"] == "SUCCEEDED"
    assert ferry("logs", job_id).stdout == "tick 0\ntick 1\ntick 2\n"


def test_ctrl_c_cancels_the_attached_job(home: Path, project: Path) -> None:
    script(project, "sleep.py", "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\n")
    cli = subprocess.Popen(
        [FERRY, "run", "--", "python", "sleep.py"],
        cwd=project,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job_id = wait_for(lambda: ferry_json("jobs"), 30, "the job to be stored")[0]["id"]
    wait_status(job_id, "RUNNING")
    cli.send_signal(signal.SIGINT)
    _out, err = cli.communicate(timeout=30)
    assert cli.returncode == 130
    assert "cancelling" in err
    assert job_status(job_id)["status"] == "CANCELLED"


def test_supervisor_kill_9_becomes_lost_and_job_processes_die(home: Path, project: Path) -> None:
    """With no preemption retries left, a lost supervisor fails the job (resuming is in
    tests/runtime/test_resume.py)."""
    script(
        project,
        "escape.py",
        """
        import os, subprocess, sys, time
        # one child in the job's group, one that leaves it (its own session)
        a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "pids"), "w").write(f"{os.getpid()} {a.pid} {b.pid}")
        time.sleep(120)
    """,
    )
    (project / "job.yaml").write_text("command: python escape.py\nretries: {on_preemption: 0}\n")
    job_id = submit("job.yaml", cwd=project)
    status = wait_status(job_id, "RUNNING")
    pids_file = Path(status["outputs"]) / "output" / "pids"
    wait_for(pids_file.exists, 30, "the job to write its pids")
    pids = [int(p) for p in pids_file.read_text().split()]
    from ferry.store import open_store

    supervisor = open_store().get_job(job_id).supervisor_pid
    assert supervisor and pid_alive(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not pid_alive(supervisor), 10, "the supervisor to die")
    jobs = ferry_json("jobs")  # any ferry command notices the stale supervisor
    job = next(j for j in jobs if j["id"] == job_id)
    assert job["status"] == "FAILED"
    assert job["reason"].startswith("supervisor lost")
    assert job_status(job_id)["attempts"][0]["status"] == "LOST"
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "every job process to end")


def test_processes_left_behind_by_a_finished_job_are_stopped(home: Path, project: Path) -> None:
    script(
        project,
        "daemon.py",
        """
        import os, subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "pid"), "w").write(str(p.pid))
    """,
    )
    assert ferry("run", "--", "python", "daemon.py", cwd=project).returncode == 0
    job = ferry_json("jobs")[0]
    pid = int((Path(job["outputs"]) / "output" / "pid").read_text())
    wait_for(lambda: not pid_alive(pid), 10, "the left-behind process to be stopped")


def test_contract_environment(home: Path, project: Path) -> None:
    script(
        project,
        "env.py",
        """
        import json, os
        keys = [k for k in os.environ if k.startswith(("FERRY_", "AIP_", "SM_", "CLOUD_ML", "TRAINING_"))]
        keys += ["CUDA_VISIBLE_DEVICES", "MY_SETTING"]
        out = {k: os.environ.get(k) for k in keys}
        out["cwd"] = os.getcwd()
        open(os.path.join(os.environ["FERRY_MODEL_DIR"], "env.json"), "w").write(json.dumps(out))
    """,
    )
    result = ferry(
        "run",
        "--name",
        "envcheck",
        "--env",
        "MY_SETTING=on",
        "-p",
        "lr=0.01",
        "-p",
        "batch-size=64",
        "-p",
        "arch=resnet",
        "--",
        "python",
        "env.py",
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    job = ferry_json("jobs")[0]
    out = Path(job["outputs"])
    env = json.loads((out / "model" / "env.json").read_text())
    jid = job["id"]
    assert (
        env["FERRY_JOB_ID"] == jid
        and env["CLOUD_ML_JOB_ID"] == jid
        and env["TRAINING_JOB_NAME"] == jid
    )
    assert env["FERRY_ATTEMPT"] == "1"
    assert env["FERRY_MODEL_DIR"] == str(out / "model") == env["SM_MODEL_DIR"]
    assert env["AIP_MODEL_DIR"] == f"{out / 'model'}/"
    assert env["FERRY_CHECKPOINT_DIR"] == str(out / "checkpoints")
    assert env["AIP_CHECKPOINT_DIR"] == f"{out / 'checkpoints'}/"
    assert env["FERRY_TENSORBOARD_DIR"] == str(out / "tensorboard")
    assert env["AIP_TENSORBOARD_LOG_DIR"] == f"{out / 'tensorboard'}/"
    assert env["FERRY_OUTPUT_DIR"] == str(out / "output") == env["SM_OUTPUT_DATA_DIR"]
    assert json.loads(env["FERRY_HPARAMS"]) == {"lr": 0.01, "batch-size": 64, "arch": "resnet"}
    assert json.loads(env["SM_HPS"]) == {"lr": 0.01, "batch-size": 64, "arch": "resnet"}
    assert (
        env["SM_HP_LR"] == "0.01"
        and env["SM_HP_BATCH_SIZE"] == "64"
        and env["SM_HP_ARCH"] == "resnet"
    )
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["FERRY_NUM_GPUS"] == "0" == env["SM_NUM_GPUS"]
    assert env["FERRY_NODE_RANK"] == "0" and env["FERRY_NUM_NODES"] == "1"
    assert env["MY_SETTING"] == "on"
    assert env["cwd"] == str(home / "jobs" / jid / "work")  # a fresh copy of the snapshot


def test_declared_gpus_are_shared_without_overlap_and_fifo(home: Path, project: Path) -> None:
    ferry("config", "set", "local.gpus", "2")
    ferry("config", "set", "local.cpus", "8")
    script(
        project,
        "gpu.py",
        """
        import os, sys, time
        out = os.environ["FERRY_OUTPUT_DIR"]
        rank = os.environ.get("LOCAL_RANK", "0")  # (a job of N GPUs runs N processes)
        open(os.path.join(out, "cuda" + rank), "w").write(os.environ["CUDA_VISIBLE_DEVICES"])
        release = os.path.join(os.environ["FERRY_TEST_TMP"], "release-" + sys.argv[1])
        while not os.path.exists(release):
            time.sleep(0.05)
    """,
    )

    def run(tag: str, gpus: int) -> str:
        return submit(
            "--name",
            tag,
            "--accelerator",
            f"A100:{gpus}",
            "--",
            "python",
            "gpu.py",
            tag,
            cwd=project,
        )

    def cuda(job_id: str, rank: int = 0) -> str:
        path = Path(job_status(job_id)["outputs"]) / "output" / f"cuda{rank}"
        return wait_for(lambda: path.exists() and path.read_text(), 30, f"{job_id} to start")

    def release(tag: str) -> None:
        (home.parent / f"release-{tag}").write_text("")

    a, b = run("a", 1), run("b", 1)
    assert sorted([cuda(a), cuda(b)]) == ["0", "1"]
    big = run("big", 2)  # needs both GPUs: waits
    small = run("small", 1)  # would fit after one release, but must not jump ahead of big
    cpu = submit("--name", "cpu", "--", "python", "-c", "print('no gpu needed')", cwd=project)
    assert wait_status(cpu, "SUCCEEDED")["status"] == "SUCCEEDED"  # backfills: needs no GPU
    assert job_status(big)["status"] == "QUEUED"
    release("a")
    wait_status(a, "SUCCEEDED")
    assert job_status(big)["status"] == "QUEUED"
    assert job_status(small)["status"] == "QUEUED"  # the free GPU is held for big
    release("b")
    # one process per GPU, each seeing both as under torchrun (and using GPU LOCAL_RANK)
    assert (cuda(big, 0), cuda(big, 1)) == ("0,1", "0,1")
    assert job_status(small)["status"] == "QUEUED"
    release("big")
    assert cuda(small) in ("0", "1")
    release("small")
    wait_status(small, "SUCCEEDED")


def test_retries_on_error_start_a_new_attempt(home: Path, project: Path) -> None:
    script(
        project,
        "flaky.py",
        """
        import os, sys
        marker = os.path.join(os.environ["FERRY_OUTPUT_DIR"], "tried")
        print("attempt", os.environ["FERRY_ATTEMPT"])
        if not os.path.exists(marker):
            open(marker, "w").close()
            sys.exit(1)
    """,
    )
    result = ferry("run", "--retries", "2", "--", "python", "flaky.py", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "attempt 1\nattempt 2\n"
    assert "attempt 2 of" in result.stderr
    job = job_status(ferry_json("jobs")[0]["id"])
    assert [a["status"] for a in job["attempts"]] == ["FAILED", "SUCCEEDED"]
    assert any(e["to"] == "RECOVERING" and "retry 1 of 2" in e["message"] for e in job["events"])
    logs = ferry("logs", job["id"], "--attempt", "1")
    assert logs.stdout == "attempt 1\n"


def test_logs_tail_follow_and_timestamps(home: Path, project: Path) -> None:
    script(
        project,
        "count.py",
        """
        import time
        for i in range(5):
            print(i, flush=True)
            time.sleep(0.2)
    """,
    )
    job_id = submit("--", "python", "count.py", cwd=project)
    followed = ferry("logs", "-f", job_id)
    assert followed.stdout == "0\n1\n2\n3\n4\n"
    assert ferry("logs", job_id, "--tail", "2").stdout == "3\n4\n"
    stamped = ferry("logs", job_id, "-t", "-n", "1").stdout
    assert stamped.endswith(" 4\n") and stamped[:4].isdigit() and "T" in stamped[:24]
    assert ferry("logs", job_id[:-1]).stdout == "0\n1\n2\n3\n4\n"  # unique prefix


def test_wait_returns_the_job_exit_code(home: Path, project: Path) -> None:
    ok = submit("--", "python", "-c", "pass", cwd=project)
    bad = submit("--", "python", "-c", "raise SystemExit(7)", cwd=project)
    assert ferry("wait", ok).returncode == 0
    assert ferry("wait", bad).returncode == 7
    assert ferry("wait", ok, bad).returncode == 7


def test_wait_timeout(home: Path, project: Path) -> None:
    job_id = submit("--", "python", "-c", "import time; time.sleep(30)", cwd=project)
    result = ferry("wait", job_id, "--timeout", "0.5s")
    assert result.returncode == 1
    assert "still" in result.stderr
    ferry("cancel", job_id, "--wait")


def test_secrets_reach_the_job_but_never_the_store(home: Path, project: Path) -> None:
    script(
        project,
        "secret.py",
        """
        import hashlib, os
        digest = hashlib.sha256(os.environ.get("HF_TOKEN", "").encode()).hexdigest()
        open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "digest"), "w").write(digest)
    """,
    )
    result = ferry(
        "run",
        "--secret",
        "HF_TOKEN",
        "--",
        "python",
        "secret.py",
        cwd=project,
        env={"HF_TOKEN": "hf_verysecret_123"},
    )
    assert result.returncode == 0, result.stderr
    job = ferry_json("jobs")[0]
    digest = (Path(job["outputs"]) / "output" / "digest").read_text()
    assert digest == hashlib.sha256(b"hf_verysecret_123").hexdigest()
    status = ferry("status", job["id"], "--json").stdout + ferry("status", job["id"]).stdout
    assert "hf_verysecret_123" not in status
    for path in home.rglob("*"):
        if path.is_file():
            assert b"hf_verysecret_123" not in path.read_bytes(), path
    assert oct((home / "jobs" / job["id"]).stat().st_mode & 0o777) == "0o700"


def test_missing_secret_is_refused(home: Path, project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    result = subprocess.run(
        [FERRY, "run", "--secret", "HF_TOKEN", "--", "true"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2
    assert "secret HF_TOKEN is not set" in result.stderr


def test_shell_command(home: Path, project: Path) -> None:
    result = ferry("run", "--shell", "--", "echo $((6 * 7)) && echo done", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "42\ndone\n"


def test_partial_lines_and_binary_output(home: Path, project: Path) -> None:
    script(
        project,
        "raw.py",
        """
        import sys, time
        sys.stdout.write("prompt> ")
        sys.stdout.flush()
        time.sleep(1)
        sys.stdout.buffer.write(b"caf\\xc3\\xa9 \\xff\\n")
        sys.stdout.write("progress 1\\rprogress 2\\n")
    """,
    )
    result = subprocess.run(
        [FERRY, "run", "--", "python", "raw.py"], cwd=project, capture_output=True
    )
    assert result.returncode == 0
    # bytes reach the terminal as the job wrote them (only carriage returns become lines)
    assert result.stdout.splitlines() == [
        b"prompt> ",
        b"caf\xc3\xa9 \xff",
        b"progress 1",
        b"progress 2",
    ]


def test_a_supervisor_adopts_the_next_job_and_spares_the_ones_it_starts(
    home: Path, project: Path
) -> None:
    ferry("config", "set", "local.cpus", "2")
    script(
        project,
        "gate.py",
        """
        import os, sys, time
        gate = os.path.join(os.environ["FERRY_TEST_TMP"], "open-" + sys.argv[1])
        while not os.path.exists(gate):
            time.sleep(0.05)
    """,
    )
    big = submit("--name", "big", "--cpus", "2", "--", "python", "gate.py", "big", cwd=project)
    wait_status(big, "RUNNING")
    quick = submit("--name", "quick", "--cpus", "1", "--", "python", "-c", "pass", cwd=project)
    slow = submit("--name", "slow", "--cpus", "1", "--", "python", "gate.py", "slow", cwd=project)
    (home.parent / "open-big").write_text("")
    wait_status(quick, "SUCCEEDED")
    wait_status(slow, "RUNNING")
    from ferry.store import open_store

    store = open_store()
    # the supervisor of `big` went on to supervise `quick`, and started one for `slow`
    assert store.get_job(quick).supervisor_pid == store.get_job(big).supervisor_pid
    slow_supervisor = store.get_job(slow).supervisor_pid
    assert slow_supervisor != store.get_job(big).supervisor_pid
    # `quick` ending killed what it left behind, but not the supervisor it had started
    assert slow_supervisor is not None and pid_alive(slow_supervisor)
    assert job_status(slow)["status"] == "RUNNING"
    (home.parent / "open-slow").write_text("")
    assert wait_status(slow, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"


def test_shell_line_in_a_spec_keeps_its_operators(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text(
        'command: "echo one && echo two | tr a-z A-Z > out.txt; cat out.txt"\nshell: true\n'
    )
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "one\nTWO\n"


def test_cancelling_the_head_of_the_queue_starts_the_jobs_behind_it(
    home: Path, project: Path
) -> None:
    ferry("config", "set", "local.gpus", "2")
    ferry("config", "set", "local.cpus", "4")
    long = submit(
        "--accelerator", "A100:1", "--", "python", "-c", "import time; time.sleep(60)", cwd=project
    )
    wait_status(long, "RUNNING")
    big = submit("--accelerator", "A100:2", "--", "true", cwd=project)
    small = submit("--accelerator", "A100:1", "--", "true", cwd=project)
    assert job_status(small)["status"] == "QUEUED"  # held back for `big`
    ferry("cancel", big)
    assert wait_status(small, "SUCCEEDED", timeout=20)["status"] == "SUCCEEDED"
    assert job_status(long)["status"] == "RUNNING"
    ferry("cancel", long, "--wait")


def test_a_job_that_can_no_longer_fit_does_not_block_the_queue(home: Path, project: Path) -> None:
    ferry("config", "set", "local.gpus", "2")
    ferry("config", "set", "local.cpus", "1")
    script(
        project,
        "gate.py",
        """
        import os, time
        while not os.path.exists(os.path.join(os.environ["FERRY_TEST_TMP"], "open")):
            time.sleep(0.05)
    """,
    )
    first = submit("--", "python", "gate.py", cwd=project)
    wait_status(first, "RUNNING")
    big = submit("--accelerator", "A100:2", "--", "true", cwd=project)
    after = submit("--", "true", cwd=project)
    ferry("config", "set", "local.gpus", "1")  # `big` can never run here now
    (home.parent / "open").write_text("")
    assert wait_status(after, "SUCCEEDED", timeout=30)["status"] == "SUCCEEDED"
    assert job_status(big)["status"] == "QUEUED"
    assert "can never start here now" in ferry("status", big, env={"COLUMNS": "250"}).stdout
    ferry("cancel", big)


def test_relative_paths_are_fixed_at_submit(home: Path, tmp_path: Path) -> None:
    ferry("config", "set", "local.cpus", "1")
    x, y = tmp_path / "x", tmp_path / "y"
    for folder, text in ((x, "DATA-X"), (y, "DATA-Y")):
        folder.mkdir()
        (folder / "data.txt").write_text(text)
    holder = submit("--", "python", "-c", "import time; time.sleep(1)", cwd=y)
    reader = submit("--input", "d=./data.txt", "--", "sh", "-c", "cat $FERRY_INPUT_D", cwd=x)
    wait_status(holder, "SUCCEEDED")
    wait_status(reader, "SUCCEEDED")
    assert ferry("logs", reader).stdout == "DATA-X\n"
    assert job_status(reader)["spec"]["inputs"]["d"]["uri"] == str(x / "data.txt")


def test_a_lost_jobs_whole_group_is_stopped(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text(  # not resumed: its new attempt would sleep again
        "command: sh -c 'sleep 1011 & env -i sleep 1012 & sleep 1013'\n"
        "retries: {on_preemption: 0}\n"
    )
    job_id = submit("job.yaml", cwd=project)
    wait_status(job_id, "RUNNING")
    from ferry.store import open_store

    def sleepers() -> list[int]:
        found = []
        for pid in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[:1] == [b"sleep"] and cmd[1:2] in ([b"1011"], [b"1012"], [b"1013"]):
                found.append(int(pid))
        return found

    wait_for(lambda: len(sleepers()) == 3, 20, "the three sleeps")
    supervisor = open_store().get_job(job_id).supervisor_pid
    assert supervisor
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not pid_alive(supervisor), 10, "the supervisor to die")
    ferry("jobs")
    wait_for(lambda: not [p for p in sleepers() if pid_alive(p)], 10, "every sleep to be killed")


def test_a_job_may_submit_jobs_that_outlive_it(home: Path, project: Path) -> None:
    script(
        project,
        "outer.py",
        f"""
        import subprocess
        job = subprocess.run([{FERRY!r}, "run", "--detach", "--name", "inner", "--", "python", "-c",
                              "import time; time.sleep(1.5); print('inner-done')"],
                             capture_output=True, text=True, check=True).stdout.strip()
        print(job)
    """,
    )
    result = ferry("run", "--name", "outer", "--", "python", "outer.py", cwd=project)
    assert result.returncode == 0, result.stderr
    inner = result.stdout.strip()
    assert wait_status(inner, "SUCCEEDED", "FAILED", "CANCELLED")["status"] == "SUCCEEDED"
    assert ferry("logs", inner).stdout == "inner-done\n"


def test_the_backend_says_an_attempts_price_offering_and_grace(home: Path) -> None:
    from ferry.backends.local import LocalBackend
    from ferry.store import open_store

    store = open_store()
    plain = store.create_job(
        job_id="a-1", name="a", backend="local", spec={"command": ["x"]}, job_dir="/j", outputs="/o"
    )
    given = store.create_job(
        job_id="b-1",
        name="b",
        backend="local",
        spec={"command": ["x"], "limits": {"stop_grace": 2.5}},
        job_dir="/j",
        outputs="/o",
    )
    backend = LocalBackend()
    assert (backend.price(plain), backend.offering(plain), backend.stop_grace(plain)) == (
        0.0,
        "local",
        30.0,
    )
    assert ferry("config", "set", "local.price_hour", "1.5").returncode == 0
    assert ferry("config", "set", "local.stop_grace", "10s").returncode == 0
    assert (backend.price(plain), backend.stop_grace(plain)) == (1.5, 10.0)
    assert backend.stop_grace(given) == 2.5  # the spec's own wins
