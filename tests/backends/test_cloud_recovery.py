"""A cloud attempt whose launcher was lost between the provider's create and recording
its handle: the next process that finds the job stops what was made for that attempt
(found by its name or labels), so nothing runs unfollowed, and the job goes on in a new
attempt. The window is made by erasing the recorded handle, then killing the supervisor
with SIGKILL."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import job_logs, job_status, submit, wait_for

pytestmark = [pytest.mark.slow]


def _made(cloud: str, server: Any, job_id: str) -> list[Any]:
    if cloud == "vertex":
        return [j for j in server.jobs.values() if j.body["labels"]["ferry-job"] == job_id]
    tag = {"Key": "ferry-job", "Value": job_id}
    return [j for j in server.jobs.values() if tag in j.body["Tags"]]


def _ended(cloud: str, made: Any) -> bool:
    if cloud == "vertex":
        return made.state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")
    return made.status in ("Completed", "Failed", "Stopped")


def test_a_provider_job_whose_handle_was_never_recorded_is_stopped(
    cloud: tuple[str, dict[str, Any]], project: Path
) -> None:
    from ferry.store import open_store

    name, place = cloud
    server = place["server"]
    release = project.parent / "release"
    (project / "job.yaml").write_text(f"command: [python, train.py, long, '{release}']\n")
    job_id = submit("--backend", name, "job.yaml", cwd=project)
    wait_for(lambda: "starting at" in job_logs(job_id), 120, "the job to start")
    first = _made(name, server, job_id)[0]
    store = open_store()
    store.update_attempt(job_id, 1, handle=None)  # (as if the record never came)
    supervisor = store.get_job(job_id).supervisor_pid
    assert supervisor
    os.kill(supervisor, signal.SIGKILL)
    # the next look at the job (ferry status) finds its supervisor lost, and stops what
    # attempt 1 made
    wait_for(
        lambda: bool(job_status(job_id)) and _ended(name, first),
        120,
        "the unrecorded provider job to be stopped",
        every=1.0,
    )
    release.touch()
    wait_for(lambda: job_status(job_id)["status"] == "SUCCEEDED", 180, "the job to finish")
    status = job_status(job_id)
    assert status["attempts"][0]["status"] == "LOST", status["attempts"]
    assert status["attempts"][-1]["status"] == "SUCCEEDED"
    assert all(_ended(name, made) for made in _made(name, server, job_id))
