"""The vertex backend: each attempt is a Vertex AI custom job, sent through the official
client (``google-cloud-aiplatform``'s ``aiplatform_v1.JobServiceClient``, REST).

Launching an attempt:

1. the offering: the cheapest Vertex AI machine that fits and is not passed over
   (:func:`ferry.backends.cloud.choose`), in ``vertex.region`` when that is set;
2. the bundle: the code snapshot and Ferry's wheel in the job's bucket under their
   content hashes (:mod:`ferry.packaging.bundle`; an unchanged folder sends 0 bytes);
3. the run folder ``gs://BUCKET/.ferry/runs/<job>-<attempt>-<nonce>``: the runner's order
   and the job's secrets (never in the request, which the console shows);
4. the ``CustomJob`` (:mod:`ferry.backends.vertex_request`), parsed strictly, created.

Vertex AI's states map to the controller's: QUEUED and PENDING wait (for at most
``limits.max_pending``); RUNNING, CANCELLING, PAUSED and UPDATING run; SUCCEEDED, FAILED,
CANCELLED and EXPIRED end the attempt as its run folder records it. A job that failed
for lack of resources (error code 8, RESOURCE_EXHAUSTED, "Resources are insufficient")
before its runner started had no capacity; after it started, its spot VM was taken back.
A create refused for quota (HTTP 429) passes that offering over at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config
from ferry.backends.base import LaunchRequest, RunningAttempt
from ferry.backends.cloud import (
    bucket_root,
    choose,
    env_for,
    max_pending,
    nonce,
    provider_timeout,
    write_order,
)
from ferry.backends.cloud_backend import (
    Chosen,
    CloudBackend,
    Placeholders,
    bundle_said,
    shown_request,
)
from ferry.backends.cloud_run import CloudRun, Seen
from ferry.backends.vertex_api import RUN_LABEL, VertexJobs, project
from ferry.backends.vertex_api import require_sdk as _require_sdk
from ferry.contract.container_paths import GCS_MARK
from ferry.errors import FerryError, SpecError
from ferry.status import PROVIDER_JOB_PREFIX
from ferry.store.records import Job

if TYPE_CHECKING:
    from ferry.backends.preflight import Check
    from ferry.catalog.optimizer import Option
    from ferry.spec import JobSpec
    from ferry.store.plan import Plan

PLACEHOLDER_PROJECT = "<PROJECT>"
_WAITING = {"JOB_STATE_QUEUED", "JOB_STATE_PENDING"}
_ENDED = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_PARTIALLY_SUCCEEDED",
}
_RESOURCE_EXHAUSTED = 8  # google.rpc.Code
_GRACE = 30.0  # s: a spot VM of Google Cloud gets 30 s between the notice and its end


class VertexRun(CloudRun):
    """An attempt running as the custom job ``name``."""

    # a cancel stops the VMs as Compute Engine does (an assumption: the pages on cancelling a
    # custom job give no time), its spot VMs' 30 s between SIGTERM and the end
    cancel_grace = _GRACE

    def __init__(
        self,
        job: Job,
        name: str,
        folder: str,
        log_path: str,
        metrics_path: str,
        grace: float,
        option: Option | None = None,
        said: list[str] | None = None,
        jobs: VertexJobs | None = None,
    ) -> None:
        super().__init__(job, f"{name}@{folder}", folder, log_path, metrics_path, grace, option)
        self.name = name
        self._jobs = jobs
        self._said += said or []

    @property
    def jobs(self) -> VertexJobs:
        """The client (made when first needed: credentials that fail say so in a poll)."""
        if self._jobs is None:
            self._jobs = VertexJobs(_region_of(self.name))
        return self._jobs

    def _where(self) -> str:
        from ferry.backends.vertex_request import console_url

        return console_url(self.name)

    def _look(self) -> Seen:
        data = self.jobs.get(self.name)
        state = str(data.get("state") or "JOB_STATE_UNSPECIFIED")
        error = data.get("error") or {}
        message = str(error.get("message") or "")
        if state in _WAITING:
            return Seen(Seen.PENDING, state, message)
        if state not in _ENDED:  # (startTime: when it first ran)
            return Seen(Seen.RUNNING, state, message, started=_epoch(data.get("startTime")))
        words = message.lower()
        exhausted = int(error.get("code") or 0) == _RESOURCE_EXHAUSTED or (
            "resources are insufficient" in words or "stockout" in words
        )
        started = self._runner_started()
        return Seen(
            Seen.ENDED,
            state,
            message,
            ended=_epoch(data.get("endTime")),
            succeeded=state == "JOB_STATE_SUCCEEDED",
            preempted=exhausted and started,
            no_capacity=exhausted and not started,
            cancelled=state == "JOB_STATE_CANCELLED",
        )

    def _cancel(self) -> None:
        self.jobs.cancel(self.name)


def _parse_handle(handle: str | None) -> tuple[str, str]:
    name, _, folder = (handle or "").partition("@")
    return name, folder


def _region_of(name: str) -> str:
    parts = name.split("/")
    return parts[3] if len(parts) > 3 else ""


class VertexBackend(CloudBackend):
    """Attempts run as Vertex AI custom jobs in the provider's prebuilt containers."""

    name = "vertex"
    spot_notice = _GRACE
    provider = "Vertex AI"
    protocol = "gs"
    machine = "training machine"
    catalog_provider = "gcp"
    copy_command = "gcloud storage cp -r {uri} gs://BUCKET/..."
    features = frozenset(
        {
            "inputs.remote",
            "inputs.stream",
            "outputs.remote",
            "resources.nodes",
            "resources.spot",
            "resources.flex",
            "resources.tpu",
            "environment.requirements",
            "environment.image",
        }
    )
    provider_paths = frozenset({GCS_MARK})  # Cloud Storage FUSE: every bucket, on every VM

    def _check(self, spec: JobSpec, outputs: str | None = None) -> None:
        from ferry.store.plan import Plan

        _require_sdk()
        outputs = self.check_place(spec, outputs)
        acc = spec.resources.accelerator_request
        if spec.resources.nodes > 1 and acc is not None and acc.is_tpu:
            from ferry.errors import Unsupported

            raise Unsupported(
                f"Vertex AI runs a TPU slice ({acc}) as one replica whose hosts come with its "
                f"topology, not as resources.nodes ({spec.resources.nodes}) replicas",
                "ask for a larger slice with nodes: 1, such as accelerator: tpu-v5e-16",
            )
        plan = Plan.of(spec.to_json())
        if plan.resources.flex_start:
            _check_flex_start(plan, self.stop_grace_of(plan))
        option = choose(self.placed(plan, outputs), self.name)
        target_for(plan, option, project() or PLACEHOLDER_PROJECT)  # (the image: refused early)

    def dry_run(self, spec: JobSpec) -> dict[str, Any]:
        """The ``CustomJob`` the first attempt of ``spec`` would send, with placeholders
        for what is known only at submit (the job's id, the code's hash) or from settings
        that are not set (the project, the bucket)."""
        from ferry import __version__
        from ferry.backends import vertex_request
        from ferry.store.plan import Plan

        self.check_features(spec)
        marks = Placeholders()
        outputs, job_id = marks.outputs(
            spec.outputs or f"{config.default_outputs_root()}/{{job_id}}", "gs"
        )
        root = bucket_root(outputs, "gs", self.name)
        plan = Plan.of(spec.to_json())
        self._check(spec, outputs=outputs)
        option = choose(self.placed(plan, outputs), self.name)
        chosen = project() or marks.mark(
            PLACEHOLDER_PROJECT,
            "ferry config set vertex.project PROJECT (or set GOOGLE_CLOUD_PROJECT)",
        )
        target = target_for(plan, option, chosen)
        digest = marks.mark("<CODE_SHA256>", "the hash of the code snapshot taken at submit")
        wheel_hash = marks.mark("<WHEEL_HASH>", "the hash of Ferry's wheel, uploaded at submit")
        nonce_mark = marks.mark("<NONCE>", "6 random hex digits, one per attempt")
        display = f"{job_id}-1-{nonce_mark}"
        body = vertex_request.custom_job(
            job_id=job_id,
            attempt=1,
            plan=plan,
            target=target.target,
            run_folder=f"{root}/.ferry/runs/{display}",
            code=f"{root}/.ferry/code/{digest}.tar.gz",
            wheel=f"{root}/.ferry/wheels/{wheel_hash}/ferry-{__version__}-py3-none-any.whl",
            outputs=outputs,
            env=dict(spec.env),
            timeout=provider_timeout(plan, self.stop_grace_of(plan)),
            max_wait=max_pending(plan),
        )
        body["labels"]["ferry-job"] = job_id  # (the placeholders, not their label spelling)
        body["labels"][RUN_LABEL] = display
        vertex_request.validate(body)
        region = target.target.region
        parent = vertex_request.parent(chosen, region)
        endpoint = str(
            config.get("vertex.endpoint") or f"https://{region}-aiplatform.googleapis.com"
        )
        url = f"{endpoint}/v1/{parent}/customJobs"
        gcloud = vertex_request.gcloud_command(body, chosen, region)
        return shown_request(url, body, ("gcloud", gcloud), target.note, marks)

    def launch(self, request: LaunchRequest) -> RunningAttempt:
        from ferry.backends import vertex_request
        from ferry.backends.cloud import run_folder
        from ferry.packaging.bundle import upload

        job = request.job
        option = choose(self.placed(job.plan, job.outputs), self.name)
        chosen = project()
        if chosen is None:
            raise SpecError(
                "no Google Cloud project is set for Vertex AI",
                "run: ferry config set vertex.project PROJECT (or set GOOGLE_CLOUD_PROJECT)",
            )
        target = target_for(job.plan, option, chosen)
        region = target.target.region
        jobs = VertexJobs(region)  # (credentials that fail: before anything is uploaded)
        root = bucket_root(job.outputs, "gs", self.name)
        bundle = upload(Path(job.job_dir) / "code", root)
        display = f"{job.id}-{request.attempt}-{nonce()}"
        folder = run_folder(job.outputs, display)
        body = vertex_request.custom_job(
            job_id=job.id,
            attempt=request.attempt,
            plan=job.plan,
            target=target.target,
            run_folder=folder,
            code=bundle.code,
            wheel=bundle.wheel,
            outputs=job.outputs,
            env=env_for(job, request.env),
            timeout=provider_timeout(job.plan, request.grace),
            max_wait=max_pending(job.plan),
        )
        body["labels"][RUN_LABEL] = vertex_request.label(display)
        said = [bundle_said(bundle)]
        if target.note:
            said.append(target.note)
        parent = vertex_request.parent(chosen, region)
        write_order(request, folder)
        nodes = job.plan.resources.nodes
        made = self.send(lambda: jobs.create(parent, body), folder, option, said, nodes)
        if not isinstance(made, dict):
            return made  # (refused for quota)
        name = str(made["name"])
        said.append(
            f"{PROVIDER_JOB_PREFIX}Vertex AI custom job {name}: {vertex_request.console_url(name)}"
        )
        return VertexRun(
            job,
            name,
            folder,
            request.log_path,
            request.metrics_path,
            request.grace,
            option,
            said,
            jobs,
        )

    def placed(self, plan: Plan, outputs: str | None, offline: bool = False) -> Plan:
        return in_region(plan)

    def follow(
        self,
        job: Job,
        handle: str,
        log_path: str,
        metrics_path: str,
        grace: float,
        option: Option | None,
    ) -> VertexRun | None:
        name, folder = _parse_handle(handle)
        if not name or not folder:
            return None
        return VertexRun(job, name, folder, log_path, metrics_path, grace, option=option)

    def provider_log(self, job: Job, handle: str | None, lines: int) -> list[str]:
        from ferry.backends.vertex_request import console_url

        name = (handle or "").partition("@")[0]
        page = console_url(name) if name else ""
        raise FerryError(
            f"Vertex AI keeps the custom job's own log in Cloud Logging, which Ferry does not "
            f"read (ferry logs {job.id} has what the runner wrote)",
            f"open the job's Logs tab: {page}" if page else f"ferry status {job.id}",
        )

    def end_provider_job(self, handle: str) -> None:
        name = _parse_handle(handle)[0]
        if name:
            VertexJobs(_region_of(name)).cancel(name)

    def unrecorded(self, job: Job, attempt: int) -> list[str]:
        from ferry.backends import vertex_request
        from ferry.backends.cloud import run_folder

        chosen = project()
        if chosen is None:
            return []
        where = choose(in_region(job.plan), self.name).offering.region  # (as launch chose)
        parent = vertex_request.parent(chosen, where)
        found = VertexJobs(where).labelled(parent, "ferry-job", vertex_request.label(job.id))
        handles = []
        for made in found:
            labels = made.get("labels") or {}
            if labels.get("ferry-attempt") != str(attempt) or made.get("state") in _ENDED:
                continue
            folder = run_folder(job.outputs, str(labels.get(RUN_LABEL, "")))
            handles.append(f"{made['name']}@{folder}")
        return handles

    def _preflight(self, plan: Plan, outputs: str) -> list[Check]:
        from ferry.backends.vertex_preflight import checks

        chosen = project()
        placed: tuple[Option, Any] | FerryError
        try:
            option = choose(in_region(plan), self.name)
            placed = (
                option,
                target_for(plan, option, chosen or PLACEHOLDER_PROJECT).target.machine,
            )
        except FerryError as exc:
            placed = exc
        return checks(plan, outputs, chosen, placed)


def _check_flex_start(plan: Plan, grace: float) -> None:
    """Refuse a flex-start job Vertex AI would refuse: one that may run over 7 days."""
    from ferry.backends.vertex_names import VERTEX_FLEX_START_MAX_RUNTIME
    from ferry.errors import Unsupported
    from ferry.units import format_duration

    timeout = provider_timeout(plan, grace)
    if timeout <= VERTEX_FLEX_START_MAX_RUNTIME:
        return
    if plan.limits.max_runtime:
        room = VERTEX_FLEX_START_MAX_RUNTIME - (timeout - plan.limits.max_runtime)
        raise Unsupported(
            "Vertex AI runs a flex-start job (resources.spot: flex) for 7 days at most, and "
            f"limits.max_runtime ({format_duration(plan.limits.max_runtime)}), with the stop "
            "grace and the last upload, is longer",
            f"set limits.max_runtime to {format_duration(room // 60 * 60)} or less",
        )
    raise Unsupported(
        "Vertex AI runs a flex-start job (resources.spot: flex) for 7 days at most, and the "
        f"cloud.max_runtime setting ({format_duration(timeout)}) is longer",
        "set limits.max_runtime in the spec, or: ferry config set cloud.max_runtime 6d",
    )


def in_region(plan: Plan) -> Plan:
    """The plan, kept to ``vertex.region`` when that is set (and the spec names none)."""
    from dataclasses import replace

    region = config.get("vertex.region")
    if not region or plan.resources.regions:
        return plan
    return replace(plan, resources=replace(plan.resources, regions=(str(region),)))


def target_for(plan: Plan, option: Option, project_id: str) -> Chosen:
    """Where an attempt of ``plan`` runs on ``option``, and in which image."""
    from ferry.accelerator_names import VertexMachine, backend_name
    from ferry.accelerators import parse_accelerator
    from ferry.backends.vertex_names import VERTEX_GPU_MACHINES
    from ferry.backends.vertex_request import Target
    from ferry.packaging.images import vertex_image

    region = option.offering.region
    acc = parse_accelerator(plan.resources.accelerator) if plan.resources.accelerator else None
    listed = VERTEX_GPU_MACHINES.get(option.offering.instance_type)
    if listed is not None:  # the offering's own machine
        machine = VertexMachine(option.offering.instance_type, listed[0], listed[1])
    else:
        machine = (backend_name(acc, "vertex") if acc is not None else None) or VertexMachine(
            option.offering.instance_type
        )
    kind = "tpu" if acc is not None and acc.is_tpu else "gpu" if acc is not None else "cpu"
    if plan.image:
        image, note = plan.image, ""
    else:
        found = vertex_image(plan.framework, kind, region)
        image, note = found.uri, found.note
    target = Target(
        project=project_id,
        region=region,
        machine=machine,
        spot=option.spot,
        flex_start=option.flex_start,
        image=image,
        custom_image=bool(plan.image),
        service_account=config.get("vertex.service_account"),
        network=config.get("vertex.network"),
    )
    return Chosen(target, note)


def _epoch(stamp: object) -> float | None:
    """An RFC 3339 time as the REST API gives it (``2024-05-01T10:00:00.123456789Z``), in
    seconds since the epoch; None for none."""
    import datetime

    if not isinstance(stamp, str) or not stamp:
        return None
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    try:
        at = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    return at.timestamp() + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)
