"""The platforms' own training libraries read a Ferry job as their platform's: SageMaker's
toolkit (``sagemaker_training.environment``) and Vertex AI's ``training_utils``, imported
for real inside jobs started by ``ferry run``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ferry, ferry_json

pytestmark = pytest.mark.slow

# What SageMaker's toolkit makes of the job, next to what Ferry's variables say. Paths are
# compared inside the job, where container paths (/opt/ml/...) resolve.
SAGEMAKER_TOOLKIT_SCRIPT = textwrap.dedent("""
    import json, os
    from sagemaker_training import environment

    env = environment.Environment()
    exported = env.to_env_vars()  # what the toolkit's own launcher would set

    def value(text):
        try:
            return json.loads(text)
        except ValueError:
            return text

    def same(a, b):
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)

    ours = {k: v for k, v in os.environ.items() if k.startswith("SM_")}
    base = environment.base_dir
    with open(os.path.join(env.model_dir, "model.txt"), "w") as f:
        f.write("written through the toolkit's model_dir")
    with open(os.path.join(env.output_data_dir, "extra.txt"), "w") as f:
        f.write("written through the toolkit's output_data_dir")
    report = {
        "base_dir": base,
        "not_exported": sorted(k for k in ours if k not in exported),
        "differ": {k: [v, exported[k]] for k, v in ours.items()
                   if k in exported and value(v) != value(exported[k])},
        "model_dir": env.model_dir,
        "channel_input_dirs": env.channel_input_dirs,
        "input_data_config": env.input_data_config,
        "hyperparameters": env.hyperparameters,
        "ferry_hparams": json.loads(os.environ["FERRY_HPARAMS"]),
        "current_host": env.current_host,
        "hosts": env.hosts,
        "resource_config": env.resource_config,
        "num_gpus": env.num_gpus,
        "ferry_num_gpus": int(os.environ["FERRY_NUM_GPUS"]),
        "num_cpus": env.num_cpus,
        "same": {
            "model": same(env.model_dir, os.environ["FERRY_MODEL_DIR"]),
            "output": same(env.output_data_dir, os.environ["FERRY_OUTPUT_DIR"]),
            "checkpoints": same(os.path.join(base, "checkpoints"),
                                os.environ["FERRY_CHECKPOINT_DIR"]),
            "tensorboard": same(os.path.join(env.output_dir, "tensorboard"),
                                os.environ["FERRY_TENSORBOARD_DIR"]),
            "train": same(env.channel_input_dirs["train"], os.environ["FERRY_INPUT_TRAIN"]),
        },
    }
    with open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "toolkit.json"), "w") as f:
        json.dump(report, f)
""")


def _run_sagemaker_toolkit(
    project: Path, tmp_path: Path, paths: str
) -> tuple[dict[str, Any], Path, str]:
    data = tmp_path / "train"
    data.mkdir()
    (data / "rows.csv").write_text("1,2\n")
    user_home = tmp_path / "user-home"  # where the toolkit would build a tree of its own
    user_home.mkdir()
    (project / "train.py").write_text(SAGEMAKER_TOOLKIT_SCRIPT)
    (project / "job.yaml").write_text(
        f"command: python train.py\ncontract: sagemaker\npaths: {paths}\n"
        f"inputs: {{train: {data}}}\n"
        "hyperparameters: {lr: 0.01, epochs: 2, arch: resnet, layers: [64, 32]}\n"
    )
    result = ferry("run", "job.yaml", cwd=project, timeout=120, env={"HOME": str(user_home)})
    assert result.returncode == 0, result.stdout + result.stderr
    job = ferry_json("jobs")[0]
    outputs = Path(job["outputs"])
    report: dict[str, Any] = json.loads((outputs / "output" / "toolkit.json").read_text())
    assert not (user_home / "sagemaker_local").exists()
    return report, outputs, job["id"]


def _check_sagemaker_report(report: dict[str, Any], outputs: Path) -> None:
    assert report["not_exported"] == []
    assert report["differ"] == {}  # every SM_* Ferry sets is what the toolkit computes
    assert report["same"] == dict.fromkeys(
        ("model", "output", "checkpoints", "tensorboard", "train"), True
    )
    assert report["channel_input_dirs"] == {"train": f"{report['base_dir']}/input/data/train"}
    assert report["model_dir"] == f"{report['base_dir']}/model"
    assert list(report["input_data_config"]) == ["train"]
    typed = {"lr": 0.01, "epochs": 2, "arch": "resnet", "layers": [64, 32]}
    assert report["hyperparameters"] == typed == report["ferry_hparams"]
    assert report["current_host"] == "algo-1" and report["hosts"] == ["algo-1"]
    assert report["resource_config"]["current_host"] == "algo-1"
    assert report["num_gpus"] == report["ferry_num_gpus"]
    assert (outputs / "model" / "model.txt").read_text().startswith("written through")
    assert (outputs / "output" / "extra.txt").read_text().startswith("written through")


def test_sagemaker_toolkit_reads_the_job_on_host_paths(
    home: Path, project: Path, tmp_path: Path
) -> None:
    report, outputs, job_id = _run_sagemaker_toolkit(project, tmp_path, "host")
    assert report["base_dir"] == str(home / "jobs" / job_id / "opt_ml")  # the job's own tree
    _check_sagemaker_report(report, outputs)


def test_sagemaker_toolkit_reads_the_job_in_container_paths(
    home: Path, project: Path, tmp_path: Path
) -> None:
    report, outputs, _ = _run_sagemaker_toolkit(project, tmp_path, "container")
    assert report["base_dir"] == "/opt/ml"
    _check_sagemaker_report(report, outputs)


VERTEX_SCRIPT = textwrap.dedent("""
    import json, os
    from google.cloud.aiplatform.training_utils import environment_variables as aip

    report = {
        "model_dir": aip.model_dir,
        "checkpoint_dir": aip.checkpoint_dir,
        "tensorboard_log_dir": aip.tensorboard_log_dir,
        "training_data_uri": aip.training_data_uri,
        "cloud_ml_job_id": aip.cloud_ml_job_id,
        "ferry": {k: v for k, v in os.environ.items() if k.startswith("FERRY_")},
    }
    with open(os.path.join(aip.model_dir, "saved.txt"), "w") as f:
        f.write("model")
    with open(os.path.join(aip.checkpoint_dir, "ck.txt"), "w") as f:
        f.write("checkpoint")
    with open(os.path.join(aip.tensorboard_log_dir, "events.txt"), "w") as f:
        f.write("events")
    print(json.dumps(report))
""")


def test_vertex_training_utils_reads_the_job(home: Path, project: Path) -> None:
    (project / "task.py").write_text(VERTEX_SCRIPT)
    (project / "job.yaml").write_text("command: python task.py\ncontract: vertex\n")
    result = ferry("run", "job.yaml", cwd=project, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    ours = report["ferry"]
    assert report["model_dir"] == ours["FERRY_MODEL_DIR"] + "/"
    assert report["checkpoint_dir"] == ours["FERRY_CHECKPOINT_DIR"] + "/"
    assert report["tensorboard_log_dir"] == ours["FERRY_TENSORBOARD_DIR"] + "/"
    assert report["cloud_ml_job_id"] == ours["FERRY_JOB_ID"]
    assert report["training_data_uri"] is None  # set by Vertex AI only for managed datasets
    outputs = Path(ferry_json("jobs")[0]["outputs"])
    assert (outputs / "model" / "saved.txt").read_text() == "model"
    assert (outputs / "checkpoints" / "ck.txt").read_text() == "checkpoint"
    assert (outputs / "tensorboard" / "events.txt").read_text() == "events"
