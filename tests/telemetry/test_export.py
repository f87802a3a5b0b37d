"""Metrics leave Ferry too: TensorBoard event files (read back with TensorBoard's own
reader) and an MLflow run in a local SQLite store."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ferry.telemetry.tensorboard import EventWriter, _python_crc32c, crc32c
from tests.conftest import assert_one_line_error, ferry, ferry_json, job_status

pytestmark = pytest.mark.slow


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_event_files_are_read_by_tensorboard(tmp_path: Path) -> None:
    assert _python_crc32c(b"123456789") == 0xE3069283 == crc32c(b"123456789")
    writer = EventWriter(tmp_path, "test")
    writer.add([(0, s, 1000.0 + s, "loss", 1.0 / s) for s in range(1, 51)])
    writer.add([(0, 50, 1050.0, "acc", 0.5), (1, 50, 1050.0, "loss", 0.25)])
    writer.add([(0, None, 1051.0, "sys/cpu_percent", 99.5), (0, 60, 1052.0, "loss", math.nan)])
    writer.flush()
    writer.add([(0, 70, 1060.0, "loss", -2.5)])
    writer.flush()  # appended to the same file
    assert len(list(tmp_path.iterdir())) == 1
    scalars = read_scalars(tmp_path)
    assert len(scalars["loss"]) == 52 and scalars["loss"][0] == (1, 1.0)
    assert scalars["loss"][49] == (50, pytest.approx(0.02))
    assert math.isnan(scalars["loss"][50][1]) and scalars["loss"][51] == (70, -2.5)
    assert scalars["acc"] == [(50, 0.5)] and scalars["rank1/loss"] == [(50, 0.25)]
    assert scalars["sys/cpu_percent"] == [(50, 99.5)]  # at the script's latest step


def test_a_job_metrics_reach_tensorboard_and_mlflow(
    home: Path, project: Path, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    (project / "train.py").write_text(
        "import os, pathlib\nfrom ferry import runtime\n"
        "for step in range(1, 1501):\n"
        "    runtime.report(step=step, loss=1.0 / step)\n"
        "    if step % 500 == 0: runtime.report(step=step, val_acc=step / 1500, **{'top@1': 0.5})\n"
        "pathlib.Path(os.environ['FERRY_MODEL_DIR'], 'model.txt').write_text('weights')\n"
    )
    (project / "job.yaml").write_text(
        "name: tracked\ncommand: python train.py\n"
        "hyperparameters: {lr: 0.01, optimizer: {name: adam, betas: [0.9, 0.99]}, 'layers[0]': 64}\n"
        "tracking: {mlflow: 'sqlite:///mlflow.db', experiment: digits}\n"
    )
    assert ferry("run", "job.yaml", cwd=project).returncode == 0
    job_id = ferry_json("jobs")[0]["id"]
    outputs = Path(job_status(job_id)["outputs"])
    scalars = read_scalars(outputs / "tensorboard" / "ferry")
    assert len(scalars["loss"]) == 1500 and scalars["val_acc"][-1] == (1500, 1.0)

    from tests.conftest import wait_for

    def created() -> bool:  # the tracker made the database: opening it now races with nothing
        return any("MLflow run" in e["message"] for e in job_status(job_id)["events"])

    wait_for(created, timeout=60, what="the MLflow run")
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("digits").experiment_id

    def finished() -> object:
        runs = client.search_runs([experiment])
        return runs and runs[0].info.status == "FINISHED" and runs[0]

    run = wait_for(finished, timeout=60, what="the MLflow run to finish")
    assert run.data.params == {
        "lr": "0.01",
        "optimizer.name": "adam",
        "optimizer.betas": "[0.9, 0.99]",
        "layers_0_": "64",
    }
    assert len(client.get_metric_history(run.info.run_id, "top_1")) == 3  # top@1

    assert run.data.tags["ferry.job_id"] == job_id and run.data.tags["ferry.backend"] == "local"
    assert run.data.tags["ferry.status"] == "SUCCEEDED" and run.info.run_name == "tracked"
    assert "ferry.cost_usd" in run.data.tags and run.data.tags["ferry.accelerator"] == "none"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert len(history) == 1500 and history[-1].step == 1500
    assert history[-1].value == pytest.approx(1 / 1500)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"model", "logs"} <= artifacts
    assert [a.path for a in client.list_artifacts(run.info.run_id, "model")] == ["model/model.txt"]
    assert (project / "mlartifacts").is_dir()  # beside the database, not in a working folder


def test_an_unreachable_mlflow_server_is_an_event_not_a_failure(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "from ferry import runtime\nruntime.report(step=1, loss=1.0)\n"
    )
    (project / "job.yaml").write_text(
        "command: python train.py\ntracking: {mlflow: 'http://user:pw@127.0.0.1:9'}\n"
    )
    line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), 2)
    assert "MLFLOW_TRACKING_PASSWORD" in line and "pw" not in line.replace("password", "")
    for uri in ("http://user:pw@127.0.0.1:9", "postgresql+psycopg2://u:pw@db/mlflow"):
        result = ferry("config", "set", "tracking.mlflow", uri)
        assert "MLFLOW_TRACKING_PASSWORD" in assert_one_line_error(result, 2)
    assert ferry("config", "set", "tracking.mlflow", "http://127.0.0.1:9").returncode == 0
    assert ferry("run", "--", "python", "train.py", cwd=project).returncode == 0
    job_id = ferry_json("jobs")[0]["id"]
    assert job_status(job_id)["spec"]["tracking"]["mlflow"] == "http://127.0.0.1:9"
    from tests.conftest import wait_for

    def failed() -> list[str]:
        return [
            e["message"]
            for e in job_status(job_id)["events"]
            if "MLflow" in e["message"] and "failed" in e["message"]
        ]

    [event] = wait_for(failed, timeout=120, what="the MLflow failure event")
    assert "sending to MLflow at http://127.0.0.1:9 failed" in event
