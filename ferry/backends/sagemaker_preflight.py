"""The sagemaker backend's preflight (:mod:`ferry.backends.preflight`): AWS credentials
(STS), the region, the bucket, the execution role (IAM: it exists and SageMaker may
assume it), the instance in the region, and its quota for training jobs (Service
Quotas: "<instance> for training job usage", or "for spot training job usage")."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ferry import config
from ferry.backends.preflight import TIMEOUT, Check, bucket_writable
from ferry.errors import FerryError

if TYPE_CHECKING:
    from ferry.catalog.optimizer import Option
    from ferry.store.plan import Plan

QUOTAS_PAGE = "https://console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas"
LISTING = 20.0  # s the quota listing may take in all (SageMaker has many quotas)


def checks(plan: Plan, outputs: str) -> list[Check]:
    """Every check, in order; later ones that need an earlier one's answer say so."""
    from ferry.backends.cloud import choose
    from ferry.backends.sagemaker_api import in_region, region_of
    from ferry.backends.sagemaker_names import sagemaker_type

    found = [_credentials()]
    try:
        where = region_of(plan, outputs, offline=False)
    except FerryError as exc:
        return [*found, Check("region", False, exc.message, exc.hint or "")]
    found.append(_region(plan, outputs, where))
    found.append(bucket_writable(outputs))
    try:
        option = choose(in_region(plan, where), "sagemaker")
    except FerryError as exc:
        found.append(_role(where or "us-east-1"))
        found.append(Check("instance", False, exc.message, exc.hint or ""))
        return found
    there = option.offering.region
    found.append(_role(there))
    kind = sagemaker_type(option.offering.instance_type)
    found.append(Check("instance", True, f"{kind} in {there}, {option.price:.2f} USD/h"))
    found.append(_quota(option, there, plan.resources.nodes))
    return found


def _region(plan: Plan, outputs: str, where: str | None) -> Check:
    """Where the jobs run, and what said so."""
    from ferry.backends.sagemaker_api import bucket_region
    from ferry.storage.locations import parse_uri

    if bucket_region(parse_uri(outputs).bucket) is not None:
        return Check("region", True, f"jobs run in {where}, the bucket's region")
    if where is not None:
        return Check(
            "region",
            True,
            f"jobs run in {where} (sagemaker.region or AWS_REGION: the bucket's region "
            "could not be read, and the job's channels must be in the same region)",
        )
    if plan.resources.regions:
        regions = ", ".join(plan.resources.regions)
        return Check(
            "region",
            None,
            f"the bucket's region could not be read; jobs run in resources.regions ({regions}), "
            "which must hold the bucket",
        )
    return Check(
        "region",
        False,
        "the bucket's region could not be read, and no region is set",
        "ferry config set sagemaker.region REGION (the bucket's)",
    )


def _client(service: str, region: str | None = None) -> Any:
    import boto3
    from botocore.config import Config

    short = Config(
        retries={"max_attempts": 2, "mode": "standard"},
        connect_timeout=TIMEOUT,
        read_timeout=TIMEOUT,
    )
    return boto3.client(service, region_name=region, config=short)


def _credentials() -> Check:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound

    try:
        session = boto3.Session()
        found = session.get_credentials()
    except ProfileNotFound as exc:
        return Check(
            "credentials",
            False,
            f"AWS profile not found ({exc})",
            "run: aws configure --profile NAME, or unset AWS_PROFILE",
        )
    if found is None:
        return Check(
            "credentials",
            False,
            "no AWS credentials were found",
            "run: aws configure (or aws sso login, or set AWS_PROFILE)",
        )
    try:
        identity = _client("sts", session.region_name or "us-east-1").get_caller_identity()
    except ClientError as exc:
        if _code(exc) in _REJECTED:
            return Check(
                "credentials",
                False,
                f"AWS did not take the credentials: {_words(exc)}",
                "check them: aws sts get-caller-identity (or aws sso login again)",
            )
        return Check("credentials", None, f"STS did not say ({_words(exc)})")
    except BotoCoreError as exc:  # (the network, an endpoint out of reach)
        return Check("credentials", None, f"STS could not be reached ({exc})")
    account, arn = identity.get("Account"), identity.get("Arn")
    return Check("credentials", True, f"AWS account {account} as {arn}")


# what STS answers for credentials it does not take
_REJECTED = {
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "AccessDenied",
}


def _role(where: str) -> Check:
    role = str(config.get("sagemaker.role") or "")
    if not role:
        return Check(
            "role",
            False,
            "no execution role is set for SageMaker jobs",
            "ferry config set sagemaker.role arn:aws:iam::ACCOUNT:role/NAME",
        )
    name = role.rsplit("/", 1)[-1]
    try:
        found = _client("iam", where).get_role(RoleName=name)["Role"]
    except Exception as exc:
        code = _code(exc)
        if code == "NoSuchEntity":
            return Check(
                "role",
                False,
                f"the role {role} does not exist",
                "create it (IAM > Roles > AWS service: SageMaker), or set another: "
                "ferry config set sagemaker.role ARN",
            )
        return Check("role", None, f"{role} could not be read ({_words(exc)})")
    trust = found.get("AssumeRolePolicyDocument") or {}
    if isinstance(trust, str):  # (URL-encoded JSON in IAM's raw answer)
        try:
            trust = json.loads(unquote(trust))
        except ValueError:
            trust = {}
    if "sagemaker.amazonaws.com" not in json.dumps(trust):
        return Check(
            "role",
            False,
            f"SageMaker may not assume the role {role} (its trust policy does not name "
            "sagemaker.amazonaws.com)",
            f"aws iam update-assume-role-policy --role-name {name} --policy-document "
            '\'{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":'
            '{"Service":"sagemaker.amazonaws.com"},"Action":"sts:AssumeRole"}]}\'',
        )
    return Check("role", True, f"{role} exists and SageMaker may assume it")


def _quota(option: Option, where: str, nodes: int) -> Check:
    from ferry.backends.sagemaker_names import sagemaker_type

    kind = sagemaker_type(option.offering.instance_type)
    usage = "spot training job usage" if option.spot else "training job usage"
    wanted = f"{kind} for {usage}"
    try:
        quota = _find_quota(_client("service-quotas", where), wanted)
    except Exception as exc:
        return Check("quota", None, f"Service Quotas did not answer ({_words(exc)})")
    if quota is None:
        return Check("quota", None, f"Service Quotas lists no quota {wanted!r} in {where}")
    value = float(quota.get("Value") or 0)
    if value < nodes:
        code = quota.get("QuotaCode", "CODE")
        return Check(
            "quota",
            False,
            f"{wanted!r} in {where} is {value:g}, and the job needs {nodes}",
            f"aws service-quotas request-service-quota-increase --service-code sagemaker "
            f"--quota-code {code} --desired-value {nodes} --region {where}; or {QUOTAS_PAGE}",
        )
    return Check("quota", True, f"{wanted!r} in {where} is {value:g}")


def _find_quota(client: Any, name: str) -> dict[str, Any] | None:
    """The quota called ``name``: as applied to the account, else AWS's default. Raises
    TimeoutError when the listing takes longer than ``LISTING``."""
    import time

    deadline = time.monotonic() + LISTING
    for call in (client.list_service_quotas, client.list_aws_default_service_quotas):
        token = None
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the listing took more than {LISTING:g} s")
            asked: dict[str, Any] = {"ServiceCode": "sagemaker", "MaxResults": 100}
            if token:
                asked["NextToken"] = token
            page = call(**asked)
            for quota in page.get("Quotas", []):
                if quota.get("QuotaName") == name:
                    found: dict[str, Any] = quota
                    return found
            token = page.get("NextToken")
            if not token:
                break
    return None


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or "")


def _words(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Message") or exc)
