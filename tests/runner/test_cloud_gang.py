"""One machine of a cloud's gang (ferry/runner/cloud_gang.py): its place read from what
Vertex AI and SageMaker write on it, and node 0 and the others when the gang does not
come together, run for real as ``python -m ferry.runner.cloud`` on run folders of this
machine. (The whole gang on both clouds' doubles: tests/backends/test_cloud_gangs.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ferry.errors import FerryError
from ferry.runner.cloud_gang import GANG, place
from ferry.runner.nodes import node_folder
from ferry.runner.order import RunOrder
from ferry.runner.record import STOPPED, RunFolderReader


def _cluster_spec(kind: str, index: int, workers: int = 2) -> str:
    cluster = {
        "workerpool0": ["workerpool0-0:2222"],
        "workerpool1": [f"workerpool1-{i}:2222" for i in range(workers)],
    }
    return json.dumps(
        {"cluster": cluster, "environment": "cloud", "task": {"type": kind, "index": index}}
    )


def test_vertex_replicas_are_ranked_as_cluster_spec_lists_them() -> None:
    chief = place(3, {"CLUSTER_SPEC": _cluster_spec("workerpool0", 0)})
    assert chief.hosts == ("workerpool0-0", "workerpool1-0", "workerpool1-1")
    assert (chief.rank, chief.port) == (0, 2222)  # (the port Vertex AI opens between them)
    assert place(3, {"CLUSTER_SPEC": _cluster_spec("workerpool1", 1)}).rank == 2


def test_sagemaker_instances_are_ranked_as_resourceconfig_lists_them(tmp_path: Path) -> None:
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"], "x": 1}))
    found = place(2, {}, str(config))
    assert (found.hosts, found.rank, found.port) == (("algo-1", "algo-2"), 1, 0)


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"CLUSTER_SPEC": _cluster_spec("workerpool0", 0, workers=2)}, "started 3 machines"),
        ({"CLUSTER_SPEC": "{not json"}, "CLUSTER_SPEC is not as Vertex AI writes it"),
        ({"CLUSTER_SPEC": _cluster_spec("workerpool2", 0)}, "a Ferry gang does not use"),
        ({"CLUSTER_SPEC": _cluster_spec("workerpool1", 5)}, "is not one of its 3 hosts"),
        ({}, "not told where the gang's other machines are"),
    ],
)
def test_a_place_the_provider_did_not_give_is_said(environ: dict[str, str], says: str) -> None:
    with pytest.raises(FerryError, match=says):
        place(2, environ, "/nonexistent/resourceconfig.json")


def _machine(tmp_path: Path, command: str, rank: int, wait: float) -> dict[str, Any]:
    """A gang of two whose run folder and code are on this machine; ``rank``'s share of
    it, ready to run with :func:`_run`."""
    from ferry.runner.machine import Machine

    code = tmp_path / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "job.py").write_text(command)
    archive = tmp_path / "channel" / "code.tar.gz"
    archive.parent.mkdir(exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(code / "job.py", "job.py")
    folder = tmp_path / "run"
    plan = Machine(job_id="g", outputs=str(tmp_path / "outputs"), max_pending=wait)
    RunOrder(
        1,
        [sys.executable, "job.py"],
        ".",
        {},
        2.0,
        hosts=["?", "?"],
        machine={**plan.fields(), "scratch": str(tmp_path / f"scratch-{rank}")},
    ).write(folder)
    kind = "workerpool0" if rank == 0 else "workerpool1"
    cluster = json.dumps(
        {
            "cluster": {"workerpool0": ["127.0.0.1:29999"], "workerpool1": ["127.0.0.1:29999"]},
            "task": {"type": kind, "index": 0},
        }
    )
    env = {**os.environ, "CLUSTER_SPEC": cluster, "FERRY_HOME": str(tmp_path / "home")}
    return {"folder": str(folder), "code": str(archive.parent), "env": env}


def _run(machine: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferry.runner.cloud", machine["folder"], machine["code"]],
        env=machine["env"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_node_0_stops_the_gang_when_another_node_never_starts(tmp_path: Path) -> None:
    machine = _machine(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(60)\n", 0, 2)
    done = _run(machine)
    assert done.returncode == 0, done.stderr
    folder = machine["folder"]
    gang = RunFolderReader(folder).state()
    assert gang is not None and gang.ended and gang.outcome == "preempted", gang
    assert gang.reason == "node 1 of the gang was lost (its machine did not start within 2.0s)"
    said = json.loads(RunFolderReader(folder).get(GANG) or b"{}")
    assert said == {"hosts": ["127.0.0.1", "127.0.0.1"], "port": 29999}
    events = RunFolderReader(folder).read("events").decode()
    assert "node 1 was lost: stopping the gang's 1 other nodes" in events, events
    node = RunFolderReader(node_folder(folder, 0))
    ended = node.state()
    assert ended is not None and ended.ended and ended.failed_at is None  # stopped, not failed
    assert b"up" in node.read("log")
    # the node that never came is told to stop too, should its machine come after all
    assert (Path(folder) / "node-1" / STOPPED).exists()


def test_a_machine_started_again_does_not_run_its_node_again(tmp_path: Path) -> None:
    from ferry.runner.record import RunFolderWriter

    # node 0's machine ran before (the gang's record says it started), and node 1 ended
    machine = _machine(tmp_path, "print('again')\n", 0, 60)
    folder = machine["folder"]
    RunFolderWriter(folder, 1)
    RunFolderWriter(node_folder(folder, 1), 1).end(0, "exited")
    assert _run(machine).returncode == 0
    gang = RunFolderReader(folder).state()
    assert gang is not None and gang.outcome == "preempted", gang
    assert gang.reason == (
        "node 0 of the gang was lost (its machine started it again while the gang ran)"
    )
    assert RunFolderReader(node_folder(folder, 0)).state() is None  # it did not run again
    # a node other than 0 whose runner was running records that it was lost
    other = _machine(tmp_path / "other", "print('again')\n", 1, 60)
    RunFolderWriter(node_folder(other["folder"], 1), 1).beat()
    assert _run(other).returncode == 0
    ended = RunFolderReader(node_folder(other["folder"], 1)).state()
    assert ended is not None and ended.outcome == "preempted", ended
    assert b"again" not in RunFolderReader(node_folder(other["folder"], 1)).read("log")


def test_a_node_whose_node_0_never_says_where_to_meet_ends_as_not_started(
    tmp_path: Path,
) -> None:
    machine = _machine(tmp_path, "print('never')\n", 1, 2)
    assert _run(machine).returncode == 0
    ended = RunFolderReader(node_folder(machine["folder"], 1)).state()
    assert ended is not None and ended.outcome == "not_started", ended
    assert ended.reason == "node 0 did not say where the gang meets within 2.0s"


def test_a_node_stopped_before_the_gang_met_ends_as_not_started(tmp_path: Path) -> None:
    machine = _machine(tmp_path, "print('never')\n", 1, 60)
    (Path(machine["folder"]) / STOPPED).write_bytes(b"")
    assert _run(machine).returncode == 0
    ended = RunFolderReader(node_folder(machine["folder"], 1)).state()
    assert ended is not None and ended.reason == "stopped before it started", ended


def test_the_providers_own_sigterm_leaves_the_nodes_exit_codes_standing(tmp_path: Path) -> None:
    """A stop that did not come from Ferry (the provider's time limit, maintenance) is not
    a clean end: the gang's end is its nodes' own."""
    import signal
    import time

    from ferry.runner.record import RunFolderWriter

    machine = _machine(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(60)\n", 0, 60)
    folder = machine["folder"]
    RunFolderWriter(node_folder(folder, 1), 1).end(0, "exited")  # (node 1 is done)
    lead = subprocess.Popen(
        [sys.executable, "-m", "ferry.runner.cloud", folder, machine["code"]],
        env=machine["env"],
    )
    node = RunFolderReader(node_folder(folder, 0))
    deadline = time.monotonic() + 30
    while (state := node.state()) is None or state.state != "running":
        assert time.monotonic() < deadline, "node 0's runner did not start"
        time.sleep(0.2)
    lead.send_signal(signal.SIGTERM)
    assert lead.wait(timeout=60) in (0, 1)
    gang = RunFolderReader(folder).state()
    assert gang is not None and gang.outcome == "exited", gang
    assert gang.exit_code == -signal.SIGTERM and gang.reason.startswith("node 0: "), gang
    assert "notice: stopping the gang's 1 nodes" in RunFolderReader(folder).read("events").decode()
