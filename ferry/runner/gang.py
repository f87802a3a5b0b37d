"""A gang: the processes of one attempt across its nodes, and what each of them is told.

A job with ``resources.nodes`` N and ``procs_per_node`` P runs N×P processes. Each gets the
variables ``torchrun`` sets (so ``torch.distributed.init_process_group()`` and the
libraries built on it find their peers with no code of Ferry's), the node's GPUs as
``torchrun`` leaves them (process ``LOCAL_RANK`` uses its share), and the shapes Vertex
AI and SageMaker give a distributed job (``CLUSTER_SPEC``, ``TF_CONFIG``, ``SM_HOSTS``,
``SM_CURRENT_HOST``), so their samples run unchanged.

Rank 0 is local rank 0 of node 0, whose address is ``MASTER_ADDR``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferry.store.plan import Plan


@dataclass(frozen=True)
class Gang:
    """One node's view of an attempt's processes."""

    hosts: tuple[str, ...]  # each node's address, by node rank
    procs_per_node: int
    node_rank: int  # this node's
    master_port: int  # where rank 0 listens (on hosts[0])
    gpus: tuple[int, ...] = ()  # this node's GPUs that the attempt holds

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ValueError("a gang has at least one node")
        if self.procs_per_node < 1:
            raise ValueError("a gang has at least one process per node")
        if not 0 <= self.node_rank < len(self.hosts):
            raise ValueError(f"node rank {self.node_rank} is not one of {len(self.hosts)} nodes")
        if not 0 < self.master_port < 65536:
            raise ValueError(f"{self.master_port} is not a port")
        if self.gpus and len(self.gpus) % self.procs_per_node:
            raise ValueError(
                f"{len(self.gpus)} GPUs cannot be shared evenly by {self.procs_per_node}"
                " processes; ask for a multiple of procs_per_node GPUs"
            )

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def master_addr(self) -> str:
        return self.hosts[0]

    def rank(self, local_rank: int) -> int:
        """The global rank of this node's process ``local_rank``."""
        if not 0 <= local_rank < self.procs_per_node:
            raise ValueError(f"local rank {local_rank} is not one of {self.procs_per_node}")
        return self.node_rank * self.procs_per_node + local_rank

    def node_env(self) -> dict[str, str]:
        """What every process of this node gets: the node's place in the gang, as Ferry,
        Vertex AI and SageMaker say it."""
        addresses = [f"{host}:{self.master_port}" for host in self.hosts]
        # node 0 is Vertex AI's first worker pool (TensorFlow's chief), the others the second
        first = self.node_rank == 0
        index = 0 if first else self.node_rank - 1
        cluster = {"workerpool0": addresses[:1]}
        tf_cluster = {"chief": addresses[:1]}
        if self.nodes > 1:
            cluster["workerpool1"] = addresses[1:]
            tf_cluster["worker"] = addresses[1:]
        task = {"type": "workerpool0" if first else "workerpool1", "index": index}
        tf_task = {"type": "chief" if first else "worker", "index": index}
        hosts = self.sagemaker_hosts()
        return {
            "FERRY_NODE_RANK": str(self.node_rank),
            "FERRY_NUM_NODES": str(self.nodes),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.procs_per_node),
            "NODE_RANK": str(self.node_rank),
            "GROUP_RANK": str(self.node_rank),
            # Vertex AI's (cloud.google.com/vertex-ai/docs/training/distributed-training)
            "CLUSTER_SPEC": json.dumps(
                {
                    "cluster": cluster,
                    "environment": "cloud",
                    "task": task,
                }
            ),
            "TF_CONFIG": json.dumps(
                {"cluster": tf_cluster, "task": tf_task, "environment": "cloud"}
            ),
            # SageMaker's
            "SM_HOSTS": json.dumps(list(hosts)),
            "SM_CURRENT_HOST": hosts[self.node_rank],
        }

    def env(self, local_rank: int) -> dict[str, str]:
        """What process ``local_rank`` of this node gets: the node's variables, and its own
        rank as ``torchrun`` gives it. As under ``torchrun``, every process sees all of the
        node's GPUs, and process ``LOCAL_RANK`` uses its share of them from there
        (``torch.cuda.set_device(LOCAL_RANK)`` with one GPU each): libraries built for
        torchrun (Lightning, Accelerate, Transformers) pick their device that way."""
        gpus = self.gpus
        return {
            **self.node_env(),
            "RANK": str(self.rank(local_rank)),
            "LOCAL_RANK": str(local_rank),
            "GROUP_WORLD_SIZE": str(self.nodes),
            "ROLE_RANK": str(self.rank(local_rank)),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus),
            "FERRY_NUM_GPUS": str(len(gpus)),
        }

    def sagemaker_hosts(self) -> tuple[str, ...]:
        """The hosts as ``SM_HOSTS`` lists them: ``algo-1`` for one node, as SageMaker
        names it; the nodes' own addresses for several, so that a script which takes
        ``SM_HOSTS[0]`` as its master reaches it."""
        return ("algo-1",) if self.nodes == 1 else self.hosts


def procs_per_node(plan: Plan) -> int:
    """``resources.procs_per_node``, or the GPUs of a node (at least 1) when not given."""
    given = plan.resources.procs_per_node
    if given:
        return int(given)
    acc = plan.resources.accelerator
    if not acc or starts_own_workers(list(plan.command)):
        return 1
    from ferry.accelerators import parse_accelerator

    parsed = parse_accelerator(acc)
    return 1 if parsed.is_tpu else max(1, parsed.count)


# Launchers that start a process per GPU themselves: their command runs once per node.
_LAUNCHERS = frozenset({"torchrun", "accelerate", "deepspeed", "horovodrun", "mpirun", "srun"})
_LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})


def starts_own_workers(command: list[str]) -> bool:
    """Whether ``command`` is a launcher (``torchrun``, ``python -m torch.distributed.run``,
    ``accelerate launch`` ...) that starts the workers of a node itself."""
    words = " ".join(str(w) for w in command).split()  # (a shell command is one string)
    if not words:
        return False
    first = os.path.basename(words[0])
    if first in _LAUNCHERS:
        return True
    if first.startswith("python") and len(words) > 2 and words[1] == "-m":
        return words[2] in _LAUNCHER_MODULES or words[2].split(".")[0] in _LAUNCHERS
    return False
