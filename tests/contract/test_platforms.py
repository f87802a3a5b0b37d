"""Scripts written for SageMaker or Vertex AI run unchanged: their files, variables and
argument styles, with real local folders."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ferry, ferry_json, job_status

pytestmark = pytest.mark.slow

SAGEMAKER_SCRIPT = textwrap.dedent("""
    import argparse, json, os
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float)
    p.add_argument("--epochs", type=int)
    p.add_argument("--arch")
    args = p.parse_args()
    config = os.environ["SM_INPUT_CONFIG_DIR"]
    hps = json.load(open(os.path.join(config, "hyperparameters.json")))
    resources = json.load(open(os.path.join(config, "resourceconfig.json")))
    channels = json.load(open(os.path.join(config, "inputdataconfig.json")))
    data = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "x.csv")).read().strip()
    os.makedirs(os.environ["SM_MODEL_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "report.json"), "w") as f:
        json.dump({"args": vars(args), "hps": hps, "host": resources["current_host"],
                   "channels": sorted(channels), "data": data,
                   "sm_hosts": json.loads(os.environ["SM_HOSTS"])}, f)
""")


def test_a_sagemaker_script_runs_unchanged(home: Path, project: Path, tmp_path: Path) -> None:
    data = tmp_path / "train"
    data.mkdir()
    (data / "x.csv").write_text("1,2,3\n")
    (project / "train.py").write_text(SAGEMAKER_SCRIPT)
    (project / "job.yaml").write_text(
        f"command: python train.py\ncontract: sagemaker\ninputs: {{train: {data}}}\n"
        "hyperparameters: {lr: 0.01, epochs: 2, arch: resnet}\n"
    )
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(
        (Path(ferry_json("jobs")[0]["outputs"]) / "model" / "report.json").read_text()
    )
    assert report["args"] == {"lr": 0.01, "epochs": 2, "arch": "resnet"}  # --key value
    assert report["hps"] == {"lr": "0.01", "epochs": "2", "arch": "resnet"}  # text, as SageMaker
    assert report["host"] == "algo-1" and report["sm_hosts"] == ["algo-1"]
    assert report["channels"] == ["train"] and report["data"] == "1,2,3"


def test_the_sagemaker_failure_file_becomes_the_reason(home: Path, project: Path) -> None:
    (project / "fail.py").write_text(
        "import os\n"
        "out = os.environ.get('SM_OUTPUT_DIR', '.')\n"
        "open(os.path.join(out, 'failure'), 'w').write('CUDA out of memory at batch 512')\n"
    )
    result = ferry("run", "--name", "smfail", "--", "python", "fail.py", cwd=project)
    assert result.returncode == 0  # the Ferry contract reads no failure file
    (project / "job.yaml").write_text("command: python fail.py\ncontract: sagemaker\n")
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 1
    job = ferry_json("jobs")[0]
    assert job["status"] == "FAILED"
    assert (
        job["reason"]
        == "CUDA out of memory at batch 512 (from /opt/ml/output/failure; exit code 0)"
    )
    assert job_status(job["id"])["attempts"][0]["status"] == "FAILED"


def test_a_vertex_script_gets_key_equals_value_arguments(home: Path, project: Path) -> None:
    (project / "task.py").write_text(
        "import argparse, os\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--lr', type=float)\n"
        "p.add_argument('--layers', type=int)\n"
        "a = p.parse_args()\n"
        "d = os.environ['AIP_MODEL_DIR']\n"
        "assert d.endswith('/')\n"
        "open(d + 'saved.txt', 'w').write(f'{a.lr} {a.layers}')\n"
        "print(os.environ['CLOUD_ML_JOB_ID'] == os.environ['FERRY_JOB_ID'])\n"
    )
    (project / "job.yaml").write_text(
        "command: python task.py\ncontract: vertex\nhyperparameters: {lr: 0.5, layers: 3}\n"
    )
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True\n"
    assert (Path(ferry_json("jobs")[0]["outputs"]) / "model" / "saved.txt").read_text() == "0.5 3"


def test_hard_coded_opt_ml_paths_work_without_docker(
    home: Path, project: Path, tmp_path: Path
) -> None:
    data = tmp_path / "train"
    data.mkdir()
    (data / "rows.csv").write_text("a\nb\nc\n")
    (project / "train.py").write_text(
        "rows = open('/opt/ml/input/data/train/rows.csv').read().split()\n"
        "import json, os\n"
        "hps = json.load(open('/opt/ml/input/config/hyperparameters.json'))\n"
        "open('/opt/ml/model/model.txt', 'w').write(f'{len(rows)} rows, lr {hps[\"lr\"]}')\n"
        "open('/opt/ml/checkpoints/ck.txt', 'w').write('c')\n"
        "print(os.environ['SM_MODEL_DIR'], os.environ['SM_CHANNEL_TRAIN'])\n"
    )
    (project / "job.yaml").write_text(
        f"command: python train.py\ncontract: sagemaker\ninputs: {{train: {data}}}\nhyperparameters: {{lr: 0.1}}\n"
    )
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "/opt/ml/model /opt/ml/input/data/train\n"
    job = ferry_json("jobs")[0]
    assert job["spec"]["paths"] == "container"  # noticed in the code
    out = Path(job["outputs"])
    assert (out / "model" / "model.txt").read_text() == "3 rows, lr 0.1"
    assert (out / "checkpoints" / "ck.txt").read_text() == "c"
    assert not Path("/opt/ml").exists()  # nothing changed on this machine


def test_code_without_container_paths_runs_on_the_host(home: Path, project: Path) -> None:
    (project / "plain.py").write_text("print('plain')\n")
    assert ferry("run", "--", "python", "plain.py", cwd=project).stdout == "plain\n"
    assert ferry_json("jobs")[0]["spec"]["paths"] == "host"


def test_local_inputs_are_read_only_in_container_paths(
    home: Path, project: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("original")
    (project / "touch.py").write_text(
        "import os\n"
        "path = os.path.join(os.environ['FERRY_INPUT_D'], 'x.txt')\n"
        "try:\n"
        "    open(path, 'w').write('changed')\n"
        "    print('written')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    (project / "job.yaml").write_text(
        f"command: python touch.py\npaths: container\ninputs: {{d: {data}}}\n"
    )
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "refused 30\n"  # EROFS
    assert (data / "x.txt").read_text() == "original"


def test_metrics_reported_through_cloudml_hypertune_are_picked_up(
    home: Path, project: Path
) -> None:
    (project / "tune.py").write_text(
        "import time, hypertune\n"
        "h = hypertune.HyperTune()\n"
        "for step in (1, 2, 3, 4, 5):\n"
        "    h.report_hyperparameter_tuning_metric(hyperparameter_metric_tag='accuracy', metric_value=0.5 + step / 10, global_step=step)\n"
        "    time.sleep(0.6)  # read while it runs, and again at the end: each entry once\n"
    )
    (project / "job.yaml").write_text("command: python tune.py\ncontract: vertex\n")
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    job_id = ferry_json("jobs")[0]["id"]
    events = [e["message"] for e in job_status(job_id)["events"]]
    assert "metrics reported through cloudml-hypertune: accuracy=1.0 at step 5" in events
    [accuracy] = [m for m in ferry_json("metrics", job_id) if m["name"] == "accuracy"]
    assert accuracy["points"] == 5 and accuracy["last"] == 1.0 and accuracy["last_step"] == 5


def test_an_opt_ml_folder_written_before_it_was_a_link_is_kept(tmp_path: Path) -> None:
    from ferry.contract import sagemaker
    from ferry.contract.env import JobDirs

    dirs = JobDirs.under(str(tmp_path / "out"))
    dirs.create()
    root = tmp_path / "opt_ml"
    (root / "model").mkdir(parents=True)
    (root / "model" / "early.bin").write_bytes(b"e")  # a job folder from an older Ferry
    env = sagemaker.prepare(root, dirs, {}, {})
    assert (root / "model").is_symlink()
    assert (dirs.model / "early.bin").read_bytes() == b"e"
    assert Path(env["SM_MODEL_DIR"]).resolve() == dirs.model.resolve()
