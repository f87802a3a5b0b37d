"""What the backends' tests share: the job script they run, the test session's Ray head,
its Vertex AI test server (tests/backends/vertex_server.py) and its SageMaker test server
(tests/backends/sagemaker_server.py)."""

from __future__ import annotations

import contextlib
import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.sagemaker_server import SageMakerServer
from tests.backends.vertex_server import VertexServer
from tests.conftest import ferry

# The job the backends' tests run: `train.py [ok|long|exitN] [RELEASE]`. It prints what it
# was given (variables, hyperparameters, its input), reports a loss each step, keeps its
# step in step.txt, answers the notice (SIGTERM) with "notice at N" and exit 143, and
# writes its model (rank 0) at the end.
SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from ferry import runtime
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    keys = ("FERRY_JOB_ID", "FERRY_ATTEMPT", "FERRY_MODEL_DIR", "SM_MODEL_DIR", "TOKEN",
            "RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")
    print(json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
    print("hyperparameters", json.dumps(runtime.hparams()), flush=True)
    if mode.startswith("exit"):
        print("about to fail", file=sys.stderr, flush=True)
        sys.exit(int(mode[4:]))
    data = os.environ.get("FERRY_INPUT_DATA")
    if data:
        print("input says", Path(data, "numbers.txt").read_text().strip(), flush=True)
    start = int(Path("step.txt").read_text()) if Path("step.txt").exists() else 0
    print("starting at", start, flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    # long: 50 steps; with a release file named, until that file exists (a test acts on a
    # job that is surely still running, then lets it end)
    release = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    steps = (1500 if release else 50) if mode == "long" else 3
    for step in range(start, steps):
        if stop:
            print("notice at", step, flush=True)
            sys.exit(143)
        if release is not None and release.exists():
            break
        runtime.report(loss=1.0 / (step + 1), step=step)
        Path("step.tmp").write_text(str(step + 1))
        os.replace("step.tmp", "step.txt")  # whole whenever it is taken
        time.sleep(0.2 if mode == "long" else 0.05)
    if os.environ.get("RANK", "0") == "0":
        Path(os.environ["FERRY_MODEL_DIR"], "model.txt").write_text("weights")
    print("done", flush=True)
    """
)


# A gang over two nodes: each rank adds its rank + 1 through gloo (a real all-reduce across
# the nodes), says so, then steps; rank 0 keeps its step in step.txt (checkpoint.paths), so
# a resumed gang starts after it.
GANG = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    node = os.environ["NODE_RANK"]
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"rank {rank} of {world} on node {node}: sum {total.item():g} gpus {gpus}", flush=True)
    start = int(Path("step.txt").read_text()) if Path("step.txt").exists() else 0
    print(f"starting at {start}", flush=True)
    if len(sys.argv) > 1 and sys.argv[1] == "fail":
        if rank == 1:
            print("rank 1 gives up", flush=True)
            # what it leaves holding its output (not its gloo socket) keeps node 1's runner
            # a few seconds longer than node 0's, whose rank 0 fails at once, its peer gone
            import subprocess
            deaf = "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(4)"
            subprocess.Popen([sys.executable, "-c", deaf])
            time.sleep(0.5)
            sys.exit(3)
        dist.barrier()  # fails once rank 1 has left, or waits: the gang must be stopped
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for step in range(start, steps):
        time.sleep(0.2)
        if rank == 0:  # renamed into place: whole whenever it is taken
            Path("step.tmp").write_text(str(step + 1))
            os.replace("step.tmp", "step.txt")
    dist.destroy_process_group()
    print("done", flush=True)
    """
)


def loss_points(job_id: str) -> int:
    """The losses the job has reported (or printed) so far."""
    out = ferry("metrics", job_id, "--json")
    if out.returncode != 0:
        return 0
    return sum(m["points"] for m in json.loads(out.stdout) if m["name"] == "loss")


def grid_sweep(project: Path, backend: str, param: str, timeout: float = 240) -> list[Any]:
    """``ferry sweep job.yaml`` of ``project`` on ``backend``: a grid over ``param`` (one
    ``--param``), two trials at once, ``loss:min``. Its trials, best first, each checked
    to have run as a job of that backend."""
    done = ferry(
        "sweep", "job.yaml", "--backend", backend, "--param", param, "--sampler", "grid",
        "--parallel", "2", "--objective", "loss:min", cwd=project, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [listed] = json.loads(ferry("sweep", "ls", "--json").stdout)
    status = json.loads(ferry("sweep", "status", listed["sweep"], "--json").stdout)
    for trial in status["trials"]:  # each an ordinary job of that backend
        job = json.loads(ferry("status", trial["job"], "--json").stdout)
        assert job["backend"] == backend, job
    trials: list[Any] = status["trials"]
    return trials


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head on this machine, started as Ferry starts one (``ray.address`` unset):
    127.0.0.1, two declared T4 GPUs."""
    from ferry.backends.ray_cluster import LocalHead

    home = tmp_path_factory.mktemp("ray-home")
    env = {**os.environ, "FERRY_HOME": str(home)}
    for key, value in (("local.gpus", "2"), ("local.gpu_type", "T4"), ("ray.idle", "0")):
        assert ferry("config", "set", key, value, env=env).returncode == 0
    before = os.environ.get("FERRY_HOME")
    os.environ["FERRY_HOME"] = str(home)
    try:
        url = LocalHead().ensure()
    finally:
        if before is None:
            del os.environ["FERRY_HOME"]
        else:
            os.environ["FERRY_HOME"] = before
    yield url
    os.environ["FERRY_HOME"] = str(home)
    try:
        LocalHead().stop()
    finally:
        if before is None:
            del os.environ["FERRY_HOME"]
        else:
            os.environ["FERRY_HOME"] = before


@pytest.fixture(scope="session")
def vertex_server(tmp_path_factory: pytest.TempPathFactory, gcs_endpoint: str) -> Iterator[Any]:
    server = VertexServer(tmp_path_factory.mktemp("vertex"), gcs_endpoint, grace=5.0)
    yield server
    server.close()


@pytest.fixture
def on_vertex(
    home: Path,
    project: Path,
    vertex_server: VertexServer,
    gcs_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """This test's FERRY_HOME set for the test server, outputs in a bucket of its own."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

    gs = gcsfs.GCSFileSystem(token="anon", project="test", skip_instance_cache=True)
    bucket = f"v{os.urandom(4).hex()}"
    gs.mkdir(bucket)
    for key, value in (
        ("vertex.endpoint", vertex_server.endpoint),
        ("vertex.project", "test-project"),
        ("outputs_root", f"gs://{bucket}/runs"),
        ("outputs.sync_interval", "1s"),
    ):
        assert ferry("config", "set", key, value).returncode == 0
    vertex_server.script.clear()
    vertex_server.quotas.clear()
    vertex_server.service_accounts.clear()
    (project / "train.py").write_text(SCRIPT)
    return {"gs": gs, "fs": gs, "protocol": "gs", "bucket": bucket, "server": vertex_server}


@pytest.fixture(
    params=[
        pytest.param("vertex", marks=pytest.mark.xdist_group("vertex")),
        pytest.param("sagemaker", marks=pytest.mark.xdist_group("sagemaker")),
    ]
)
def cloud(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Each cloud backend, with its place ready (on_vertex, on_sagemaker): its name and
    that fixture's value."""
    name = str(request.param)
    return name, request.getfixturevalue(f"on_{name}")


def ready(request: pytest.FixtureRequest, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ready the place backend ``name``'s jobs go to: the session's Ray head (through
    RAY_ADDRESS), or a cloud's test server with a bucket of the test's own."""
    if name == "ray":
        monkeypatch.setenv("RAY_ADDRESS", request.getfixturevalue("ray_head"))
    elif name in ("vertex", "sagemaker"):
        request.getfixturevalue(f"on_{name}")


def provider_job(name: str, server: Any, job_id: str) -> Any:
    """The last provider job (custom job, training job) made for Ferry's job ``job_id`` on
    the cloud ``name``'s test server."""
    if name == "vertex":
        found = [j for j in server.jobs.values() if j.body["labels"]["ferry-job"] == job_id]
    else:
        tag = {"Key": "ferry-job", "Value": job_id}
        found = [j for j in server.jobs.values() if tag in j.body["Tags"]]
    assert found, f"no provider job for {job_id}"
    return found[-1]


@pytest.fixture(scope="session")
def sagemaker_server(
    tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str
) -> Iterator[SageMakerServer]:
    server = SageMakerServer(tmp_path_factory.mktemp("sagemaker"), s3_endpoint, grace=5.0)
    yield server
    server.close()


@pytest.fixture
def on_sagemaker(
    home: Path,
    project: Path,
    sagemaker_server: SageMakerServer,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """This test's FERRY_HOME set for the test server, outputs in a bucket of its own; AWS's
    own variables point boto3's CloudWatch Logs at moto."""
    import boto3

    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", s3_endpoint),
        ("AWS_ENDPOINT_URL_STS", s3_endpoint),
        ("AWS_ENDPOINT_URL_IAM", s3_endpoint),
        ("AWS_ENDPOINT_URL_SERVICE_QUOTAS", sagemaker_server.endpoint),
    ):
        monkeypatch.setenv(key, value)
    # the execution role, which SageMaker may assume (IAM on moto)
    iam = boto3.client("iam", endpoint_url=s3_endpoint, region_name="us-east-1")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sagemaker.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(RoleName="ferry-tests", AssumeRolePolicyDocument=json.dumps(trust))
    # the bucket is in eu-west-1, this machine's AWS region us-east-1: jobs go to the bucket
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="eu-west-1")
    bucket = f"sm-{os.urandom(4).hex()}"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    for key, value in (
        ("sagemaker.endpoint", sagemaker_server.endpoint),
        ("sagemaker.role", "arn:aws:iam::123456789012:role/ferry-tests"),
        ("storage.s3.endpoint_url", s3_endpoint),
        ("outputs_root", f"s3://{bucket}/runs"),
        ("outputs.sync_interval", "1s"),
    ):
        assert ferry("config", "set", key, value).returncode == 0
    sagemaker_server.script.clear()
    sagemaker_server.quotas.clear()
    sagemaker_server.default_quotas.clear()
    (project / "train.py").write_text(SCRIPT)
    import s3fs

    fs = s3fs.S3FileSystem(
        key="testing", secret="testing", client_kwargs={"endpoint_url": s3_endpoint}
    )
    return {"s3": s3, "fs": fs, "protocol": "s3", "bucket": bucket, "server": sagemaker_server}
