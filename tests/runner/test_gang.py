"""What each process of a gang is told: torchrun's variables (checked by a real gloo
all-reduce between two processes), an even share of the node's GPUs, and the shapes that
Vertex AI's training_utils and SageMaker's toolkit read."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.contract import sagemaker
from ferry.contract.env import JobDirs
from ferry.runner.gang import Gang


def test_ranks_cover_the_gang_once_and_each_process_gets_its_own_gpus() -> None:
    hosts = ("10.0.0.1", "10.0.0.2")
    ranks = []
    for node in range(2):
        gang = Gang(hosts, procs_per_node=2, node_rank=node, master_port=29500, gpus=(0, 1, 2, 3))
        for local in range(2):
            env = gang.env(local)
            ranks.append(int(env["RANK"]))
            assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2"
            assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29500")
            assert env["NODE_RANK"] == env["GROUP_RANK"] == env["FERRY_NODE_RANK"] == str(node)
            assert env["LOCAL_RANK"] == str(local) and env["FERRY_NUM_NODES"] == "2"
            # as under torchrun: all of the node's, each process taking its share by
            # LOCAL_RANK (what Lightning, Accelerate and torch.cuda.set_device expect)
            assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
            assert env["FERRY_NUM_GPUS"] == "4"
    assert sorted(ranks) == [0, 1, 2, 3]
    cpu_only = Gang(("h",), procs_per_node=3, node_rank=0, master_port=1234)
    assert [cpu_only.env(i)["CUDA_VISIBLE_DEVICES"] for i in range(3)] == ["", "", ""]


def test_processes_sharing_a_node_get_one_thread_each_unless_the_job_says() -> None:
    from ferry.runner.order import RunOrder
    from ferry.runner.run import rank_envs

    def threads(procs: int, env: dict[str, str], spec: tuple[str, ...] = ()) -> list[str | None]:
        order = RunOrder(
            1, ["python", "t.py"], ".", env, 5.0, procs_per_node=procs, job_env=[*spec]
        )
        return [rank_env.get("OMP_NUM_THREADS") for _, rank_env in rank_envs(order)]

    assert threads(2, {}) == ["1", "1"]  # as torchrun
    assert threads(2, {"OMP_NUM_THREADS": "4"}, ("OMP_NUM_THREADS",)) == ["4", "4"]  # the spec's
    assert threads(2, {"OMP_NUM_THREADS": "2"}) == ["1", "1"]  # the machine's (Ray's share)
    assert threads(1, {"OMP_NUM_THREADS": "2"}) == ["2"]  # one process: as the job gives it
    assert threads(1, {}) == [None]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"hosts": ()}, "at least one node"),
        ({"procs_per_node": 0}, "at least one process"),
        ({"node_rank": 2}, "node rank 2 is not one of 2"),
        ({"master_port": 0}, "is not a port"),
        ({"gpus": (0, 1, 2)}, "3 GPUs cannot be shared evenly by 2"),
    ],
)
def test_a_gang_that_cannot_be_is_refused(kwargs: dict[str, object], says: str) -> None:
    given: dict[str, object] = {
        "hosts": ("a", "b"),
        "procs_per_node": 2,
        "node_rank": 0,
        "master_port": 29500,
        **kwargs,
    }
    with pytest.raises(ValueError, match=says):
        Gang(**given)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ALL_REDUCE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")  # env:// from the gang's variables, as under torchrun
value = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(value)
print(dist.get_rank(), dist.get_world_size(), int(value.item()), flush=True)
dist.destroy_process_group()
"""


def test_torch_distributed_finds_its_peers_from_the_gangs_variables() -> None:
    gang = Gang(("127.0.0.1",), procs_per_node=2, node_rank=0, master_port=free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ALL_REDUCE],
            env={**os.environ, **gang.env(local)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for local in range(2)
    ]
    outputs = sorted(p.communicate(timeout=120)[0].split() for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert outputs == [["0", "2", "3"], ["1", "2", "3"]]  # 1 + 2 on both ranks


VERTEX = """
import json
from google.cloud.aiplatform.training_utils import environment_variables as e
print(json.dumps({"cluster_spec": e.cluster_spec, "tf_config": e.tf_config}))
"""


def test_vertex_training_utils_reads_each_nodes_place() -> None:
    hosts = ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    seen = []
    for node in range(3):
        env = Gang(hosts, procs_per_node=1, node_rank=node, master_port=2222).env(0)
        out = subprocess.run(
            [sys.executable, "-c", VERTEX],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        seen.append(json.loads(out))
    spec = seen[0]["cluster_spec"]
    assert spec["cluster"] == {
        "workerpool0": ["10.0.0.1:2222"],
        "workerpool1": ["10.0.0.2:2222", "10.0.0.3:2222"],
    }
    assert [s["cluster_spec"]["task"] for s in seen] == [
        {"type": "workerpool0", "index": 0},
        {"type": "workerpool1", "index": 0},
        {"type": "workerpool1", "index": 1},
    ]
    assert [s["tf_config"]["task"] for s in seen] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]


SAGEMAKER = """
import json
from sagemaker_training import environment
env = environment.Environment()
print(json.dumps({"hosts": env.hosts, "current_host": env.current_host,
                  "master": env.master_hostname, "is_master": env.is_master}))
"""


@pytest.mark.parametrize("nodes", [1, 2])
def test_sagemakers_toolkit_reads_each_nodes_place(tmp_path: Path, nodes: int) -> None:
    hosts = ("10.0.0.1", "10.0.0.2")[:nodes]
    dirs = JobDirs.under(str(tmp_path / "out"))
    dirs.create()
    gang = Gang(hosts, procs_per_node=1, node_rank=nodes - 1, master_port=29500)
    names = gang.sagemaker_hosts()
    here = names[gang.node_rank]
    env = sagemaker.prepare(tmp_path / "opt_ml", dirs, {}, {}, hosts=names, current=here)
    out = subprocess.run(
        [sys.executable, "-c", SAGEMAKER],
        env={**os.environ, **env, **gang.env(0)},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["hosts"] == list(names) and seen["current_host"] == here
    assert seen["master"] == names[0] and seen["is_master"] == (nodes == 1)
    assert names == (("algo-1",) if nodes == 1 else hosts)
