"""The Python API (what a notebook uses): submit, wait, status, logs, cancel."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import ferry
from ferry.errors import AmbiguousJob, JobNotFound, SpecError
from ferry.status import JobStatus

pytestmark = pytest.mark.slow


def test_submit_wait_logs(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "import json, os\nprint(json.loads(os.environ['FERRY_HPARAMS']))\n"
    )
    job = ferry.submit(
        command="python train.py", code=str(project), hyperparameters={"lr": 0.1}, name="nb"
    )
    assert job.id.startswith("nb-")
    assert job.wait(timeout=60) is JobStatus.SUCCEEDED
    assert job.status is JobStatus.SUCCEEDED
    assert job.logs() == "{'lr': 0.1}\n"
    assert job.exit_code == 0
    assert job.model_dir == Path(job.outputs) / "model"
    assert [a.number for a in job.attempts] == [1]
    assert ferry.get_job(job.id[:5]).id == job.id
    assert [j.id for j in ferry.list_jobs()] == [job.id]
    assert "SUCCEEDED" in job._repr_html_()


def test_submit_from_a_spec_file_and_a_jobspec(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text("name: from-file\ncommand: python -c 'print(42)'\n")
    job = ferry.submit(project / "job.yaml")
    assert job.wait(60) is JobStatus.SUCCEEDED and job.logs() == "42\n"
    spec = ferry.JobSpec(command=("python", "-c", "print(7)"), code=str(project))
    job = ferry.submit(spec, name="from-object")
    assert job.wait(60) is JobStatus.SUCCEEDED and job.logs() == "7\n"


def test_submit_from_a_threaded_host_uses_a_fresh_supervisor(home: Path, project: Path) -> None:
    # Jupyter kernels run threads, where forking is unsafe: the API must start the
    # supervisor as a new process instead, and the job must still run.
    results: list[ferry.Job] = []
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)
    busy.start()
    try:
        results.append(ferry.submit(command="python -c 'print(1)'", code=str(project)))
    finally:
        stop.set()
        busy.join()
    job = results[0]
    assert job.wait(60) is JobStatus.SUCCEEDED
    assert job.logs() == "1\n"


def test_cancel_and_timeout(home: Path, project: Path) -> None:
    job = ferry.submit(command="python -c 'import time; time.sleep(60)'", code=str(project))
    with pytest.raises(TimeoutError):
        job.wait(timeout=0.2)
    job.cancel()
    assert job.wait(timeout=60) is JobStatus.CANCELLED


def test_errors(home: Path, project: Path) -> None:
    with pytest.raises(SpecError):
        ferry.submit(command="python x.py", code=str(project), resources={"memory": "lots"})
    with pytest.raises(JobNotFound):
        ferry.get_job("nothing-here")
    ferry.submit(command="true", code=str(project), name="dup").wait(60)
    ferry.submit(command="true", code=str(project), name="dup").wait(60)
    with pytest.raises(AmbiguousJob):
        ferry.get_job("dup")


@pytest.mark.parametrize(
    ("imported", "heavy"),
    [
        (  # the package itself
            "ferry",
            (
                *("torch", "ray", "optuna", "pydantic", "rich", "yaml", "boto3", "botocore"),
                *("psutil", "google.cloud", "azure", "mlflow", "matplotlib", "fsspec"),
            ),
        ),
        (  # what `ferry` imports before it hands a command to the launcher, which has
            # imported the rest already (ferry.launcher)
            "ferry.cli.main, ferry.launcher",
            (
                *("argparse", "pydantic", "yaml", "sqlite3", "json", "pathlib", "subprocess"),
                *("psutil", "hashlib", "ferry.spec", "ferry.config", "ferry.store", "ferry.errors"),
            ),
        ),
    ],
)
def test_imports_stay_light(imported: str, heavy: tuple[str, ...]) -> None:
    import subprocess
    import sys

    code = f"import sys, {imported}\nprint([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
