"""The digits example end to end: through `ferry run` (as `make demo` does) and plain python."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ferry, ferry_json

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parents[2] / "examples" / "digits"


def test_digits_through_ferry(home: Path, tmp_path: Path) -> None:
    result = ferry("run", str(EXAMPLE / "job.yaml"), "-p", "epochs=4", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "epoch=4/4" in result.stdout
    job = ferry_json("jobs")[0]
    assert job["id"].startswith("digits-cnn-")
    model = Path(job["outputs"]) / "model"
    assert (model / "model.pt").stat().st_size > 10_000
    assert json.loads((model / "metrics.json").read_text())["test_accuracy"] > 0.8
    assert (Path(job["outputs"]) / "checkpoints" / "last.pt").exists()
    # the example folder itself is left untouched
    assert not (EXAMPLE / "model").exists()


def test_digits_with_plain_python(tmp_path: Path) -> None:
    work = tmp_path / "digits"
    shutil.copytree(EXAMPLE, work)
    result = subprocess.run(
        [sys.executable, "train.py", "--epochs", "2"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert "test_accuracy=" in result.stdout
    assert (work / "model" / "model.pt").exists()


def test_demo_script(home: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / "demo.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "demo: test accuracy" in result.stdout
    assert "demo: model in" in result.stdout and "model.pt" in result.stdout


def test_digits_preempted_20_times_at_random_finishes_its_epochs(
    home: Path, tmp_path: Path
) -> None:
    """The example saves its own snapshot every epoch (as PyTorch's DDP tutorial does) and
    resumes from it; preempted 20 times at random moments it still trains every epoch once
    to the end, and its metric series continues along the epochs."""
    import random
    import time

    from ferry.store import open_store
    from tests.conftest import job_status, wait_for

    result = ferry("run", "--detach", str(EXAMPLE / "job.yaml"), "-p", "epochs=40", cwd=tmp_path)
    job_id = result.stdout.strip()
    store = open_store()
    rng = random.Random(4)
    for n in range(1, 21):
        wait_for(
            lambda n=n: (
                store.get_job(job_id).status.value == "RUNNING" and len(store.attempts(job_id)) == n
            ),
            60,
            f"attempt {n} running",
        )
        time.sleep(rng.uniform(0.2, 2.5))
        assert ferry("preempt", job_id).returncode == 0
    assert ferry("wait", job_id, "--timeout", "300s").returncode == 0
    status = job_status(job_id)
    states = [a["status"] for a in status["attempts"]]
    assert states == ["PREEMPTED"] * 20 + ["SUCCEEDED"]
    metrics = json.loads((Path(status["outputs"]) / "model" / "metrics.json").read_text())
    assert metrics["epochs"] == 40 and metrics["test_accuracy"] > 0.9
    rows = [r for r in store.metrics_after(job_id, 0, 1_000_000) if r[5] == "loss"]
    epochs = [r[3] for r in rows]
    assert set(epochs) == set(range(1, 41))  # epoch=N/40 lines: every epoch reached
    assert len(epochs) - 40 <= 20  # each preemption loses at most the epoch in progress
