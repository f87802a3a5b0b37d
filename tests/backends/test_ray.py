"""The ray backend against a real Ray head on this machine (started once per test session
by Ferry's own code, with two declared T4 GPUs), through the real `ferry` command: the
runner as the Ray job's entrypoint, the contract, inputs and outputs (a folder, and S3
through moto's server), gangs, cancel, preemption and resume, a runner killed under its
job, and an attempt that no node can take."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.backends.ray_cluster import dashboard_url
from ferry.backends.ray_jobs import zip_folder
from tests.backends.conftest import GANG, SCRIPT, grid_sweep
from tests.conftest import (
    assert_one_line_error,
    ferry,
    ferry_json,
    job_status,
    showing,
    submit,
    wait_for,
)
from tests.conftest import job_logs as _logs
from tests.conftest import until_logged as _until_logged
from tests.conftest import wait_status_slowly as wait_status

pytestmark = pytest.mark.xdist_group("ray")  # one head, on one worker


@pytest.fixture
def ray_project(home: Path, project: Path, ray_head: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose jobs go to the session's head (through RAY_ADDRESS)."""
    monkeypatch.setenv("RAY_ADDRESS", ray_head)
    (project / "train.py").write_text(SCRIPT)
    return project


def _submit_spec(project: Path, text: str) -> str:
    """Submit the job ``text`` specifies (on the ray backend)."""
    spec = project / "job.yaml"
    spec.write_text(f"backend: ray\n{text}")
    return submit(str(spec), cwd=project)


def _ray_job(ray_head: str, job_id: str, attempt: int = 1) -> dict[str, object]:
    """What the Jobs API says of an attempt's Ray job (its handle: submission id@cluster)."""
    handle = job_status(job_id)["attempts"][attempt - 1]["handle"]
    submission_id, _, where = handle.partition("@")
    assert where == ray_head and submission_id.startswith(f"ferry-{job_id}-{attempt}-")
    with urllib.request.urlopen(f"{ray_head}/api/jobs/{submission_id}", timeout=10) as answer:
        data: dict[str, object] = json.loads(answer.read())
    return data


def _started(job_id: str) -> None:
    _until_logged(job_id, "starting at 0", 60, "the job to start")


def test_a_job_runs_as_a_ray_job_under_the_contract(ray_project: Path, ray_head: str) -> None:
    result = ferry(
        "run",
        "--backend",
        "ray",
        "--secret",
        "TOKEN",
        "--",
        "python",
        "train.py",
        cwd=ray_project,
        env={"TOKEN": "s3cr3t-value"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    job_id = ferry_json("jobs")[0]["id"]
    status = job_status(job_id)
    assert status["status"] == "SUCCEEDED", status
    first = json.loads(_logs(job_id).splitlines()[0])
    assert first["FERRY_JOB_ID"] == job_id and first["FERRY_ATTEMPT"] == "1"
    assert first["TOKEN"] == "s3cr3t-value"  # the secret reached the job ...
    assert first["SM_MODEL_DIR"].endswith(f"{job_id}/model")
    assert "done" in _logs(job_id)
    # ... through Ray, not through the order or the record (the script printed it)
    runs = Path(status["attempts"][0]["log_path"]).parent / "runs" / "1"
    assert (runs / "order.json").exists()
    for path in runs.rglob("*"):
        if path.is_file() and path.parent.name != "log":
            assert b"s3cr3t-value" not in path.read_bytes(), path
    # the Ray job: the runner as entrypoint, with this interpreter, the code as working_dir
    ray_job = _ray_job(ray_head, job_id)
    # the secret went through the job's private folder (read and removed by the runner),
    # not through Ray's record of the job, which anyone reaching the cluster can read
    assert "TOKEN" not in json.dumps(ray_job["runtime_env"])
    assert not (runs / "secrets.json").exists()
    assert ray_job["status"] == "SUCCEEDED"
    assert " -m ferry.runner " in str(ray_job["entrypoint"])
    assert str(ray_job["entrypoint"]).startswith(os.path.dirname(sys.executable))
    # outputs: the model, and the manifest lists it
    outputs = Path(status["outputs"])
    assert (outputs / "model" / "model.txt").read_text() == "weights"
    manifest = json.loads((outputs / "manifest.json").read_text())
    assert "model/model.txt" in {f["path"] for f in manifest["files"]}
    metrics = ferry_json("metrics", job_id)
    assert any(m["name"] == "loss" for m in metrics), metrics
    # Ray's own log of the job (its Jobs API's): a second source, Ray's words on starting
    # the runner (the job's own output goes to the run folder)
    provider = ferry("logs", job_id, "--provider")
    assert provider.returncode == 0, provider
    assert "Running entrypoint for job ferry-" in provider.stdout, provider.stdout


def test_a_gang_of_two_ranks_runs_on_the_node(ray_project: Path) -> None:
    (ray_project / "gang.py").write_text(GANG)
    job_id = submit(
        "--backend",
        "ray",
        "--accelerator",
        "T4:2",
        "--procs-per-node",
        "2",
        "--",
        "python",
        "gang.py",
        cwd=ray_project,
    )
    wait_status(job_id, "SUCCEEDED", timeout=90)
    # the two ranks met (gloo, on the node's own address) and summed 1 + 2; Ray gave the
    # entrypoint the two GPUs, and every rank sees both (torchrun's way)
    assert "rank 1 of 2 on node 0: sum 3 gpus 0,1" in _logs(job_id, "--rank", "1")
    assert "rank 0 of 2 on node 0: sum 3 gpus 0,1" in _logs(job_id, "--rank", "0")


def test_cancel_stops_the_ray_job(ray_project: Path, ray_head: str, tmp_path: Path) -> None:
    release = tmp_path / "release"  # (never: the cancel ends it)
    job_id = submit(
        "--backend", "ray", "--", "python", "train.py", "long", str(release), cwd=ray_project
    )
    _started(job_id)
    assert ferry("cancel", job_id).returncode == 0
    status = wait_status(job_id, "CANCELLED", timeout=60)
    assert "notice at" in _logs(job_id)  # it had the notice
    assert _ray_job(ray_head, job_id)["status"] == "STOPPED"
    assert status["attempts"][0]["status"] == "CANCELLED"


def test_a_runner_killed_under_its_job_makes_the_attempt_lost(
    ray_project: Path, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    job_id = submit(
        "--backend", "ray", "--", "python", "train.py", "long", str(release), cwd=ray_project
    )
    _started(job_id)
    job_dir = Path(job_status(job_id)["attempts"][0]["log_path"]).parent
    state_file = job_dir / "runs" / "1" / "state.json"
    runner = json.loads(state_file.read_text())["pid"]
    os.kill(runner, signal.SIGKILL)
    release.touch()
    status = wait_status(job_id, "SUCCEEDED", timeout=120)  # resumed under a new attempt
    lost = status["attempts"][0]
    assert lost["status"] == "LOST", lost
    assert "without recording the end" in lost["reason"], lost["reason"]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])  # lost; a shutdown
def test_a_lost_supervisor_is_followed_again_and_the_ray_job_runs_on(
    ray_project: Path, ray_head: str, how: int, tmp_path: Path
) -> None:
    from ferry.store import open_store

    release = tmp_path / "release"
    job_id = submit(
        "--backend", "ray", "--", "python", "train.py", "long", str(release), cwd=ray_project
    )
    _started(job_id)
    first = _ray_job(ray_head, job_id)
    supervisor = open_store().get_job(job_id).supervisor_pid
    assert supervisor
    os.kill(supervisor, how)
    # any ferry command notices (as ferry agent does): a new supervisor follows the attempt
    wait_for(
        lambda: (
            ferry("jobs").returncode == 0
            and open_store().get_job(job_id).supervisor_pid not in (None, supervisor)
        ),
        30,
        "a new supervisor",
    )
    release.touch()
    status = wait_status(job_id, "SUCCEEDED", timeout=120)  # (ferry status reconciles)
    assert [a["status"] for a in status["attempts"]] == ["SUCCEEDED"]  # no new attempt
    assert _ray_job(ray_head, job_id)["submission_id"] == first["submission_id"]
    assert status["retries_used"]["preemptions"] == 0
    log = _logs(job_id)
    assert log.count("starting at 0") == 1 and log.count("done") == 1, log  # none twice
    events = " ".join(e["message"] for e in status["events"])
    assert "following attempt 1 again" in events, events


def test_jobs_elsewhere_share_one_watcher_which_a_new_one_replaces(
    ray_project: Path, ray_head: str, tmp_path: Path
) -> None:
    import psutil

    from ferry.store import open_store

    release = tmp_path / "release"
    jobs = [
        submit(
            "--backend", "ray", "--", "python", "train.py", "long", str(release), cwd=ray_project
        )
        for _ in range(2)
    ]
    for job_id in jobs:
        _started(job_id)
    store = open_store()

    def watchers() -> set[int | None]:
        return {store.get_job(job_id).supervisor_pid for job_id in jobs}

    (watcher,) = watchers()  # one process follows both
    assert watcher is not None and Path(f"/proc/{watcher}/comm").read_text() == "ferry-supervise\n"
    assert "ferry.watcher" not in " ".join(psutil.Process(watcher).cmdline())  # (forked)
    os.kill(watcher, signal.SIGKILL)
    # the next command finds both jobs lost and hands both to one new watcher
    wait_for(
        lambda: (
            ferry("jobs").returncode == 0 and None not in (now := watchers()) and watcher not in now
        ),
        30,
        "a new watcher",
        every=0.5,
    )
    (again,) = watchers()
    release.touch()
    for job_id in jobs:
        status = wait_status(job_id, "SUCCEEDED", timeout=120)
        assert [a["status"] for a in status["attempts"]] == ["SUCCEEDED"]  # followed, not rerun
        assert _logs(job_id).count("starting at 0") == 1
    # with nothing left to follow it ends (after local.linger)

    def ended() -> bool:
        try:
            return psutil.Process(again).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(ended, 30, "the watcher to end", every=0.5)


def test_the_watcher_keeps_no_secret_of_a_job_that_has_ended(ray_project: Path) -> None:
    """Waiting for another job once its own has ended (local.linger), the watcher shows
    the job's secret to none of this user's other processes; nor do Ray's."""
    from ferry.store import open_store

    assert ferry("config", "set", "local.linger", "60").returncode == 0
    value = f"value-{os.urandom(12).hex()}"
    ran = ferry(
        *("run", "--backend", "ray", "--secret", "TOKEN", "--", "python", "train.py"),
        cwd=ray_project,
        env={"TOKEN": value},
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[0])["TOKEN"] == value  # the job had it
    watcher = open_store().get_job(ferry_json("jobs")[0]["id"]).supervisor_pid
    assert watcher is not None and Path(f"/proc/{watcher}/comm").read_text() == "ferry-supervise\n"
    try:  # (its thread for the job ends just after the job's end is recorded)
        wait_for(
            lambda: not showing(value),
            10,
            "the watcher to forget it",
            explain=lambda: showing(value),
        )
        assert Path(f"/proc/{watcher}/comm").read_text() == "ferry-supervise\n"  # waiting
    finally:
        os.kill(watcher, signal.SIGTERM)  # (rather than waiting a minute for another job)


def test_an_attempt_no_node_can_take_ends_after_max_pending(ray_project: Path) -> None:
    job_id = _submit_spec(
        ray_project,
        "command: [python, train.py]\nresources: {accelerator: 'T4:8'}\n"
        "limits: {max_pending: 3s}\n",
    )
    status = wait_status(job_id, "FAILED", timeout=60)
    reason = status["reason"]
    assert "no node of the Ray cluster took it within limits.max_pending (3.0s)" in reason, reason
    assert "8 GPU" in reason and "the cluster has 2 CPU, 2 GPU" in reason, reason


def test_a_job_stopped_on_the_cluster_fails_saying_so(
    ray_project: Path, ray_head: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"  # (never: the stop ends it)
    job_id = submit(
        "--backend", "ray", "--", "python", "train.py", "long", str(release), cwd=ray_project
    )
    _started(job_id)
    submission_id = job_status(job_id)["attempts"][0]["handle"].partition("@")[0]
    request = urllib.request.Request(f"{ray_head}/api/jobs/{submission_id}/stop", method="POST")
    urllib.request.urlopen(request, timeout=10).close()  # as `ray job stop` does
    status = wait_status(job_id, "FAILED", timeout=60)
    assert "stopped on the cluster, not by Ferry" in status["reason"], status["reason"]


def test_cancel_ends_an_attempt_ray_never_placed(ray_project: Path) -> None:
    job_id = _submit_spec(
        ray_project, "command: [python, train.py]\nresources: {accelerator: 'T4:8'}\n"
    )
    wait_status(job_id, "RUNNING", timeout=60)  # (submitted: Ray holds it PENDING)
    assert ferry("cancel", job_id).returncode == 0
    wait_status(job_id, "CANCELLED", timeout=60)


def _s3_bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """A fresh bucket on the test S3 server, with this test's ferry pointed at it."""
    import s3fs

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    for key, value in {**creds, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    assert ferry("config", "set", "storage.s3.endpoint_url", endpoint).returncode == 0
    s3 = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
    bucket = f"t{os.urandom(4).hex()}"
    s3.mkdir(bucket)
    return s3, bucket


def test_outputs_the_runner_cannot_send_fail_the_job(
    ray_project: Path,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, bucket = _s3_bucket(s3_endpoint, monkeypatch)
    job_id = _submit_spec(  # no credentials for the runner: it cannot write the bucket
        ray_project, f"command: [python, train.py]\noutputs: s3://{bucket}/runs/{{job_id}}\n"
    )
    status = wait_status(job_id, "FAILED", timeout=90)
    assert status["exit_code"] == 0  # the script did its part
    assert "did not say what it sent" in status["reason"], status["reason"]
    events = " ".join(e["message"] for e in status["events"])
    assert "outputs could not be written to s3://" in events, events


def test_outputs_in_s3_are_sent_by_the_runner(
    ray_project: Path,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s3, bucket = _s3_bucket(s3_endpoint, monkeypatch)
    job_id = _submit_spec(
        ray_project,
        f"command: [python, train.py]\noutputs: s3://{bucket}/runs/{{job_id}}\n"
        "secrets: [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY]\n",
    )
    wait_status(job_id, "SUCCEEDED", timeout=90)
    s3.invalidate_cache()
    assert s3.cat(f"{bucket}/runs/{job_id}/model/model.txt") == b"weights"
    manifest = json.loads(s3.cat(f"{bucket}/runs/{job_id}/manifest.json"))
    listed = {f["path"] for f in manifest["files"]}
    assert "model/model.txt" in listed and "logs/attempt-1.log" in listed, listed


def test_a_cluster_on_other_machines_needs_outputs_in_a_bucket(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "http://10.1.2.3:8265")
    (project / "train.py").write_text("pass\n")
    result = ferry("run", "--backend", "ray", "--", "python", "train.py", cwd=project)
    line = assert_one_line_error(result, 2)
    assert "cannot write the job's outputs to a folder of this one" in line, line


def test_addresses_name_the_jobs_api() -> None:
    assert dashboard_url("http://head:8265/") == "http://head:8265"
    assert dashboard_url("ray://head:10001") == "http://head:8265"
    assert dashboard_url("head:6379") == "http://head:8265"
    assert dashboard_url("head:9000") == "http://head:9000"
    assert dashboard_url("head") == "http://head:8265"


def test_the_code_package_depends_on_the_files_only(tmp_path: Path) -> None:
    folder = tmp_path / "code"
    (folder / "pkg").mkdir(parents=True)
    (folder / "train.py").write_text("print(1)\n")
    (folder / "pkg" / "util.py").write_text("X = 1\n")
    data, digest = zip_folder(folder)
    os.utime(folder / "train.py", (1, 1))  # a new time, the same files: the same package
    assert zip_folder(folder) == (data, digest)
    (folder / "train.py").write_text("print(2)\n")
    assert zip_folder(folder)[1] != digest


@pytest.fixture
def ray_nodes() -> Iterator[Any]:
    """A Ray cluster of simulated nodes (ray.cluster_utils.Cluster), fresh for each test
    (one that lost nodes, or stopped a gang, may not take the next job at once on this
    small machine): a head for the entrypoints (no GPU) and two nodes with one T4 each;
    ``add`` puts another such node in, ``nodes`` lists them, ``url`` is its Jobs API."""
    from ray.cluster_utils import Cluster

    from ferry.runner.run import free_port

    port = free_port()
    # its own session folder: two clusters under Ray's default /tmp/ray would find each
    # other's "session_latest" (its nodes inherit this)
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="fr-", dir="/tmp")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "num_gpus": 0,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": port,
            # not Ray's fixed 52365, which another head on this machine may hold
            "dashboard_agent_listen_port": free_port(),
        },
    )

    def add() -> Any:
        node = cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:T4": 1})
        cluster.wait_for_nodes()
        return node

    cluster.nodes = [add(), add()]
    cluster.add = add
    cluster.url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(cluster.url), 60, "the simulated cluster's Jobs API")
    yield cluster
    cluster.shutdown()
    if before is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = before


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/api/version", timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture
def gang_project(
    home: Path, project: Path, ray_nodes: Any, monkeypatch: pytest.MonkeyPatch
) -> Path:
    monkeypatch.setenv("RAY_ADDRESS", ray_nodes.url)
    (project / "gang.py").write_text(GANG)
    return project


def test_a_gang_spans_two_nodes_with_one_runner_each(gang_project: Path) -> None:
    job_id = _submit_spec(
        gang_project, "command: [python, gang.py]\nresources: {nodes: 2, accelerator: 'T4:1'}\n"
    )
    status = wait_status(job_id, "SUCCEEDED", timeout=120)
    log = _logs(job_id)
    assert "[0] rank 0 of 2 on node 0: sum 3" in log, log  # gloo across the two nodes
    assert "[1] rank 1 of 2 on node 1: sum 3" in log, log
    assert "rank 1 of 2 on node 1" in _logs(job_id, "--rank", "1")
    events = " ".join(e["message"] for e in status["events"])
    assert "(STRICT_SPREAD)" in events and "MASTER_ADDR" in events, events
    runs = Path(status["attempts"][0]["log_path"]).parent / "runs" / "1"
    assert (runs / "node-0" / "state.json").exists() and (runs / "node-1" / "state.json").exists()


def test_a_failing_node_stops_the_gang_and_is_named(gang_project: Path) -> None:
    job_id = _submit_spec(
        gang_project,
        "command: [python, gang.py, fail]\nresources: {nodes: 2, accelerator: 'T4:1'}\n"
        "limits: {stop_grace: 5s}\n",
    )
    status = wait_status(job_id, "FAILED", timeout=120)
    assert status["exit_code"] == 3, status
    assert status["reason"].startswith("node 1: rank 1: exit code 3"), status["reason"]
    assert "rank 1 gives up" in status["reason"]
    events = " ".join(e["message"] for e in status["events"])
    # node 0 was seen failing first (rank 0 lost its peer), yet node 1 is named
    assert "node 0 failed: stopping the gang's 1 other nodes" in events, events


def test_a_node_lost_under_the_gang_is_a_preemption(gang_project: Path, ray_nodes: Any) -> None:
    job_id = _submit_spec(
        gang_project,
        "command: [python, gang.py, '40']\nresources: {nodes: 2, accelerator: 'T4:1'}\n"
        "checkpoint: {paths: [step.txt]}\n",
    )
    import psutil

    _until_logged(job_id, "starting at 0", 120, "the gang to start")
    # a few steps, and a save of checkpoint.paths by node 0's runner (every beat)
    saved = Path(job_status(job_id)["outputs"]) / "checkpoints" / ".ferry-workdir" / "step.txt"
    wait_for(lambda: saved.exists() and saved.read_text() not in ("", "0"), 60, "a saved step")
    # the node that runs rank 0 (node 0's runner descends from its raylet) dies
    job_dir = Path(job_status(job_id)["attempts"][0]["log_path"]).parent
    runner = json.loads((job_dir / "runs" / "1" / "node-0" / "state.json").read_text())["pid"]
    above = {parent.pid for parent in psutil.Process(runner).parents()}
    victim = next(
        node for node in ray_nodes.nodes if node.all_processes["raylet"][0].process.pid in above
    )
    ray_nodes.nodes.remove(victim)
    ray_nodes.remove_node(victim)
    ray_nodes.nodes.append(ray_nodes.add())  # and the cluster gets another
    status = wait_status(job_id, "SUCCEEDED", timeout=180)
    first = status["attempts"][0]
    assert first["status"] == "PREEMPTED", first
    assert "node 0 of the gang was lost" in first["reason"], first["reason"]
    resumed = _logs(job_id, "--attempt", str(len(status["attempts"])))
    assert "starting at 0" not in resumed, resumed  # from rank 0's saved step


@contextlib.contextmanager
def _relay(host: str, target: int) -> Iterator[int]:
    """Forward connections to a free port of ``host`` to 127.0.0.1:``target`` (a head
    this machine reaches as it would reach one on another machine); yields the port."""
    import socket
    import threading

    listener = socket.create_server((host, 0))
    stopping = threading.Event()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:  # (one side went away: both are shut below)
            return
        finally:
            for end in (a, b):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while not stopping.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", target))
            except OSError:  # (the head is away: this connection fails, the next may not)
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        listener.close()


def test_a_cluster_elsewhere_is_followed_through_the_bucket(
    home: Path,
    project: Path,
    ray_head: str,
    tmp_path: Path,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A head reached at this machine's network address counts as one elsewhere: the order
    and the runner's record travel through the outputs' bucket, not a folder here."""
    import socket

    address = socket.gethostbyname(socket.gethostname())
    if address.startswith("127."):
        address = next((a for a in os.popen("hostname -I").read().split() if "." in a), "127.0.0.1")
    if address.startswith("127."):
        pytest.skip("this machine has no address but loopback")
    s3, bucket = _s3_bucket(s3_endpoint, monkeypatch)
    # what a user of a cluster elsewhere sets: its interpreter, and what the node needs
    assert ferry("config", "set", "ray.python", sys.executable).returncode == 0
    (project / "train.py").write_text(SCRIPT)
    spec = (
        f"command: [python, train.py, long, '{tmp_path / 'release'}']\n"
        f"outputs: s3://{bucket}/runs/{{job_id}}\n"
        "checkpoint: {paths: [step.txt]}\nlimits: {stop_grace: 10s}\n"
        f"env: {{AWS_ENDPOINT_URL: '{s3_endpoint}', FERRY_HOME: '{tmp_path / 'node'}'}}\n"
        "secrets: [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY]\n"
    )
    with _relay(address, int(ray_head.rsplit(":", 1)[1])) as port:
        monkeypatch.setenv("RAY_ADDRESS", f"http://{address}:{port}")
        job_id = _submit_spec(project, spec)
        _started(job_id)
        assert ferry("preempt", job_id).returncode == 0
        # (released once noticed: released sooner, the script could end before the notice)
        _until_logged(job_id, "notice at", 90, "the notice")
        (tmp_path / "release").touch()  # (the resumed attempt ends soon)
        status = wait_status(job_id, "SUCCEEDED", timeout=150)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert "notice at" in _logs(job_id, "--attempt", "1")
    assert "starting at 0" not in _logs(job_id, "--attempt", "2")  # from the bucket's step
    assert any(m["name"] == "loss" for m in ferry_json("metrics", job_id))
    # the runs' records are in the bucket, none in the job's folder here
    s3.invalidate_cache()
    for attempt in status["attempts"]:
        submission = attempt["handle"].partition("@")[0]
        assert s3.exists(f"{bucket}/.ferry/runs/{submission}/state.json"), submission
    assert not (Path(status["attempts"][0]["log_path"]).parent / "runs").exists()
    assert s3.cat(f"{bucket}/runs/{job_id}/model/model.txt") == b"weights"


def _lose_follower(job_id: str) -> None:
    """kill -9 the process that follows the job (its watcher), and wait until it is gone."""
    import psutil

    from ferry.store import open_store

    follower = open_store().get_job(job_id).supervisor_pid
    assert follower
    os.kill(follower, signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(follower).wait(10)


def test_a_preemption_asked_while_no_one_follows_reaches_the_attempt(
    ray_project: Path, tmp_path: Path
) -> None:
    from ferry.controller.jobs import preempt
    from ferry.store import open_store

    release = tmp_path / "release"
    job_id = _submit_spec(
        ray_project,
        f"command: [python, train.py, long, '{release}']\ncheckpoint: {{paths: [step.txt]}}\n",
    )
    _started(job_id)
    _lose_follower(job_id)
    store = open_store()
    preempt(store, store.get_job(job_id))  # (still RUNNING in the store: asked as before)
    noticed = lambda: "notice at" in _logs(job_id, "--attempt", "1")  # noqa: E731
    wait_for(noticed, 90, "the notice", every=0.5)
    release.touch()
    status = wait_status(job_id, "SUCCEEDED", timeout=150)  # the next command follows it
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert "notice at" in _logs(job_id, "--attempt", "1")


def test_an_attempt_that_cannot_be_found_again_is_lost_and_counted(
    ray_project: Path, tmp_path: Path
) -> None:
    from ferry.backends.ray_jobs import RayJobs
    from ferry.store import open_store

    release = tmp_path / "release"
    job_id = _submit_spec(ray_project, f"command: [python, train.py, long, '{release}']\n")
    _started(job_id)
    submission, _, cluster = job_status(job_id)["attempts"][0]["handle"].partition("@")
    _lose_follower(job_id)  # (and no ferry command until the handle is damaged)
    # a handle that names nothing (a record from another Ferry, damaged by hand); the Ray
    # job it named is stopped here, since nothing else can find it now
    open_store().update_attempt(job_id, 1, handle="nothing")
    RayJobs(cluster).stop(submission)
    release.touch()
    status = wait_status(job_id, "SUCCEEDED", timeout=150)
    first = status["attempts"][0]
    assert first["status"] == "LOST" and "could not find it again" in first["reason"], first
    assert sum(status["retries_used"].values()) == 1, status["retries_used"]


def test_ferry_ray_stop_keeps_a_head_that_runs_jobs_and_leaves_no_process_of_it(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # Ferry's own head, in this home
    assert ferry("config", "set", "ray.idle", "1h").returncode == 0  # (with its idle watcher)
    (project / "train.py").write_text(SCRIPT)
    release = tmp_path / "release"  # (never: the cancel ends it)
    job_id = submit(
        "--backend", "ray", "--", "python", "train.py", "long", str(release), cwd=project
    )
    try:
        _started(job_id)
        line = assert_one_line_error(ferry("ray", "stop"), 2)
        assert f"runs 1 job(s) ({job_id})" in line and "--force" in line, line
        assert wait_status(job_id, "RUNNING")  # untouched
        assert ferry("cancel", job_id).returncode == 0
        wait_status(job_id, "CANCELLED", timeout=60)
        head = _head_processes(json.loads((home / "ray" / "head.json").read_text()))
        lines = [" ".join(p.info["cmdline"] or ()) for p in head]
        assert any("ray.util.client.server" in line for line in lines), lines
        assert any("ferry.backends.ray_cluster" in line for line in lines), "no idle watcher"
        result = ferry("ray", "stop")
        assert result.returncode == 0 and "stopped the Ray head" in result.stdout
        left = [f"{p.pid} {p.info['cmdline']}"[:150] for p in head if _alive(p)]
        assert not left, "\n".join(left)  # by the time the command said so
    finally:
        ferry("ray", "stop", "--force")


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _head_processes(record: dict[str, Any]) -> list[Any]:
    """The processes of a head Ferry started, found as a person would find them: its
    dashboard (by its port), every process in the dashboard's session and their children,
    Ray's client proxy (by the head's GCS port) and Ferry's idle watcher (by the head's
    address), and their children."""
    import psutil

    port = record["dashboard"].rsplit(":", 1)[1]
    gcs_port = record["gcs"].rsplit(":", 1)[1]
    dashboards = [
        p
        for p in psutil.process_iter(["cmdline"])
        if f"--port={port}" in (p.info["cmdline"] or ())
        and "dashboard" in " ".join(p.info["cmdline"])
    ]
    assert dashboards, f"no dashboard at port {port}"
    session = os.getsid(dashboards[0].pid)
    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, OSError):
            line = " ".join(proc.info["cmdline"] or ())
            if (
                os.getsid(proc.pid) == session
                or ("ray.util.client.server" in line and f":{gcs_port}" in line)
                or ("ferry.backends.ray_cluster" in line and record["dashboard"] in line)
            ):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    child.info = {"cmdline": child.cmdline()}
                    found[child.pid] = child
    return list(found.values())


def test_requirements_are_installed_where_the_ray_job_runs(
    ray_project: Path, tmp_path: Path
) -> None:
    """environment.requirements on Ray: the runner builds the environment on the node (in
    the node's FERRY_HOME, here the job's env names one), and `python` is its interpreter;
    an install that fails is the attempt's, with the installer's words."""
    from tests.packaging.wheels import make_wheel

    make_wheel(ray_project / "wheels", "2.0")
    (ray_project / "requirements.txt").write_text("--no-index\n--find-links wheels\ndemo-pkg\n")
    (ray_project / "show.py").write_text(
        "import sys, demo_pkg\nprint('demo', demo_pkg.VERSION, 'in', sys.prefix)\n"
    )
    node_home = tmp_path / "node-home"
    spec = (
        "command: [python, show.py]\nenvironment: {requirements: requirements.txt}\n"
        f"env: {{FERRY_HOME: '{node_home}'}}\n"
    )
    job_id = _submit_spec(ray_project, spec)
    status = wait_status(job_id, "SUCCEEDED", timeout=120)
    log = _logs(job_id)
    assert f"demo 2.0 in {node_home / 'envs'}" in log, log
    events = " ".join(e["message"] for e in status["events"])
    assert "(requirements.txt): built in" in events, events
    (ray_project / "requirements.txt").write_text("--no-index\nno-such-package==1\n")
    failed = wait_status(_submit_spec(ray_project, spec), "FAILED", timeout=120)
    assert "could not be installed" in failed["reason"], failed["reason"]
    assert "environment.log in the attempt's run folder" in failed["reason"]


def test_a_sweep_runs_its_trials_on_ray(ray_project: Path) -> None:
    (ray_project / "quad.py").write_text(
        "from ferry import runtime\n"
        "x = float(runtime.hparams()['x'])\n"
        "for step in range(3):\n"
        "    runtime.report(loss=(x - 2) ** 2 + 0.1 * (3 - step), step=step)\n"
    )
    (ray_project / "job.yaml").write_text("name: quad\ncommand: python quad.py\n")
    trials = grid_sweep(ray_project, "ray", "x=choice:1,2", timeout=180)
    assert [(t["params"]["x"], t["state"]) for t in trials] == [(2, "COMPLETE"), (1, "COMPLETE")]
    assert [round(t["objective"], 6) for t in trials] == [0.1, 1.1]
