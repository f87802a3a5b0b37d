"""The Vertex AI request for one attempt: a ``CustomJob`` in the REST API's own field names
(https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs).

Pure: the same function makes what ``launch`` sends and what ``--dry-run`` prints, and
:func:`validate` parses it with ``aiplatform_v1.CustomJob`` strictly (an unknown field,
a wrong enum or type is an error), so a request Ferry sends is one the API reads.

What each part of the spec becomes:

- one worker pool of ``replicaCount`` 1 whose ``machineSpec`` is the chosen offering's
  machine (GPUs, or a TPU slice with its ``tpuTopology``), with a ``diskSpec``; a job of
  ``resources.nodes`` N adds a second pool of N-1 replicas alike (Vertex AI's primary
  replica is node 0 of the gang, the second pool's follow, as ``CLUSTER_SPEC`` lists
  them: :mod:`ferry.runner.cloud_gang`);
- ``pythonPackageSpec``: the provider's prebuilt framework image runs Ferry's wheel
  (``packageUris``, which Vertex AI pip-installs) as ``python -m ferry.runner.cloud
  RUN_FOLDER CODE``; with ``environment.image`` a ``containerSpec`` runs the same through
  :mod:`ferry.runner.bootstrap`, which installs the wheel from the bucket's ``/gcs`` mount;
- ``scheduling``: ``SPOT``, ``STANDARD`` or ``FLEX_START`` from ``resources.spot`` (true,
  false, flex), a flex-start job with ``maxWaitDuration`` a minute past how long Ferry lets
  it wait (``limits.max_pending``); ``timeout`` always (``limits.max_runtime`` and the stop
  grace, or the ``cloud.max_runtime`` setting, never the provider's silent 7 days);
  retries and restarts off, since Ferry owns them;
- ``baseOutputDirectory`` is the job's outputs, so Vertex AI sets ``AIP_MODEL_DIR``,
  ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR`` as it always does;
- ``serviceAccount`` and ``network`` from the settings, and labels that carry the job's
  id and attempt.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferry.errors import FerryError, install_hint

if TYPE_CHECKING:
    from ferry.accelerator_names import VertexMachine
    from ferry.store.plan import Plan

CLOUD_MODULE = "ferry.runner.cloud"
FLEX_WAIT_MARGIN = 60  # s past Ferry's own limit on the wait, before Vertex AI's
BOOT_DISK_GB = 100  # Vertex AI's own default boot disk, said rather than left implied
_LABEL_RE = re.compile(r"[^a-z0-9_-]")


@dataclass(frozen=True)
class Target:
    """Where and on what one attempt runs: the settings and the chosen offering."""

    project: str  # a placeholder (<PROJECT>) in a dry run without the setting
    region: str
    machine: VertexMachine
    spot: bool
    image: str  # the executor image (prebuilt), or environment.image
    flex_start: bool = False  # flex-start capacity (Dynamic Workload Scheduler)
    custom_image: bool = False  # environment.image: a containerSpec
    service_account: str | None = None
    network: str | None = None


def parent(project: str, region: str) -> str:
    """The collection a custom job is created in."""
    return f"projects/{project}/locations/{region}"


def label(value: str) -> str:
    """``value`` as a label value (lowercase letters, digits, ``_`` and ``-``; 63 at most)."""
    return _LABEL_RE.sub("-", value.lower())[:63]


def custom_job(
    *,
    job_id: str,
    attempt: int,
    plan: Plan,
    target: Target,
    run_folder: str,
    code: str,
    wheel: str,
    outputs: str,
    env: dict[str, str],
    timeout: float,
    max_wait: float | None = None,
) -> dict[str, Any]:
    """The ``CustomJob`` body for attempt ``attempt`` of job ``job_id``.

    Args:
        plan: the job's typed spec.
        target: where it runs.
        run_folder: the attempt's run folder (a ``gs://`` prefix).
        code: the code archive's URI; wheel: Ferry's wheel's.
        outputs: the job's outputs (``gs://``), Vertex AI's ``baseOutputDirectory``.
        env: what the job's processes get besides the contract (the spec's ``env``).
        timeout: seconds before Vertex AI ends the job whatever happens.
        max_wait: on flex-start capacity, how long Ferry lets the job wait for its machines
            (Vertex AI's own limit is a minute longer, so Ferry's speaks first).
    """
    machine: dict[str, Any] = {"machineType": target.machine.machine_type}
    if target.machine.accelerator_type:
        machine["acceleratorType"] = target.machine.accelerator_type
        machine["acceleratorCount"] = target.machine.accelerator_count
    if target.machine.tpu_topology:
        machine["tpuTopology"] = target.machine.tpu_topology
    variables = [{"name": k, "value": v} for k, v in sorted(env.items())]
    pool: dict[str, Any] = {
        "machineSpec": machine,
        "replicaCount": "1",  # (an int64: a string in the JSON mapping)
        "diskSpec": _disk(target.machine.machine_type),
    }
    if target.custom_image:
        from ferry.runner.bootstrap import command as bootstrap_command

        pool["containerSpec"] = {
            "imageUri": target.image,
            "command": bootstrap_command(fuse_path(wheel), "gcs"),
            "args": [run_folder, code],
            "env": variables,
        }
    else:
        pool["pythonPackageSpec"] = {
            "executorImageUri": target.image,
            "packageUris": [wheel],
            "pythonModule": CLOUD_MODULE,
            "args": [run_folder, code],
            "env": variables,
        }
    pools = [pool]
    if plan.resources.nodes > 1:  # the other nodes: replicas of the same machine and code
        pools.append({**pool, "replicaCount": str(plan.resources.nodes - 1)})
    scheduling: dict[str, Any] = {
        "strategy": "FLEX_START" if target.flex_start else "SPOT" if target.spot else "STANDARD",
        "timeout": f"{max(1, int(timeout))}s",
        "restartJobOnWorkerRestart": False,
        "disableRetries": True,
    }
    if target.flex_start and max_wait is not None:
        scheduling["maxWaitDuration"] = f"{int(max_wait) + FLEX_WAIT_MARGIN}s"
    spec: dict[str, Any] = {
        "workerPoolSpecs": pools,
        "scheduling": scheduling,
        "baseOutputDirectory": {"outputUriPrefix": outputs},
    }
    if target.service_account:
        spec["serviceAccount"] = target.service_account
    if target.network:
        spec["network"] = target.network
    return {
        "displayName": f"ferry-{job_id}-{attempt}"[:128],
        "labels": {"ferry-job": label(job_id), "ferry-attempt": str(attempt)},
        "jobSpec": spec,
    }


def _disk(machine_type: str) -> dict[str, Any]:
    """The boot disk: an SSD, but on machines whose default is another kind (A3 Ultra, A4
    take Hyperdisk), Vertex AI's default kind."""
    if machine_type.startswith(("a3-ultragpu", "a4-")):
        return {"bootDiskSizeGb": BOOT_DISK_GB}
    return {"bootDiskType": "pd-ssd", "bootDiskSizeGb": BOOT_DISK_GB}


def fuse_path(uri: str) -> str:
    """Where a ``gs://bucket/key`` object is on a Vertex AI machine (Cloud Storage FUSE)."""
    if not uri.startswith("gs://"):
        return uri
    return "/gcs/" + uri[len("gs://") :]


def validate(body: dict[str, Any]) -> Any:
    """``body`` parsed as ``aiplatform_v1.CustomJob``; raises FerryError naming what the
    API would refuse (an unknown field, a bad enum, a wrong type)."""
    try:
        from google.cloud.aiplatform_v1 import CustomJob
    except ImportError:
        from ferry.errors import BackendNotInstalled

        raise BackendNotInstalled(
            "the vertex backend needs google-cloud-aiplatform, which is not installed",
            install_hint("vertex"),
        ) from None
    try:
        return CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    except Exception as exc:  # (json_format.ParseError; its words name the field)
        raise FerryError(
            f"Ferry made a CustomJob that Vertex AI would refuse: {exc}",
            "report it with the output of --dry-run",
        ) from None


def gcloud_command(body: dict[str, Any], project: str, region: str) -> str:
    """The ``gcloud`` command that sends the same job, its spec in ``custom_job.json``."""
    labels = ",".join(f"{k}={v}" for k, v in body.get("labels", {}).items())
    return (
        shlex.join(
            [
                "gcloud",
                "ai",
                "custom-jobs",
                "create",
                f"--project={project}",
                f"--region={region}",
                f"--display-name={body['displayName']}",
                f"--labels={labels}",
                "--config=custom_job.json",
            ]
        )
        + "  # custom_job.json: the request's jobSpec"
    )


def console_url(name: str) -> str:
    """The Cloud Console page of the custom job ``name`` (projects/P/locations/R/customJobs/N)."""
    parts = name.split("/")
    if len(parts) != 6:
        return ""
    _, project, _, region, _, number = parts
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{number}"
        f"/cpu?project={project}"
    )
