"""A gang over several Ray nodes: ``python -m ferry.runner.ray_gang RUN_FOLDER``, the
entrypoint of a Ray job whose attempt has ``resources.nodes`` above 1.

It runs inside the Ray job (it imports Ray, which the cluster has) and

1. asks for a placement group of one bundle per node (the node's CPUs, GPUs, memory and
   accelerator type), ``STRICT_SPREAD``: each on a node of its own; it gives up after
   ``limits.max_pending`` with what it asked for (a provider failure);
2. learns each bundle's node address (node 0's is ``MASTER_ADDR``) and a free port on
   node 0 (``MASTER_PORT``);
3. starts one Ray task per bundle, each running Ferry's runner for its node
   (``python -m ferry.runner RUN_FOLDER/node-<i>``, with the node's share of the order:
   ``node_rank``, the hosts, the port) with the GPUs Ray gave that task;
4. passes the notice on: SIGTERM to this process (Ray's stop) cancels every task, which
   sends SIGTERM to its runner, which stops its ranks (SIGKILL after the grace);
5. stops the gang when a node's runner fails, and when a node dies (the attempt then
   counts as preempted: the job resumes from its checkpoint);
6. records the gang's end in the run folder: the node that died, or the exit code and
   reason of the node whose rank failed first (by the time its runner recorded).

Each node's runner records its own share in ``node-<i>/`` (log, metrics, events, its
outputs listing), which the controller reads beside this folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from ferry.runner.nodes import (
    PROVIDER_FAILED,
    Failure,
    failed_of_itself,
    failure_of,
    gang_end,
    node_folder,
)
from ferry.runner.order import RunOrder
from ferry.runner.record import RUNNING, STARTING, RunFolderReader, RunFolderWriter, _Place
from ferry.runner.run import NOT_STARTED, SECRETS


def bundle(order: RunOrder) -> dict[str, float]:
    """What one node's share of the gang holds (a placement group bundle)."""
    plan = order.machine or {}
    wanted: dict[str, float] = {"CPU": float(plan.get("cpus") or 1)}
    if plan.get("gpus"):
        wanted["GPU"] = float(plan["gpus"])
    for name, amount in (plan.get("resources") or {}).items():
        wanted[str(name)] = float(amount)
    return wanted


def _run_node(folder: str) -> int:
    """(A Ray task, on the node of its bundle.) Run that node's runner to its end; a
    cancel (the notice) is passed on as SIGTERM. The runner dies with the task's worker."""
    from ferry.runner.spawn import spawn

    runner = spawn(  # (with a parent-death signal)
        [sys.executable, "-m", "ferry.runner", folder],
        {"env": dict(os.environ), "stdin": subprocess.DEVNULL},
    )
    while True:
        try:
            return runner.wait()
        except KeyboardInterrupt:  # ray.cancel: the notice
            runner.send_signal(signal.SIGTERM)


def _node_address() -> tuple[str, int]:
    """(A Ray task.) This node's address, and a free port on it."""
    import ray

    from ferry.runner.run import free_port

    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return address, free_port()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ferry.runner.ray_gang RUN_FOLDER", file=sys.stderr)
        return 2
    folder = args[0]
    from ferry.runner.run import take_order

    secrets = _Place(folder).get(SECRETS)  # (take_order removes the file)
    order = take_order(folder, "ferry gang")
    if order is None:
        return 2
    if not order.argv:  # stopped before it started (recorded)
        return 0
    record = RunFolderWriter(folder, order.attempt)
    asked: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(signum))
    try:
        code, outcome, reason = _gang(folder, order, record, asked, secrets)
    except Exception as exc:  # Ray refused something: the attempt could not run
        code, outcome, reason = None, PROVIDER_FAILED, f"the gang could not start on Ray: {exc}"
    record.end(code, outcome, reason)
    return 0


def _gang(
    folder: str,
    order: RunOrder,
    record: RunFolderWriter,
    asked: list[int],
    secrets: bytes | None,
) -> tuple[int | None, str, str | None]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from ferry.units import format_duration

    nodes = len(order.hosts)
    import logging

    ray.init(logging_level=logging.ERROR, log_to_driver=False)
    wanted = bundle(order)
    shown = ", ".join(f"{v:g} {k}" for k, v in wanted.items())
    record.event(f"asking Ray for {nodes} nodes of {shown} each (STRICT_SPREAD)")
    record.beat(STARTING)
    group = placement_group([wanted] * nodes, strategy="STRICT_SPREAD")
    wait = float((order.machine or {}).get("max_pending") or 600.0)
    deadline = time.monotonic() + wait
    try:
        while not group.wait(timeout_seconds=1):  # (the notice is looked at every second)
            if asked:
                return None, NOT_STARTED, "stopped while Ray placed the gang"
            if time.monotonic() > deadline:
                return (
                    None,
                    PROVIDER_FAILED,
                    f"Ray could not place {nodes} nodes of {shown} each on nodes of their "
                    f"own within limits.max_pending ({format_duration(wait)})",
                )

        def on(index: int) -> Any:
            return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)

        where = ray.remote(num_cpus=0)(_node_address)
        addresses = ray.get(
            [where.options(scheduling_strategy=on(i)).remote() for i in range(nodes)],
            timeout=120,
        )
        if asked:
            return None, NOT_STARTED, "stopped while Ray placed the gang"
        hosts = [host for host, _ in addresses]
        port = addresses[0][1]
        run_node = ray.remote(max_retries=0)(_run_node)
        tasks = []
        for node in range(nodes):
            share = replace(order, hosts=hosts, node_rank=node, master_port=port)
            share.write(node_folder(folder, node))
            if secrets is not None:  # (a cluster here: each node's runner reads its own)
                _Place(node_folder(folder, node)).put(SECRETS, secrets)
            options: dict[str, Any] = {"num_cpus": wanted["CPU"], "scheduling_strategy": on(node)}
            if "GPU" in wanted:
                options["num_gpus"] = wanted["GPU"]
            # the job's variables reach the task through the Ray job's runtime env; the
            # task's own (the GPUs Ray gave it) stand
            tasks.append(run_node.options(**options).remote(node_folder(folder, node)))
        record.event(f"the gang's {nodes} nodes: {', '.join(hosts)}; MASTER_ADDR {hosts[0]}:{port}")
        record.beat(RUNNING)
        return _follow(folder, tasks, record, asked, order.grace + _END_MARGIN)
    finally:
        remove_placement_group(group)


_END_MARGIN = 10.0  # s past the grace a stopped node's runner gets to record its end


def _follow(
    folder: str, tasks: list[Any], record: RunFolderWriter, asked: list[int], grace: float
) -> tuple[int | None, str, str | None]:
    """Until every node's runner has ended: the notice to all, a failing or lost node
    stopping the others. Returns the gang's (exit code, outcome, reason), as
    :func:`ferry.runner.nodes.gang_end` picks it."""
    import ray

    pending = list(tasks)
    index = {task: node for node, task in enumerate(tasks)}
    cancelled: set[Any] = set()
    failures: dict[int, Failure] = {}

    def stop_others(why: str) -> None:
        with contextlib.suppress(Exception):  # (the record may fail: the notice may not)
            record.event(f"{why}: stopping the gang's {len(pending)} other nodes")
        for other in pending:
            if other not in cancelled:
                cancelled.add(other)
                ray.cancel(other)

    last_beat = time.monotonic()
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for task in done:
                node = index[task]
                first = not failures
                try:
                    ray.get(task)
                except Exception as exc:  # its node died, or its worker was killed
                    if task in cancelled:  # (stopped here: its runner recorded its end)
                        failed_of_itself(folder, node, failures, grace)
                        continue
                    why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    failures[node] = Failure(True, None, why, time.time())
                    if first:
                        stop_others(f"node {node} was lost")
                    continue
                if task in cancelled:  # (it may have failed before it was stopped)
                    failed_of_itself(folder, node, failures, grace)
                    continue
                state = RunFolderReader(node_folder(folder, node)).state()
                failed = (
                    Failure(False, None, "no end recorded", time.time())
                    if state is None or not state.ended
                    else failure_of(state, stopped=False)
                )
                if failed is None:
                    continue
                failures[node] = failed
                if first and pending:
                    stop_others(f"node {node} failed")
            if asked and any(task not in cancelled for task in pending):
                stop_others("notice (SIGTERM)")
            if time.monotonic() - last_beat >= 2:
                with contextlib.suppress(Exception):
                    record.beat(RUNNING)
                last_beat = time.monotonic()
    except BaseException:  # this process failed: the nodes get the notice all the same
        for task in pending:
            with contextlib.suppress(Exception):
                ray.cancel(task)
        with contextlib.suppress(Exception):
            ray.wait(pending, num_returns=len(pending), timeout=60)
        raise
    return gang_end(failures, bool(asked))


if __name__ == "__main__":
    sys.exit(main())
