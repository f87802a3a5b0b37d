"""One exit-code convention wherever a person or a script looks: 128+N for a death by signal N,
with the signal's name beside it (the store keeps what the process reported)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ferry
from tests.conftest import ferry as run_ferry
from tests.conftest import ferry_json, job_status

pytestmark = pytest.mark.slow

SELF_TERM = "import os, signal\nprint('going', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n"


def test_a_job_ended_by_sigterm_is_143_sigterm_everywhere(home: Path, project: Path) -> None:
    (project / "term.py").write_text(SELF_TERM)
    run = run_ferry("run", "--", "python", "term.py", cwd=project)
    assert run.returncode == 143
    assert "FAILED" in run.stderr and "exit code 143 (SIGTERM)" in run.stderr
    listed = ferry_json("jobs")[0]
    job_id = listed["id"]
    assert (listed["exit_code"], listed["signal"]) == (143, "SIGTERM")
    assert listed["reason"].startswith("exit code 143 (SIGTERM)")
    detail = job_status(job_id)
    assert (detail["exit_code"], detail["signal"]) == (143, "SIGTERM")
    attempt = detail["attempts"][0]
    assert (attempt["exit_code"], attempt["signal"]) == (143, "SIGTERM")
    assert attempt["reason"].startswith("exit code 143 (SIGTERM)")
    assert any("exit code 143 (SIGTERM)" in e["message"] for e in detail["events"])
    text = run_ferry("status", job_id).stdout
    assert "FAILED  exit code 143 (SIGTERM)" in text and "code -15" not in text
    assert "143 SIGTERM" in text  # the attempts table
    assert "exit code 143 (SIGTERM)" in run_ferry("jobs", env={"COLUMNS": "200"}).stdout
    assert run_ferry("wait", job_id).returncode == 143
    job = ferry.get_job(job_id)
    assert (job.exit_code, job.signal) == (143, "SIGTERM")


def test_an_exit_of_its_own_has_no_signal(home: Path, project: Path) -> None:
    assert (
        run_ferry("run", "--", "python", "-c", "raise SystemExit(3)", cwd=project).returncode == 3
    )
    job_id = ferry_json("jobs")[0]["id"]
    detail = job_status(job_id)
    assert (detail["exit_code"], detail["signal"]) == (3, None)
    assert detail["attempts"][0]["signal"] is None
    assert "FAILED  exit code 3" in run_ferry("status", job_id).stdout
    assert (ferry.get_job(job_id).exit_code, ferry.get_job(job_id).signal) == (3, None)
