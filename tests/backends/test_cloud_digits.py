"""The digits example (examples/digits) on both clouds' doubles, with spot capacity taken
back once mid-training: the second attempt resumes from the checkpoint the first left in
the bucket, and the model lands in the bucket (tests/backends/*_server.py say what the
doubles simulate)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conftest import loss_points
from tests.conftest import job_logs, job_status, submit, wait_for

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_the_digits_example_is_preempted_once_and_still_finishes(
    cloud: tuple[str, dict[str, Any]], project: Path
) -> None:
    name, place = cloud
    server, fs, bucket = place["server"], place["fs"], place["bucket"]
    for file in ("train.py", "job.yaml"):
        shutil.copy(REPO / "examples" / "digits" / file, project / file)
    job_id = submit("--backend", name, "--spot", "--hparam", "epochs=60", "job.yaml", cwd=project)
    # (one loss point a printed epoch)
    wait_for(lambda: loss_points(job_id) >= 3, 180, "a few epochs on the cloud's double")
    if name == "vertex":
        first = [j for j in server.jobs.values() if j.body["labels"]["ferry-job"] == job_id][-1]
        server.preempt(first.name)
    else:
        tag = {"Key": "ferry-job", "Value": job_id}
        first = [j for j in server.jobs.values() if tag in j.body["Tags"]][-1]
        server.interrupt(first.name)
    wait_for(lambda: job_status(job_id)["status"] == "SUCCEEDED", 300, "the job to finish")
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"], status
    resumed = job_logs(job_id, "--attempt", "2")
    assert "resumed from" in resumed and "epoch=60/60" in resumed, resumed[-2000:]
    start = int(resumed.split("resumed from")[1].split("at epoch")[1].split()[0])
    assert start >= 3  # (the checkpoints the first attempt left in the bucket)
    metrics = json.loads(fs.cat_file(f"{bucket}/runs/{job_id}/model/metrics.json"))
    assert metrics["epochs"] == 60 and metrics["test_accuracy"] > 0.8
