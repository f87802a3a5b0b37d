"""What a gang over several machines keeps in its run folder, whichever platform placed it
(a Ray cluster, :mod:`ferry.runner.ray_gang`; a cloud's job of several machines,
:mod:`ferry.runner.cloud_gang`).

Each node's runner records its own share under the gang's folder, in ``node-<i>/`` (log,
metrics, events, the outputs it sent); the gang's own record, beside them, says how the
whole gang ended: the node that was lost, else the node whose rank failed first.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from dataclasses import dataclass
from typing import Any

from ferry.errors import FerryError
from ferry.runner.record import RunFolderReader, RunState
from ferry.runner.run import EXITED

PREEMPTED = "preempted"  # a node died under the gang (or its machine was restarted)
PROVIDER_FAILED = "provider_failed"  # the platform could not place or start the gang
NODE = "node-{}"  # a node's run folder, under the gang's


def node_folder(folder: str, node: int) -> str:
    """The run folder of node ``node``'s runner, under the gang's ``folder``."""
    return f"{folder.rstrip('/')}/{NODE.format(node)}"


@dataclass(frozen=True)
class Failure:
    """How one node of a gang failed."""

    lost: bool  # its machine (or its runner) was lost, rather than a rank failing
    code: int | None  # its exit code, where a rank failed
    reason: str
    at: float  # (wall clock) when


def gang_end(failures: dict[int, Failure], asked: bool) -> tuple[int | None, str, str | None]:
    """The gang's (exit code, outcome, reason) from its nodes' failures: a lost node's (the
    others' failures follow from it), else the node whose rank failed first. (The node
    seen failing first need not be it: a rank that leaves makes its peers fail within
    milliseconds, and their node's runner may end sooner than its own.) ``asked``: the
    gang was given the stop notice, so a node lost then was being stopped anyway."""
    if not failures:
        return 0, EXITED, None
    node, first = min(failures.items(), key=lambda item: (not item[1].lost, item[1].at))
    if first.lost and not asked:
        return None, PREEMPTED, f"node {node} of the gang was lost ({first.reason})"
    if first.lost:
        return -signal.SIGKILL, EXITED, f"node {node}: its runner was lost ({first.reason})"
    if first.code is None:
        return None, PROVIDER_FAILED, f"node {node}: {first.reason}"
    return first.code, EXITED, f"node {node}: {first.reason}"


def failure_of(state: RunState, stopped: bool) -> Failure | None:
    """How a node whose end is recorded (``state``) failed, if it did: a node recorded as
    preempted was lost. A node the gang stopped counts as failed only where its rank had
    failed before the stop reached it (its ``failed_at``)."""
    if state.outcome == PREEMPTED:
        return Failure(True, None, state.reason or "lost", state.ended_at or time.time())
    if state.outcome == EXITED and state.exit_code == 0:
        return None
    if stopped and state.failed_at is None:
        return None
    reason = state.reason or "no reason recorded"
    return Failure(False, state.exit_code, reason, state.failed_at or time.time())


def failed_of_itself(folder: str, node: int, failures: dict[int, Failure], within: float) -> None:
    """A stopped node whose rank had failed before the stop reached it: a failure too.
    Its runner may still be recording its end when the platform reports it stopped (a
    process holding its rank's output keeps it): that end is waited for, ``within``
    seconds at most."""
    reader = RunFolderReader(node_folder(folder, node))
    deadline = time.monotonic() + within
    while True:
        state = None
        with contextlib.suppress(Exception):
            state = reader.state()
        if state is not None and state.ended:
            failed = failure_of(state, stopped=True)
            if failed is not None:
                failures[node] = failed
            return
        if state is None or time.monotonic() >= deadline:
            return
        time.sleep(0.2)


def outputs_listed(folder: str, nodes: int, name: str) -> list[Any] | None:
    """What the runners of an attempt listed as sent in their file ``name`` (every node's,
    for a gang); None when one of them listed nothing."""
    folders = [node_folder(folder, n) for n in range(nodes)] if nodes > 1 else [folder]
    listed: list[Any] = []
    for each in folders:
        try:
            data = RunFolderReader(each).get(name)
            found = json.loads(data) if data is not None else None
        except (FerryError, ValueError):
            return None
        if not isinstance(found, list):
            return None
        listed += found
    return listed
