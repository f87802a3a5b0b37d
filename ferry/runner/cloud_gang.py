"""A gang over a cloud's machines: what :mod:`ferry.runner.cloud` runs on each machine of a
Vertex AI custom job with several replicas, or of a SageMaker training job whose
``InstanceCount`` is above 1 (an order with several ``hosts``).

The provider starts the same command on every machine. Each one:

1. learns its place in the gang: the machines' names and its own rank, from Vertex AI's
   ``CLUSTER_SPEC`` (workerpool0's replica is node 0, workerpool1's follow in order) or
   SageMaker's ``/opt/ml/input/config/resourceconfig.json`` (``hosts``, ``current_host``);
2. learns where rank 0 listens (``MASTER_PORT``): on Vertex AI the port ``CLUSTER_SPEC``
   gives workerpool0, which the service opens between replicas; on SageMaker a free port
   of node 0. Node 0 writes the hosts and the port into the run folder (``gang.json``);
   the others wait for that file, for ``limits.max_pending`` at most;
3. writes its share of the order (the hosts, its rank, the port) into
   ``RUN_FOLDER/node-<rank>/`` and runs Ferry's runner on that folder, in the job's code,
   as its child; the provider's SIGTERM is passed on to it. Every ``ALIVE_EVERY``
   seconds it says it is there (``alive`` in its folder), whatever its runner is doing
   (bringing inputs, installing, sending outputs).

Node 0 also follows the gang. It keeps the gang's own record in ``RUN_FOLDER`` (starting,
running, the end, the events), passes the controller's notice (``stopped`` there) on to
every node's folder, and stops the others the same way when a node fails, never starts
(within ``limits.max_pending``) or is lost (not heard from for ``LOST_AFTER``); such a
node is told to stop too, should it come back. Once every node has ended it records the
gang's end (:func:`ferry.runner.nodes.gang_end`) and exits, last: the provider's job
lasts until the end is recorded. A node still running past the grace and the upload
allowance after it was told to stop is left to the provider: node 0 records the end and
exits 1, and the controller cancels a job that runs on after its recorded end.

The notice reaches a node's runner as ``stopped`` in its folder, which it looks for
before it starts and as it beats; the provider's SIGTERM is also passed on as a signal,
but only to a runner that has started (whose handlers are in place).

A provider may start a machine's command again (Vertex AI restarts a replica that
exited with an error, and moves one to another VM for maintenance). A node whose record
shows it ran before does not run again: node 0 then counts itself lost and stops the
gang, any other node records that it was lost, and the attempt resumes from its
checkpoint as after a preemption.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ferry import defaults
from ferry.errors import FerryError
from ferry.runner.nodes import PREEMPTED, Failure, failure_of, gang_end, node_folder
from ferry.runner.record import (
    RUNNING,
    STOPPED,
    RunFolderReader,
    RunFolderWriter,
    RunState,
    _Place,
)
from ferry.units import format_duration

if TYPE_CHECKING:
    from ferry.runner.order import RunOrder

GANG = "gang.json"  # in the gang's run folder: the hosts and MASTER_PORT, from node 0
ALIVE = "alive"  # in each node's folder: when its machine last said it is there
RESOURCE_CONFIG = "/opt/ml/input/config/resourceconfig.json"  # SageMaker's, on each machine
POLL = 2.0  # s between node 0's looks at the nodes' records
ALIVE_EVERY = 10.0  # s between a machine's words that it is there
LOST_AFTER = 120.0  # s without a word from a machine before its node counts as lost
DEFAULT_WAIT = 600.0  # s the machines wait for each other (an order without max_pending)
TRIES = 5  # times a write of the gang's record is tried, 2 s apart, before giving up


@dataclass(frozen=True)
class Place:
    """This machine's place in the gang, as the provider told it."""

    hosts: tuple[str, ...]  # every machine's name, by node rank
    rank: int  # this machine's
    port: int  # where rank 0 listens; 0: a free port of node 0


def place(nodes: int, environ: Mapping[str, str], resource_config: str = RESOURCE_CONFIG) -> Place:
    """This machine's place in a gang of ``nodes``. Raises FerryError when the provider
    said nothing of the others, or something else than the job asked for."""
    if environ.get("CLUSTER_SPEC"):
        found = _vertex_place(environ["CLUSTER_SPEC"])
    elif os.path.isfile(resource_config):
        found = _sagemaker_place(resource_config)
    else:
        raise FerryError(
            "this machine is not told where the gang's other machines are (no CLUSTER_SPEC, "
            f"no {resource_config})",
            "run jobs of several nodes on Vertex AI, SageMaker or Ray",
        )
    if len(found.hosts) != nodes:
        raise FerryError(
            f"the provider started {len(found.hosts)} machines for a gang of {nodes}",
            "submit the job again",
        )
    return found


def _vertex_place(text: str) -> Place:
    """From Vertex AI's ``CLUSTER_SPEC``: ``{"cluster": {"workerpool0": ["HOST:PORT"],
    "workerpool1": [...]}, "task": {"type": "workerpool1", "index": 0}, ...}``."""
    try:
        data = json.loads(text)
        cluster, task = data["cluster"], data["task"]
        chief = list(cluster.get("workerpool0") or [])
        workers = list(cluster.get("workerpool1") or [])
        kind, index = str(task["type"]), int(task.get("index") or 0)
        if kind not in ("workerpool0", "workerpool1"):
            raise ValueError(f"this replica is of {kind}, which a Ferry gang does not use")
        rank = index if kind == "workerpool0" else len(chief) + index
        addresses = [str(a) for a in chief + workers]
        hosts = tuple(a.rsplit(":", 1)[0] for a in addresses)
        port = int(addresses[0].rsplit(":", 1)[1]) if ":" in addresses[0] else 0
        if not 0 <= rank < len(hosts):
            raise ValueError(f"replica {kind}-{index} is not one of its {len(hosts)} hosts")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise FerryError(
            f"CLUSTER_SPEC is not as Vertex AI writes it ({exc})", "submit the job again"
        ) from None
    return Place(hosts, rank, port)


def _sagemaker_place(path: str) -> Place:
    """From SageMaker's ``resourceconfig.json``: ``{"current_host": "algo-2", "hosts":
    ["algo-1", "algo-2"], ...}``."""
    try:
        with open(path) as file:
            data = json.load(file)
        hosts = tuple(str(h) for h in data["hosts"])
        rank = hosts.index(str(data["current_host"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FerryError(
            f"{path} is not as SageMaker writes it ({exc})", "submit the job again"
        ) from None
    return Place(hosts, rank, 0)


def main(folder: str, code: str, order: RunOrder) -> int:
    """Run this machine's share of the gang whose run folder is ``folder``."""
    try:
        where = place(len(order.hosts), os.environ)
    except FerryError as exc:
        _fail_machine(f"this machine cannot join the gang: {exc}")
        return 1
    asked: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(signum))
    if where.rank == 0:
        return _Lead(folder, code, order, where, asked).run()
    return _join(folder, code, order, where, asked)


def _say(words: str) -> None:
    print(f"ferry: {words}", file=sys.stderr, flush=True)


def _fail_machine(words: str) -> None:
    """Say why this machine ends, in its log and (on SageMaker) as the job's failure."""
    from ferry.runner.bootstrap import FAILURE_FILE

    _say(words)
    if os.path.isdir(os.path.dirname(FAILURE_FILE)):
        with contextlib.suppress(OSError):
            Path(FAILURE_FILE).write_text(words[:1000])


def _wait(order: RunOrder) -> float:
    return float((order.machine or {}).get("max_pending") or DEFAULT_WAIT)


class _Alive:
    """This machine's word that it is there, in its node's folder, every ``ALIVE_EVERY``."""

    def __init__(self, folder: str) -> None:
        self.place = _Place(folder)
        self.last = -ALIVE_EVERY

    def say(self) -> None:
        if time.monotonic() - self.last < ALIVE_EVERY:
            return
        with contextlib.suppress(FerryError):  # (said again at the next one)
            self.place.put(ALIVE, json.dumps({"at": time.time()}).encode())
            self.last = time.monotonic()


def _state(folder: str) -> RunState | None:
    """The state in ``folder``, asked up to ``TRIES`` times. Raises FerryError."""
    for attempt in range(TRIES):
        try:
            return RunFolderReader(folder).state()
        except FerryError:
            if attempt == TRIES - 1:
                raise
            time.sleep(2.0)
    return None  # (not reached)


def _tried(what: str, write: Callable[[], None]) -> None:
    """``write``, tried up to ``TRIES`` times. Raises FerryError saying ``what`` failed."""
    for attempt in range(TRIES):
        try:
            write()
            return
        except FerryError as exc:
            if attempt == TRIES - 1:
                raise FerryError(f"{what} could not be written: {exc.message}") from None
            time.sleep(2.0)


def _signal_started(runner: subprocess.Popen[bytes] | None, folder: str) -> bool:
    """SIGTERM to this node's runner, once it has started (its record is there, so its
    handlers are in place): whether it was sent, or there is no runner to send it to."""
    if runner is None or runner.poll() is not None:
        return True
    try:
        started = RunFolderReader(folder).state() is not None
    except FerryError:
        return False
    if started:
        with contextlib.suppress(OSError):
            runner.send_signal(signal.SIGTERM)
    return started


def _join(folder: str, code: str, order: RunOrder, where: Place, asked: list[int]) -> int:
    """A node other than 0: wait for node 0's word, then run this node's runner."""
    mine = node_folder(folder, where.rank)
    try:
        if _ran_before(mine, order):
            return 0
    except FerryError as exc:
        _fail_machine(f"node {where.rank} cannot read its run folder: {exc}")
        return 1
    root, own, alive = _Place(folder), _Place(mine), _Alive(mine)
    deadline = time.monotonic() + _wait(order)
    port = None
    while port is None:
        alive.say()
        with contextlib.suppress(FerryError, ValueError, KeyError, TypeError):
            if asked or root.get(STOPPED) is not None or own.get(STOPPED) is not None:
                _not_started(mine, order, "stopped before it started")
                return 0
            said = root.get(GANG)
            if said is not None:
                port = int(json.loads(said)["port"])
                break
        if time.monotonic() > deadline:
            waited = format_duration(_wait(order))
            _not_started(mine, order, f"node 0 did not say where the gang meets within {waited}")
            return 0
        time.sleep(POLL)
    try:
        runner = _start(folder, code, order, where, port)
    except FerryError as exc:
        _not_started(mine, order, f"its runner could not be started: {exc}")
        return 0
    if runner is not None:
        _until_ended(runner, mine, order, asked, alive)
    return 0


def _ran_before(folder: str, order: RunOrder) -> bool:
    """Whether this node ran before (the provider started the command again): its end is
    then recorded, as lost where it was not, and it runs no more. Raises FerryError when
    its record cannot be read."""
    state = _state(folder)
    if state is None:
        return False
    if not state.ended:
        why = "its machine started it again while it ran"
        _say(why)
        with contextlib.suppress(FerryError):
            RunFolderWriter(folder, order.attempt, announce=False).end(None, PREEMPTED, why)
    return True


def _not_started(folder: str, order: RunOrder, why: str) -> None:
    from ferry.runner.run import NOT_STARTED, SECRETS

    with contextlib.suppress(FerryError):
        _Place(folder).remove(SECRETS)
    try:
        RunFolderWriter(folder, order.attempt, announce=False).end(None, NOT_STARTED, why)
    except FerryError as exc:
        _say(f"{why}; and its run folder could not be written: {exc}")


def _start(
    folder: str, code: str, order: RunOrder, where: Place, port: int
) -> subprocess.Popen[bytes] | None:
    """This node's runner, started on its share of the order in the job's code (None when
    the code could not be brought: recorded as not started). Raises FerryError when the
    share cannot be written."""
    from ferry.runner.code import code_or_end
    from ferry.runner.spawn import spawn

    mine = node_folder(folder, where.rank)
    share = replace(order, hosts=list(where.hosts), node_rank=where.rank, master_port=port)
    share.write(mine)
    work = code_or_end(mine, code, order.attempt)
    if work is None:
        return None
    _say(f"node {where.rank} of {len(where.hosts)}: code of the job in {work}; starting its runner")
    try:
        return spawn(
            [sys.executable, "-m", "ferry.runner", mine],
            {"cwd": str(work), "env": dict(os.environ), "stdin": subprocess.DEVNULL},
        )
    except OSError as exc:
        raise FerryError(f"the runner could not be started: {exc}") from None


def _until_ended(
    runner: subprocess.Popen[bytes],
    folder: str,
    order: RunOrder,
    asked: list[int],
    alive: _Alive,
) -> None:
    """Wait for this node's runner, passing the provider's SIGTERM on (``stopped`` in its
    folder, and the signal once it has started) and saying the machine is there; a runner
    that ended without recording its end (it crashed) has it recorded for it."""
    told = signalled = False
    last = 0.0
    while runner.poll() is None:
        alive.say()
        if asked and time.monotonic() - last >= POLL:
            last = time.monotonic()
            if not told:
                with contextlib.suppress(FerryError):
                    _Place(folder).put(STOPPED, b"")
                    told = True
            signalled = signalled or _signal_started(runner, folder)
        with contextlib.suppress(subprocess.TimeoutExpired):
            runner.wait(timeout=0.5)
    for _ in range(5):  # (the bucket may not answer at once)
        if _record_if_silent(runner, folder, order):
            return
        time.sleep(1.0)


def _record_if_silent(runner: subprocess.Popen[bytes], folder: str, order: RunOrder) -> bool:
    """Record the end of a runner that ended without recording it; whether its record
    could be read (nothing is written on a read that failed)."""
    from ferry.runner.run import EXITED

    try:
        state = RunFolderReader(folder).state()
    except FerryError:
        return False
    if state is not None and state.ended:
        return True
    code = runner.returncode
    why = f"its runner ended without recording the end (exit code {code})"
    _say(why)
    with contextlib.suppress(FerryError):
        RunFolderWriter(folder, order.attempt, announce=False).end(code, EXITED, why)
    return True


class _Lead:
    """Node 0: its own runner, and the gang's record."""

    def __init__(
        self, folder: str, code: str, order: RunOrder, where: Place, asked: list[int]
    ) -> None:
        self.folder, self.code, self.order, self.where = folder, code, order, where
        self.asked = asked
        self.nodes = len(where.hosts)
        self.pending = set(range(self.nodes))  # nodes whose end is still to come
        self.failures: dict[int, Failure] = {}
        self.to_tell: set[int] = set()  # nodes to stop ...
        self.told: set[int] = set()  # ... and those whose folder says so
        self.noticed = False  # the notice (the controller's, the provider's) passed on
        self.by_provider = False  # ... and it was the provider's SIGTERM, not Ferry's stop
        self.stop_by: float | None = None  # (monotonic) when the told nodes should have ended
        self.runner: subprocess.Popen[bytes] | None = None
        self.signalled = True  # the provider's SIGTERM passed on to node 0's runner
        self.signals = 0  # the provider's SIGTERMs taken
        self.silent_checked = False
        self.record: RunFolderWriter

    def run(self) -> int:
        from ferry.runner.run import NOT_STARTED, free_port

        try:
            before = _state(self.folder)
            if before is not None:  # the provider started this machine's command again
                return self._again(before)
            self.record = RunFolderWriter(self.folder, self.order.attempt)  # (starting)
            if self.record.stopped() or self.asked:
                self.to_tell = set(range(self.nodes))
                for _ in range(TRIES):
                    if self._tell():
                        break
                    time.sleep(2.0)
                _not_started(node_folder(self.folder, 0), self.order, "stopped before it started")
                return self._end(None, NOT_STARTED, "stopped before it started")
            port = self.where.port or free_port()
            hosts = list(self.where.hosts)
            said = json.dumps({"hosts": hosts, "port": port}).encode()
            _tried("gang.json", lambda: _Place(self.folder).put(GANG, said))
        except FerryError as exc:  # (nothing has started: the provider ends the job)
            _fail_machine(f"node 0 cannot keep the gang's record: {exc}")
            return 1
        self._event(
            f"the gang's {self.nodes} nodes: {', '.join(hosts)}; MASTER_ADDR {hosts[0]}:{port}"
        )
        try:
            self.runner = _start(self.folder, self.code, self.order, self.where, port)
        except FerryError as exc:
            why = f"its runner could not be started: {exc}"
            _not_started(node_folder(self.folder, 0), self.order, why)
        with contextlib.suppress(FerryError):
            self.record.beat(RUNNING)
        stuck = self._follow()
        if self.runner is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.runner.wait(timeout=30)
        return self._end(*gang_end(self.failures, self.noticed)) or (1 if stuck else 0)

    def _end(self, code: int | None, outcome: str, reason: str | None) -> int:
        """Record the gang's end (tried again while the bucket does not answer): 0, or 1
        when it could not be."""
        try:
            _tried("the gang's end", lambda: self.record.end(code, outcome, reason))
        except FerryError as exc:
            _fail_machine(f"node 0: {exc}")
            return 1
        return 0

    def _again(self, before: RunState) -> int:
        """This machine ran node 0 before: the gang's end stands where it is recorded;
        else node 0 counts as lost, and the others are stopped and waited for."""
        if before.ended:
            return 0
        why = "its machine started it again while the gang ran"
        _say(f"node 0: {why}; stopping the gang")
        self.record = RunFolderWriter(self.folder, self.order.attempt, announce=False)
        self.pending.discard(0)
        self.failures[0] = Failure(True, None, why, time.time())
        self._stop(self.pending | {0}, f"node 0: {why}: stopping the gang's other nodes")
        stuck = self._follow()
        return self._end(*gang_end(self.failures, self.noticed)) or (1 if stuck else 0)

    def _follow(self) -> bool:
        """Until every node has ended (or was given up on): the notice passed on, a node
        that fails, never starts or is lost stopping the others. Returns whether a node
        was left running."""
        folders = {n: node_folder(self.folder, n) for n in range(self.nodes)}
        readers = {n: RunFolderReader(folders[n]) for n in range(self.nodes)}
        began = time.monotonic()
        last_look = began  # (at the machines' words)
        while self.pending:
            self._take_notice()
            self._tell()
            if not self.signalled:
                self.signalled = _signal_started(self.runner, folders[0])
            runner = self.runner
            ended = runner is not None and runner.poll() is not None
            if ended and runner is not None and 0 in self.pending and not self.silent_checked:
                self.silent_checked = _record_if_silent(runner, folders[0], self.order)
            for node in sorted(self.pending):
                try:
                    state = readers[node].state()
                except FerryError:  # (the bucket did not answer: asked again)
                    continue
                if state is not None and state.ended:
                    failed = self._failure(node, state)  # (while it is pending: a notice
                    self.pending.discard(node)  # taken now counts it as told)
                    if failed is not None:
                        self._failed(node, failed)
            if time.monotonic() - last_look >= ALIVE_EVERY:
                last_look = time.monotonic()
                for node in sorted(self.pending - {0}):  # (node 0 is this machine)
                    lost = self._lost(folders[node], began)
                    if lost:
                        self.pending.discard(node)
                        self.to_tell.add(node)  # (should it come back, it ends at once)
                        self._failed(node, Failure(True, None, lost, time.time()))
            if self.pending and self.stop_by is not None and time.monotonic() > self.stop_by:
                left = ", ".join(str(n) for n in sorted(self.pending))
                self._event(f"nodes {left} did not end after the stop: left to the provider")
                return True
            if self.pending:
                with contextlib.suppress(FerryError):
                    self.record.beat(RUNNING)
                time.sleep(POLL)
        for _ in range(TRIES):  # (a node given up on hears it, should it come back)
            if self._tell():
                break
            time.sleep(2.0)
        return False

    def _failure(self, node: int, state: RunState) -> Failure | None:
        """How ``node``, which has ended, failed (if it did). An end that would count is
        weighed again once the notice is looked for: a node that saw the controller's
        stop before this did ended as stopped, not failed."""
        failed = failure_of(state, stopped=self._stopped(node))
        if failed is not None and not self.noticed:
            self._take_notice()
            failed = failure_of(state, stopped=self._stopped(node))
        return failed

    def _stopped(self, node: int) -> bool:
        """Whether ``node`` was stopped by Ferry (the gang, or the controller's notice):
        after the provider's own SIGTERM, a node's exit code stands."""
        return not self.by_provider and (node in self.to_tell or self.noticed)

    def _failed(self, node: int, failed: Failure) -> None:
        first = not self.failures
        self.failures[node] = failed
        if first and self.pending:
            how = "was lost" if failed.lost else "failed"
            said = f"node {node} {how}: stopping the gang's {len(self.pending)} other nodes"
            self._stop(self.pending, said)

    def _lost(self, folder: str, began: float) -> str:
        """Why the node whose folder is ``folder`` counts as lost, or ``""``."""
        try:
            data = _Place(folder).get(ALIVE)
            heard = float(json.loads(data)["at"]) if data is not None else None
        except (FerryError, ValueError, KeyError, TypeError):
            return ""  # (asked again at the next look)
        if heard is None:
            if time.monotonic() - began > _wait(self.order):
                return f"its machine did not start within {format_duration(_wait(self.order))}"
            return ""
        if time.time() - heard > LOST_AFTER:
            return f"its machine has not been heard from for {format_duration(LOST_AFTER)}"
        return ""

    def _take_notice(self) -> None:
        """The notice, once it comes (``stopped`` from the controller, or the provider's
        SIGTERM to this machine): passed on to every node still running. The provider's
        SIGTERM is also passed on to node 0's runner as a signal, and leaves the nodes a
        little less than the grace to end (the provider's SIGKILL follows it)."""
        if len(self.asked) > self.signals:
            self.signals = len(self.asked)
            self.signalled = False
            soon = time.monotonic() + max(5.0, self.order.grace - 5.0)
            self.stop_by = min(self.stop_by or soon, soon)
        if self.noticed:
            return
        stopped = self.record.stopped()
        if not stopped and not self.asked:
            return
        self.noticed = True
        self.by_provider = not stopped
        self._stop(self.pending, f"notice: stopping the gang's {len(self.pending)} nodes")

    def _stop(self, nodes: set[int], said: str) -> None:
        """Tell ``nodes`` to stop (``stopped`` in their folders, which their runners look
        for as they beat), saying ``said`` in the gang's events."""
        self._event(said)
        self.to_tell |= nodes
        self._tell()
        wait = self.order.grace + defaults.CLOUD_UPLOAD_ALLOWANCE + 2 * ALIVE_EVERY
        by = time.monotonic() + wait
        self.stop_by = min(self.stop_by or by, by)

    def _tell(self) -> bool:
        """Write ``stopped`` into the folders of the nodes to stop that do not say so yet
        (a write that fails is tried again at the next look); whether all say so now."""
        for node in sorted(self.to_tell - self.told):
            with contextlib.suppress(FerryError):
                _Place(node_folder(self.folder, node)).put(STOPPED, b"")
                self.told.add(node)
        return self.to_tell <= self.told

    def _event(self, message: str) -> None:
        with contextlib.suppress(FerryError):  # (the record may fail: the stop may not)
            self.record.event(message)
