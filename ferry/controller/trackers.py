"""The MLflow tracker of a job (``tracking: {mlflow: URI}``): the process
(:mod:`ferry.telemetry.mlflow_sink`) its supervisor starts beside the attempts, which
outlives them, and the supervisor's reaping of those that ended."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from ferry import config
from ferry.store import Job, Store

_trackers: list[Any] = []  # MLflow trackers this supervisor started (subprocess.Popen)


def _tracker_alive(pid_file: Path) -> bool:
    """Whether the MLflow tracker recorded in ``pid_file`` still runs."""
    from ferry.procs import start_time

    try:
        pid_text, started = pid_file.read_text().split()
        now_started = start_time(int(pid_text))
    except (OSError, ValueError):
        return False
    return now_started is not None and abs(now_started - float(started)) < 1.0


def collect_trackers() -> None:
    """Reap the trackers that have ended (those still running go on by themselves)."""
    from ferry.procs import unspare

    for proc in list(_trackers):
        if proc.poll() is not None:
            with contextlib.suppress(ValueError):  # (another job's thread, in a watcher)
                _trackers.remove(proc)
                unspare(proc.pid)


def start_tracker(store: Store, job: Job, launch_env: dict[str, str]) -> None:
    """Start the process that sends the job's metrics to MLflow, when the job asks for it."""
    uri = job.plan.tracking.mlflow  # config's default was put there
    if not uri:
        return
    import subprocess

    from ferry import procs
    from ferry.telemetry.mlflow_sink import shown_uri

    pid_file = Path(job.job_dir) / "mlflow.pid"
    if _tracker_alive(pid_file):  # a resumed job's may still be running
        return
    # the submitter's environment (MLFLOW_TRACKING_* credentials), not this supervisor's
    env = {k: v for k, v in launch_env.items() if not k.startswith("FERRY_JOB")}
    env["FERRY_HOME"] = str(config.ferry_home())
    env["MLFLOW_TRACKING_URI"] = uri  # not on the command line, which every user can read
    # fail within a minute when the server is away (MLflow's own default retries for minutes)
    env.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    env.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    with open(Path(job.job_dir) / "mlflow.log", "ab") as log, procs.SPAWN_LOCK:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ferry.telemetry.mlflow_sink", job.id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        procs.spare(proc.pid)  # it outlives the attempts: their cleanup must not kill it
    _trackers.append(proc)
    pid_file.write_text(f"{proc.pid} {procs.start_time(proc.pid) or 0}")
    store.add_event(job.id, f"sending metrics to MLflow at {shown_uri(uri)}")
