"""A SageMaker API test server for training jobs' life cycles, and the provider double
behind it.

moto's SageMaker proves that a request is read (tests/backends/test_sagemaker.py sends
Ferry's to it), but its training jobs are Completed at once and cannot be stopped. This
server simulates what moto cannot, over HTTP as the API serves boto3 (the JSON 1.1
protocol: ``POST /`` with ``X-Amz-Target: SageMaker.<Operation>``):

- **Requests**: CreateTrainingJob's parameters are checked with botocore's own
  ``ParamValidator`` against the service model (the API's ValidationException when they
  fail); DescribeTrainingJob answers in the API's fields (``TrainingJobStatus``,
  ``SecondaryStatus``, ``SecondaryStatusTransitions``, ``FailureReason``,
  ``BillableTimeInSeconds`` ...); StopTrainingJob stops it.
- **Life cycle**: InProgress/Starting, InProgress/Downloading while the channels are
  brought, InProgress/Training while the container runs, then Completed on exit 0, else
  Failed with SageMaker's words (``AlgorithmError: <the failure file>, exit code: N``).
  A stop is Stopping (SIGTERM to the container, SIGKILL after ``grace``), then
  Stopped/Stopped; a job stopped before its container started is Stopped at once; a stop
  of a job that is Stopping or has ended is a ValidationException ("… is in status …").
  ``BillableTimeInSeconds`` is the container's whole seconds (half of them for managed
  spot, which bills fewer seconds than it trained).
- **Scripted failures** (``script``, taken by the next create): ``quota`` answers the
  create with ResourceLimitExceeded and the words of an account-level limit;
  ``capacity`` fails the job before its container starts with ``CapacityError: Unable
  to provision requested ML compute capacity``; ``lost-answer`` makes the job but
  answers the create with an InternalFailure (HTTP 500), as when an answer is lost (the
  client's retry then hears ResourceInUse); ``lost-answers`` answers every create of that
  name so, as when the service keeps failing;
  ``pending`` leaves the job Starting until it is stopped; ``broken-wheel`` spoils the
  wheel a channel brought, so that the install in the container fails.
- **Lists** of training jobs (ListTrainingJobs: ``NameContains``, ``StatusEquals``).
- **Service Quotas** (what the preflight asks): ListServiceQuotas and
  ListAWSDefaultServiceQuotas for ``sagemaker`` (the protocol's
  ``ServiceQuotasV20190624.`` target), two quotas a page, from ``quotas`` (applied) and
  ``default_quotas`` (quota name -> value).
- **Spot interruption** (:meth:`SageMakerServer.interrupt`): SIGTERM to the container,
  SIGKILL after ``grace``, then InProgress/Interrupted, as SageMaker reports a managed
  spot job whose instance was taken back; with ``restart_after``, SageMaker's own restart
  follows (Starting, Downloading, Training: the same container again on a fresh
  instance), else it stays Interrupted until it is stopped.

**The provider double** runs what the request says, as SageMaker would on a fresh
instance of the training image: in a fresh folder it builds the instance's ``/opt/ml``
(each channel's objects from moto's S3 under ``input/data/<channel>``, the
``input/config`` files, the spot checkpoints from ``CheckpointConfig.S3Uri`` under
``LocalPath``), then runs ``ContainerEntrypoint`` + ``ContainerArguments`` with the
request's ``Environment`` and the variables SageMaker sets (``TRAINING_JOB_NAME``,
``TRAINING_JOB_ARN``, ``AWS_REGION``), in a private mount namespace where that folder
is ``/opt/ml`` (Ferry's own container-paths helper, as the local backend uses it). The
image's ``python3`` is an interpreter whose packages are the test session's, Ferry
excepted. The instance's access to storage is moto's address (``AWS_ENDPOINT_URL_S3``)
and test keys, as a real instance's is its execution role. The container's output goes
to moto's CloudWatch Logs, ``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-1-…``,
once it has ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ferry.contract.container_paths import wrap
from tests.backends.machines import image_python, names_here, start, stop_with_grace, wait_all

ACCOUNT = "123456789012"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
_ENDED = {"Completed", "Failed", "Stopped"}


@dataclass
class Job:
    """One training job the server holds."""

    name: str
    body: dict[str, Any]
    region: str
    status: str = "InProgress"
    secondary: str = "Starting"
    reason: str = ""
    created: float = field(default_factory=time.time)
    started: float | None = None  # its container
    ended: float | None = None
    transitions: list[dict[str, Any]] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # one per instance
    vms: list[Path] = field(default_factory=list)  # the instances of its last start
    failed: int = 0  # the instance that failed first
    stopping: bool = False
    interrupted: bool = False
    restart_after: float | None = None  # s after an interruption before it starts again
    runs: int = 0  # containers started
    lost_answers: bool = False  # every create of its name answered with a server error

    def answer(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: v
            for k, v in self.body.items()
            if k not in ("Tags",)  # (DescribeTrainingJob does not return them)
        }
        out.update(
            TrainingJobArn=f"arn:aws:sagemaker:{self.region}:{ACCOUNT}:training-job/{self.name}",
            TrainingJobStatus=self.status,
            SecondaryStatus=self.secondary,
            CreationTime=self.created,
            LastModifiedTime=time.time(),
            SecondaryStatusTransitions=self.transitions,
            ModelArtifacts={"S3ModelArtifacts": ""},
        )
        if self.reason:
            out["FailureReason"] = self.reason
        if self.started:
            out["TrainingStartTime"] = self.started
        if self.ended:
            out["TrainingEndTime"] = self.ended
            if self.started:
                seconds = max(1, int(self.ended - self.started))
                out["TrainingTimeInSeconds"] = seconds
                # managed spot bills fewer seconds than it trained (at the on-demand
                # price): here, half
                spot = self.body.get("EnableManagedSpotTraining")
                out["BillableTimeInSeconds"] = max(1, seconds // 2) if spot else seconds
        return out


class SageMakerServer:
    """The server: ``endpoint`` is its address; ``jobs`` what was created; ``script`` a
    list of behaviours the next creates take (``"quota"``, ``"capacity"``,
    ``"lost-answer"``, ``"pending"``, ``"broken-wheel"``, ``"run"``)."""

    def __init__(self, root: Path, aws: str, grace: float = 5.0) -> None:
        self.root = root
        self.aws = aws  # moto's address: S3 and CloudWatch Logs
        self.grace = grace
        image_python(root / "probe")  # (fails early, here, if the image cannot be made)
        self.jobs: dict[str, Job] = {}
        self.requests: list[dict[str, Any]] = []  # every create's parameters
        self.script: list[str] = []
        self.provision = 0.5  # s a job stays Starting before its channels are brought
        self.quotas: dict[str, float] = {}  # Service Quotas: applied, by name
        self.default_quotas: dict[str, float] = {}  # and AWS's defaults
        self.quota_calls = 0  # Service Quotas pages asked for
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, code: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data, default=str).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(raw)))
                self.send_header("x-amzn-RequestId", os.urandom(8).hex())
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:
                target = self.headers.get("X-Amz-Target", "")
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                operation = target.partition(".")[2]
                region = _region_of(self.headers.get("Authorization", ""))
                try:
                    params = json.loads(raw or b"{}")
                except ValueError:
                    return self._send(400, _error("SerializationException", "bad JSON"))
                handler = {
                    "CreateTrainingJob": server.create,
                    "DescribeTrainingJob": server.describe,
                    "StopTrainingJob": server.stop,
                    "ListTrainingJobs": server.list_jobs,
                    "ListServiceQuotas": server.list_quotas,
                    "ListAWSDefaultServiceQuotas": server.list_default_quotas,
                }.get(operation)
                if handler is None:
                    return self._send(400, _error("UnknownOperationException", operation))
                code, data = handler(params, region)
                self._send(code, data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    # -- the API -----------------------------------------------------------------------

    def create(self, params: dict[str, Any], region: str) -> tuple[int, dict[str, Any]]:
        import botocore.session
        from botocore.validate import ParamValidator

        model = botocore.session.get_session().get_service_model("sagemaker")
        shape = model.operation_model("CreateTrainingJob").input_shape
        report = ParamValidator().validate(params, shape)
        if report.has_errors():
            return 400, _error("ValidationException", report.generate_report())
        self.requests.append(params)
        name = params["TrainingJobName"]
        behaviour = self.script.pop(0) if self.script else "run"
        if behaviour == "quota":
            kind = params["ResourceConfig"]["InstanceType"]
            usage = (
                "spot training job usage"
                if params.get("EnableManagedSpotTraining")
                else ("training job usage")
            )
            return 400, _error(
                "ResourceLimitExceeded",
                f"The account-level service limit '{kind} for {usage}' is 0 Instances, with "
                "current utilization of 0 Instances and a request delta of 1 Instances. Please "
                "use AWS Service Quotas to request an increase for this quota.",
            )
        with self._lock:
            if name in self.jobs and self.jobs[name].lost_answers:
                return 500, _error("InternalFailure", "We encountered an internal error.")
            if name in self.jobs:
                return 400, _error(
                    "ResourceInUse",
                    f"Training job names must be unique within an AWS account "
                    f"and region, and a training job with this name already exists ({name})",
                )
            job = self.jobs[name] = Job(name, params, region)
            job.lost_answers = behaviour == "lost-answers"
            self._transition(job, "Starting", "Preparing the instances for training")
        threading.Thread(target=self._life, args=(job, behaviour), daemon=True).start()
        if behaviour in ("lost-answer", "lost-answers"):
            return 500, _error("InternalFailure", "We encountered an internal error.")
        return 200, {"TrainingJobArn": job.answer()["TrainingJobArn"]}

    def list_quotas(self, params: dict[str, Any], region: str) -> tuple[int, dict[str, Any]]:
        self.quota_calls += 1
        return 200, _quota_page(self.quotas, params, region)

    def list_default_quotas(
        self, params: dict[str, Any], region: str
    ) -> tuple[int, dict[str, Any]]:
        self.quota_calls += 1
        return 200, _quota_page(self.default_quotas, params, region)

    def list_jobs(self, params: dict[str, Any], region: str) -> tuple[int, dict[str, Any]]:
        """ListTrainingJobs, by NameContains and StatusEquals (one page)."""
        part, status = params.get("NameContains", ""), params.get("StatusEquals")
        with self._lock:
            found = [
                {
                    "TrainingJobName": j.name,
                    "TrainingJobArn": j.answer()["TrainingJobArn"],
                    "CreationTime": j.created,
                    "TrainingJobStatus": j.status,
                }
                for j in self.jobs.values()
                if part in j.name and (status is None or j.status == status)
            ]
        return 200, {"TrainingJobSummaries": found}

    def describe(self, params: dict[str, Any], region: str) -> tuple[int, dict[str, Any]]:
        job = self.jobs.get(str(params.get("TrainingJobName")))
        if job is None:
            return 400, _error("ValidationException", "Requested resource not found.")
        with self._lock:
            return 200, job.answer()

    def stop(self, params: dict[str, Any], region: str) -> tuple[int, dict[str, Any]]:
        job = self.jobs.get(str(params.get("TrainingJobName")))
        if job is None:
            return 400, _error("ValidationException", "Requested resource not found.")
        with self._lock:
            if job.status in _ENDED or job.status == "Stopping":
                return 400, _error(
                    "ValidationException",
                    f"The request was rejected because the training job is in status {job.status}.",
                )
            job.stopping = True
            job.status = "Stopping"
            self._transition(job, "Stopping", "Stopping the training job")
            if not job.procs:  # no container yet: nothing to stop
                self._finish(job, "Stopped", "Stopped", "")
        self._signal(job)
        return 200, {}

    def interrupt(self, name: str, restart_after: float | None = None) -> None:
        """The spot instance of ``name`` is taken back (and, ``restart_after`` seconds
        later, SageMaker starts the job again)."""
        job = self.jobs[name]
        job.interrupted = True
        job.restart_after = restart_after
        self._signal(job)

    def _signal(self, job: Job) -> None:
        for proc in job.procs:
            if proc.poll() is None:
                stop_with_grace(proc, self.grace)

    # -- a job's life -------------------------------------------------------------------

    def _life(self, job: Job, behaviour: str) -> None:
        time.sleep(self.provision)
        if behaviour == "pending":
            return  # (Starting until stopped)
        if job.stopping:
            return
        if behaviour == "capacity":
            with self._lock:
                self._finish(
                    job,
                    "Failed",
                    "Failed",
                    "CapacityError: Unable to provision requested ML compute capacity. Please "
                    "retry using a different ML instance type.",
                )
            return
        try:
            code = self._run(job, behaviour)
        except Exception as exc:  # the double itself failed: said as an internal error
            with self._lock:
                self._finish(job, "Failed", "Failed", f"InternalServerError: {exc!r}")
            return
        self._send_logs(job)
        if job.status in _ENDED:  # (stopped before its container started)
            return
        failure = ""
        with_failure = job.vms[job.failed] / "opt_ml" / "output" / "failure"
        if with_failure.is_file():
            failure = with_failure.read_text(errors="replace").strip()
        with self._lock:
            if job.interrupted:
                self._transition(job, "Interrupted", "Training job interrupted (spot)")
                job.procs = []
                job.interrupted = False
                if job.stopping:
                    self._finish(job, "Stopped", "Stopped", "")
                elif job.restart_after is not None:
                    delay, job.restart_after = job.restart_after, None
                    threading.Timer(delay, self._restart, args=(job,)).start()
            elif job.stopping:
                self._finish(job, "Stopped", "Stopped", "")
            elif code == 0:
                self._finish(job, "Completed", "Completed", "")
            else:
                self._finish(
                    job, "Failed", "Failed", f"AlgorithmError: {failure}, exit code: {code}"
                )

    def _restart(self, job: Job) -> None:
        """SageMaker's own restart of an interrupted spot job: the same container again."""
        with self._lock:
            if job.status in _ENDED or job.stopping:
                return
            self._transition(job, "Starting", "Restarting the interrupted training job")
        self._life(job, "run")

    def _run(self, job: Job, behaviour: str) -> int:
        """What the job's instances run (``InstanceCount`` of them: algo-1, algo-2 ...);
        returns the exit code of the container that failed first, else 0."""
        job.runs += 1
        count = int(job.body["ResourceConfig"].get("InstanceCount") or 1)
        hosts = [f"algo-{n + 1}" for n in range(count)]
        with self._lock:
            self._transition(job, "Downloading", "Downloading input data")
        job.vms = [
            # (a fresh instance each start)
            self.root / f"vm-{job.name}-{job.runs}" / (host if count > 1 else "")
            for host in hosts
        ]
        machines = [
            self._instance(job, behaviour, vm, hosts, host)
            for vm, host in zip(job.vms, hosts, strict=True)
        ]
        with self._lock:
            if job.stopping:  # (stopped while the instances got ready)
                return -signal.SIGTERM
            job.procs = start(machines, home=False)
            job.started = time.time()
            self._transition(
                job, "Training", "Training image download completed. Training in progress."
            )
        code, job.failed = wait_all(job.procs, self.grace)
        return code

    def _instance(
        self, job: Job, behaviour: str, vm: Path, hosts: list[str], host: str
    ) -> tuple[list[str], dict[str, str], Path]:
        """One instance made ready (its ``/opt/ml``): its command, variables and folder."""
        opt_ml = vm / "opt_ml"
        for sub in ("home", "tmp", "mnt"):
            (vm / sub).mkdir(parents=True)
        python = image_python(vm)  # a fresh instance: nothing installed by another
        s3 = self._client("s3", job.region)
        config = opt_ml / "input" / "config"
        config.mkdir(parents=True)
        for channel in job.body.get("InputDataConfig", []):
            uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
            bucket, _, prefix = uri[len("s3://") :].partition("/")
            self._download(s3, bucket, prefix, opt_ml / "input" / "data" / channel["ChannelName"])
        if behaviour == "broken-wheel":  # (a download that went wrong)
            for wheel in (opt_ml / "input" / "data").glob("*/*.whl"):
                wheel.write_bytes(b"not a wheel")
        checkpoints = job.body.get("CheckpointConfig")
        if checkpoints:
            local = checkpoints.get("LocalPath", "/opt/ml/checkpoints")
            bucket, _, prefix = checkpoints["S3Uri"][len("s3://") :].partition("/")
            target = opt_ml / Path(local).relative_to("/opt/ml")
            target.mkdir(parents=True, exist_ok=True)
            self._download(s3, bucket, prefix.rstrip("/") + "/", target)
        for sub in ("model", "output/data", "code"):
            (opt_ml / sub).mkdir(parents=True, exist_ok=True)
        files = {
            "hyperparameters.json": job.body.get("HyperParameters", {}),
            "resourceconfig.json": {
                "current_host": host,
                "hosts": hosts,
                "current_instance_type": job.body["ResourceConfig"]["InstanceType"],
                "current_group_name": "homogeneousCluster",
                "network_interface_name": "eth0",
            },
            "inputdataconfig.json": {
                c["ChannelName"]: {
                    "TrainingInputMode": c.get("InputMode", "File"),
                    "S3DistributionType": "FullyReplicated",
                    "RecordWrapperType": "None",
                }
                for c in job.body.get("InputDataConfig", [])
            },
        }
        for name, data in files.items():
            (config / name).write_text(json.dumps(data))
        algorithm = job.body["AlgorithmSpecification"]
        command = [
            str(python) if w in ("python3", "python") else w
            for w in algorithm["ContainerEntrypoint"]
        ]
        argv = [*command, *algorithm.get("ContainerArguments", [])]
        env = {
            "PATH": f"{python.parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(vm / "home"),
            "TMPDIR": str(vm / "tmp"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TRAINING_JOB_NAME": job.name,
            "TRAINING_JOB_ARN": job.answer()["TrainingJobArn"],
            "AWS_REGION": job.region,
            "AWS_DEFAULT_REGION": job.region,
            # the instance's access to storage (a real one's: its execution role)
            "AWS_ENDPOINT_URL_S3": self.aws,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "PIP_NO_INDEX": "1",  # (no network here: pip finds the image's packages)
            **job.body.get("Environment", {}),
        }
        binds = [(str(opt_ml), "/opt/ml")]
        if len(hosts) > 1:  # each instance reaches the others by their names
            binds.append(names_here(vm, hosts))
        return wrap(argv, "/opt/ml/code", vm / "mnt", binds), env, vm

    def _download(self, s3: Any, bucket: str, prefix: str, target: Path) -> None:
        """The objects under ``prefix``, as a channel is laid out (as SageMaker's local
        mode lays it, sagemaker.utils.download_folder): a prefix that names one object
        is that file; otherwise each key's path after the prefix."""
        target.mkdir(parents=True, exist_ok=True)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        if prefix in keys and not prefix.endswith("/"):
            s3.download_file(bucket, prefix, str(target / prefix.rsplit("/", 1)[-1]))
            return
        for key in keys:
            if key.endswith("/"):
                continue
            into = target / key[len(prefix) :].lstrip("/")
            into.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(into))

    def _send_logs(self, job: Job) -> None:
        """Each container's output to CloudWatch Logs, as SageMaker's agent sends it (a
        stream per instance)."""
        logs = self._client("logs", job.region)
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_group(logGroupName=LOG_GROUP)
        for n, vm in enumerate(job.vms):
            log = vm / "log.txt"
            if not log.exists():
                continue
            stream = f"{job.name}/algo-{n + 1}-{int(job.created)}-{job.runs}"
            logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
            # (CloudWatch refuses an empty message: the agent ships the lines with text; a
            # container restarted a moment ago may have written none yet)
            lines = [line for line in log.read_text(errors="replace").splitlines() if line]
            now = int(time.time() * 1000)
            events = [{"timestamp": now, "message": line} for line in lines[-1000:]]
            if events:
                logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)

    def _client(self, service: str, region: str) -> Any:
        import boto3

        return boto3.client(
            service,
            region_name=region,
            endpoint_url=self.aws,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def _transition(self, job: Job, status: str, message: str) -> None:
        now = time.time()
        if job.transitions and "EndTime" not in job.transitions[-1]:
            job.transitions[-1]["EndTime"] = now
        job.secondary = status
        job.transitions.append({"Status": status, "StartTime": now, "StatusMessage": message})

    def _finish(self, job: Job, status: str, secondary: str, reason: str) -> None:
        job.status = status
        job.reason = reason
        job.ended = time.time()
        self._transition(job, secondary, reason or f"Training job {status.lower()}")

    def close(self) -> None:
        for job in self.jobs.values():
            for proc in job.procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        self.httpd.shutdown()


def _quota_page(quotas: dict[str, float], params: dict[str, Any], region: str) -> dict[str, Any]:
    """One page (two quotas) of Service Quotas' answer for SageMaker."""
    start = int(params.get("NextToken") or 0)
    names = sorted(quotas)[start : start + 2]
    page: dict[str, Any] = {
        "Quotas": [
            {
                "ServiceCode": "sagemaker",
                "ServiceName": "Amazon SageMaker",
                "QuotaCode": f"L-{abs(hash(name)) % 10**8:08d}",
                "QuotaName": name,
                "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT}:sagemaker/{name}",
                "Value": quotas[name],
                "Unit": "None",
                "Adjustable": True,
                "GlobalQuota": False,
            }
            for name in names
        ]
    }
    if start + 2 < len(quotas):
        page["NextToken"] = str(start + 2)
    return page


def _region_of(authorization: str) -> str:
    """The region a SigV4 request was signed for (Credential=KEY/DATE/REGION/...)."""
    credential = authorization.partition("Credential=")[2].split(",")[0]
    parts = credential.split("/")
    return parts[2] if len(parts) > 2 else "us-east-1"


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"__type": kind, "message": message}
