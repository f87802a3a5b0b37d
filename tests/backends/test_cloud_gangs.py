"""Jobs of several nodes on both clouds' doubles: a Vertex AI custom job with a second
worker pool, a SageMaker training job with two instances. Each machine runs Ferry's
runner for its node (ferry/runner/cloud_gang.py), the ranks meet over gloo by the names
the provider gives the machines, and node 0 keeps the gang's record in the bucket
(tests/backends/*_server.py say what the doubles simulate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conftest import GANG, provider_job
from tests.conftest import ferry, job_logs, job_status, submit, wait_for

pytestmark = [pytest.mark.slow]


def _events(job_id: str) -> str:
    return " | ".join(e["message"] for e in job_status(job_id)["events"])


def _gang_spec(project: Path, args: str, extra: str = "") -> None:
    (project / "gang.py").write_text(GANG)
    (project / "job.yaml").write_text(
        f"name: gang\ncommand: [python, gang.py{args}]\nresources: {{nodes: 2}}\n"
        f"secrets: [HIDDEN]\n{extra}"
    )


def test_a_gang_spans_two_machines_of_the_provider(
    cloud: tuple[str, dict[str, Any]], project: Path
) -> None:
    name, place = cloud
    server, fs, bucket = place["server"], place["fs"], place["bucket"]
    _gang_spec(project, "")
    job_id = submit("--backend", name, "job.yaml", cwd=project, env={"HIDDEN": "s3cr3t"})
    wait_for(lambda: job_status(job_id)["status"] == "SUCCEEDED", 240, "the gang to finish")
    log = job_logs(job_id)
    assert "[0] rank 0 of 2 on node 0: sum 3" in log, log  # gloo across the two machines
    assert "[1] rank 1 of 2 on node 1: sum 3" in log, log
    assert "rank 1 of 2 on node 1" in job_logs(job_id, "--rank", "1")
    hosts = "workerpool0-0, workerpool1-0" if name == "vertex" else "algo-1, algo-2"
    assert f"the gang's 2 nodes: {hosts}; MASTER_ADDR {hosts.split(',')[0]}:" in _events(job_id)
    sent = provider_job(name, server, job_id).body
    if name == "vertex":  # the primary replica, and a second pool for the other node
        pools = sent["jobSpec"]["workerPoolSpecs"]
        assert [p["replicaCount"] for p in pools] == ["1", "1"], pools
        assert pools[0]["machineSpec"] == pools[1]["machineSpec"]
    else:
        assert sent["ResourceConfig"]["InstanceCount"] == 2
    # each node's runner kept its share of the record; the secrets reached both, and
    # left the bucket once read
    runs = fs.find(f"{bucket}/.ferry/runs/")
    for node in (0, 1):
        assert any(f"/node-{node}/state.json" in path for path in runs), runs
    assert not any(path.endswith("secrets.json") for path in runs), runs
    assert "s3cr3t" not in json.dumps(sent)


def test_a_failing_node_stops_the_gang_and_is_named(
    cloud: tuple[str, dict[str, Any]], project: Path
) -> None:
    name, _ = cloud
    _gang_spec(project, ", fail", "limits: {stop_grace: 5s}\n")
    job_id = submit("--backend", name, "job.yaml", cwd=project, env={"HIDDEN": "x"})
    wait_for(lambda: job_status(job_id)["status"] == "FAILED", 240, "the gang to fail")
    status = job_status(job_id)
    assert status["exit_code"] == 3, status
    assert status["reason"].startswith("node 1: rank 1: exit code 3"), status["reason"]
    assert "rank 1 gives up" in status["reason"]
    assert "failed: stopping the gang's 1 other nodes" in _events(job_id)


def test_cancel_stops_every_machine_of_the_gang(
    cloud: tuple[str, dict[str, Any]], project: Path
) -> None:
    name, place = cloud
    _gang_spec(project, ", '400'")
    job_id = submit("--backend", name, "job.yaml", cwd=project, env={"HIDDEN": "x"})
    wait_for(lambda: "starting at 0" in job_logs(job_id, "--rank", "1"), 240, "both nodes")
    assert ferry("cancel", job_id).returncode == 0
    wait_for(lambda: job_status(job_id)["status"] == "CANCELLED", 90, "the cancel")
    assert "notice: stopping the gang's 2 nodes" in _events(job_id)
    made = provider_job(name, place["server"], job_id)
    wait_for(lambda: all(p.poll() is not None for p in made.procs), 60, "every machine's end")
    assert len(made.procs) == 2


def test_dry_run_shows_a_gangs_machines_and_a_tpu_slice_is_not_a_gang(
    home: Path, project: Path
) -> None:
    from tests.conftest import assert_one_line_error

    (project / "job.yaml").write_text(
        "name: g\ncommand: python train.py\nresources: {nodes: 4, accelerator: 'A100:1'}\n"
    )
    out = ferry("run", "--backend", "vertex", "--dry-run", "job.yaml", cwd=project)
    assert out.returncode == 0, out.stderr
    pools = json.loads(out.stdout)["request"]["body"]["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "3"]
    assert pools[1]["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_A100"
    out = ferry("run", "--backend", "sagemaker", "--dry-run", "job.yaml", cwd=project)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["request"]["body"]["ResourceConfig"]["InstanceCount"] == 4
    (project / "job.yaml").write_text(
        "name: g\ncommand: python train.py\nresources: {nodes: 2, accelerator: tpu-v5e-8}\n"
    )
    refused = ferry("run", "--backend", "vertex", "--dry-run", "job.yaml", cwd=project)
    said = assert_one_line_error(refused, 1)
    assert "runs a TPU slice" in said and "nodes: 1" in said, said
