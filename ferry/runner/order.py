"""The run order: what a runner is asked to run, handed to it in its run folder.

The controller's side writes ``order.json`` into the attempt's run folder before it
starts the runner; the runner reads it and needs nothing else (no job store, no spec).
The job's environment is not in the file: it holds the job's secrets, which are never
written down. The runner is started with it as its own environment (or handed it in
memory, when forked), and passes it on.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ferry.errors import FerryError

ORDER = "order.json"


@dataclass(frozen=True)
class RunOrder:
    """One node's share of one attempt."""

    attempt: int
    argv: list[str]
    cwd: str
    env: dict[str, str]  # (not written: the runner's own environment when read)
    grace: float  # seconds between the notice (SIGTERM) and SIGKILL
    # where the log goes: a file on this machine, appended to; empty: the run folder's log
    log_file: str = ""
    # the gang (one process when procs_per_node and the number of hosts are 1)
    procs_per_node: int = 1
    hosts: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    node_rank: int = 0
    master_port: int = 0  # 0: a free port of this machine, chosen by the runner
    gpus: list[int] = field(default_factory=list)  # this node's GPUs the attempt holds
    durable: bool = True  # sync state.json to disk at each write (a local folder only)
    # the job's output also to the runner's own stdout: on a cloud machine, the provider's
    # log (CloudWatch, Cloud Logging), where its console shows it and reads its metrics
    echo: bool = False
    # the job as another machine needs it (runner/machine.py); None: the controller's own
    # machine, which did it already
    machine: dict[str, Any] | None = None
    # the variables the job's spec sets (its env:), which the runner's own defaults for a
    # gang (OMP_NUM_THREADS) never replace, whatever the machine's environment has
    job_env: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.procs_per_node

    def write(self, folder: str | os.PathLike[str]) -> None:
        """Write the order, but its environment, into the run folder ``folder`` (a folder
        made private to its owner, or a bucket prefix)."""
        from ferry.runner.record import _Place

        fields = self.fields()
        del fields["env"]
        _Place(str(folder)).put(ORDER, json.dumps(fields).encode())

    def fields(self) -> dict[str, Any]:
        """The order as a dict (its lists shared, not copied)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> RunOrder:
        """The order ``fields`` give, leaving out the ones this version does not know (an
        order from a newer Ferry); raises TypeError when one it needs is missing."""
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> RunOrder:
        """The order in the run folder ``folder``, with this process's environment as the
        job's."""
        from ferry.runner.record import RunFolderReader

        folder = str(folder)
        where = f"{folder.rstrip('/')}/{ORDER}"
        data = RunFolderReader(folder).get(ORDER)
        if data is None:
            raise FerryError(
                f"{folder} holds no run order ({ORDER})",
                "start the runner on an attempt's run folder, as the backend does",
            )
        try:
            return cls.from_fields({**json.loads(data), "env": dict(os.environ)})
        except (ValueError, TypeError) as exc:
            hint = "was it written by Ferry?"
            raise FerryError(f"{where} is not a run order ({exc})", hint) from None
