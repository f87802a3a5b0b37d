"""The contract's variables, by name, and where a backend's ranks see them differently.

A rank sees the same contract on every backend: the same names, with values that mean
the same (its rank, the job's hyperparameters, folders of the same role). The few
differences are real ones, declared here with the reason, and nowhere else;
tests/backends/test_rank_environment.py runs one job everywhere and fails on any other.
"""

from __future__ import annotations

# Names that belong to the contract: Ferry's, the aliases of Vertex AI, SageMaker and
# torchrun (TF_CONFIG for TensorFlow), and the variables Ferry sets for every job. (Not
# Ferry's own settings, FERRY_HOME and the like, which a job may inherit from where it was
# submitted.)
PREFIXES = ("FERRY_INPUT_", "AIP_", "CLOUD_ML_", "SM_", "SAGEMAKER_", "TRAINING_JOB_")
NAMES = frozenset(
    {
        "FERRY_JOB_ID",
        "FERRY_ATTEMPT",
        "FERRY_MODEL_DIR",
        "FERRY_CHECKPOINT_DIR",
        "FERRY_CHECKPOINT_EVERY",
        "FERRY_CHECKPOINT_KEEP",
        "FERRY_TENSORBOARD_DIR",
        "FERRY_OUTPUT_DIR",
        "FERRY_HPARAMS",
        "FERRY_NODE_RANK",
        "FERRY_NUM_NODES",
        "FERRY_NUM_GPUS",
        "FERRY_METRICS_FILE",
        "FERRY_FAILURE_FILE",
        "BUCKET_ROOT",
        "CLUSTER_SPEC",
        "TF_CONFIG",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
    }
)

# backend -> {variable: why a rank there sees it otherwise}: what the provider itself
# sets beside the contract, or a value the platform chooses.
DIFFERENCES: dict[str, dict[str, str]] = {
    "local": {},
    "ray": {
        "OMP_NUM_THREADS": "a job of one process per node keeps what Ray sets, its share of "
        "CPUs (resources.cpus); a gang's processes get 1, as everywhere",
    },
    "vertex": {
        "CLOUD_ML_PROJECT_ID": "Vertex AI sets it: the project the job runs in",
    },
    "sagemaker": {
        "TRAINING_JOB_ARN": "SageMaker sets it: the training job's ARN",
    },
}


def is_contract(name: str) -> bool:
    """Whether the variable ``name`` is one of the contract's."""
    return name in NAMES or name.startswith(PREFIXES)
