"""`ferry check` and the preflight before every cloud submit, against the test servers
(Service Quotas and Service Usage answered by the SageMaker and Vertex AI test servers,
STS, IAM and S3 on moto, the bucket on gcp-storage-emulator): each check passes, fails
with its fix, or says why it was not checked."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error, ferry, ferry_json

pytestmark = [pytest.mark.slow]

T4 = "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus"
T4_SPOT = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_t4_gpus"


def _checks(out: Any) -> dict[str, dict[str, Any]]:
    return {c["what"]: c for c in json.loads(out.stdout)["checks"]}


@pytest.mark.xdist_group("sagemaker")
def test_sagemaker_setup_is_checked_and_a_missing_quota_refuses_the_submit(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    # three applied quotas, two a page: the one wanted is on the second page
    server.quotas.update(
        {
            "ml.c5.xlarge for training job usage": 5,
            "ml.m4.xlarge for training job usage": 1,
            "ml.m5.xlarge for training job usage": 2,
        }
    )
    server.default_quotas.update({"ml.g5.xlarge for spot training job usage": 0})
    (project / "job.yaml").write_text("name: c\ncommand: python train.py\n")
    out = ferry("check", "job.yaml", "--backend", "sagemaker", "--json", cwd=project)
    assert out.returncode == 0, out.stdout + out.stderr
    found = _checks(out)
    assert [c["ok"] for c in found.values()] == [True] * 6, found
    assert "AWS account 123456789012" in found["credentials"]["said"]
    assert found["region"]["said"] == "jobs run in eu-west-1, the bucket's region"
    assert "SageMaker may assume it" in found["role"]["said"]
    assert found["quota"]["said"] == "'ml.m5.xlarge for training job usage' in eu-west-1 is 2"
    # what passed is trusted for a while: a submit now asks nothing again...
    asked = server.quota_calls
    done = ferry("run", "--backend", "sagemaker", "job.yaml", cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert server.quota_calls == asked
    # ...until a setting it depends on changes
    assert ferry("config", "set", "sagemaker.region", "eu-west-1").returncode == 0
    done = ferry("run", "--backend", "sagemaker", "job.yaml", cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert server.quota_calls > asked
    # a quota of 0 (AWS's default, for spot on this instance): the fix, and no submit
    spot = ("--accelerator", "A10G:1", "--spot")
    out = ferry("check", "job.yaml", "--backend", "sagemaker", *spot, cwd=project)
    assert out.returncode == 1
    assert "FAIL quota: 'ml.g5.xlarge for spot training job usage' in eu-west-1 is 0" in out.stdout
    assert (
        "aws service-quotas request-service-quota-increase --service-code sagemaker" in out.stdout
    )
    refused = ferry("run", "--backend", "sagemaker", *spot, "job.yaml", cwd=project)
    line = assert_one_line_error(refused, 2)  # (no plan printed for a job refused)
    assert line.startswith("ferry: quota: 'ml.g5.xlarge for spot training job usage'"), line
    assert len(ferry_json("jobs")) == 2  # (the two above: refused before it was stored)


@pytest.mark.xdist_group("sagemaker")
def test_a_role_sagemaker_may_not_assume_or_no_credentials_are_named(
    on_sagemaker: dict[str, Any], project: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    iam = boto3.client("iam", endpoint_url=s3_endpoint, region_name="us-east-1")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Principal": {"Service": "ec2.amazonaws.com"},
            }
        ],
    }
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(RoleName="ec2-only", AssumeRolePolicyDocument=json.dumps(trust))
    ferry("config", "set", "sagemaker.role", "arn:aws:iam::123456789012:role/ec2-only")
    (project / "job.yaml").write_text("command: python train.py\n")
    out = ferry("check", "job.yaml", "--backend", "sagemaker", "--json", cwd=project)
    role = _checks(out)["role"]
    assert out.returncode == 1 and role["ok"] is False
    assert "does not name sagemaker.amazonaws.com" in role["said"]
    assert role["fix"].startswith("aws iam update-assume-role-policy --role-name ec2-only")
    ferry("config", "set", "sagemaker.role", "arn:aws:iam::123456789012:role/nobody")
    out = ferry("check", "job.yaml", "--backend", "sagemaker", "--json", cwd=project)
    assert "does not exist" in _checks(out)["role"]["said"]
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(project / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(project / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    out = ferry("check", "job.yaml", "--backend", "sagemaker", cwd=project)
    assert out.returncode == 1
    assert "FAIL credentials: no AWS credentials were found" in out.stdout
    assert "fix: run: aws configure" in out.stdout


@pytest.mark.xdist_group("vertex")
def test_vertex_setup_is_checked_quota_and_service_account_included(
    on_vertex: dict[str, Any], project: Path
) -> None:
    server = on_vertex["server"]
    server.quotas.update({T4: {"us-central1": 4}, T4_SPOT: {"us-central1": 0}})
    (project / "job.yaml").write_text(
        "command: python train.py\nresources: {accelerator: 'T4:1', regions: [us-central1]}\n"
    )
    out = ferry("check", "job.yaml", "--backend", "vertex", "--json", cwd=project)
    assert out.returncode == 0, out.stdout + out.stderr
    found = _checks(out)
    assert found["project"]["said"] == "test-project" and found["bucket"]["ok"] is True
    assert found["quota"]["said"] == f"{T4} in us-central1 is 4"
    # spot uses the preemptible quota, here 0
    out = ferry("check", "job.yaml", "--backend", "vertex", "--spot", "--json", cwd=project)
    quota = _checks(out)["quota"]
    assert out.returncode == 1 and quota["ok"] is False
    assert quota["said"] == f"{T4_SPOT} in us-central1 is 0, and the job needs 1"
    assert "console.cloud.google.com/iam-admin/quotas?project=test-project" in quota["fix"]
    # a service account that does not exist
    ferry("config", "set", "vertex.service_account", "trainer@test-project.iam.gserviceaccount.com")
    out = ferry("check", "job.yaml", "--backend", "vertex", "--json", cwd=project)
    account = _checks(out)["service account"]
    assert account["ok"] is False and "does not exist" in account["said"]
    server.service_accounts.add("trainer@test-project.iam.gserviceaccount.com")
    out = ferry("check", "job.yaml", "--backend", "vertex", "--json", cwd=project)
    assert out.returncode == 0 and _checks(out)["service account"]["ok"] is True


@pytest.mark.xdist_group("vertex")
def test_a_bucket_that_cannot_be_written_refuses_the_submit(
    on_vertex: dict[str, Any], project: Path
) -> None:
    ferry("config", "set", "outputs_root", "gs://no-such-bucket-here/runs")
    refused = ferry("run", "--backend", "vertex", "--", "python", "train.py", cwd=project)
    line = assert_one_line_error(refused, 2)  # (no plan printed for a job refused)
    assert line == (
        "ferry: bucket: gs://no-such-bucket-here does not exist (create it: gcloud storage "
        "buckets create gs://no-such-bucket-here)"
    ), line
    assert ferry_json("jobs") == []


def test_a_backend_without_checks_says_so(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text("command: python train.py\n")
    out = ferry("check", "job.yaml", "--backend", "local", cwd=project)
    line = assert_one_line_error(out, 2)
    assert "the local backend has nothing to check" in line
