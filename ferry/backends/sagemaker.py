"""The sagemaker backend: each attempt is a SageMaker training job, sent through boto3
(:mod:`ferry.backends.sagemaker_api`).

Launching an attempt:

1. the offering: the cheapest SageMaker instance that fits and is not passed over
   (:func:`ferry.backends.cloud.choose`), in the bucket's region (SageMaker reads its
   channels from its own region), else ``sagemaker.region``;
2. the bundle: the code snapshot, Ferry's wheel and the bootstrap beside it, in the job's
   bucket under content hashes (an unchanged folder sends 0 bytes);
3. the run folder ``s3://BUCKET/.ferry/runs/<training job name>``: the runner's order and
   the job's secrets (never in the request, which the console shows);
4. ``CreateTrainingJob`` (:mod:`ferry.backends.sagemaker_request`), checked against
   botocore's model (at submit too, with stand-ins for what is not known yet).

SageMaker's states map to the controller's: ``InProgress`` waits while its secondary
status says the instance is being found and made ready (Starting, LaunchingMLInstances,
PreparingTrainingStack, for at most ``limits.max_pending``) and runs from Downloading on,
which SageMaker bills; Completed, Failed and Stopped end the attempt as its run folder
records it. A spot interruption (``Interrupted`` in the job's status transitions) ends
the attempt as preempted: Ferry tells the run folder to stop and stops the training job,
which SageMaker would otherwise restart inside the same job, and the next attempt resumes
from the job's checkpoints, so retries stay Ferry's. A create refused for quota
(ResourceLimitExceeded) and a job failed with a CapacityError before its runner started
pass that offering over. An attempt costs SageMaker's ``BillableTimeInSeconds`` at the
instance's on-demand price (for managed spot, those seconds already carry the discount).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config
from ferry.backends.base import Exit, LaunchRequest, RunningAttempt
from ferry.backends.cloud import (
    bucket_root,
    choose,
    env_for,
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
from ferry.backends.sagemaker_api import (
    SageMakerJobs,
    bucket_region,
    epoch_of,
    in_region,
    latest_words,
    region,
    region_of,
    require_sdk,
)
from ferry.contract.container_paths import OPT_ML_MARK
from ferry.errors import FerryError, SpecError
from ferry.status import PROVIDER_JOB_PREFIX
from ferry.store.records import Job

if TYPE_CHECKING:
    from ferry.backends.preflight import Check
    from ferry.catalog.optimizer import Option
    from ferry.spec import JobSpec
    from ferry.store.plan import Plan

PLACEHOLDER_ROLE = "<ROLE_ARN>"
_ROLE_STAND_IN = "arn:aws:iam::123456789012:role/ferry-dry-run"  # (checks a dry run's form)
# the instance is being found and made ready: not billed yet
_WAITING = {"Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack"}
_ENDED = {"Completed", "Failed", "Stopped"}
_INTERRUPTED = {"Interrupted", "Restarting"}  # managed spot: the instance was taken back
_CAPACITY_WORDS = ("capacityerror", "insufficient capacity", "unable to provision")
_GRACE = 120.0  # s: SageMaker's spot notice, as EC2's: two minutes before the instance goes
# the spec's fields behind the request's, for a refusal at submit
_FROM_SPEC = {
    "Environment": "env",
    "HyperParameters": "hyperparameters",
    "MetricDefinitions": "metrics",
    "InputDataConfig": "inputs",
}


class SageMakerRun(CloudRun):
    """An attempt running as the training job ``name``."""

    # StopTrainingJob: SIGTERM, then SIGKILL 120 s later (the API reference says so)
    cancel_grace = _GRACE

    def __init__(
        self,
        job: Job,
        name: str,
        folder: str,
        region_name: str,
        log_path: str,
        metrics_path: str,
        grace: float,
        option: Option | None = None,
        said: list[str] | None = None,
        jobs: SageMakerJobs | None = None,
    ) -> None:
        super().__init__(
            job, _handle(name, region_name, folder), folder, log_path, metrics_path, grace, option
        )
        self.name = name
        self.region = region_name
        self.log_path = log_path
        self._nodes = job.plan.resources.nodes
        self._jobs = jobs
        self._billed: float | None = None  # BillableTimeInSeconds, once ended
        self._said += said or []

    @property
    def jobs(self) -> SageMakerJobs:
        """The client (made when first needed: credentials that fail say so in a poll)."""
        if self._jobs is None:
            self._jobs = SageMakerJobs(self.region)
        return self._jobs

    def _where(self) -> str:
        from ferry.backends.sagemaker_request import console_url

        return console_url(self.region, self.name)

    def _look(self) -> Seen:
        data = self.jobs.describe(self.name)
        status = str(data.get("TrainingJobStatus") or "")
        secondary = str(data.get("SecondaryStatus") or "")
        state = f"{status}/{secondary}" if secondary else status
        reason = str(data.get("FailureReason") or "")
        history = [str(t.get("Status")) for t in data.get("SecondaryStatusTransitions") or []]
        if status not in _ENDED:
            if set(history) & _INTERRUPTED:  # (now, or SageMaker restarted it since)
                return self._interrupted(state, reason)
            phase = Seen.PENDING if secondary in _WAITING else Seen.RUNNING
            started = epoch_of(data.get("TrainingStartTime"))  # (what SageMaker bills from)
            return Seen(phase, state, latest_words(data), started=started)
        if data.get("BillableTimeInSeconds") is not None:
            self._billed = float(data["BillableTimeInSeconds"])
        capacity = any(w in reason.lower() for w in _CAPACITY_WORDS)
        started = self._runner_started()
        said = reason
        if secondary in ("MaxRuntimeExceeded", "MaxWaitTimeExceeded") and not said:
            said = f"SageMaker's StoppingCondition: {secondary}"
        # the end came from an interruption (Ferry's stop of it, seen late), not from the
        # job or a stop in the console: the last status before the stop says which
        before = [s for s in history if s not in ("Stopping", "Stopped", "Failed")]
        interrupted = status != "Completed" and bool(before) and before[-1] in _INTERRUPTED
        return Seen(
            Seen.ENDED,
            state,
            said,
            ended=epoch_of(data.get("TrainingEndTime")),
            succeeded=status == "Completed",
            no_capacity=capacity and not started,
            preempted=(capacity and started) or interrupted,
            cancelled=status == "Stopped" and secondary == "Stopped" and not interrupted,
        )

    def _interrupted(self, state: str, reason: str) -> Seen:
        """The spot instance was taken back: a runner SageMaker starts again ends at once,
        and the training job is stopped (a stop that fails is asked again at the next
        look); the attempt is preempted."""
        from ferry.backends.cloud import STOPPED_NAME

        self._place.put(STOPPED_NAME, b"")
        self.jobs.stop(self.name)
        self._said.append(
            "spot capacity taken back (SageMaker: Interrupted): the training job is stopped, "
            "and the next attempt resumes from the checkpoints"
        )
        return Seen(Seen.ENDED, state, reason, preempted=True)

    def _cancel(self) -> None:
        self.jobs.stop(self.name)

    def _ended(self, seen: Seen) -> Exit:
        ended = super()._ended(seen)
        if not self._runner_started():  # the provider's log is all there is
            tail = self.jobs.log_tail(self.name)
            if tail:
                from ferry.backends.sagemaker_request import logs_url

                with contextlib.suppress(OSError), open(self.log_path, "a") as log:
                    log.write("".join(f"{line}\n" for line in tail))
                last = " | ".join(line.strip() for line in tail[-3:] if line.strip())
                ended = replace(ended, reason=f"{ended.reason}; its log ends: {last}")
                self._said.append(
                    f"the training job's last log lines (CloudWatch: "
                    f"{logs_url(self.region, self.name)}) are in ferry logs"
                )
        rate = _on_demand(self.option, self._nodes)
        if self._billed is not None and rate is not None:
            ended = replace(ended, billed=rate * self._billed / 3600)
        return ended


def _on_demand(option: Option | None, nodes: int) -> float | None:
    """USD per hour SageMaker bills its billable seconds at: the on-demand price of every
    instance (``BillableTimeInSeconds`` counts one instance's seconds; SageMaker's docs
    multiply it by ``InstanceCount`` for a job of several)."""
    if option is None:
        return None
    from ferry.backends.registry import service_markup

    unit = option.offering.price_for(False)
    if unit is None:
        return None
    markup = service_markup(
        "sagemaker", option.offering.instance_type, bool(option.offering.accelerator)
    )
    return unit * markup * nodes


def _handle(name: str, region_name: str, folder: str) -> str:
    return f"{region_name}:{name}@{folder}"


def _parse_handle(handle: str | None) -> tuple[str, str, str]:
    head, _, folder = (handle or "").partition("@")
    region_name, _, name = head.partition(":")
    return region_name, name, folder


class SageMakerBackend(CloudBackend):
    """Attempts run as SageMaker training jobs in the provider's prebuilt containers."""

    name = "sagemaker"
    spot_notice = _GRACE
    provider = "SageMaker"
    protocol = "s3"
    machine = "training instance"
    catalog_provider = "aws"
    copy_command = "aws s3 cp --recursive {uri} s3://BUCKET/..."
    features = frozenset(
        {
            "inputs.remote",
            "inputs.mount",
            "inputs.stream",
            "outputs.remote",
            "resources.nodes",
            "resources.spot",
            "environment.requirements",
            "environment.image",
        }
    )
    # the instance's own /opt/ml: what a script writes into its model and output/data
    # folders joins the outputs (the runner's provider_tree)
    provider_paths = frozenset({OPT_ML_MARK})

    def _check(self, spec: JobSpec, outputs: str | None = None, offline: bool = False) -> None:
        from ferry.backends import sagemaker_request as request

        require_sdk()
        outputs = self.check_place(spec, outputs)
        _one_channel_each(list(spec.inputs))
        marks = Placeholders(stand_ins={"<JOB_ID>": "job", "<BUCKET>": "bucket"})  # (a dry run's)
        body = self._request(spec, outputs.replace("{job_id}", "job"), marks, offline)[0]
        problems = request.problems(body, marks.stand_ins)
        if problems:
            where = next(
                (f" (the spec's {v})" for k, v in _FROM_SPEC.items() if k in problems[0]), ""
            )
            raise SpecError(
                f"SageMaker would refuse this job's request{where}: {problems[0]}",
                "see the request: ferry run JOB.yaml --backend sagemaker --dry-run",
            )

    def _request(
        self, spec: JobSpec, outputs: str, marks: Placeholders, offline: bool
    ) -> tuple[dict[str, Any], Chosen]:
        """The request of the first attempt of ``spec``, with ``marks`` for what is not
        known (the job's id, the hashes, settings that are not set)."""
        from ferry import __version__
        from ferry.backends import sagemaker_request as request
        from ferry.store.plan import Plan

        plan = Plan.of(spec.to_json())
        root = bucket_root(outputs, "s3", self.name)
        where = region_of(plan, outputs, offline)
        option = choose(in_region(plan, where), self.name)
        role = str(config.get("sagemaker.role") or "") or marks.mark(
            PLACEHOLDER_ROLE, "ferry config set sagemaker.role ROLE_ARN", _ROLE_STAND_IN
        )
        chosen = _target(plan, option, role)
        job_id = "<JOB_ID>" if "<JOB_ID>" in outputs else "job"
        digest = marks.mark("<CODE_SHA256>", "the hash of the code snapshot taken at submit", "0")
        wheel_hash = marks.mark(
            "<WHEEL_HASH>", "the hash of Ferry's wheel, uploaded at submit", "0"
        )
        nonce_mark = marks.mark("<NONCE>", "6 random hex digits, one per attempt", "0")
        name = f"{job_id}-1-{nonce_mark}"
        body = request.training_job(
            name=name,
            job_id=job_id,
            attempt=1,
            hyperparameters=_hyperparameters(plan),
            metrics=dict(plan.metrics),
            inputs=_channels(plan, chosen.target.region, offline=True),
            target=chosen.target,
            run_folder=f"{root}/.ferry/runs/{name}",
            code=f"{root}/.ferry/code/{digest}.tar.gz",
            wheel=f"{root}/.ferry/wheels/{wheel_hash}/ferry-{__version__}-py3-none-any.whl",
            outputs=outputs,
            env=dict(spec.env),
            timeout=provider_timeout(plan, self.stop_grace_of(plan)),
            max_pending=_max_pending(plan),
        )
        return body, chosen

    def dry_run(self, spec: JobSpec) -> dict[str, Any]:
        """The ``CreateTrainingJob`` request the first attempt of ``spec`` would send, with
        placeholders for what is known only at submit (the job's id, the code's hash) or
        from settings that are not set (the role, the bucket). No network: the region is
        ``sagemaker.region`` (or ``AWS_REGION``) here, the bucket's at launch."""
        from ferry.backends import sagemaker_request as request

        self.check_features(spec)
        marks = Placeholders()
        outputs = marks.outputs(
            spec.outputs or f"{config.default_outputs_root()}/{{job_id}}", "s3"
        )[0]
        self._check(spec, outputs=outputs, offline=True)
        body, chosen = self._request(spec, outputs, marks, offline=True)
        request.validate(body, marks.stand_ins)
        where = chosen.target.region
        endpoint = str(
            config.get("sagemaker.endpoint") or f"https://api.sagemaker.{where}.amazonaws.com"
        )
        notes = [chosen.note] if chosen.note else []
        if len(spec.resources.regions) != 1:  # (one named region: the job runs there or not)
            chose = (
                "the sagemaker.region setting (or AWS_REGION)"
                if region() is not None
                else "the cheapest region for this instance"
            )
            notes.append(
                f"the region shown, {where}, is {chose}: the job runs in its bucket's region, "
                "which Ferry asks S3 at submit"
            )
        if any(uri.startswith("s3://") and not uri.endswith("/") for uri in _input_uris(spec)):
            notes.append(
                "an s3:// input without a trailing / is looked at when the job is launched: "
                "a folder becomes a channel, a single object is copied by Ferry's runner"
            )
        url = f"{endpoint}/ (X-Amz-Target: SageMaker.CreateTrainingJob)"
        command = ("aws", request.aws_command(body, where))
        return shown_request(url, body, command, " ".join(notes), marks)

    def placed(self, plan: Plan, outputs: str | None, offline: bool = False) -> Plan:
        return in_region(plan, region_of(plan, outputs or "", offline=offline))

    def launch(self, request: LaunchRequest) -> RunningAttempt:
        from ferry.backends import sagemaker_request
        from ferry.backends.cloud import run_folder
        from ferry.packaging.bundle import upload

        job = request.job
        role = config.get("sagemaker.role")
        if not role:
            raise SpecError(
                "no execution role is set for SageMaker jobs",
                "run: ferry config set sagemaker.role arn:aws:iam::ACCOUNT:role/NAME (a role "
                "SageMaker may assume, with access to the bucket)",
            )
        root = bucket_root(job.outputs, "s3", self.name)
        option = choose(self.placed(job.plan, job.outputs), self.name)
        chosen = _target(job.plan, option, str(role))
        where = chosen.target.region
        jobs = SageMakerJobs(where)  # (no SDK: before anything is uploaded)
        bundle = upload(Path(job.job_dir) / "code", root, bootstrap=True)
        name = sagemaker_request.job_name(job.id, request.attempt, nonce())
        folder = run_folder(job.outputs, name)
        inputs = _channels(job.plan, where, offline=False)
        body = sagemaker_request.training_job(
            name=name,
            job_id=job.id,
            attempt=request.attempt,
            hyperparameters=_hyperparameters(job.plan),
            metrics=dict(job.plan.metrics),
            inputs=inputs,
            target=chosen.target,
            run_folder=folder,
            code=bundle.code,
            wheel=bundle.wheel,
            outputs=job.outputs,
            env=env_for(job, request.env),
            timeout=provider_timeout(job.plan, request.grace),
            max_pending=_max_pending(job.plan),
        )
        said = [bundle_said(bundle)]
        if chosen.note:
            said.append(chosen.note)
        write_order(request, folder, _machine_changes(request, inputs))
        made = self.send(lambda: jobs.create(body), folder, option, said, job.plan.resources.nodes)
        if not isinstance(made, dict):
            return made  # (refused for quota)
        console = sagemaker_request.console_url(where, name)
        said.append(f"{PROVIDER_JOB_PREFIX}SageMaker training job {name}: {console}")
        return SageMakerRun(
            job,
            name,
            folder,
            where,
            request.log_path,
            request.metrics_path,
            request.grace,
            option,
            said,
            jobs,
        )

    def follow(
        self,
        job: Job,
        handle: str,
        log_path: str,
        metrics_path: str,
        grace: float,
        option: Option | None,
    ) -> SageMakerRun | None:
        region_name, name, folder = _parse_handle(handle)
        if not name or not folder:
            return None
        return SageMakerRun(
            job, name, folder, region_name, log_path, metrics_path, grace, option=option
        )

    def provider_log(self, job: Job, handle: str | None, lines: int) -> list[str]:
        """The training job's CloudWatch Logs streams, each line led by its host when there
        are several (``[algo-2] …``)."""
        from ferry.backends.sagemaker_request import logs_url

        region_name, name, _ = _parse_handle(handle)
        if not name:
            raise FerryError(
                f"that attempt of {job.id} made no training job (it was refused first)",
                f"ferry status {job.id} says why; --attempt N picks another",
            )
        found = SageMakerJobs(region_name).log_lines(name, lines)
        if not found:
            raise FerryError(
                f"CloudWatch Logs has no lines of the training job {name} yet",
                f"look again later, or at {logs_url(region_name, name)}",
            )
        hosts = {host for _, host, _ in found}
        return [f"[{host}] {message}" if len(hosts) > 1 else message for _, host, message in found]

    def end_provider_job(self, handle: str) -> None:
        region_name, name, _ = _parse_handle(handle)
        if name:
            SageMakerJobs(region_name).stop(name)

    def unrecorded(self, job: Job, attempt: int) -> list[str]:
        from ferry.backends.cloud import run_folder
        from ferry.backends.sagemaker_request import job_name

        where = region_of(job.plan, job.outputs, offline=False) or region()
        if where is None:
            return []
        prefix = job_name(job.id, attempt, "x")[:-1]  # (the name before its nonce)
        names = SageMakerJobs(where).running(prefix)
        return [_handle(n, where, run_folder(job.outputs, n)) for n in names]

    def _preflight(self, plan: Plan, outputs: str) -> list[Check]:
        from ferry.backends.sagemaker_preflight import checks

        return checks(plan, outputs)


def _target(plan: Plan, option: Option, role: str) -> Chosen:
    """Where an attempt of ``plan`` runs on ``option``, and in which image."""
    from ferry.backends.sagemaker_names import sagemaker_type
    from ferry.backends.sagemaker_request import Target
    from ferry.packaging.images import sagemaker_image

    where = option.offering.region
    if plan.image:
        image, note = plan.image, ""
    else:
        found = sagemaker_image(plan.framework, bool(option.offering.accelerator), where)
        image, note = found.uri, found.note
    subnets = _words(config.get("sagemaker.subnets"))
    groups = _words(config.get("sagemaker.security_groups"))
    if bool(subnets) != bool(groups):
        raise SpecError(
            "SageMaker's VpcConfig needs both subnets and security groups",
            "ferry config set sagemaker.subnets SUBNET,... and sagemaker.security_groups SG,...",
        )
    target = Target(
        region=where,
        instance_type=sagemaker_type(option.offering.instance_type),
        spot=option.spot,
        image=image,
        role=role,
        nodes=plan.resources.nodes,
        subnets=subnets,
        security_groups=groups,
    )
    return Chosen(target, note)


def _input_uris(spec: JobSpec) -> list[str]:
    """The URIs of the inputs SageMaker may bring (copied or mounted)."""
    return [i.uri for i in spec.inputs.values() if i.mode in ("copy", "mount")]


def _words(value: Any) -> tuple[str, ...]:
    return tuple(w.strip() for w in str(value or "").split(",") if w.strip())


def _hyperparameters(plan: Plan) -> dict[str, str]:
    from ferry.contract.env import hyperparameter_text

    return {k: hyperparameter_text(v) for k, v in plan.hyperparameters.items()}


def _one_channel_each(names: list[str]) -> None:
    """Refuse inputs whose channels would have one name (or Ferry's own)."""
    from ferry.backends.sagemaker_request import CODE_CHANNEL, WHEEL_CHANNEL, channel_name

    taken = {WHEEL_CHANNEL: "Ferry's wheel", CODE_CHANNEL: "the job's code"}
    for name in names:
        channel = channel_name(name)
        if channel in taken:
            raise SpecError(
                f"input {name!r} would be SageMaker's channel {channel!r}, which "
                f"{taken[channel]} has",
                "rename the input",
            )
        taken[channel] = f"input {name!r}"


def _channels(plan: Plan, where: str, offline: bool) -> dict[str, tuple[str, str]]:
    """The inputs SageMaker brings as channels: folders of ``s3://`` data in the job's
    region, copied or mounted. A single object (a prefix would take its neighbours too),
    a bucket elsewhere and a streamed input are the runner's to bring. ``offline``: a URI
    is a folder when it ends with ``/``; else S3 is asked."""
    from ferry.storage.locations import parse_uri

    found: dict[str, tuple[str, str]] = {}
    for name, item in plan.inputs.items():
        uri, mode = str(item.get("uri", "")), str(item.get("mode") or "copy")
        if not uri.startswith("s3://") or mode not in ("copy", "mount"):
            continue
        if offline:
            if uri.endswith("/"):
                found[name] = (uri, mode)
            continue
        if bucket_region(parse_uri(uri).bucket) != where:
            continue
        if uri.endswith("/") or _is_folder(uri):
            found[name] = (uri.rstrip("/") + "/", mode)
    return found


def _is_folder(uri: str) -> bool:
    """Whether ``uri`` names a folder (a prefix with objects under it) rather than one
    object; False when S3 cannot say (the runner brings it then)."""
    from ferry.storage.locations import parse_uri
    from ferry.storage.registry import filesystem

    with contextlib.suppress(Exception):
        place = parse_uri(uri)
        return bool(filesystem(place.protocol).isdir(place.path))
    return False


def _machine_changes(request: LaunchRequest, inputs: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """The runner's plan on a SageMaker machine: the channels' folders for those inputs,
    and ``/opt/ml`` as the provider's tree."""
    from ferry.backends.sagemaker_request import channel_path

    machine = dict(request.machine or {})
    given = dict(machine.get("inputs") or {})
    for name, (uri, mode) in inputs.items():
        given[name] = {"uri": channel_path(name), "mode": mode, "channel_of": uri}
    return {"inputs": given, "provider_tree": "/opt/ml"}


def _max_pending(plan: Plan) -> float:
    from ferry.backends.cloud import DEFAULT_MAX_PENDING

    return plan.limits.max_pending or DEFAULT_MAX_PENDING
