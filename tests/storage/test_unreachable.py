"""A bucket Ferry cannot use fails fast, in one line that names the URI, the cause and the
fix: a name that does not resolve (the real Google and AWS hosts: no network here), a closed
port, missing or wrong credentials, a bucket that does not exist; at submit, in `ferry
outputs`, and in a running job's supervisor."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error, ferry, ferry_json, job_status, submit, wait_for

pytestmark = pytest.mark.slow

BOUND = 15.0  # seconds within which a failure must be known


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _timed(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[Any, float]:
    began = time.monotonic()
    result = ferry(*args, cwd=cwd, env=env, timeout=120)
    return result, time.monotonic() - began


def _offline_google(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Google endpoint (which does not resolve here), with no credentials."""
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", "/nonexistent")  # no gcloud login here


def test_a_google_bucket_without_network_fails_fast_in_one_line(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _offline_google(monkeypatch)
    for flag, value in (("--outputs", "gs://some-bucket/x"), ("--input", "d=gs://some-bucket/x")):
        result, took = _timed("run", flag, value, "--", "true", cwd=project)
        line = assert_one_line_error(result, 1)
        assert took < BOUND, (took, line)
        assert "gs://some-bucket/x" in line and "DNS lookup of storage.googleapis.com" in line
        assert "storage.gcs.endpoint_url" in line  # the fix for an emulator


def test_broken_google_credentials_are_named(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _offline_google(monkeypatch)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(project / "missing-key.json"))
    result, took = _timed("run", "--outputs", "gs://some-bucket/x", "--", "true", cwd=project)
    line = assert_one_line_error(result, 1)
    assert took < BOUND
    assert "the credentials for gs://some-bucket/x" in line and "missing-key.json" in line


def test_a_closed_port_is_named_for_each_store(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;",
    )
    for store in ("s3", "gcs"):
        set_it = ferry("config", "set", f"storage.{store}.endpoint_url", f"http://127.0.0.1:{port}")
        assert set_it.returncode == 0, set_it.stderr
    for uri in ("s3://b/runs", "gs://b/runs", "az://b/runs"):
        for flag, value in (("--outputs", uri), ("--input", f"d={uri}")):
            result, took = _timed("run", flag, value, "--", "true", cwd=project)
            line = assert_one_line_error(result, 1)
            assert took < BOUND, (took, line)
            assert f"cannot reach {uri}: the connection was refused at 127.0.0.1:{port}" in line


def test_an_endpoint_must_be_a_url(home: Path) -> None:
    result = ferry("config", "set", "storage.gcs.endpoint_url", "localhost:4443")
    assert "expected an http:// or https:// URL" in assert_one_line_error(result, 2)


def test_missing_buckets_and_wrong_credentials_against_the_emulators(
    stores: dict[str, Any], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = stores["bucket"]
    for scheme in ("s3", "gs", "az"):
        result = ferry(
            "run", "--input", f"d={scheme}://no-such-{bucket}/x", "--", "true", cwd=project
        )
        line = assert_one_line_error(result, 2)
        assert f"input 'd': the bucket {scheme}://no-such-{bucket} does not exist" in line
    # Azurite checks the account key's signature
    wrong = os.environ["AZURE_STORAGE_CONNECTION_STRING"].replace("AccountKey=E", "AccountKey=F")
    result, took = _timed(
        "run", "--outputs", f"az://{bucket}/runs", "--", "true", cwd=project,
        env={"AZURE_STORAGE_CONNECTION_STRING": wrong},
    )  # fmt: skip
    line = assert_one_line_error(result, 1)
    assert took < BOUND and f"the credentials for az://{bucket}/runs" in line
    assert "AZURE_STORAGE_CONNECTION_STRING" in line
    # no AWS credentials anywhere: botocore says so before it sends anything
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(project / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(project / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result, took = _timed("run", "--outputs", f"s3://{bucket}/runs", "--", "true", cwd=project)
    line = assert_one_line_error(result, 1)
    assert took < BOUND and f"the credentials for s3://{bucket}/runs" in line
    assert "AWS_ACCESS_KEY_ID" in line
    # the outputs_root setting is checked as --outputs is, and named as the user wrote it
    assert ferry("config", "set", "outputs_root", f"s3://{bucket}/runs").returncode == 0
    for args in (("run",), ("run", "--detach")):
        result, took = _timed(*args, "--", "true", cwd=project)
        line = assert_one_line_error(result, 1)
        assert took < BOUND, (took, line)
        assert line.startswith(f"ferry: outputs (outputs_root s3://{bucket}/runs): "), line
        assert f"the credentials for s3://{bucket}/runs/{{job_id}}" in line, line
    assert ferry_json("jobs") == []  # nothing was queued


def test_ferry_outputs_of_a_job_whose_bucket_is_gone_from_reach(
    stores: dict[str, Any], project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = stores["bucket"]
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'm')\n"
    )
    for scheme in ("s3", "gs"):
        outputs = f"{scheme}://{bucket}/runs/{{job_id}}"
        run = ferry("run", "--outputs", outputs, "--", "python", "save.py", cwd=project)
        assert run.returncode == 0, run.stderr
    jobs = {job["outputs"].split(":")[0]: job["id"] for job in ferry_json("jobs")}
    port = _closed_port()
    assert (
        ferry("config", "set", "storage.s3.endpoint_url", f"http://127.0.0.1:{port}").returncode
        == 0
    )
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")  # the real Google host: no DNS here
    for scheme, cause in (("s3", "the connection was refused"), ("gs", "DNS lookup")):
        uri = f"{scheme}://{bucket}/runs/{jobs[scheme]}"
        for extra in ((), ("--download", str(tmp_path / scheme))):
            result, took = _timed("outputs", jobs[scheme], *extra, cwd=project)
            line = assert_one_line_error(result, 1)
            assert took < BOUND, (took, line)
            assert f"cannot reach {uri}: {cause}" in line


def test_a_bucket_lost_during_the_job_fails_it_with_one_sentence(
    stores: dict[str, Any], project: Path, tmp_path: Path
) -> None:
    bucket = stores["bucket"]
    (project / "gate.py").write_text(
        "import os, time\n"
        "g = os.path.join(os.environ['FERRY_TEST_TMP'], 'go')\n"
        "while not os.path.exists(g): time.sleep(0.05)\n"
        "open(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'm')\n"
    )
    job_id = submit(
        "--outputs", f"s3://{bucket}/runs/{{job_id}}", "--", "python", "gate.py", cwd=project
    )
    wait_for(lambda: job_status(job_id)["status"] == "RUNNING", 30, "the job to run")
    port = _closed_port()  # the endpoint moves away while the job runs
    assert (
        ferry("config", "set", "storage.s3.endpoint_url", f"http://127.0.0.1:{port}").returncode
        == 0
    )
    (tmp_path / "go").write_text("")
    began = time.monotonic()
    status = wait_for(
        lambda: (s := job_status(job_id))["status"] in ("SUCCEEDED", "FAILED") and s, 60, "the end"
    )
    assert time.monotonic() - began < BOUND
    assert status["status"] == "FAILED"
    reason = status["reason"]
    assert f"outputs could not be written to s3://{bucket}/runs/{job_id}" in reason
    assert "the connection was refused" in reason and "\n" not in reason


def test_the_gcs_endpoint_setting_reaches_an_emulator(
    stores: dict[str, Any], gcs_endpoint: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md: `ferry config set storage.gcs.endpoint_url URL` instead of
    STORAGE_EMULATOR_HOST, with no Google credentials here (anonymous, as emulators want)."""
    gs, bucket = stores["gs"], stores["bucket"]
    _offline_google(monkeypatch)
    assert ferry("config", "set", "storage.gcs.endpoint_url", gcs_endpoint).returncode == 0
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'gcs')\n"
    )
    outputs = f"gs://{bucket}/runs/{{job_id}}"
    result = ferry("run", "--outputs", outputs, "--", "python", "save.py", cwd=project)
    assert result.returncode == 0, result.stderr
    job_id = ferry_json("jobs")[0]["id"]
    assert ferry_json("outputs", job_id)["complete"] is True
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)  # where the fixture's gcsfs looks
    gs.invalidate_cache()
    assert gs.cat_file(f"{bucket}/runs/{job_id}/model/m.bin") == b"gcs"
