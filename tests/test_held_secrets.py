"""The secrets a supervisor holds (ferry.held_secrets): going on to another job, it holds
that job's and no longer those of the job before, and what shows its environment to this
user's other processes (/proc/PID/environ) shows none once their job has ended. Through
the real `ferry` command, with the launcher off: a supervisor starts with the environment
of the command that submitted its first job (tests/cli/test_launcher.py: the launcher's
side; tests/backends/test_ray.py: the watcher's)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import ferry, job_logs, job_status, showing, submit, wait_for

pytestmark = pytest.mark.slow
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")

GATE = """
import hashlib, os, sys, time
print(hashlib.sha256(os.environ["TOKEN"].encode()).hexdigest(), flush=True)
gate = os.path.join(os.environ["FERRY_TEST_TMP"], "open-" + sys.argv[1])
while not os.path.exists(gate):
    time.sleep(0.05)
"""


def test_a_supervisor_that_goes_on_to_a_queued_job_holds_only_that_jobs_secrets(
    home: Path, project: Path, s3_endpoint: str
) -> None:
    """The secrets include the bucket's credentials: the supervisor sends each job's
    outputs with those it took from that job."""
    import s3fs

    assert ferry("config", "set", "local.cpus", "1").returncode == 0
    assert ferry("config", "set", "storage.s3.endpoint_url", s3_endpoint).returncode == 0
    bucket = f"t{os.urandom(4).hex()}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing").mkdir(bucket)
    (project / "gate.py").write_text(GATE)
    values = {name: f"{name}-{os.urandom(12).hex()}" for name in ("first", "second")}
    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    jobs = {}
    for name, value in values.items():
        secrets = [f"--secret={secret}" for secret in ("TOKEN", *credentials)]
        where = ("--outputs", f"s3://{bucket}/{{job_id}}", "--cpus", "1", *secrets)
        env = {"TOKEN": value, **credentials, "AWS_DEFAULT_REGION": "us-east-1"}
        jobs[name] = submit(*where, "--", "python", "gate.py", name, cwd=project, env=env)
        if name == "first":
            wait_for(lambda: job_status(jobs["first"])["status"] == "RUNNING")
    assert job_status(jobs["second"])["status"] == "QUEUED"  # (room for one job)
    (home.parent / "open-first").write_text("")
    wait_for(lambda: job_status(jobs["second"])["status"] == "RUNNING")
    from ferry.store import open_store

    store = open_store()
    supervisor = store.get_job(jobs["first"]).supervisor_pid
    assert store.get_job(jobs["second"]).supervisor_pid == supervisor  # it went on
    assert showing(values["first"]) == []
    digest = hashlib.sha256(values["second"].encode()).hexdigest()
    wait_for(lambda: digest in job_logs(jobs["second"]), 30, "the job to read its secret")
    (home.parent / "open-second").write_text("")
    for job in jobs.values():
        ended = wait_for(lambda job=job: (s := job_status(job))["status"] in ENDED and s)
        assert ended["status"] == "SUCCEEDED", ended["reason"]  # its outputs were sent
    assert showing(values["second"]) == []
