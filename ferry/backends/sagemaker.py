"""The sagemaker backend: each attempt is a SageMaker training job, sent through boto3.

Launching an attempt:

1. the offering: the cheapest SageMaker instance that fits and is not passed over
   (:func:`ferry.backends.cloud.choose`), in the bucket's region (SageMaker reads its
   channels from its own region), else ``sagemaker.region``;
2. the bundle: the code snapshot, Ferry's wheel and the bootstrap beside it, in the job's
   bucket under content hashes (an unchanged folder sends 0 bytes);
3. the run folder ``s3://BUCKET/.ferry/runs/<training job name>``: the runner's order and
   the job's secrets (never in the request, which the console shows);
4. ``CreateTrainingJob`` (:mod:`ferry.backends.sagemaker_request`), checked against
   botocore's model.

SageMaker's states map to the controller's: ``InProgress`` waits while its secondary
status says the machine is being readied (Starting, LaunchingMLInstances, Downloading ...,
for at most ``limits.max_pending``) and runs from Training on; Completed, Failed and
Stopped end the attempt as its run folder records it. A spot interruption (secondary
status Interrupted) ends the attempt as preempted: Ferry stops the training job, and the
next attempt resumes from the job's checkpoints, so retries stay Ferry's. A create
refused for quota (ResourceLimitExceeded) and a job failed with a CapacityError before its
runner started pass that offering over. The cost of an attempt is SageMaker's
``BillableTimeInSeconds`` at the offering's price.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config
from ferry.backends.base import Backend, Exit, LaunchRequest, RunningAttempt
from ferry.backends.cloud import (
    CloudRun,
    Refused,
    Seen,
    bucket_root,
    choose,
    env_for,
    forget_secrets,
    nonce,
    provider_timeout,
    write_order,
)
from ferry.errors import DoesNotFit, FerryError, SpecError, Unsupported
from ferry.store.records import Job

if TYPE_CHECKING:
    from ferry.catalog.optimizer import Option
    from ferry.spec import JobSpec
    from ferry.store.plan import Plan

PLACEHOLDER_ROLE = "<ROLE_ARN>"
_ROLE_STAND_IN = "arn:aws:iam::123456789012:role/ferry-dry-run"  # (checks a dry run's form)
_WAITING = {
    "Starting",
    "Pending",
    "LaunchingMLInstances",
    "PreparingTrainingStack",
    "Downloading",
    "DownloadingTrainingImage",
    "Restarting",
}
_ENDED = {"Completed", "Failed", "Stopped"}
_CAPACITY_WORDS = ("capacityerror", "insufficient capacity", "unable to provision")
_GRACE = 120.0  # s: SageMaker's spot notice, as EC2's: two minutes before the machine goes
_TAIL = 20  # lines of the provider's log said when its runner never started


def region() -> str | None:
    """The AWS region of SageMaker jobs, when one is set (setting, then AWS's variables)."""
    given = config.get("sagemaker.region")
    if given:
        return str(given)
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def _require_sdk() -> None:
    """Raise BackendNotInstalled when boto3 is missing."""
    import importlib.util

    if importlib.util.find_spec("boto3") is None:
        from ferry.errors import BackendNotInstalled

        raise BackendNotInstalled(
            "the sagemaker backend needs boto3, which is not installed",
            "pip install 'ferry[sagemaker]'",
        )


class SageMakerJobs:
    """SageMaker's API in one region (or at ``sagemaker.endpoint``), with its errors as
    FerryErrors that carry SageMaker's own words; CloudWatch Logs beside it."""

    def __init__(self, region_name: str) -> None:
        _require_sdk()
        import boto3
        from botocore.config import Config

        self.region = region_name
        endpoint = config.get("sagemaker.endpoint")
        # (short: a poll must not hold up the process that follows; the next one asks again)
        self._config = Config(
            retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=30
        )
        try:
            self.client = boto3.client(
                "sagemaker",
                region_name=region_name,
                endpoint_url=str(endpoint) if endpoint else None,
                config=self._config,
            )
        except Exception as exc:  # (botocore: no region, a bad endpoint)
            raise FerryError(
                f"SageMaker cannot be reached: {exc}", "check sagemaker.region and the AWS setup"
            ) from None
        self._logs: Any = None

    def _call(self, what: str, call: Any) -> Any:
        from botocore.exceptions import ClientError

        try:
            return call()
        except ClientError as exc:
            raise SageMakerError(what, exc) from None
        except Exception as exc:  # (credentials, the network, a retry that ran out)
            raise FerryError(f"SageMaker: {what} failed: {exc}", _credentials_hint(exc)) from None

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the training job ``body``. A call whose answer was lost (a timeout, a
        server error) may have made it: it is looked for by its name, which Ferry chose,
        before the error is raised, so no job runs unseen."""
        from botocore.exceptions import ClientError

        from ferry.backends.sagemaker_request import validate

        validate(body)
        name = body["TrainingJobName"]
        try:
            self.client.create_training_job(**body)
        except ClientError as exc:
            error = SageMakerError("creating the training job", exc)
            if error.code != "ResourceInUse":  # (in use: made by the lost first try)
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                if status < 500:
                    raise error from None
                return self._made(name, error.message)
        except Exception as exc:  # no answer: it may exist
            return self._made(name, f"SageMaker: creating the training job failed: {exc}")
        return self.describe(name)

    def _made(self, name: str, failure: str) -> dict[str, Any]:
        try:
            return self.describe(name)
        except SageMakerError as again:
            if again.code == "ValidationException":  # ("Requested resource not found")
                raise FerryError(failure, "check the network, and try again") from None
            raise FerryError(
                f"{failure}, and whether it was made could not be seen ({again.message})",
                "look for it in the console; Ferry told its runner to stop at once",
            ) from None

    def describe(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self._call(
            "reading the training job",
            lambda: self.client.describe_training_job(TrainingJobName=name),
        )
        return found

    def stop(self, name: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.stop_training_job(TrainingJobName=name)
        except ClientError as exc:
            error = SageMakerError("stopping the training job", exc)
            words = error.message.lower()
            if error.code == "ValidationException" and (
                "stopped" in words or "completed" in words or "failed" in words
            ):
                return  # it has ended already
            raise error from None
        except Exception as exc:
            raise FerryError(f"SageMaker: stopping the training job failed: {exc}") from None

    def log_tail(self, name: str, lines: int = _TAIL) -> list[str]:
        """The last ``lines`` of the job's CloudWatch log streams (one per host), oldest
        first; ``[]`` when there are none or they cannot be read."""
        from ferry.backends.sagemaker_request import LOG_GROUP

        with contextlib.suppress(Exception):
            if self._logs is None:
                import boto3

                self._logs = boto3.client("logs", region_name=self.region, config=self._config)
            streams = self._logs.describe_log_streams(
                logGroupName=LOG_GROUP, logStreamNamePrefix=f"{name}/"
            ).get("logStreams", [])
            found: list[tuple[int, str]] = []
            for stream in streams[:4]:
                events = self._logs.get_log_events(
                    logGroupName=LOG_GROUP,
                    logStreamName=stream["logStreamName"],
                    limit=lines,
                    startFromHead=False,
                ).get("events", [])
                found += [(int(e.get("timestamp", 0)), str(e.get("message", ""))) for e in events]
            return [message.rstrip("\n") for _, message in sorted(found)][-lines:]
        return []


def _credentials_hint(exc: Exception) -> str:
    if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
        return "set up AWS credentials: aws configure (or aws sso login)"
    if type(exc).__name__ == "NoRegionError":
        return "ferry config set sagemaker.region REGION"
    return "check the AWS credentials (aws sts get-caller-identity) and the network"


class SageMakerError(FerryError):
    """SageMaker refused a call; its message verbatim, with the fix when one is known."""

    def __init__(self, what: str, exc: Any) -> None:
        error = exc.response.get("Error", {}) if hasattr(exc, "response") else {}
        self.code = str(error.get("Code") or "")
        words = str(error.get("Message") or exc)
        self.quota = self.code == "ResourceLimitExceeded"
        hint = "see the message above"
        if self.code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
            hint = (
                "give your AWS identity sagemaker:CreateTrainingJob, DescribeTrainingJob and "
                "StopTrainingJob, and iam:PassRole on sagemaker.role"
            )
        elif self.code in ("UnrecognizedClientException", "InvalidSignatureException"):
            hint = "check the AWS credentials: aws sts get-caller-identity"
        elif self.quota:
            hint = (
                "ask for more quota: Service Quotas > Amazon SageMaker > '<instance type> for "
                "training job usage' (or spot training job usage)"
            )
        elif "role" in words.lower() and self.code == "ValidationException":
            hint = "check sagemaker.role: a role SageMaker may assume, with access to the bucket"
        super().__init__(f"SageMaker: {what} failed: {words}", hint)


class SageMakerRun(CloudRun):
    """An attempt running as the training job ``name``."""

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
        self._jobs = jobs
        self._billed: float | None = None
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
        if status not in _ENDED:
            if secondary == "Interrupted":  # spot capacity taken back: Ferry's retry
                self._said.append(
                    "spot capacity taken back (SageMaker: Interrupted): stopping the training "
                    "job, so that the next attempt resumes from the checkpoints"
                )
                self.jobs.stop(self.name)  # (a failure: asked again at the next look)
                return Seen(Seen.ENDED, state, reason, preempted=True)
            phase = Seen.PENDING if secondary in _WAITING else Seen.RUNNING
            return Seen(phase, state, _latest(data))
        if data.get("BillableTimeInSeconds") is not None:
            self._billed = float(data["BillableTimeInSeconds"])
        capacity = any(w in reason.lower() for w in _CAPACITY_WORDS)
        started = self._runner_started()
        said = reason
        if secondary in ("MaxRuntimeExceeded", "MaxWaitTimeExceeded") and not said:
            said = f"SageMaker's StoppingCondition: {secondary}"
        return Seen(
            Seen.ENDED,
            state,
            said,
            succeeded=status == "Completed",
            no_capacity=capacity and not started,
            preempted=capacity and started,
            cancelled=status == "Stopped" and secondary == "Stopped",
        )

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
        if self._billed is not None:
            ended = replace(ended, billed_seconds=self._billed)
        return ended


def _latest(data: dict[str, Any]) -> str:
    """SageMaker's last words on the job's progress (its StatusMessage)."""
    transitions = data.get("SecondaryStatusTransitions") or []
    if transitions:
        return str(transitions[-1].get("StatusMessage") or "")
    return ""


def _handle(name: str, region_name: str, folder: str) -> str:
    return f"{region_name}:{name}@{folder}"


def _parse_handle(handle: str | None) -> tuple[str, str, str]:
    head, _, folder = (handle or "").partition("@")
    region_name, _, name = head.partition(":")
    return region_name, name, folder


class SageMakerBackend(Backend):
    """Attempts run as SageMaker training jobs in the provider's prebuilt containers."""

    name = "sagemaker"
    runs_here = False
    features = frozenset(
        {
            "inputs.remote",
            "inputs.mount",
            "inputs.stream",
            "outputs.remote",
            "resources.spot",
            "environment.requirements",
            "environment.image",
            "paths.container",  # (/opt/ml is the instance's own; the runner collects from it)
        }
    )

    def _check(self, spec: JobSpec, outputs: str | None = None) -> None:
        from ferry.accelerator_names import backend_name
        from ferry.store.plan import Plan

        _require_sdk()
        outputs = outputs or spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
        bucket_root(outputs, "s3", self.name)
        for name, item in spec.inputs.items():
            if "://" not in item.uri or item.uri.startswith("file://"):
                raise SpecError(
                    f"input {name!r} is a file of this machine ({item.uri}), which a SageMaker "
                    "machine cannot read",
                    f"put it in a bucket (aws s3 cp --recursive {item.uri} s3://BUCKET/...) "
                    "and give that URI",
                )
            if item.mode == "mount" and not item.uri.startswith("s3://"):
                raise SpecError(
                    f"input {name!r}: SageMaker mounts only s3:// data ({item.uri})",
                    "use mode: copy, or put the data in S3",
                )
        acc = spec.resources.accelerator_request
        if acc is not None and backend_name(acc, "sagemaker") is None:
            raise Unsupported(
                f"SageMaker has no training instance for {acc}",
                "see the instances it has: ferry catalog ls --provider aws",
            )
        plan = Plan.of(spec.to_json())
        option = choose(_in_region(plan, region()), self.name)
        _target(plan, option, str(config.get("sagemaker.role") or _ROLE_STAND_IN))

    def dry_run(self, spec: JobSpec) -> dict[str, Any]:
        """The ``CreateTrainingJob`` request the first attempt of ``spec`` would send, with
        placeholders for what is known only at submit (the job's id, the code's hash) or
        from settings that are not set (the role, the bucket)."""
        from ferry import __version__
        from ferry.backends import sagemaker_request as request
        from ferry.store.plan import Plan

        self.check_features(spec)
        placeholders: list[dict[str, str]] = []
        stand_ins: dict[str, str] = {}

        def mark(name: str, filled_by: str, stand_in: str) -> str:
            placeholders.append({"placeholder": name, "filled_by": filled_by})
            stand_ins[name] = stand_in
            return name

        outputs = spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
        if not outputs.startswith("s3://"):
            bucket = mark(
                "<BUCKET>",
                "outputs: s3://BUCKET/runs/{job_id} in the spec, or: ferry config set "
                "outputs_root s3://BUCKET/runs",
                "bucket",
            )
            outputs = f"s3://{bucket}/runs/{{job_id}}"
        job_id = mark("<JOB_ID>", "the job's id, given when it is submitted", "job")
        outputs = outputs.replace("{job_id}", job_id)
        root = bucket_root(outputs, "s3", self.name)
        plan = Plan.of(spec.to_json())
        self._check(spec, outputs=outputs)
        option = choose(_in_region(plan, region()), self.name)
        role = str(config.get("sagemaker.role") or "") or mark(
            PLACEHOLDER_ROLE, "ferry config set sagemaker.role ROLE_ARN", _ROLE_STAND_IN
        )
        chosen = _target(plan, option, role)
        digest = mark("<CODE_SHA256>", "the hash of the code snapshot taken at submit", "0")
        wheel_hash = mark("<WHEEL_HASH>", "the hash of Ferry's wheel, uploaded at submit", "0")
        nonce_mark = mark("<NONCE>", "6 random hex digits, one per attempt", "0")
        name = f"{job_id}-1-{nonce_mark}"
        body = request.training_job(
            name=name,
            job_id=job_id,
            attempt=1,
            hyperparameters=_hyperparameters(plan),
            metrics=dict(plan.metrics),
            inputs=_channel_inputs(plan),
            target=chosen.target,
            run_folder=f"{root}/.ferry/runs/{name}",
            code=f"{root}/.ferry/code/{digest}.tar.gz",
            wheel=f"{root}/.ferry/wheels/{wheel_hash}/ferry-{__version__}-py3-none-any.whl",
            outputs=outputs,
            env=dict(spec.env),
            timeout=provider_timeout(plan, self.stop_grace_of(plan)),
            max_pending=_max_pending(plan),
        )
        request.validate(body, stand_ins)
        where = chosen.target.region
        endpoint = str(
            config.get("sagemaker.endpoint") or f"https://api.sagemaker.{where}.amazonaws.com"
        )
        shown: dict[str, Any] = {
            "method": "POST",
            "url": f"{endpoint}/ (X-Amz-Target: SageMaker.CreateTrainingJob)",
            "body": body,
            "aws": request.aws_command(body, where),
        }
        if chosen.note:
            shown["note"] = chosen.note
        shown["placeholders"] = placeholders
        return shown

    def stop_grace_of(self, plan: Plan) -> float:
        given = plan.limits.stop_grace
        return given if given is not None else _GRACE

    def default_grace(self) -> float:
        return _GRACE

    def price(self, job: Job) -> float:
        try:
            return choose(_in_region(job.plan, _job_region(job)), self.name).price
        except DoesNotFit:
            return 0.0

    def offering(self, job: Job) -> str:
        try:
            return choose(_in_region(job.plan, _job_region(job)), self.name).describe()
        except DoesNotFit:
            return "sagemaker"

    def launch(self, request: LaunchRequest) -> RunningAttempt:
        from ferry.backends import sagemaker_request
        from ferry.backends.cloud import run_folder
        from ferry.packaging.bundle import upload
        from ferry.runner.record import STOPPED, _Place

        job = request.job
        role = config.get("sagemaker.role")
        if not role:
            raise SpecError(
                "no execution role is set for SageMaker jobs",
                "run: ferry config set sagemaker.role arn:aws:iam::ACCOUNT:role/NAME (a role "
                "SageMaker may assume, with access to the bucket)",
            )
        root = bucket_root(job.outputs, "s3", self.name)
        option = choose(_in_region(job.plan, _job_region(job)), self.name)
        chosen = _target(job.plan, option, str(role))
        jobs = SageMakerJobs(chosen.target.region)  # (no SDK: before anything is uploaded)
        bundle = upload(Path(job.job_dir) / "code", root, bootstrap=True)
        name = sagemaker_request.job_name(job.id, request.attempt, nonce())
        folder = run_folder(job.outputs, name)
        inputs = _channel_inputs(job.plan)
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
        said = [
            f"code and Ferry's wheel: {bundle.sent} bytes sent"
            if bundle.sent
            else "code and Ferry's wheel unchanged: 0 bytes sent"
        ]
        if chosen.note:
            said.append(chosen.note)
        write_order(request, folder, _machine_changes(request, inputs))
        try:
            jobs.create(body)
        except SageMakerError as exc:
            forget_secrets(folder)
            if not exc.quota:
                raise
            from ferry.catalog.optimizer import block

            block(option, exc.message)
            said.append(f"{option.describe()} passed over for now: {exc.message}")
            return Refused(f"{option.describe()}: {exc.message}", said)
        except BaseException:
            # the job may have been made after all: its runner ends at once, unfollowed
            with contextlib.suppress(FerryError):
                _Place(folder).put(STOPPED, b"")
            forget_secrets(folder)
            raise
        where = chosen.target.region
        said.append(f"SageMaker training job {name}: {sagemaker_request.console_url(where, name)}")
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

    def reattach(
        self, job: Job, attempt: int, handle: str | None, log_path: str, metrics_path: str
    ) -> SageMakerRun | None:
        region_name, name, folder = _parse_handle(handle)
        if not name or not folder:
            return None
        option = None
        with contextlib.suppress(DoesNotFit):  # (a refusal for capacity passes it over)
            option = choose(_in_region(job.plan, region_name), self.name)
        run = SageMakerRun(
            job,
            name,
            folder,
            region_name,
            log_path,
            metrics_path,
            self.stop_grace(job),
            option=option,
        )
        run.go_on()
        return run

    def cancel(self, job: Job, attempt: int, handle: str | None) -> None:
        """End the attempt from any process: the notice in its run folder, and the
        provider's stop."""
        from ferry.runner.record import STOPPED, _Place

        region_name, name, folder = _parse_handle(handle)
        if not name:
            return
        with contextlib.suppress(FerryError):
            _Place(folder).put(STOPPED, b"")
        with contextlib.suppress(FerryError):
            SageMakerJobs(region_name).stop(name)
        forget_secrets(folder)

    def outputs_sent(self, job: Job, attempt: int, handle: str | None) -> list[Any] | None:
        from ferry.runner.machine import OUTPUTS
        from ferry.runner.record import RunFolderReader

        folder = _parse_handle(handle)[2]
        if not folder:
            return None
        try:
            data = RunFolderReader(folder).get(OUTPUTS)
            found = json.loads(data) if data is not None else None
        except (FerryError, ValueError):
            return None
        return found if isinstance(found, list) else None


class _Chosen:
    """The request's target, and what to say about the image."""

    def __init__(self, target: Any, note: str) -> None:
        self.target = target
        self.note = note


def _in_region(plan: Plan, where: str | None) -> Plan:
    """The plan, kept to ``where`` when that is known (and the spec names no region)."""
    if not where or plan.resources.regions:
        return plan
    return replace(plan, resources=replace(plan.resources, regions=(where,)))


def _job_region(job: Job) -> str | None:
    """Where the job's training jobs run: its bucket's region (SageMaker reads channels
    from its own region), else ``sagemaker.region``."""
    try:
        root = bucket_root(job.outputs, "s3", "sagemaker")
    except SpecError:
        return region()
    if root not in _bucket_regions:
        _bucket_regions[root] = _bucket_region(root)
    return _bucket_regions[root] or region()


_bucket_regions: dict[str, str | None] = {}  # s3://bucket -> its region (asked once)


def _bucket_region(root: str) -> str | None:
    """The region of the bucket ``s3://NAME``, or None when it cannot be asked."""
    with contextlib.suppress(Exception):
        import boto3

        from ferry.storage.locations import parse_uri

        endpoint = config.get("storage.s3.endpoint_url")
        s3 = boto3.client("s3", endpoint_url=str(endpoint) if endpoint else None)
        found = s3.get_bucket_location(Bucket=parse_uri(root).bucket)
        return str(found.get("LocationConstraint") or "us-east-1")
    return None


def _target(plan: Plan, option: Option, role: str) -> _Chosen:
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
    return _Chosen(target, note)


def _words(value: Any) -> tuple[str, ...]:
    return tuple(w.strip() for w in str(value or "").split(",") if w.strip())


def _hyperparameters(plan: Plan) -> dict[str, str]:
    from ferry.contract.env import hyperparameter_text

    return {k: hyperparameter_text(v) for k, v in plan.hyperparameters.items()}


def _channel_inputs(plan: Plan) -> dict[str, tuple[str, str]]:
    """The inputs SageMaker brings as channels: ``s3://`` data copied or mounted (a
    streamed input is read from the bucket by the script itself)."""
    found: dict[str, tuple[str, str]] = {}
    for name, item in plan.inputs.items():
        uri, mode = str(item.get("uri", "")), str(item.get("mode") or "copy")
        if uri.startswith("s3://") and mode in ("copy", "mount"):
            found[name] = (uri, mode)
    return found


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
