"""Nothing is left running or billing on either cloud's double: Ctrl-C on an attached run,
``limits.max_runtime``, ``limits.max_cost`` and a hard monthly budget each give the job the
notice through its run folder; the script ends, the provider's job ends with it (Ferry
cancels one that runs on past the grace) and its machines stop (``ferry cancel`` is in
test_vertex.py, test_sagemaker.py and test_cloud_gangs.py).
tests/backends/*_server.py say what the doubles simulate."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conftest import provider_job
from tests.conftest import FERRY, ferry, ferry_json, job_logs, job_status, submit, wait_for

pytestmark = [pytest.mark.slow]

_ENDED = {
    "vertex": {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"},
    "sagemaker": {"Completed", "Failed", "Stopped"},
}


def _nothing_left(name: str, server: Any, job_id: str) -> Any:
    """Wait until the provider's job has ended and every machine's command is gone."""
    made = provider_job(name, server, job_id)

    def ended() -> bool:
        state = made.state if name == "vertex" else made.status
        return state in _ENDED[name] and all(p.poll() is not None for p in made.procs)

    wait_for(ended, 60, "the provider's job to end with its machines")
    assert made.procs  # (it ran: the stop reached a running machine)
    return made


def _long(project: Path, tmp_path: Path, limits: str = "") -> None:
    """A job that runs until the test is over (its release file never appears), told
    the notice within 2 s."""
    (project / "job.yaml").write_text(
        f"name: long\ncommand: [python, train.py, long, {tmp_path / 'never'}]\n"
        f"limits: {{stop_grace: 2s{limits}}}\n"
    )


def _started(job_id: str) -> None:
    wait_for(lambda: "starting at" in job_logs(job_id), 120, "the job to start on the machine")


def test_ctrl_c_on_an_attached_run_ends_the_providers_job(
    cloud: tuple[str, dict[str, Any]], project: Path, tmp_path: Path
) -> None:
    name, place = cloud
    _long(project, tmp_path)
    cli = subprocess.Popen(
        [FERRY, "run", "--backend", name, "job.yaml"],
        cwd=project,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job_id = wait_for(lambda: ferry_json("jobs"), 60, "the job to be stored")[0]["id"]
        _started(job_id)
        cli.send_signal(signal.SIGINT)
        _out, err = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, err
    assert job_status(job_id)["status"] == "CANCELLED"
    _nothing_left(name, place["server"], job_id)
    assert "notice at" in job_logs(job_id)  # told first, through the run folder


def test_max_runtime_ends_the_providers_job(
    cloud: tuple[str, dict[str, Any]], project: Path, tmp_path: Path
) -> None:
    name, place = cloud
    _long(project, tmp_path, ", max_runtime: 6s")
    job_id = submit("--backend", name, "job.yaml", cwd=project)
    status = wait_for(
        lambda: (s := job_status(job_id))["status"] == "FAILED" and s, 180, "the runtime limit"
    )
    assert "max_runtime" in status["reason"], status["reason"]
    _nothing_left(name, place["server"], job_id)
    assert "notice at" in job_logs(job_id)


def test_max_cost_ends_the_providers_job(
    cloud: tuple[str, dict[str, Any]], project: Path, tmp_path: Path
) -> None:
    name, place = cloud
    # (sampled every second: how often the supervisor samples has no say in when it stops)
    ferry("config", "set", "telemetry.interval", "1s")
    cap = 0.0005  # USD: about 8 s of the CPU machine either cloud gives this job
    _long(project, tmp_path, f", max_cost: {cap}")
    job_id = submit("--backend", name, "job.yaml", cwd=project)
    status = wait_for(
        lambda: (s := job_status(job_id))["status"] == "FAILED" and s, 180, "the cost cap"
    )
    assert status["reason"].startswith("budget reached"), status["reason"]
    # never above the cap, on a busy machine too (the stop counts how late the looks come)
    assert 0 < status["cost"] <= cap, status
    _nothing_left(name, place["server"], job_id)


def test_a_hard_monthly_budget_ends_the_providers_job(
    cloud: tuple[str, dict[str, Any]], project: Path, tmp_path: Path
) -> None:
    name, place = cloud
    _long(project, tmp_path)
    job_id = submit("--backend", name, "job.yaml", cwd=project)
    _started(job_id)
    # spent as soon as it is set: the running job is stopped at its next look at the month
    assert ferry("budget", "set", "--monthly", "0.000001", "--hard").returncode == 0
    status = wait_for(
        lambda: (s := job_status(job_id))["status"] == "FAILED" and s, 120, "the budget stop"
    )
    assert status["reason"].startswith("monthly budget reached"), status["reason"]
    _nothing_left(name, place["server"], job_id)


def test_waiting_for_a_machine_counts_toward_neither_runtime_nor_cost(
    on_vertex: dict[str, Any], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(on_vertex["server"], "provision", 12.0)  # (PENDING for 12 s)
    ferry("config", "set", "telemetry.interval", "1s")  # (the cap looks 1 s + the grace ahead)
    price = 0.21849885  # USD/h: n1-standard-4 on Vertex AI, as the catalog has it
    # each limit is passed by the 12 s of waiting alone, were they counted
    (project / "job.yaml").write_text(
        "name: w\ncommand: python train.py\nalerts: {no_progress: 8s}\n"
        f"limits: {{max_runtime: 10s, max_cost: {price * 8 / 3600:.8f}, stop_grace: 1s}}\n"
    )
    launched = time.time()
    done = ferry("run", "--backend", "vertex", "job.yaml", cwd=project, timeout=180)
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    status = job_status(job_id)
    (attempt,) = status["attempts"]
    assert attempt["price"] == pytest.approx(price)
    assert attempt["started_at"] >= launched + 12  # its start: when its machine started
    assert status["started_at"] >= launched + 10  # the job's too (less its launch)
    assert 0 < attempt["cost"] <= price * 8 / 3600
    events = [e["message"] for e in status["events"]]
    assert any(e.startswith("attempt 1's machine started after 1") for e in events), events
    assert not any("no progress" in e for e in events), events  # (none was expected yet)
