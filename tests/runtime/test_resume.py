"""Journey 3: preempted, crashed or lost, a job resumes from its latest checkpoint."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, ferry, ferry_json, job_status, submit, wait_for


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


pytestmark = pytest.mark.slow

TRAIN = """
import os, sys, time
from ferry import runtime
total = int(sys.argv[1])
ckpt = runtime.checkpoint.restore()
start = ckpt.state["step"] + 1 if ckpt else 0
print(f"attempt {os.environ['FERRY_ATTEMPT']} starts at step {start}", flush=True)
for step in range(start, total):
    time.sleep(0.1)
    runtime.report(step=step, loss=1.0 / (step + 1))
    if step % 5 == 4:
        runtime.checkpoint.save({"step": step}, step)
print("done", flush=True)
"""


def checkpointing(project: Path, steps: int) -> tuple[str, int]:
    """Start TRAIN for ``steps`` steps; once it has saved a checkpoint, return the job's id
    and its supervisor's pid."""
    from ferry.store import open_store

    (project / "train.py").write_text(TRAIN)
    job_id = submit("--", "python", "train.py", str(steps), cwd=project)
    wait_for(lambda: max(steps_of(job_id) or [0]) >= 6, what="a checkpoint")
    supervisor = open_store().get_job(job_id).supervisor_pid
    assert supervisor
    return job_id, supervisor


def steps_of(job_id: str) -> Counter[int]:
    from ferry.store import open_store

    store = open_store()
    rows = store.metrics_after(job_id, 0, 1_000_000)
    return Counter(step for _, _, _, step, _, name, _ in rows if name == "loss")


def test_simulated_preemptions_resume_from_checkpoints(home: Path, project: Path) -> None:
    (project / "train.py").write_text(TRAIN)
    result = ferry(
        "run",
        "--simulate-preempt-every",
        "2s",
        "--",
        "python",
        "train.py",
        "60",
        cwd=project,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    job_id = ferry_json("jobs")[0]["id"]
    status = job_status(job_id)
    attempts = status["attempts"]
    preempted = [a for a in attempts if a["status"] == "PREEMPTED"]
    assert len(preempted) >= 2 and attempts[-1]["status"] == "SUCCEEDED"
    assert preempted[0]["reason"] == "preempted (simulate.preempt_every); 1 of 20"
    assert all(a["exit_code"] == 143 for a in preempted)  # the notice: SIGTERM
    starts = [
        int(line.rsplit(" ", 1)[1])
        for line in result.stdout.splitlines()
        if " starts at step " in line
    ]
    assert starts[0] == 0 and all(s % 5 == 0 for s in starts) and starts == sorted(starts)
    steps = steps_of(job_id)
    assert set(steps) == set(range(60))  # the series continues along the step axis
    repeated = sum(n - 1 for n in steps.values())
    assert repeated <= 5 * len(preempted)  # at most one checkpoint interval lost each time
    assert "attempt 2 of" in result.stderr


def test_ferry_preempt_runs_the_scripts_callback_before_it_stops(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "import os, time\nfrom ferry import runtime\n"
        "ckpt = runtime.checkpoint.restore()\n"
        "state = {'step': ckpt.state['step'] if ckpt else 0}\n"
        "runtime.on_preemption(lambda: runtime.checkpoint.save(dict(state), state['step']))\n"
        "if ckpt:\n"
        "    print('resumed at', ckpt.step, flush=True)\n"
        "    raise SystemExit(0)\n"
        "while True:\n"
        "    state['step'] += 1\n"
        # (renamed into place: a notice between the truncation and the write of a plain
        # open(..., 'w') would leave the file empty)
        "    tmp = os.path.join(os.environ['FERRY_OUTPUT_DIR'], 'step.tmp')\n"
        "    open(tmp, 'w').write(str(state['step']))\n"
        "    os.replace(tmp, os.path.join(os.environ['FERRY_OUTPUT_DIR'], 'step'))\n"
        "    time.sleep(0.05)\n"
    )
    job_id = submit("--", "python", "train.py", cwd=project)
    wait_for(lambda: job_status(job_id)["status"] == "RUNNING", what="RUNNING")
    outputs = Path(job_status(job_id)["outputs"])
    wait_for(lambda: (outputs / "output" / "step").exists(), what="a few steps")
    time.sleep(0.5)
    preempt = ferry("preempt", job_id[:6])
    assert preempt.returncode == 0 and "preemption notice sent" in preempt.stderr
    assert ferry("wait", job_id, "--timeout", "60s").returncode == 0
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert status["attempts"][0]["exit_code"] == 143  # the callback ran, then SIGTERM's end
    saved_at = int((outputs / "output" / "step").read_text())
    log = ferry("logs", job_id).stdout
    resumed = int(log.split("resumed at ")[1].split()[0])
    assert saved_at - 2 <= resumed <= saved_at + 1  # saved on the notice, not minutes before
    assert "preemption notice (ferry preempt): SIGTERM, then SIGKILL after 30s" in [
        e["message"] for e in status["events"]
    ]
    line = assert_one_line_error(ferry("preempt", job_id), 2)
    assert "is SUCCEEDED; only a running job can be preempted" in line


def test_a_script_that_polls_preempted_stops_at_its_own_pace(home: Path, project: Path) -> None:
    (project / "poll.py").write_text(
        "import os, time\nfrom ferry import runtime\n"
        "if os.environ['FERRY_ATTEMPT'] == '2': raise SystemExit(0)\n"
        "while not runtime.preempted():\n"
        "    time.sleep(0.05)\n"
        "print('noticed; wrapping up', flush=True)\n"
        "time.sleep(0.5)\n"
        "raise SystemExit(7)\n"
    )
    (project / "job.yaml").write_text("command: python poll.py\nsimulate: {preempt_every: 1s}\n")
    assert ferry("run", "job.yaml", cwd=project).returncode == 0
    status = job_status(ferry_json("jobs")[0]["id"])
    assert (
        status["attempts"][0]["status"] == "PREEMPTED" and status["attempts"][0]["exit_code"] == 7
    )


def test_a_killed_supervisor_is_resumed(home: Path, project: Path) -> None:
    (project / "train.py").write_text(TRAIN)
    job_id = submit("--", "python", "train.py", "50", cwd=project)
    wait_for(lambda: job_status(job_id)["status"] == "RUNNING", what="RUNNING")
    from ferry.store import open_store

    wait_for(lambda: max(steps_of(job_id) or [0]) >= 12, what="a checkpoint or two")
    supervisor = open_store().get_job(job_id).supervisor_pid
    assert supervisor
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not pid_alive(supervisor), what="the supervisor to die")
    stored = max(steps_of(job_id))  # what reached the store before it died
    import subprocess

    from tests.conftest import FERRY

    noticers = [subprocess.Popen([FERRY, "jobs"], stdout=subprocess.DEVNULL) for _ in range(4)]
    assert all(p.wait(60) == 0 for p in noticers)  # four commands notice at once: one resume
    wait_for(lambda: len(job_status(job_id)["attempts"]) == 2, what="a new attempt")
    assert ferry("wait", job_id, "--timeout", "60s").returncode == 0
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["LOST", "SUCCEEDED"]
    assert any(
        e["message"].startswith("supervisor lost; resuming in a new attempt (1 of 20)")
        for e in status["events"]
    )
    log = ferry("logs", job_id).stdout
    start = int(log.split("attempt 2 starts at step ")[1].split()[0])
    # from the last checkpoint the first attempt wrote (every 5 steps), not from scratch; the
    # orphaned script may have saved more after its supervisor died (its reports no longer
    # reached the store), until the resume stopped it
    assert start % 5 == 0 and 10 <= start < 50, start
    # every step is there but those reported after the supervisor's last read and before
    # the checkpoint the resume started from (they died with the supervisor that held them)
    missing = set(range(50)) - set(steps_of(job_id))
    assert all(stored < step < start for step in missing), (missing, stored, start)


def test_exit_codes_retried_without_counting_and_preemptions_run_out(
    home: Path, project: Path
) -> None:
    (project / "flaky.py").write_text(
        "import os\nraise SystemExit(0 if os.environ['FERRY_ATTEMPT'] == '3' else 75)\n"
    )
    (project / "job.yaml").write_text("command: python flaky.py\nretries: {on_exit_codes: [75]}\n")
    assert ferry("run", "job.yaml", cwd=project, timeout=60).returncode == 0
    status = job_status(ferry_json("jobs")[0]["id"])
    assert [a["exit_code"] for a in status["attempts"]] == [75, 75, 0]
    assert any(
        "exit code 75 is always retried (retries.on_exit_codes)" in e["message"]
        for e in status["events"]
    )

    (project / "sleepy.py").write_text("import time\ntime.sleep(30)\n")
    (project / "job.yaml").write_text(
        "command: python sleepy.py\nretries: {on_preemption: 1}\nsimulate: {preempt_every: 1s}\nlimits: {stop_grace: 2s}\n"
    )
    result = ferry("run", "job.yaml", cwd=project, timeout=60)
    assert result.returncode != 0
    status = job_status(ferry_json("jobs")[0]["id"])
    assert status["status"] == "FAILED"
    assert status["reason"] == "preempted 2 times (retries.on_preemption is 1)"


def test_a_new_supervisor_counts_on_the_retries_the_lost_one_used(
    home: Path, project: Path
) -> None:
    # attempt 1 fails and is retried (on_error: 1); attempt 2's supervisor is killed; the
    # resumed attempt 3 fails: the one retry is spent, so the job fails rather than retry
    (project / "flaky.py").write_text(
        "import os, sys, time\n"
        "n = os.environ['FERRY_ATTEMPT']\n"
        "print('attempt', n, flush=True)\n"
        "if n == '2':\n"
        "    time.sleep(60)\n"
        "sys.exit(3)\n"
    )
    (project / "job.yaml").write_text("command: python flaky.py\nretries: {on_error: 1}\n")
    job_id = submit("job.yaml", cwd=project)
    from ferry.store import open_store

    def second_attempt_runs() -> bool:
        attempts = job_status(job_id)["attempts"]
        return len(attempts) == 2 and attempts[1]["status"] == "RUNNING"

    wait_for(second_attempt_runs, what="the retry to run")
    supervisor = open_store().get_job(job_id).supervisor_pid
    assert supervisor
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not pid_alive(supervisor), what="the supervisor to die")
    ferry("jobs")  # notices the lost supervisor and resumes the job
    assert ferry("wait", job_id, "--timeout", "60s").returncode == 3
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["FAILED", "LOST", "FAILED"]
    assert status["retries_used"] == {"preemptions": 1, "on_error": 1, "on_exit_codes": 0}
    assert status["reason"].startswith("exit code 3")


def test_max_runtime_delivers_the_notice_first(home: Path, project: Path) -> None:
    (project / "long.py").write_text(
        "import os, time\nfrom ferry import runtime\n"
        "@runtime.on_preemption\n"
        "def save():\n"
        "    open(os.path.join(os.environ['FERRY_OUTPUT_DIR'], 'saved'), 'w').write('yes')\n"
        "time.sleep(60)\n"
    )
    assert (
        ferry("run", "--max-runtime", "1s", "--", "python", "long.py", cwd=project).returncode
        == 124
    )
    status = job_status(ferry_json("jobs")[0]["id"])
    assert status["reason"] == "max_runtime 1.0s reached"
    assert (Path(status["outputs"]) / "output" / "saved").read_text() == "yes"


def test_a_failure_file_fails_a_job_that_exits_0(home: Path, project: Path) -> None:
    (project / "lie.py").write_text(
        "import os\nopen(os.environ['FERRY_FAILURE_FILE'], 'w').write('validation data missing')\n"
    )
    assert ferry("run", "--", "python", "lie.py", cwd=project).returncode != 0
    status = job_status(ferry_json("jobs")[0]["id"])
    assert status["status"] == "FAILED"
    assert status["reason"] == "validation data missing (from FERRY_FAILURE_FILE; exit code 0)"


def test_bad_retry_and_simulate_fields(home: Path, project: Path) -> None:
    for text, expected in {
        "retries: {on_exit_codes: [0]}": "exit codes from 1 to 255",
        "simulate: {preempt_every: soon}": "preempt_every",
        "limits: {stop_grace: -1}": "stop_grace",
    }.items():
        (project / "job.yaml").write_text(f"command: python x.py\n{text}\n")
        assert expected in assert_one_line_error(ferry("run", "job.yaml", cwd=project), 2)


def test_the_agent_resumes_a_lost_job_and_installs_as_a_user_service(
    home: Path, project: Path, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from ferry.store import open_store

    job_id, supervisor = checkpointing(project, 30)
    os.kill(supervisor, signal.SIGKILL)
    agent = subprocess.Popen(
        [sys.executable, "-m", "ferry.cli.main", "agent", "--interval", "0.5s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()
        assert f"{job_id}: supervisor lost; now RECOVERING (supervisor lost; resuming" in line
        wait_for(
            lambda: open_store().get_job(job_id).status.value == "SUCCEEDED", 60, "the resumed job"
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(10) == 0
    config_home = tmp_path / "xdg"
    result = ferry("agent", "--install", env={"XDG_CONFIG_HOME": str(config_home)})
    assert result.returncode == 0 and "systemctl --user daemon-reload" in result.stdout
    unit = (config_home / "systemd" / "user" / "ferry-agent.service").read_text()
    assert f"Environment=FERRY_HOME={home}" in unit and "ExecStart=" in unit and " agent" in unit


def test_a_supervisor_stopped_by_sigterm_leaves_the_job_to_resume(
    home: Path, project: Path
) -> None:
    """A shutdown or reboot sends SIGTERM: the job is not failed but resumed afterwards."""
    job_id, supervisor = checkpointing(project, 30)
    os.kill(supervisor, signal.SIGTERM)
    wait_for(lambda: not pid_alive(supervisor), 60, "the supervisor to stop")
    assert ferry("wait", job_id, "--timeout", "60s").returncode == 0  # noticed and resumed
    attempts = job_status(job_id)["attempts"]
    assert [a["status"] for a in attempts] == ["LOST", "SUCCEEDED"]
    assert attempts[0]["reason"] == "its supervisor was stopped by SIGTERM"


def test_a_listed_signal_death_is_retried(home: Path, project: Path) -> None:
    (project / "oom.py").write_text(
        "import os, signal\nif os.environ['FERRY_ATTEMPT'] == '1': os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    (project / "job.yaml").write_text("command: python oom.py\nretries: {on_exit_codes: [137]}\n")
    assert ferry("run", "job.yaml", cwd=project).returncode == 0
    status = job_status(ferry_json("jobs")[0]["id"])
    assert [a["exit_code"] for a in status["attempts"]] == [137, 0]
