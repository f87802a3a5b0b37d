"""The backend contract suite: the same job, asked the same things, on every backend.

A backend is accepted when it passes this suite (docs/backends.md): a job ends as its
script does, the script gets the contract (variables, folders, hyperparameters, secrets,
inputs), logs and metrics reach `ferry logs` and `ferry metrics`, outputs reach the bucket
with their manifest, cancel and preemption give the script the notice, a preempted job
resumes from its checkpoint, and a job outlives the loss of the process that followed it.
Each backend runs where its tests run: local on this machine, ray on the test session's
Ray head (one worker holds it), vertex on the session's JobService test server and
sagemaker on the session's SageMaker test server, whose provider doubles run the request's
command on this machine against the bucket emulators.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conftest import SCRIPT, ready
from tests.conftest import (
    ferry,
    ferry_json,
    job_logs,
    job_status,
    submit,
    until_logged,
    wait_for,
    wait_status_slowly,
)


@pytest.fixture(
    params=[
        pytest.param("local"),
        pytest.param("ray", marks=pytest.mark.xdist_group("ray")),  # (the session's head)
        # (the session's JobService test server and its provider double, on the bucket
        # emulator: tests/backends/vertex_server.py)
        pytest.param("vertex", marks=pytest.mark.xdist_group("vertex")),
        # (tests/backends/sagemaker_server.py, on moto's S3)
        pytest.param("sagemaker", marks=pytest.mark.xdist_group("sagemaker")),
    ]
)
def backend(
    request: pytest.FixtureRequest, home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The backend under test, with the place its jobs go to ready."""
    ready(request, request.param, monkeypatch)
    (project / "train.py").write_text(SCRIPT)
    return str(request.param)


CLOUDS = {"vertex": "on_vertex", "sagemaker": "on_sagemaker"}  # backend -> its fixture


class Place:
    """Where a backend's jobs read inputs and leave outputs: this machine's folders, or
    a bucket (a cloud's machine reads none of this machine's files)."""

    def __init__(self, bucket: dict[str, Any] | None) -> None:
        self.fs = bucket["fs"] if bucket else None
        self.bucket = bucket["bucket"] if bucket else ""
        self.protocol = bucket["protocol"] if bucket else ""

    def input(self, folder: Path) -> str:
        """The URI a job gives for ``folder``'s files."""
        if self.fs is None:
            return str(folder)
        self.fs.put(str(folder), f"{self.bucket}/inputs/{folder.name}", recursive=True)
        return f"{self.protocol}://{self.bucket}/inputs/{folder.name}"

    def read(self, outputs: str, path: str) -> bytes:
        """The bytes of ``path`` in the job's outputs."""
        if self.fs is None:
            return (Path(outputs) / path).read_bytes()
        data: bytes = self.fs.cat_file(f"{outputs.split('://', 1)[1]}/{path}")
        return data


@pytest.fixture
def place(backend: str, request: pytest.FixtureRequest) -> Place:
    return Place(request.getfixturevalue(CLOUDS[backend]) if backend in CLOUDS else None)


def _submit(project: Path, backend: str, mode: str = "ok", spec: str = "") -> str:
    """Submit ``train.py MODE`` to ``backend``, with more of the spec (``long``: until
    the file ``release`` beside the project exists)."""
    release = f", '{project.parent / 'release'}'" if mode == "long" else ""
    command = f"command: [python, train.py, {mode}{release}]\n"
    (project / "job.yaml").write_text(f"backend: {backend}\n{command}{spec}")
    return submit("job.yaml", cwd=project)


def _started(job_id: str) -> None:
    until_logged(job_id, "starting at", 90, "the job to start")


def test_a_job_ends_as_its_script_does(backend: str, project: Path) -> None:
    good = _submit(project, backend)
    bad = _submit(project, backend, "exit3")
    assert wait_status_slowly(good, "SUCCEEDED", timeout=90)["exit_code"] == 0
    failed = wait_status_slowly(bad, "FAILED", timeout=90)
    assert failed["exit_code"] == 3
    assert "about to fail" in failed["reason"], failed["reason"]  # its last lines
    assert ferry("wait", bad).returncode == 3  # (the shell sees the script's code)


def test_the_script_gets_the_contract_and_its_results_come_back(
    backend: str, place: Place, project: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "numbers.txt").write_text("1 2 3\n")
    uri = place.input(data)
    spec = f"hyperparameters: {{lr: 0.1}}\ninputs:\n  data: {{uri: '{uri}'}}\nsecrets: [TOKEN]\n"
    (project / "job.yaml").write_text(f"backend: {backend}\ncommand: [python, train.py]\n{spec}")
    result = ferry("run", "job.yaml", cwd=project, env={"TOKEN": "s3cr3t"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout  # followed here as it ran
    job_id = ferry_json("jobs")[0]["id"]
    log = job_logs(job_id)
    seen = json.loads(log.splitlines()[0])
    assert seen["FERRY_JOB_ID"] == job_id and seen["FERRY_ATTEMPT"] == "1"
    assert seen["TOKEN"] == "s3cr3t"
    assert seen["SM_MODEL_DIR"] and seen["FERRY_MODEL_DIR"]
    assert 'hyperparameters {"lr": 0.1}' in log
    assert "input says 1 2 3" in log
    losses = [m for m in ferry_json("metrics", job_id) if m["name"] == "loss"]
    assert losses and losses[0]["points"] == 3 and losses[0]["last_step"] == 2, losses
    status = job_status(job_id)
    assert "s3cr3t" not in json.dumps(status)
    outputs = status["outputs"]
    assert place.read(outputs, "model/model.txt") == b"weights"
    manifest = json.loads(place.read(outputs, "manifest.json"))
    assert "model/model.txt" in {f["path"] for f in manifest["files"]}


def test_cancel_gives_the_script_the_notice(backend: str, project: Path) -> None:
    job_id = _submit(project, backend, "long")
    _started(job_id)
    assert ferry("cancel", job_id).returncode == 0
    status = wait_status_slowly(job_id, "CANCELLED", timeout=90)
    assert "notice at" in job_logs(job_id)
    assert status["attempts"][-1]["status"] == "CANCELLED"


def test_a_preempted_job_resumes_from_its_checkpoint(backend: str, project: Path) -> None:
    spec = "checkpoint: {paths: [step.txt]}\nlimits: {stop_grace: 10s}\n"
    job_id = _submit(project, backend, "long", spec)
    _started(job_id)
    wait_for(  # a few steps done
        lambda: any(
            m["name"] == "loss" and m["points"] >= 3 for m in ferry_json("metrics", job_id)
        ),
        90,
        "a few steps",
        every=0.5,
    )
    assert ferry("preempt", job_id).returncode == 0
    noticed = lambda: "notice at" in job_logs(job_id, "--attempt", "1")  # noqa: E731
    wait_for(noticed, 90, "the notice", every=0.5)
    (project.parent / "release").touch()
    status = wait_status_slowly(job_id, "SUCCEEDED", timeout=150)
    first, second = status["attempts"][:2]
    assert first["status"] == "PREEMPTED" and second["status"] == "SUCCEEDED", first
    assert status["retries_used"]["preemptions"] == 1
    noticed = int(job_logs(job_id, "--attempt", "1").split("notice at")[1].split()[0])
    resumed = int(job_logs(job_id, "--attempt", "2").split("starting at")[1].split()[0])
    assert 0 < resumed <= noticed, (resumed, noticed)


def test_a_job_outlives_the_loss_of_what_followed_it(backend: str, project: Path) -> None:
    from ferry.store import open_store

    job_id = _submit(project, backend, "long", "checkpoint: {paths: [step.txt]}\n")
    _started(job_id)
    follower = open_store().get_job(job_id).supervisor_pid
    assert follower
    os.kill(follower, signal.SIGKILL)
    (project.parent / "release").touch()
    status = wait_status_slowly(job_id, "SUCCEEDED", timeout=150)  # (ferry status reconciles)
    last = len(status["attempts"])
    assert "done" in job_logs(job_id, "--attempt", str(last))
    # one that ran elsewhere ran on, followed again; one here resumed where it was
    if backend == "local":
        assert status["attempts"][0]["status"] == "LOST"
        assert "starting at 0" not in job_logs(job_id, "--attempt", str(last))
    else:
        assert [a["status"] for a in status["attempts"]] == ["SUCCEEDED"]
