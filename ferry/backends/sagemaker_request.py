"""The SageMaker request for one attempt: ``CreateTrainingJob``'s parameters in the API's
own field names (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html).

Pure: the same function makes what ``launch`` sends and what ``--dry-run`` prints, and
:func:`validate` checks it against botocore's service model, as botocore does (required
and unknown fields, types), and then against the limits the model states and botocore
leaves to the server (enums, lengths, counts, patterns), so a request Ferry sends is one
the API reads.

What each part of the spec becomes:

- ``AlgorithmSpecification``: the provider's prebuilt framework image (a Deep Learning
  Container, or ``environment.image``) whose ``ContainerEntrypoint`` runs Ferry's
  bootstrap (:mod:`ferry.runner.bootstrap`) from the ``ferry-wheel`` channel: it installs
  the wheel beside it and starts the runner on the attempt's run folder;
  ``MetricDefinitions`` from the spec's ``metrics`` patterns;
- ``InputDataConfig``: the ``ferry-wheel`` and ``ferry-code`` channels, and one channel
  per ``s3://`` input copied (``File``) or mounted (``FastFile``); SageMaker puts each
  under ``/opt/ml/input/data/<name>`` before the job starts;
- ``ResourceConfig``: the chosen instance type, the nodes, the volume;
- ``StoppingCondition``: ``MaxRuntimeInSeconds`` always (``limits.max_runtime`` and the
  stop grace, or ``cloud.max_runtime``); for spot, ``MaxWaitTimeInSeconds`` adds the
  time it may wait for capacity (``limits.max_pending``, which Ferry itself enforces);
- ``EnableManagedSpotTraining`` with a ``CheckpointConfig`` on the job's checkpoints;
- ``HyperParameters`` as text, ``Environment`` (the spec's ``env``, never its secrets),
  ``RoleArn``, ``VpcConfig`` and ``Tags`` that carry the job's id and attempt.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ferry.errors import FerryError, install_hint

CHANNELS = "/opt/ml/input/data"  # where SageMaker puts each channel on the machine
WHEEL_CHANNEL = "ferry-wheel"  # Ferry's wheel and the bootstrap beside it
CODE_CHANNEL = "ferry-code"  # the code archive
BOOTSTRAP_NAME = "bootstrap.py"  # (ferry.packaging.bundle.BOOTSTRAP)
CHECKPOINTS = "/opt/ml/checkpoints"  # SageMaker's checkpoint folder (CheckpointConfig)
VOLUME_GB = 100  # the instance's storage volume, for the image, the data and the work
LOG_GROUP = "/aws/sagemaker/TrainingJobs"  # CloudWatch Logs: one stream per host
_NAME_RE = re.compile(r"[^a-zA-Z0-9]+")


@dataclass(frozen=True)
class Target:
    """Where and on what one attempt runs: the settings and the chosen offering."""

    region: str
    instance_type: str  # SageMaker's name (ml.g5.xlarge)
    spot: bool
    image: str  # the training image (a prebuilt container, or environment.image)
    role: str  # the execution role's ARN (a placeholder in a dry run without the setting)
    nodes: int = 1
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    volume_gb: int = VOLUME_GB
    tags: dict[str, str] = field(default_factory=dict)


def job_name(job_id: str, attempt: int, nonce: str) -> str:
    """The training job's name (and its run folder's): the job's id, the attempt and a
    nonce, in SageMaker's alphabet (letters, digits and ``-``, 63 at most, the end kept)."""
    tail = f"-{attempt}-{nonce}"
    head = _NAME_RE.sub("-", job_id).strip("-")[: 63 - len(tail)].rstrip("-")
    return f"{head or 'ferry'}{tail}"


def channel_name(input_name: str) -> str:
    """The channel of the input ``input_name`` (``[A-Za-z0-9.-_]``, 64 at most)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", input_name)[:64]


def channel_path(input_name: str) -> str:
    """Where the input's channel is on the machine."""
    return f"{CHANNELS}/{channel_name(input_name)}"


def training_job(
    *,
    name: str,
    job_id: str,
    attempt: int,
    hyperparameters: dict[str, str],
    metrics: dict[str, str],
    inputs: dict[str, tuple[str, str]],
    target: Target,
    run_folder: str,
    code: str,
    wheel: str,
    outputs: str,
    env: dict[str, str],
    timeout: float,
    max_pending: float,
) -> dict[str, Any]:
    """The ``CreateTrainingJob`` parameters for attempt ``attempt`` of job ``job_id``.

    Args:
        name: the training job's name (:func:`job_name`).
        hyperparameters: the job's hyperparameters as text; metrics: name -> pattern.
        inputs: input name -> (``s3://`` URI, mode) for the inputs SageMaker brings.
        target: where it runs.
        run_folder: the attempt's run folder (an ``s3://`` prefix).
        code: the code archive's URI; wheel: Ferry's wheel's (its folder holds the
            bootstrap too).
        outputs: the job's outputs (``s3://``): its ``checkpoints/`` are the spot
            checkpoint folder.
        env: what the job's processes get besides the contract (the spec's ``env``).
        timeout: seconds before SageMaker ends the job whatever happens; max_pending:
            seconds a spot job may wait for capacity on top of it.
    """
    wheel_folder, _, wheel_file = wheel.rpartition("/")
    channels = [
        _channel(WHEEL_CHANNEL, f"{wheel_folder}/", "File"),
        _channel(CODE_CHANNEL, code, "File"),
    ]
    for input_name, (uri, mode) in sorted(inputs.items()):
        channels.append(
            _channel(channel_name(input_name), uri, "FastFile" if mode == "mount" else "File")
        )
    runtime = max(1, int(timeout))
    stopping: dict[str, Any] = {"MaxRuntimeInSeconds": runtime}
    if target.spot:
        stopping["MaxWaitTimeInSeconds"] = runtime + max(1, int(max_pending))
    algorithm: dict[str, Any] = {
        "TrainingImage": target.image,
        "TrainingInputMode": "File",
        "ContainerEntrypoint": ["python3", f"{CHANNELS}/{WHEEL_CHANNEL}/{BOOTSTRAP_NAME}"],
        "ContainerArguments": [
            f"{CHANNELS}/{WHEEL_CHANNEL}/{wheel_file}",
            "s3",
            run_folder,
            f"{CHANNELS}/{CODE_CHANNEL}",
        ],
    }
    if metrics:
        algorithm["MetricDefinitions"] = [
            {"Name": metric, "Regex": pattern} for metric, pattern in sorted(metrics.items())
        ]
    tags = {"ferry-job": job_id, "ferry-attempt": str(attempt), "ferry-run": name}
    tags.update(target.tags)
    body: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": algorithm,
        "RoleArn": target.role,
        "InputDataConfig": channels,
        # SageMaker's own archive of /opt/ml/model stays beside the run's record: the
        # runner sends the job's outputs where the spec says
        "OutputDataConfig": {"S3OutputPath": f"{run_folder}/sagemaker"},
        "ResourceConfig": {
            "InstanceType": target.instance_type,
            "InstanceCount": target.nodes,
            "VolumeSizeInGB": target.volume_gb,
        },
        "StoppingCondition": stopping,
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
    }
    if hyperparameters:
        body["HyperParameters"] = dict(sorted(hyperparameters.items()))
    if env:
        body["Environment"] = dict(sorted(env.items()))
    if target.subnets or target.security_groups:
        body["VpcConfig"] = {
            "SecurityGroupIds": list(target.security_groups),
            "Subnets": list(target.subnets),
        }
    if target.spot:
        body["EnableManagedSpotTraining"] = True
        body["CheckpointConfig"] = {
            "S3Uri": f"{outputs.rstrip('/')}/checkpoints",
            "LocalPath": CHECKPOINTS,
        }
    return body


def _channel(name: str, uri: str, mode: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": uri,
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "InputMode": mode,
    }


# -- checking a request against botocore's model --------------------------------------------

# Java's classes in the model's patterns, as Python's re reads them (a little wider: \w
# also takes "_", which every pattern using them lists anyway)
_JAVA_CLASSES = {r"\p{L}": r"\w", r"\p{Z}": r"\s", r"\p{N}": r"\d", r"\p{Alnum}": r"a-zA-Z0-9"}


def validate(body: dict[str, Any], stand_ins: dict[str, str] | None = None) -> None:
    """Check ``body`` against ``CreateTrainingJob`` in botocore's model: raises FerryError
    naming the first field the API would refuse (see :func:`problems`)."""
    found = problems(body, stand_ins)
    if found:
        raise FerryError(
            f"Ferry made a CreateTrainingJob request that SageMaker would refuse: {found[0]}",
            "report it with the output of --dry-run",
        )


def problems(body: dict[str, Any], stand_ins: dict[str, str] | None = None) -> list[str]:
    """What SageMaker would refuse in ``body``, by botocore's model: what botocore checks
    (required and unknown fields, types), then what the model states and botocore leaves
    to the server (enums, lengths, counts, patterns). ``stand_ins`` replace placeholders
    (a dry run's ``<ROLE_ARN>``) with values of the right form first."""
    try:
        from botocore.validate import ParamValidator
    except ImportError:
        from ferry.errors import BackendNotInstalled

        raise BackendNotInstalled(
            "the sagemaker backend needs boto3, which is not installed",
            install_hint("sagemaker"),
        ) from None
    if stand_ins:
        text = json.dumps(body)
        for placeholder, value in stand_ins.items():
            text = text.replace(placeholder, value)
        body = json.loads(text)
    shape = _input_shape()
    report = ParamValidator().validate(body, shape)
    found = [report.generate_report()] if report.has_errors() else []
    return found + _limits(body, shape, "")


def _input_shape() -> Any:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model("CreateTrainingJob").input_shape


def _limits(value: Any, shape: Any, where: str) -> list[str]:
    """What the model's enum, min/max and pattern say of ``value`` (botocore checks only
    some minimums)."""
    found: list[str] = []
    meta = shape.metadata
    kind = shape.type_name
    at = where or "the request"
    if kind == "structure" and isinstance(value, dict):
        for key, item in value.items():
            member = shape.members.get(key)
            if member is not None:
                found += _limits(item, member, f"{where}.{key}" if where else key)
    elif kind == "list" and isinstance(value, list):
        found += _count(len(value), meta, at, "items")
        for i, item in enumerate(value):
            found += _limits(item, shape.member, f"{at}[{i}]")
    elif kind == "map" and isinstance(value, dict):
        found += _count(len(value), meta, at, "entries")
        for key, item in value.items():
            found += _limits(key, shape.key, f"{at} key {key!r}")
            found += _limits(item, shape.value, f"{at}[{key!r}]")
    elif kind == "string" and isinstance(value, str):
        enum = getattr(shape, "enum", None) or []
        if enum and value not in enum:
            found.append(f"{at} is {value!r}, which is not one of SageMaker's values")
        found += _count(len(value), meta, at, "characters")
        pattern = meta.get("pattern")
        if pattern and re.fullmatch(_python_pattern(pattern), value, re.DOTALL) is None:
            found.append(f"{at} {value!r} does not match {pattern}")
    elif kind in ("integer", "long") and isinstance(value, int):
        if "min" in meta and value < meta["min"]:
            found.append(f"{at} is {value}, less than {meta['min']}")
        if "max" in meta and value > meta["max"]:
            found.append(f"{at} is {value}, more than {meta['max']}")
    return found


def _count(n: int, meta: dict[str, Any], at: str, what: str) -> list[str]:
    if "max" in meta and n > meta["max"]:
        return [f"{at} has {n} {what}, more than {meta['max']}"]
    if "min" in meta and n < meta["min"]:
        return [f"{at} has {n} {what}, fewer than {meta['min']}"]
    return []


def _python_pattern(pattern: str) -> str:
    for java, python in _JAVA_CLASSES.items():
        pattern = pattern.replace(java, python)
    return pattern


# -- what people see --------------------------------------------------------------------------


def aws_command(body: dict[str, Any], region: str) -> str:
    """The ``aws`` command that sends the same request, saved as ``training_job.json``."""
    return (
        shlex.join(
            [
                "aws",
                "sagemaker",
                "create-training-job",
                "--region",
                region,
                "--cli-input-json",
                "file://training_job.json",
            ]
        )
        + "  # training_job.json: the request's body"
    )


def console_url(region: str, name: str) -> str:
    """The SageMaker console's page of the training job ``name``."""
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{name}"


def logs_url(region: str, name: str) -> str:
    """The CloudWatch console's page of the job's log streams."""
    group = LOG_GROUP.replace("/", "$252F")
    return (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
        f"#logsV2:log-groups/log-group/{group}$3FlogStreamNameFilter$3D{name}"
    )
