"""The vertex backend's preflight (:mod:`ferry.backends.preflight`): Google credentials,
the project, the bucket, the service account (IAM: it exists), the machine in its region
(``vertex.region``, else the cheapest region that has it), and its quota for custom
training (Service Usage: the ``aiplatform.googleapis.com/custom_model_training_*`` metric
of the region; the preemptible one for spot, and for flex-start capacity, which Ferry
takes to draw on it as well: the pages it was built from do not say).

With an ``http://`` ``vertex.endpoint`` (a test server here) every Google API the checks
call is asked there, without credentials."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry import config
from ferry.backends.preflight import TIMEOUT, Check, bucket_writable
from ferry.errors import FerryError

if TYPE_CHECKING:
    from ferry.catalog.optimizer import Option
    from ferry.store.plan import Plan

SERVICE = "aiplatform.googleapis.com"
QUOTAS_PAGE = "https://console.cloud.google.com/iam-admin/quotas"
# acceleratorType -> the GPU's part of its custom training quota metric
# (aiplatform.googleapis.com/custom_model_training_<part>_gpus, preemptible_<part> for spot
# and flex-start)
GPU_METRICS = {
    "NVIDIA_TESLA_T4": "nvidia_t4",
    "NVIDIA_TESLA_V100": "nvidia_v100",
    "NVIDIA_TESLA_P4": "nvidia_p4",
    "NVIDIA_TESLA_P100": "nvidia_p100",
    "NVIDIA_TESLA_A100": "nvidia_a100",
    "NVIDIA_A100_80GB": "nvidia_a100_80gb",
    "NVIDIA_L4": "nvidia_l4",
    "NVIDIA_H100_80GB": "nvidia_h100",
    "NVIDIA_H100_MEGA_80GB": "nvidia_h100_mega",
    "NVIDIA_H200_141GB": "nvidia_h200",
    "NVIDIA_B200": "nvidia_b200",
}


def checks(
    plan: Plan, outputs: str, project: str | None, placed: tuple[Option, Any] | FerryError
) -> list[Check]:
    """Every check, in order. ``project``: the project set (None: none); ``placed``: the
    offering and its machine (a ``VertexMachine``), or why there is none."""
    session, found = _credentials()
    if project is None:
        found.append(
            Check(
                "project",
                False,
                "no Google Cloud project is set for Vertex AI",
                "ferry config set vertex.project PROJECT (or set GOOGLE_CLOUD_PROJECT)",
            )
        )
        return found
    found.append(Check("project", True, project))
    found.append(bucket_writable(outputs))
    if session is not None:
        found.append(_service_account(session))
    if isinstance(placed, FerryError):
        found.append(Check("machine", False, placed.message, placed.hint or ""))
        return found
    option, machine = placed
    found.append(Check("machine", True, option.describe()))
    if session is not None:
        found.append(_quota(session, project, option, machine, plan.resources.nodes))
    return found


def _bases() -> tuple[str, str, bool]:
    """Where IAM and Service Usage are asked, and whether that is a test server."""
    endpoint = str(config.get("vertex.endpoint") or "")
    if endpoint.startswith("http://"):
        return endpoint, endpoint, True
    return "https://iam.googleapis.com", "https://serviceusage.googleapis.com", False


def _credentials() -> tuple[Any, list[Check]]:
    """A session that calls Google's APIs (None: none), and what was found."""
    import requests

    if _bases()[2]:
        endpoint = config.get("vertex.endpoint")
        said = f"none needed: a test server at {endpoint}"
        return requests.Session(), [Check("credentials", True, said)]
    try:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(  # type: ignore[no-untyped-call]
            scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
    except Exception as exc:  # (DefaultCredentialsError)
        return None, [
            Check(
                "credentials",
                False,
                f"no Google credentials were found ({exc})",
                "run: gcloud auth application-default login",
            )
        ]
    who = getattr(credentials, "service_account_email", None) or "your user account"
    session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
    return session, [Check("credentials", True, f"application default credentials ({who})")]


def _service_account(session: Any) -> Check:
    account = config.get("vertex.service_account")
    if not account:
        return Check("service account", True, "Vertex AI's own service agent (none set)")
    iam = _bases()[0]
    try:
        answer = session.get(f"{iam}/v1/projects/-/serviceAccounts/{account}", timeout=TIMEOUT)
    except Exception as exc:
        return Check("service account", None, f"IAM did not answer ({exc})")
    if answer.status_code == 404:
        return Check(
            "service account",
            False,
            f"the service account {account} does not exist",
            "create it (gcloud iam service-accounts create), or set another: ferry config "
            "set vertex.service_account EMAIL",
        )
    if answer.status_code != 200:
        return Check(
            "service account", None, f"{account} could not be read (HTTP {answer.status_code})"
        )
    return Check("service account", True, f"{account} exists")


def _quota(session: Any, project_id: str, option: Option, machine: Any, nodes: int) -> Check:
    pre = "preemptible_" if option.spot or option.flex_start else ""
    if machine.tpu_topology:  # (v5e, v6e: no acceleratorType, and not the CPUs' quota)
        return Check(
            "quota", None, f"Ferry does not know the quota of TPU slices; see {QUOTAS_PAGE}"
        )
    if machine.accelerator_type and machine.accelerator_type not in GPU_METRICS:
        return Check("quota", None, f"Ferry does not know the quota of {machine.accelerator_type}")
    if machine.accelerator_type:
        gpu = GPU_METRICS[machine.accelerator_type]
        metric = f"{SERVICE}/custom_model_training_{pre}{gpu}_gpus"
        need = int(machine.accelerator_count or 1) * nodes
    else:
        metric = f"{SERVICE}/custom_model_training_{pre}cpus"
        need = int(option.offering.vcpus or 1) * nodes
    region = option.offering.region
    try:
        limit = _limit(session, project_id, metric, region)
    except Exception as exc:
        return Check("quota", None, f"Service Usage did not answer ({exc})")
    if limit is None:
        return Check("quota", None, f"Service Usage lists no {metric} in {region}")
    if 0 <= limit < need:
        return Check(
            "quota",
            False,
            f"{metric} in {region} is {limit}, and the job needs {need}",
            f"ask for more: {QUOTAS_PAGE}?project={project_id}&metric={metric}",
        )
    shown = "unlimited" if limit < 0 else str(limit)
    return Check("quota", True, f"{metric} in {region} is {shown}")


def _limit(session: Any, project_id: str, metric: str, region: str) -> int | None:
    """The effective limit of ``metric`` in ``region`` (-1: unlimited); None: not listed.
    One call: the metric's own resource."""
    from urllib.parse import quote

    base = _bases()[1]
    url = (
        f"{base}/v1beta1/projects/{project_id}/services/{SERVICE}/consumerQuotaMetrics/"
        f"{quote(metric, safe='')}"
    )
    answer = session.get(url, params={"view": "BASIC"}, timeout=TIMEOUT)
    if answer.status_code == 404:
        return None
    answer.raise_for_status()
    fallback = None
    for limit in answer.json().get("consumerQuotaLimits", []):
        for bucket in limit.get("quotaBuckets", []):
            dims = bucket.get("dimensions") or {}
            value = int(bucket.get("effectiveLimit", "0"))  # (proto3 leaves a 0 out)
            if dims.get("region") == region:
                return value
            if not dims:
                fallback = value  # (the default, for regions without their own)
    return fallback
