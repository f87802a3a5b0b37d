"""The ray backend: each attempt is a Ray job, submitted through the cluster's Jobs API.

The attempt's entrypoint is Ferry's runner (``<python> -m ferry.runner RUN_FOLDER``, the
interpreter named: a bare ``python`` may be another one on the cluster's nodes), with the
job's code snapshot as its ``working_dir``. The runner makes the node ready (inputs,
checkpoints, the contract), runs the command or the gang, sends the outputs to the
bucket, and records everything in the run folder, which the controller reads: the
attempt's log, metrics and events come from there, its end from ``state.json``.

The run folder is the job's folder on this machine when the cluster runs here, else a
prefix of the job's bucket (``<bucket>/.ferry/runs/<job>/<attempt>``).

Ray's states map to the controller's outcomes: PENDING and RUNNING are running (PENDING
ends after ``limits.max_pending``, 10 minutes by default, since Ray waits for ever for
resources no node has: a provider failure, with what the cluster offers); SUCCEEDED,
FAILED and STOPPED end the attempt as its run folder records; a job the cluster no
longer knows, or one whose runner died without recording its end, is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from ferry import config
from ferry.backends import ray_jobs
from ferry.backends.base import (
    Backend,
    Exit,
    LaunchRequest,
    RunningAttempt,
    exit_of,
)
from ferry.backends.ray_cluster import Cluster, cluster, describe_cluster, ray_label
from ferry.errors import FerryError, SpecError
from ferry.runner.record import STOPPED
from ferry.runner.run import SECRETS
from ferry.status import describe_exit
from ferry.store.records import Job
from ferry.units import format_duration, format_size

DEFAULT_MAX_PENDING = 600.0  # s an attempt may wait for the cluster to place it
_POLL_EVERY = 0.5  # s between looks at the Jobs API and the run folder ...
# ... at least; a process following many attempts (a watcher) looks at each less often,
# so that it asks the cluster (and the bucket) about 1 / _POLL_SHARE times a second in all
_POLL_SHARE = 0.025
_following: weakref.WeakSet[RayRun] = weakref.WeakSet()  # the attempts followed here, running
# s Ray waits after the runner's grace before it SIGKILLs the runner: its last upload of
# checkpoints and outputs happens in this time
_UPLOAD_ALLOWANCE = 600
_UNREACHABLE_LOST = 300.0  # s without an answer from the cluster before the attempt is lost
_UNPLACED_STOP = 10.0  # s a stopped job Ray never placed is given before it counts as ended
RUNS_PREFIX = ".ferry/runs"  # in the job's bucket: the run folders of remote attempts


def run_folder(job: Job, attempt: int, submission_id: str, local: bool) -> str:
    """Where attempt ``attempt`` of ``job`` records itself: the job's folder when the
    cluster runs on this machine, else its bucket (under the Ray job's submission id,
    which no other attempt has)."""
    from ferry.storage.locations import parse_uri

    outputs = parse_uri(job.outputs)
    if local or outputs.is_local:
        return str(Path(job.job_dir) / "runs" / str(attempt))
    return f"{outputs.protocol}://{outputs.bucket}/{RUNS_PREFIX}/{submission_id}"


def _handle(submission_id: str, dashboard: str) -> str:
    return f"{submission_id}@{dashboard}"


def _parse_handle(handle: str) -> tuple[str, str]:
    submission_id, _, dashboard = handle.partition("@")
    return submission_id, dashboard


class RayRun(RunningAttempt):
    """An attempt submitted to a Ray cluster, followed through the Jobs API and its run
    folder: :meth:`submit` one, or follow one again (:meth:`RayBackend.reattach`)."""

    def __init__(
        self,
        job: Job,
        dashboard: str,
        submission_id: str,
        folder: str,
        log_path: str,
        metrics_path: str,
        asks: str = "",
    ) -> None:
        from ferry.backends.mirror import RunMirror
        from ferry.runner.record import _Place

        self.dashboard = dashboard
        self.jobs = ray_jobs.RayJobs(dashboard)
        self.submission_id = submission_id
        self.folder = folder
        self._place = _Place(folder)
        self.handle = _handle(submission_id, dashboard)
        self.pid = None
        self._mirror = RunMirror(folder, job.plan.resources.nodes, log_path, metrics_path)
        self._reader = self._mirror.reader
        self._exit: Exit | None = None
        self._launched = time.monotonic()
        self._next_look = 0.0
        self._stopped: float | None = None  # when the controller stopped it
        self._answered = time.monotonic()  # the cluster's last answer
        self._max_pending = job.plan.limits.max_pending or DEFAULT_MAX_PENDING
        self._asks = asks
        _following.add(self)

    @classmethod
    def submit(cls, request: LaunchRequest, where: Cluster, submission_id: str) -> RayRun:
        """Submit the attempt ``request`` asks for as a Ray job."""
        from ferry.runner.order import RunOrder
        from ferry.runner.record import _Place

        job = request.job
        folder = request.run_folder
        nodes = job.plan.resources.nodes
        machine = dict(request.machine or {})
        if nodes > 1:  # what ferry.runner.ray_gang asks of each node besides CPUs and GPUs
            machine["resources"] = _extra_resources(job)
            machine["max_pending"] = job.plan.limits.max_pending or DEFAULT_MAX_PENDING
        order = RunOrder(
            attempt=request.attempt,
            argv=request.argv,
            cwd=".",  # Ray's working_dir: the code snapshot
            env={},
            grace=request.grace,
            procs_per_node=request.procs_per_node,
            # one node: its processes meet on it; several: each node's address, learnt by
            # ferry.runner.ray_gang once the gang is placed
            hosts=["127.0.0.1"] if nodes == 1 else ["?"] * nodes,
            machine=machine,
            job_env=sorted(job.plan.env),
        )
        order.write(folder)
        jobs = ray_jobs.RayJobs(where.dashboard)
        package = jobs.upload_folder(Path(job.job_dir) / "code", owner=job.id)
        python = str(config.get("ray.python") or (sys.executable if where.local else "python3"))
        env = {
            **request.env,
            # Ray's own SIGKILL comes well after the runner's: the runner sends the outputs
            # and records the end first
            "RAY_JOB_STOP_WAIT_TIME_S": str(int(request.grace) + _UPLOAD_ALLOWANCE),
        }
        if where.local:  # the node is this machine: the same cache of inputs
            env.setdefault("FERRY_HOME", str(config.ferry_home()))
            secrets = {k: env.pop(k) for k in job.plan.secrets if k in env}
            if secrets:  # in the job's private folder, not in Ray's record of the job
                _Place(folder).put(SECRETS, json.dumps(secrets).encode())
        body = submit_request(request, submission_id, python, folder, package, env)
        jobs.submit(body)
        return cls(
            job,
            where.dashboard,
            submission_id,
            folder,
            request.log_path,
            request.metrics_path,
            _asks(body),
        )

    def go_on(self) -> None:
        """Following the attempt again: nothing is copied twice."""
        self._mirror.go_on()

    def poll(self) -> Exit | None:
        if self._exit is not None:
            return self._exit
        now = time.monotonic()
        if now < self._next_look:
            return None
        self._next_look = now + max(_POLL_EVERY, len(_following) * _POLL_SHARE)
        try:
            self._mirror.copy()
            info = self.jobs.job(self.submission_id)
        except FerryError as exc:  # the cluster or the bucket did not answer: again soon
            if now - self._answered > _UNREACHABLE_LOST:
                self._exit = Exit(
                    Exit.LOST,
                    None,
                    f"the Ray cluster at {self.dashboard} did not answer for "
                    f"{format_duration(now - self._answered)} ({exc.message})",
                )
                _following.discard(self)
            return self._exit
        self._answered = now
        if info is None:
            self._exit = Exit(
                Exit.LOST,
                None,
                f"the Ray cluster at {self.dashboard} no longer knows its job "
                f"{self.submission_id} (did the head restart?)",
            )
        elif info.status == ray_jobs.PENDING:
            if self._stopped is not None and now - self._stopped > _UNPLACED_STOP:
                # Ray stops a job it never placed only once it is placed: it is over for
                # the controller, and a runner started late finds the stop and ends
                self._exit = Exit(Exit.LOST, None, "stopped before Ray placed it")
            elif self._stopped is None and now - self._launched > self._max_pending:
                self._stop()
                self._exit = Exit(Exit.PROVIDER_FAILED, None, self._unplaced())
        elif info.status in ray_jobs.TERMINAL:
            self._exit = self._ended(info)
        if self._exit is not None:
            _following.discard(self)
        return self._exit

    def _ended(self, info: ray_jobs.RayJob) -> Exit:
        """The end of a job Ray has finished: as the run folder records it, else Ray's
        words."""
        state = None
        with contextlib.suppress(FerryError):
            state = self._reader.state()
        said = f"Ray: {info.status}" + (f" ({info.message})" if info.message else "")
        outside = info.status == ray_jobs.STOPPED and self._stopped is None
        if state is not None and state.ended:
            with contextlib.suppress(FerryError):
                self._mirror.copy()  # (every segment the end names, and the nodes')
            ended = exit_of(state)
            if outside and ended.outcome == Exit.EXITED:  # (its runner took it as the notice)
                why = f"stopped on the cluster, not by Ferry ({describe_exit(ended.code or 0)})"
                return Exit(Exit.PROVIDER_FAILED, ended.code, why)
            return ended
        if info.status == ray_jobs.STOPPED and self._stopped is not None:
            how = "killed by Ray before its runner recorded the end"
            return Exit(Exit.EXITED, -signal.SIGKILL, f"{how}; {said}")
        if outside:  # (ray job stop, the dashboard's button)
            return Exit(Exit.PROVIDER_FAILED, None, f"stopped on the cluster, not by Ferry; {said}")
        if state is None and info.error_type:  # never got as far as the runner
            return Exit(Exit.PROVIDER_FAILED, None, said)
        return Exit(Exit.LOST, None, f"its runner ended without recording the end; {said}")

    def _unplaced(self) -> str:
        """Why a pending attempt is given up, with what the cluster has."""
        offers = ""
        with contextlib.suppress(Exception):
            offers = f"; the cluster has {describe_cluster(self.dashboard)}"
        return (
            f"no node of the Ray cluster took it within limits.max_pending "
            f"({format_duration(self._max_pending)}): it asks for {self._asks}{offers}"
        )

    def events(self) -> list[str]:
        return self._mirror.events()

    def stop(self) -> None:
        """The notice: Ray sends SIGTERM to the runner (and its processes); the runner
        stops the gang, SIGKILLs it after the grace, sends the outputs and records the
        end."""
        if self.poll() is None and self._stopped is None:
            self._stop()

    def kill(self) -> None:
        """Ray has no kill: the stop again (Ray SIGKILLs what is left later)."""
        if self._exit is None:
            self._stop()

    def _stop(self) -> None:
        if self._stopped is None:
            self._stopped = time.monotonic()
            with contextlib.suppress(FerryError):  # a runner Ray starts later ends at once
                self._place.put(STOPPED, b"")
        with contextlib.suppress(FerryError):  # (unreachable: polled until it answers)
            self.jobs.stop(self.submission_id)


def submit_request(
    request: LaunchRequest,
    submission_id: str,
    python: str,
    folder: str,
    package: str,
    env: dict[str, str],
) -> dict[str, Any]:
    """The Jobs API request (Ray's ``JobSubmitRequest`` fields) for one attempt."""
    from ferry.accelerators import parse_accelerator

    res = request.job.plan.resources
    gang = res.nodes > 1
    module = "ferry.runner.ray_gang" if gang else "ferry.runner"
    body: dict[str, Any] = {
        "entrypoint": f"{shlex.quote(python)} -m {module} {shlex.quote(folder)}",
        "submission_id": submission_id,
        "runtime_env": {"working_dir": package, "env_vars": env},
        "metadata": {"ferry_job": request.job.id, "ferry_attempt": str(request.attempt)},
        "entrypoint_num_cpus": res.cpus or 1.0,
    }
    if gang:  # the entrypoint only places the gang and follows it: the nodes hold the rest
        body["entrypoint_num_cpus"] = 0.0
        return body
    if res.memory:
        body["entrypoint_memory"] = res.memory
    if res.accelerator:
        acc = parse_accelerator(res.accelerator)
        body["entrypoint_num_gpus"] = acc.count
        body["entrypoint_resources"] = _extra_resources(request.job)
    return body


def _extra_resources(job: Job) -> dict[str, float]:
    """The Ray resources an attempt of ``job`` asks for besides CPUs and GPUs (its
    accelerator's ``accelerator_type`` label)."""
    from ferry.accelerators import parse_accelerator

    acc = job.plan.resources.accelerator
    if not acc:
        return {}
    return {f"accelerator_type:{ray_label(parse_accelerator(acc).name)}": 0.001}


def _asks(submit: dict[str, Any]) -> str:
    parts = [f"{submit['entrypoint_num_cpus']:g} CPU"]
    if submit.get("entrypoint_num_gpus"):
        parts.append(f"{submit['entrypoint_num_gpus']} GPU")
    if submit.get("entrypoint_memory"):
        parts.append(f"{format_size(submit['entrypoint_memory'])} memory")
    for resource in submit.get("entrypoint_resources") or {}:
        parts.append(resource)
    return ", ".join(parts)


class RayBackend(Backend):
    """Attempts run as Ray jobs on a Ray cluster (the one Ferry starts here by default)."""

    name = "ray"
    runs_here = False
    features = frozenset(
        {
            "inputs.remote",
            "inputs.stream",
            "outputs.remote",
            "resources.nodes",
            "environment.requirements",
        }
    )

    def _check(self, spec: Any) -> None:
        acc = spec.resources.accelerator_request
        if acc is not None:
            ray_label(acc.name)
        outputs = spec.outputs or ""
        local_outputs = "://" not in outputs or outputs.startswith("file://")
        given = config.get("ray.address")
        import os

        address = str(given or os.environ.get("RAY_ADDRESS") or "")
        if local_outputs and address:
            from urllib.parse import urlsplit

            from ferry.backends.ray_cluster import LOCAL_HOSTS, dashboard_url

            host = urlsplit(dashboard_url(address)).hostname or ""
            if host not in LOCAL_HOSTS:
                raise SpecError(
                    f"the Ray cluster at {address} runs on other machines, which cannot "
                    "write the job's outputs to a folder of this one",
                    "give outputs in a bucket (outputs: s3://BUCKET/path/{job_id})",
                )

    def offering(self, job: Job) -> str:
        acc = job.plan.resources.accelerator
        return f"ray {acc}" if acc else "ray"

    def launch(self, request: LaunchRequest) -> RayRun:
        where = cluster()
        # a nonce: job ids are unique in one Ferry home, not on a cluster many share
        submission_id = f"ferry-{request.job.id}-{request.attempt}-{os.urandom(3).hex()}"
        folder = run_folder(request.job, request.attempt, submission_id, where.local)
        return RayRun.submit(_with_folder(request, folder), where, submission_id)

    def reattach(
        self, job: Job, attempt: int, handle: str | None, log_path: str, metrics_path: str
    ) -> RayRun | None:
        """Follow an attempt whose supervisor was lost: its Ray job runs on."""
        submission_id, dashboard = _parse_handle(handle or "")
        if not submission_id or not dashboard:
            return None
        local = Path(run_folder(job, attempt, submission_id, True))
        folder = str(local) if local.is_dir() else run_folder(job, attempt, submission_id, False)
        run = RayRun(job, dashboard, submission_id, folder, log_path, metrics_path)
        run.go_on()
        return run

    def outputs_sent(self, job: Job, attempt: int, handle: str | None) -> list[Any] | None:
        from ferry.runner.machine import OUTPUTS
        from ferry.runner.nodes import outputs_listed

        submission_id = _parse_handle(handle or "")[0]
        for local in (True, False):  # (where the cluster ran it is not recorded)
            if not local and not submission_id:
                break
            folder = run_folder(job, attempt, submission_id, local)
            listed = outputs_listed(folder, job.plan.resources.nodes, OUTPUTS)
            if listed is not None:
                return listed
        return None

    def provider_log(self, job: Job, handle: str | None, lines: int) -> list[str]:
        """The Ray job's own log (its entrypoint's output, as Ray's Jobs API keeps it)."""
        if not handle or "@" not in handle:
            raise FerryError(f"the attempt of {job.id} made no Ray job", f"ferry status {job.id}")
        submission_id, dashboard = _parse_handle(handle)
        text = ray_jobs.RayJobs(dashboard).logs(submission_id)
        found = text.splitlines()
        return found[-lines:] if lines else []

    def cancel(self, job: Job, attempt: int, handle: str | None) -> None:
        """Stop the attempt's Ray job (the notice, then SIGKILL after the grace)."""
        if not handle or "@" not in handle:
            return
        submission_id, dashboard = _parse_handle(handle)
        with contextlib.suppress(FerryError):
            ray_jobs.RayJobs(dashboard).stop(submission_id)


def _with_folder(request: LaunchRequest, folder: str) -> LaunchRequest:
    from dataclasses import replace

    return replace(request, run_folder=folder)
