"""The Python API: what the CLI does, for scripts and notebooks.

>>> import ferry
>>> job = ferry.submit(command="python train.py --epochs 1", code="examples/digits")
>>> job.wait()
<JobStatus.SUCCEEDED: 'SUCCEEDED'>
>>> print(job.logs(tail=3))
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import defaults
from ferry.errors import AmbiguousJob, FerryError, JobNotFound
from ferry.status import JobStatus
from ferry.store import Attempt, Store, shared_store
from ferry.store import Job as JobRecord

if TYPE_CHECKING:
    from ferry.spec import JobSpec


def resolve_job(store: Store, ref: str) -> JobRecord:
    """The job named by an id or a unique id prefix."""
    if not ref.strip():  # ("" is a prefix of every id: never a job by itself)
        raise JobNotFound("no job id given", "list jobs with: ferry jobs")
    matches = store.find_jobs(ref)
    if not matches:
        raise JobNotFound(f"no job matches {ref!r}", "list jobs with: ferry jobs")
    if len(matches) > 1:
        shown = ", ".join(j.id for j in matches[:5])
        more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
        raise AmbiguousJob(
            f"{ref!r} matches {len(matches)} jobs: {shown}{more}", "type more of the id"
        )
    return matches[0]


class Job:
    """A submitted job. Properties read the store each time, so they are always current."""

    def __init__(self, job_id: str, store: Store | None = None) -> None:
        self._store = store or shared_store()
        self.id = job_id

    @property
    def record(self) -> JobRecord:
        """The stored snapshot of the job."""
        return self._store.get_job(self.id)

    @property
    def status(self) -> JobStatus:
        """Where the job is now (noticing a lost supervisor)."""
        record = self.record
        if record.status.is_active():
            from ferry.controller import reconcile
            from ferry.followers import start

            reconcile(self._store, start=start)
            record = self.record
        return record.status

    @property
    def reason(self) -> str | None:
        """Why the job ended as it did (``exit code 3 (last log lines ...)``)."""
        return self.record.reason

    @property
    def exit_code(self) -> int | None:
        """The exit code of the last attempt, as a shell shows it: 128+N when signal N ended
        it (``signal`` names it)."""
        from ferry.status import shell_code

        code = self.record.exit_code
        return None if code is None else shell_code(code)

    @property
    def signal(self) -> str | None:
        """The signal that ended the last attempt (``'SIGTERM'``), or None if it exited."""
        from ferry.status import signal_name

        return signal_name(self.record.exit_code)

    @property
    def outputs(self) -> str:
        """Where the job's model, checkpoints and other outputs go."""
        return self.record.outputs

    @property
    def model_dir(self) -> Path:
        """The local folder holding the model (``FERRY_MODEL_DIR``)."""
        return Path(self.outputs) / "model"

    @property
    def attempts(self) -> list[Attempt]:
        """Every attempt so far."""
        return self._store.attempts(self.id)

    def wait(self, timeout: float | None = None, poll: float = 0.1) -> JobStatus:
        """Block until the job ends; return its final status.

        Raises:
            TimeoutError: when ``timeout`` seconds pass first (the job keeps running).
        """
        end = None if timeout is None else time.monotonic() + timeout
        checked = time.monotonic()
        while True:
            record = self.record
            if record.status.is_terminal():
                return record.status
            if time.monotonic() - checked > defaults.HEARTBEAT_INTERVAL:
                checked = time.monotonic()
                if self.status.is_terminal():
                    continue
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"job {self.id} still {record.status} after {timeout}s")
            time.sleep(poll)

    def logs(
        self,
        tail: int | None = None,
        attempt: int | None = None,
        stream: str | None = None,
        rank: int | None = None,
    ) -> str:
        """The job's output as text (the last attempt unless ``attempt`` is given); only
        ``stream``'s lines ("stdout" or "stderr") and ``rank``'s (of a gang) when given."""
        from ferry.logs import tail as read_tail

        path = _attempt_log(self._store, self.id, attempt)
        if path is None:
            return ""
        lines = [
            line.text
            for line in read_tail(path, None)
            if (stream is None or line.stream == stream) and (rank is None or line.rank == rank)
        ]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "\n".join(lines) + ("\n" if lines else "")

    def cancel(self) -> JobStatus:
        """Ask the job to stop; returns the status right after asking."""
        from ferry.controller import cancel
        from ferry.followers import start

        return cancel(self._store, self.record, start=start).status

    def __repr__(self) -> str:
        return f"<ferry.Job {self.id} {self.record.status.value}>"

    def _repr_html_(self) -> str:  # shown by Jupyter
        r = self.record
        rows = [
            ("job", r.id),
            ("status", r.status.value),
            ("reason", r.reason or ""),
            ("outputs", r.outputs),
        ]
        cells = "".join(
            f"<tr><th style='text-align:left'>{k}</th><td>{html.escape(str(v))}</td></tr>"
            for k, v in rows
        )
        return f"<table>{cells}</table>"


def _attempt_log(store: Store, job_id: str, number: int | None) -> str | None:
    attempts = store.attempts(job_id)
    if not attempts:
        return None
    if number is None:
        return attempts[-1].log_path
    for attempt in attempts:
        if attempt.number == number:
            return attempt.log_path
    raise FerryError(
        f"job {job_id} has no attempt {number}",
        f"it has attempts 1 to {len(attempts)}",
    )


def submit(spec: JobSpec | dict[str, Any] | str | Path | None = None, **fields: Any) -> Job:
    """Submit a job and return at once; ``Job.wait()`` blocks until it ends.

    Args:
        spec: a JobSpec, a dict of spec fields, or the path of a YAML spec file.
        **fields: spec fields that override the spec (``command="python train.py"``,
            ``resources={"accelerator": "A100:1"}``).
    """
    from ferry.controller import submit as controller_submit
    from ferry.followers import start
    from ferry.spec import JobSpec, load_spec, merge, spec_from_dict

    if isinstance(spec, JobSpec):
        resolved = spec_from_dict(merge(spec.to_json(), fields)) if fields else spec
    elif isinstance(spec, str | Path):
        resolved = load_spec(spec, fields)
    else:
        resolved = spec_from_dict(merge(spec or {}, fields))
    store = shared_store()
    record = controller_submit(resolved, start=start, store=store)
    return Job(record.id, store)


def get_job(ref: str) -> Job:
    """The job with this id or unique id prefix."""
    store = shared_store()
    return Job(resolve_job(store, ref).id, store)


def list_jobs(status: JobStatus | str | None = None, limit: int | None = 100) -> list[Job]:
    """Jobs, newest first."""
    store = shared_store()
    statuses = [JobStatus(status)] if status else None
    return [Job(r.id, store) for r in store.list_jobs(statuses, limit)]
