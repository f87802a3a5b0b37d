"""The SageMaker training contract, laid out on this machine.

SageMaker gives a training script ``/opt/ml/input/config/*.json``, its channels under
``/opt/ml/input/data/<channel>`` and ``SM_*`` variables, and reads ``/opt/ml/output/failure``
when the script fails. Here the same tree lives in the job's folder (``<job>/opt_ml``), the
variables point into it, and its model and output folders are the job's own.
(Field names and layout: the sagemaker-training-toolkit's documented environment.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ferry.contract.env import JobDirs, env_key, hyperparameter_text

HOST = "algo-1"  # SageMaker names the hosts of a training job algo-1, algo-2, ...


def prepare(
    root: Path, dirs: JobDirs, hyperparameters: dict[str, Any], inputs: dict[str, str]
) -> dict[str, str]:
    """Write the ``opt_ml`` tree under ``root``; return the variables that point into it."""
    config = root / "input" / "config"
    data = root / "input" / "data"
    config.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    (root / "output").mkdir(exist_ok=True)
    files = {
        "hyperparameters.json": {k: hyperparameter_text(v) for k, v in hyperparameters.items()},
        "resourceconfig.json": {
            "current_host": HOST,
            "hosts": [HOST],
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
        link = data / name
        if link.is_symlink() or link.exists():
            link.unlink()
        if "://" in path:  # streamed: the job reads the URI itself
            channels[name] = path
            continue
        os.symlink(path, link)
        channels[name] = str(link)
    env = {
        "SM_INPUT_DIR": str(root / "input"),
        "SM_INPUT_CONFIG_DIR": str(config),
        "SM_OUTPUT_DIR": str(root / "output"),
        "SM_RESOURCE_CONFIG": json.dumps(files["resourceconfig.json"]),
        "SM_INPUT_DATA_CONFIG": json.dumps(files["inputdataconfig.json"]),
        "SM_HOSTS": json.dumps([HOST]),
        "SM_CURRENT_HOST": HOST,
        "SM_MODEL_DIR": str(dirs.model),
        "SM_OUTPUT_DATA_DIR": str(dirs.output),
    }
    for name, where in channels.items():
        env[f"SM_CHANNEL_{env_key(name)}"] = where
    return env


def failure_text(root: Path) -> str | None:
    """What the script wrote to ``/opt/ml/output/failure``, if anything."""
    try:
        text = (root / "output" / "failure").read_text(errors="replace").strip()
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
