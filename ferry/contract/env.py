"""The single-node contract: FERRY_* variables with their Vertex AI and SageMaker aliases.

Scripts written for Vertex AI (``AIP_MODEL_DIR``...) or SageMaker (``SM_MODEL_DIR``...) find
the variables they expect, pointing at real local folders.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.procs import hostname
from ferry.units import expand_home


@dataclass(frozen=True)
class JobDirs:
    """The folders of one job's outputs (local paths)."""

    model: Path
    checkpoints: Path
    tensorboard: Path
    output: Path

    @classmethod
    def under(cls, outputs: str) -> JobDirs:
        root = expand_home(outputs.removeprefix("file://"))
        return cls(root / "model", root / "checkpoints", root / "tensorboard", root / "output")

    def create(self) -> None:
        """Make the folders (and the one holding them) where missing."""
        self.model.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.model, self.checkpoints, self.tensorboard, self.output):
            try:
                os.mkdir(path)
            except FileExistsError:
                if not path.is_dir():
                    raise


def env_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def hyperparameter_text(value: Any) -> str:
    """A hyperparameter as text, as SageMaker hands them over (SM_HP_*, hyperparameters.json)."""
    return value if isinstance(value, str) else json.dumps(value)


def contract_env(
    *,
    job_id: str,
    attempt: int,
    dirs: JobDirs,
    gpus: tuple[int, ...],
    cpus: float,
    hyperparameters: dict[str, Any],
    inputs: dict[str, str],
    checkpoint_every: float | None,
    bucket_root: str,
) -> dict[str, str]:
    """The variables an attempt gets (added to the submitter's environment)."""
    host = hostname()
    env = {
        "FERRY_JOB_ID": job_id,
        "FERRY_ATTEMPT": str(attempt),
        "FERRY_MODEL_DIR": str(dirs.model),
        "FERRY_CHECKPOINT_DIR": str(dirs.checkpoints),
        "FERRY_TENSORBOARD_DIR": str(dirs.tensorboard),
        "FERRY_OUTPUT_DIR": str(dirs.output),
        "FERRY_HPARAMS": json.dumps(hyperparameters, sort_keys=True),
        "FERRY_NODE_RANK": "0",
        "FERRY_NUM_NODES": "1",
        "FERRY_NUM_GPUS": str(len(gpus)),
        "BUCKET_ROOT": bucket_root,
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus),
        # Vertex AI custom training
        "CLOUD_ML_JOB_ID": job_id,
        "AIP_MODEL_DIR": f"{dirs.model}/",
        "AIP_CHECKPOINT_DIR": f"{dirs.checkpoints}/",
        "AIP_TENSORBOARD_LOG_DIR": f"{dirs.tensorboard}/",
        # where cloudml-hypertune writes the metrics it reports
        "CLOUD_ML_HP_METRIC_FILE": str(dirs.output.parent / "hypertune" / "output.metrics"),
        # SageMaker training toolkit
        "TRAINING_JOB_NAME": job_id,
        "SM_MODEL_DIR": str(dirs.model),
        "SM_OUTPUT_DATA_DIR": str(dirs.output),
        "SM_NUM_GPUS": str(len(gpus)),
        "SM_NUM_CPUS": str(max(1, int(cpus))),
        "SM_HOSTS": json.dumps([host]),
        "SM_CURRENT_HOST": host,
        "SM_HPS": json.dumps({k: hyperparameters[k] for k in sorted(hyperparameters)}),
        "SM_CHANNELS": json.dumps(sorted(inputs)),
    }
    if checkpoint_every:
        env["FERRY_CHECKPOINT_EVERY"] = f"{checkpoint_every:g}"
    for key, value in hyperparameters.items():
        env[f"SM_HP_{env_key(key)}"] = hyperparameter_text(value)
    for name, path in inputs.items():
        env[f"FERRY_INPUT_{env_key(name)}"] = path
        env[f"SM_CHANNEL_{env_key(name)}"] = path
    return env
