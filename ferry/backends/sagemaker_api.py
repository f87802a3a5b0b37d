"""SageMaker's API as the sagemaker backend uses it, through boto3: training jobs
(create, describe, stop) with SageMaker's errors as sentences with their fix, the tail of
a job's CloudWatch log, and where a job runs (its bucket's region)."""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ferry import config
from ferry.backends.cloud_backend import ProviderError
from ferry.errors import FerryError, SpecError, install_hint

if TYPE_CHECKING:
    from ferry.store.plan import Plan

_TAIL = 20  # lines of the provider's log said when its runner never started


def region() -> str | None:
    """The AWS region of SageMaker jobs, when one is set (setting, then AWS's variables)."""
    given = config.get("sagemaker.region")
    if given:
        return str(given)
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def require_sdk() -> None:
    """Raise BackendNotInstalled when boto3 is missing."""
    import importlib.util

    if importlib.util.find_spec("boto3") is None:
        from ferry.errors import BackendNotInstalled

        raise BackendNotInstalled(
            "the sagemaker backend needs boto3, which is not installed",
            install_hint("sagemaker"),
        )


class SageMakerJobs:
    """SageMaker's API in one region (or at ``sagemaker.endpoint``), with its errors as
    FerryErrors that carry SageMaker's own words; CloudWatch Logs beside it."""

    def __init__(self, region_name: str) -> None:
        require_sdk()
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
        """End the job ``name``: nothing when it is ending or has ended."""
        from botocore.exceptions import ClientError

        try:
            self.client.stop_training_job(TrainingJobName=name)
        except ClientError as exc:
            error = SageMakerError("stopping the training job", exc)
            words = error.message.lower()
            # ("The request was rejected because the training job is in status Stopping.")
            if error.code == "ValidationException" and "in status" in words:
                return
            raise error from None
        except Exception as exc:
            raise FerryError(
                f"SageMaker: stopping the training job failed: {exc}", _credentials_hint(exc)
            ) from None

    def running(self, prefix: str) -> list[str]:
        """The names of the training jobs in progress whose names start with ``prefix``."""
        found: list[str] = []
        token = None
        while True:
            asked: dict[str, Any] = {
                "NameContains": prefix,
                "StatusEquals": "InProgress",
                "MaxResults": 100,
            }
            if token:
                asked["NextToken"] = token
            page = self._call(
                "listing training jobs", functools.partial(self.client.list_training_jobs, **asked)
            )
            found += [
                str(j["TrainingJobName"])
                for j in page.get("TrainingJobSummaries", [])
                if str(j.get("TrainingJobName", "")).startswith(prefix)
            ]
            token = page.get("NextToken")
            if not token:
                return found

    def log_lines(self, name: str, lines: int) -> list[tuple[int, str, str]]:
        """The last ``lines`` (10000 at most) of the job's CloudWatch log streams, oldest
        first, as (milliseconds, host, message). Raises SageMakerError with CloudWatch's
        words when they cannot be read."""
        from ferry.backends.sagemaker_request import LOG_GROUP

        lines = min(max(lines, 1), 10_000)
        try:
            if self._logs is None:
                import boto3

                self._logs = boto3.client("logs", region_name=self.region, config=self._config)
            streams: list[dict[str, Any]] = []
            asked: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{name}/"}
            while True:
                page = self._logs.describe_log_streams(**asked)
                streams += page.get("logStreams", [])
                if not page.get("nextToken"):
                    break
                asked["nextToken"] = page["nextToken"]
            found: list[tuple[int, str, str]] = []
            for stream in streams:
                tail = stream["logStreamName"].split("/", 1)[-1]  # (algo-1-1700000000)
                host = m.group(0) if (m := re.match(r"algo-\d+", tail)) else tail
                events = self._logs.get_log_events(
                    logGroupName=LOG_GROUP,
                    logStreamName=stream["logStreamName"],
                    limit=lines,
                    startFromHead=False,
                ).get("events", [])
                found += [
                    (int(e.get("timestamp", 0)), host, str(e.get("message", "")).rstrip("\n"))
                    for e in events
                ]
        except Exception as exc:
            raise SageMakerError(f"reading the CloudWatch log of {name}", exc) from None
        return sorted(found)[-lines:]

    def log_tail(self, name: str, lines: int = _TAIL) -> list[str]:
        """The last ``lines`` of the job's CloudWatch log streams, oldest first; ``[]`` when
        there are none or they cannot be read (for a failure's reason)."""
        with contextlib.suppress(FerryError):
            return [message for _, _, message in self.log_lines(name, lines)]
        return []


def _credentials_hint(exc: Exception) -> str:
    if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
        return "set up AWS credentials: aws configure (or aws sso login)"
    if type(exc).__name__ == "NoRegionError":
        return "ferry config set sagemaker.region REGION"
    return "check the AWS credentials (aws sts get-caller-identity) and the network"


class SageMakerError(ProviderError):
    """SageMaker refused a call; its message verbatim, with the fix when one is known."""

    def __init__(self, what: str, exc: Any) -> None:
        error = exc.response.get("Error", {}) if hasattr(exc, "response") else {}
        self.code = str(error.get("Code") or "")
        words = str(error.get("Message") or exc)
        self.quota = self.code == "ResourceLimitExceeded"
        hint = "check the request: ferry run JOB.yaml --backend sagemaker --dry-run"
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


def bucket_region(bucket: str) -> str | None:
    """The region of the S3 bucket ``bucket``, asked once per process; None when it cannot
    be asked now (asked again next time)."""
    if bucket in _bucket_regions:
        return _bucket_regions[bucket]
    with contextlib.suppress(Exception):
        import boto3
        from botocore.config import Config

        endpoint = config.get("storage.s3.endpoint_url")
        short = Config(
            retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=10
        )
        s3 = boto3.client("s3", endpoint_url=str(endpoint) if endpoint else None, config=short)
        found = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
        # (no constraint: us-east-1; "EU": the old name of eu-west-1)
        where = {None: "us-east-1", "": "us-east-1", "EU": "eu-west-1"}.get(found, found)
        _bucket_regions[bucket] = str(where)
        return str(where)
    return None


_bucket_regions: dict[str, str] = {}  # bucket -> its region


def region_of(plan: Plan, outputs: str, offline: bool) -> str | None:
    """Where the job's training jobs run: its bucket's region (SageMaker reads channels
    from its own region; asked of S3, unless ``offline``); else, when the spec names no
    regions, ``sagemaker.region`` (None: the cheapest). Raises SpecError when the spec's
    regions leave the bucket's out."""
    from ferry.storage.locations import parse_uri

    found = None
    if not offline and outputs.startswith("s3://"):
        found = bucket_region(parse_uri(outputs).bucket)
    regions = plan.resources.regions
    if found is not None and regions and found not in regions:
        raise SpecError(
            f"the job's bucket is in {found}, which resources.regions leaves out (a SageMaker "
            "job runs in its bucket's region)",
            f"add {found} to resources.regions, or give outputs in a bucket of those regions",
        )
    if found is not None:
        return found
    return None if regions else region()


def in_region(plan: Plan, where: str | None) -> Plan:
    """The plan, kept to ``where`` when that is known."""
    if not where:
        return plan
    return replace(plan, resources=replace(plan.resources, regions=(where,)))


def epoch_of(at: object) -> float | None:
    """A time boto3 gives (a datetime) in seconds since the epoch; None for none."""
    return float(at.timestamp()) if isinstance(at, datetime.datetime) else None


def latest_words(data: dict[str, Any]) -> str:
    """SageMaker's last words on the job's progress (its StatusMessage)."""
    transitions = data.get("SecondaryStatusTransitions") or []
    if transitions:
        return str(transitions[-1].get("StatusMessage") or "")
    return ""
