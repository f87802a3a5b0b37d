"""Sends a job to MLflow: its hyperparameters as params, its metrics in batches while it
runs, tags (job id, backend, accelerator, cost, status) and, at the end, its model, outputs
and logs as artifacts.

It runs as its own process (``python -m ferry.telemetry.mlflow_sink JOB``, the URI in
``MLFLOW_TRACKING_URI``), started by
the job's supervisor when the spec says ``tracking: {mlflow: URI}``: MLflow's client weighs
over 100 MB, which the supervisor itself never carries. It follows the job's metrics in the
store until the job has ended. The MLflow run's id is kept in the job folder, so a tracker
started again continues the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import sys
import time
from pathlib import Path
from typing import Any

from ferry.status import JobStatus
from ferry.store import Job, Store

BATCH = 1000  # MLflow's limit of metrics per log_batch call
POLL = 2.0
RUN_FILE = "mlflow.json"
_END_STATUS = {
    JobStatus.SUCCEEDED: "FINISHED",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELLED: "KILLED",
}


def shown_uri(uri: str, text: str | None = None) -> str:
    """``text`` (default: the tracking URI itself) without the URI's password."""
    from urllib.parse import urlsplit

    text = uri if text is None else text
    password = urlsplit(uri).password
    return text.replace(f":{password}@", ":***@") if password else text


_NOT_IN_KEYS = re.compile(r"[^\w/.\- :]")


def mlflow_key(name: str) -> str:
    """A metric or param name as MLflow accepts it: letters, digits, ``_ - . / :`` and
    spaces, a normalised relative path, at most 250 characters (``top@1`` -> ``top_1``)."""
    key = posixpath.normpath(_NOT_IN_KEYS.sub("_", name)).lstrip("/")
    key = "/".join(part if part != ".." else "__" for part in key.split("/"))
    return key[:250] if key not in ("", ".") else "_"


def _flat(prefix: str, value: Any) -> list[tuple[str, str]]:
    """Hyperparameters as MLflow params: nested maps become ``a.b`` keys."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for key, item in value.items():
            out += _flat(f"{prefix}.{key}" if prefix else str(key), item)
        return out
    text = value if isinstance(value, str) else json.dumps(value)
    return [(mlflow_key(prefix), text[:6000])]


def _tags(job: Job, store: Store) -> dict[str, str]:
    from ferry.procs import hostname

    resources = job.plan.resources
    attempts = store.attempts(job.id)
    now = time.time()
    cost = sum(a.cost_at(now) for a in attempts)
    tags = {
        "ferry.job_id": job.id,
        "ferry.backend": job.backend,
        "ferry.accelerator": resources.accelerator or "none",
        "ferry.spot": "flex" if resources.flex_start else str(resources.spot).lower(),
        "ferry.status": job.status.value,
        "ferry.attempts": str(len(attempts)),
        "ferry.cost_usd": f"{cost:.4f}",
        "ferry.outputs": job.outputs,
        "mlflow.source.name": " ".join(job.plan.command),
        "mlflow.source.type": "JOB",
        "mlflow.user": _user(),
        "ferry.host": hostname(),
    }
    if job.reason and job.status.is_terminal():
        tags["ferry.reason"] = job.reason[:5000]
    return tags


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class Tracker:
    """One job's MLflow run."""

    def __init__(self, store: Store, job_id: str, uri: str) -> None:
        from mlflow.tracking import MlflowClient

        self.store = store
        self.job = store.get_job(job_id)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.after = 0  # the last metric point id sent
        self.last_step: int | None = None
        self.run_id = self._run()

    def _experiment(self) -> str:
        name = self.job.plan.tracking.experiment or self.job.name
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        location = None
        if self.uri.startswith("sqlite:///"):  # artifacts beside the database, not in cwd
            location = (Path(self.uri[len("sqlite:///") :]).parent / "mlartifacts").as_uri()
        try:
            return str(self.client.create_experiment(name, artifact_location=location))
        except Exception:  # created meanwhile by another job's tracker
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _run(self) -> str:
        from mlflow.entities import Param

        path = Path(self.job.job_dir) / RUN_FILE
        with contextlib.suppress(OSError, ValueError, KeyError):  # none yet: a new run
            saved = json.loads(path.read_text())
            self.after = int(saved.get("after", 0))
            return str(saved["run_id"])
        run = self.client.create_run(
            self._experiment(),
            start_time=int((self.job.started_at or time.time()) * 1000),
            tags=_tags(self.job, self.store),
            run_name=self.job.name,
        )
        run_id = str(run.info.run_id)
        params = _flat("", self.job.plan.hyperparameters)
        for i in range(0, len(params), 100):
            chunk = [Param(k, v) for k, v in params[i : i + 100]]
            self.client.log_batch(run_id, params=chunk)
        self._save(run_id)
        self.store.add_event(
            self.job.id, f"MLflow run {run_id} in experiment {run.info.experiment_id}"
        )
        return run_id

    def _save(self, run_id: str) -> None:
        path = Path(self.job.job_dir) / RUN_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"run_id": run_id, "after": self.after}))
        tmp.replace(path)

    def send(self) -> int:
        """Send the points stored since the last call; returns how many."""
        from mlflow.entities import Metric

        sent = 0
        while rows := self.store.metrics_after(self.job.id, self.after, 10 * BATCH):
            metrics = []
            for _id, _attempt, rank, step, t, name, value in rows:
                if step is None:  # telemetry: shown at the script's latest step
                    step = self.last_step or 0
                else:
                    self.last_step = step
                key = mlflow_key(name if not rank else f"rank{rank}/{name}")
                number = float("nan") if value is None else value
                metrics.append(Metric(key, number, int(t * 1000), step))
            for i in range(0, len(metrics), BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[i : i + BATCH])
            self.after = rows[-1][0]
            self._save(self.run_id)
            sent += len(rows)
        return sent

    def end(self) -> None:
        """The job has ended: last metrics, final tags, artifacts, the run's status."""
        from mlflow.entities import RunTag

        from ferry.storage.outputs import OutputSync

        self.send()
        job = self.store.get_job(self.job.id)
        tags = [RunTag(k, v) for k, v in _tags(job, self.store).items()]
        self.client.log_batch(self.run_id, tags=tags)
        local = OutputSync.for_outputs(job.outputs, Path(job.job_dir)).local
        for folder in ("model", "output", "tensorboard"):
            if (local / folder).is_dir() and any((local / folder).iterdir()):
                self.client.log_artifacts(self.run_id, str(local / folder), folder)
        for attempt in self.store.attempts(job.id):
            if Path(attempt.log_path).is_file():
                self.client.log_artifact(self.run_id, attempt.log_path, "logs")
        self.client.set_terminated(
            self.run_id,
            status=_END_STATUS.get(job.status, "FAILED"),
            end_time=int((job.ended_at or time.time()) * 1000),
        )


def follow(store: Store, job_id: str, uri: str) -> None:
    """Send the job's metrics until it has ended, then close its run."""
    tracker = Tracker(store, job_id, uri)
    while True:
        tracker.send()
        if store.get_job(job_id).status.is_terminal():
            tracker.end()
            return
        time.sleep(POLL)


def main(argv: list[str]) -> int:
    from ferry.procs import name_this_process
    from ferry.store import open_store

    name_this_process("ferry-mlflow")
    [job_id] = argv
    uri = os.environ["MLFLOW_TRACKING_URI"]
    store = open_store()
    try:
        follow(store, job_id, uri)
    except Exception as exc:  # an unreachable server, a bad URI: the job goes on
        message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
        message = shown_uri(uri, message)
        store.add_event(job_id, f"sending to MLflow at {shown_uri(uri)} failed: {message}")
        print(f"ferry: MLflow tracking failed: {shown_uri(uri, repr(exc))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
