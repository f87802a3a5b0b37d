"""The SageMaker training contract, laid out on this machine.

SageMaker gives a training script ``/opt/ml/input/config/*.json``, its channels under
``/opt/ml/input/data/<channel>`` and ``SM_*`` variables, and reads ``/opt/ml/output/failure``
when the script fails. Here the same tree lives in the job's folder (``<job>/opt_ml``), the
variables point into it, and its model, checkpoint, output and tensorboard folders are links
to the job's own. ``SAGEMAKER_BASE_DIR`` names the tree, so SageMaker's training toolkit
(``sagemaker_training.environment``) computes from it the same folders, channels,
hyperparameters and hosts as the ``SM_*`` variables say.
(Field names and layout: the sagemaker-training-toolkit's documented environment.)
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ferry.contract.env import JobDirs, env_key, hyperparameter_text

HOST = "algo-1"  # SageMaker names the hosts of a training job algo-1, algo-2, ...
GROUP = "homogeneousCluster"  # the instance group of a job without heterogeneous clusters


def prepare(
    root: Path,
    dirs: JobDirs,
    hyperparameters: dict[str, Any],
    inputs: dict[str, str],
    hosts: Sequence[str] = (HOST,),
    current: str = HOST,
) -> dict[str, str]:
    """Write the ``opt_ml`` tree under ``root``; return the variables that point into it.

    Args:
        root: The job's ``opt_ml`` folder (created when missing; rewritten each attempt).
        dirs: The job's output folders, which the tree's ``model``, ``checkpoints``,
            ``output/data`` and ``output/tensorboard`` link to.
        hyperparameters: The job's hyperparameters (written as text, as SageMaker does).
        inputs: Input name -> staged local path, or a URI for a streamed input.
        hosts: The job's hosts (a gang's nodes, ``Gang.sagemaker_hosts``), and ``current``
            the one this is.

    Returns:
        ``SAGEMAKER_BASE_DIR`` and the ``SM_*`` variables, as the toolkit would compute them.
    """
    config = root / "input" / "config"
    data = root / "input" / "data"
    config.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    (root / "output").mkdir(exist_ok=True)
    for link, target in (
        (root / "model", dirs.model),
        (root / "checkpoints", dirs.checkpoints),
        (root / "output" / "data", dirs.output),
        (root / "output" / "tensorboard", dirs.tensorboard),
    ):
        _link(link, target)
    files = {
        "hyperparameters.json": {k: hyperparameter_text(v) for k, v in hyperparameters.items()},
        "resourceconfig.json": {
            "current_host": current,
            "hosts": list(hosts),
            "current_instance_type": "local",
            "current_group_name": GROUP,
            "instance_groups": [
                {"instance_group_name": GROUP, "instance_type": "local", "hosts": list(hosts)}
            ],
            "network_interface_name": "lo",
        },
        "inputdataconfig.json": {
            name: {
                "TrainingInputMode": "File",
                "S3DistributionType": "FullyReplicated",
                "RecordWrapperType": "None",
            }
            for name in inputs
        },
    }
    for name, content in files.items():
        (config / name).write_text(json.dumps(content))
    channels = {}
    for name, path in inputs.items():
        if "://" in path:  # streamed: the job reads the URI itself
            (data / name).unlink(missing_ok=True)
            channels[name] = path
            continue
        _link(data / name, Path(path))
        channels[name] = str(data / name)
    env = {
        "SAGEMAKER_BASE_DIR": str(root),
        "SM_INPUT_DIR": str(root / "input"),
        "SM_INPUT_CONFIG_DIR": str(config),
        "SM_OUTPUT_DIR": str(root / "output"),
        "SM_RESOURCE_CONFIG": json.dumps(files["resourceconfig.json"]),
        "SM_INPUT_DATA_CONFIG": json.dumps(files["inputdataconfig.json"]),
        "SM_HOSTS": json.dumps(list(hosts)),
        "SM_CURRENT_HOST": current,
        "SM_MODEL_DIR": str(root / "model"),
        "SM_OUTPUT_DATA_DIR": str(root / "output" / "data"),
        # A SageMaker job has its whole instance, and the toolkit counts every CPU of the
        # machine (multiprocessing.cpu_count); Ferry does not confine the job to its share.
        "SM_NUM_CPUS": str(os.cpu_count() or 1),
    }
    for name, where in channels.items():
        env[f"SM_CHANNEL_{env_key(name)}"] = where
    return env


def _link(link: Path, target: Path) -> None:
    """Make ``link`` a symbolic link to ``target``, replacing an older link or an empty
    folder (left by an earlier attempt, or made by a bind mount of container paths)."""
    if link.is_symlink():
        link.unlink()
    elif link.is_dir():
        for item in link.iterdir():  # written there before it was a link: keep it
            if not (target / item.name).exists():
                shutil.move(item, target / item.name)
        shutil.rmtree(link)
    os.symlink(target, link)


def failure_text(path: Path) -> str | None:
    """What the script wrote to its failure file (``FERRY_FAILURE_FILE``,
    ``/opt/ml/output/failure``), if anything."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return text[:1000] or None


def arguments(contract: str, hyperparameters: dict[str, Any]) -> list[str]:
    """Hyperparameters as command-line arguments, as each platform passes them:
    SageMaker ``--key value``, Vertex AI ``--key=value``; none for Ferry's own contract."""
    if contract == "sagemaker":
        return [a for k, v in hyperparameters.items() for a in (f"--{k}", hyperparameter_text(v))]
    if contract == "vertex":
        return [f"--{k}={hyperparameter_text(v)}" for k, v in hyperparameters.items()]
    return []
