"""Ray's Jobs API over HTTP, as the Ray dashboard serves it (``/api/jobs/``,
``/api/packages/``), with the standard library only.

Ferry talks to a Ray cluster through this rather than through ``ray.job_submission``: the
process that follows many jobs then never imports Ray (hundreds of megabytes of
dependencies, ~70 MB of memory). The request and response fields are those of Ray's
``JobSubmitRequest`` and ``JobDetails`` (ray/dashboard/modules/job/common.py,
pydantic_models.py, Ray 2.60); the code package is a zip of the folder's files under
their relative paths, named ``gcs://_ray_pkg_<hash>.zip`` as Ray names its own
(ray/_private/runtime_env/packaging.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.errors import FerryError

# Ray's job states (ray/dashboard/modules/job/common.py JobStatus)
PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = (
    "PENDING",
    "RUNNING",
    "STOPPED",
    "SUCCEEDED",
    "FAILED",
)
TERMINAL = frozenset({STOPPED, SUCCEEDED, FAILED})
PACKAGE_PREFIX = "_ray_pkg_"  # Ray's prefix for the packages it keeps in its GCS


class RayUnreachable(FerryError):
    """The cluster's Jobs API did not answer."""


@dataclass(frozen=True)
class RayJob:
    """What the Jobs API says of one submitted job."""

    submission_id: str
    status: str  # PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED
    message: str
    exit_code: int | None  # the entrypoint's exit code, once it has one
    error_type: str | None  # e.g. JOB_SUPERVISOR_ACTOR_START_FAILURE, RUNTIME_ENV_SETUP_FAILURE
    node_id: str | None  # the node its entrypoint runs on

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RayJob:
        code = data.get("driver_exit_code")
        return cls(
            submission_id=str(data.get("submission_id") or ""),
            status=str(data.get("status") or ""),
            message=str(data.get("message") or ""),
            exit_code=int(code) if isinstance(code, int) else None,
            error_type=data.get("error_type"),
            node_id=data.get("driver_node_id"),
        )


class RayJobs:
    """The Jobs API of the cluster whose dashboard is at ``address`` (``http://host:port``)."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address = address.rstrip("/")
        self.timeout = timeout

    def _call(
        self, method: str, path: str, body: bytes | None = None, kind: str = "application/json"
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(self.address + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", kind)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RayUnreachable(
                f"cannot reach the Ray cluster's Jobs API at {self.address} ({reason})",
                "start the cluster (ray start --head), or set ray.address to its dashboard",
            ) from None

    def _json(self, method: str, path: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        status, data = self._call(method, path, body)
        if status >= 400:
            text = data.decode(errors="replace").strip().splitlines()
            detail = text[-1] if text else f"HTTP {status}"
            raise FerryError(
                f"the Ray cluster at {self.address} refused {method} {path}: {detail}",
                "check the cluster's dashboard log (ray job logs, dashboard.log)",
            )
        return json.loads(data) if data else None

    def version(self) -> str:
        """The cluster's Ray version."""
        return str(self._json("GET", "/api/version").get("ray_version", ""))

    def upload_folder(self, folder: Path, owner: str = "") -> str:
        """Send ``folder``'s files as a code package unless the cluster has it already;
        returns its URI for ``runtime_env.working_dir``. The name depends on ``owner``
        (a job) too: a package another job used may be deleted by Ray as that job ends,
        even after this one found it there."""
        data, digest = zip_folder(folder)
        if owner:
            digest = hashlib.sha1(f"{owner}\0{digest}".encode(), usedforsecurity=False).hexdigest()
        name = f"{PACKAGE_PREFIX}{digest}.zip"
        status, _ = self._call("GET", f"/api/packages/gcs/{name}")
        if status == 404:
            status, answer = self._call("PUT", f"/api/packages/gcs/{name}", data, "application/zip")
            if status >= 400:
                raise FerryError(
                    f"the Ray cluster at {self.address} refused the code package "
                    f"({len(data)} bytes): {answer.decode(errors='replace')[-200:]}",
                    "make the code smaller (a .ferryignore), or check the cluster's memory",
                )
        elif status >= 400:
            raise FerryError(
                f"the Ray cluster at {self.address} could not look up code package {name} "
                f"(HTTP {status})",
                "check the cluster's dashboard log",
            )
        return f"gcs://{name}"

    def submit(self, request: dict[str, Any], wait: float = 120.0) -> str:
        """Submit a job (a ``JobSubmitRequest``); returns its submission id. A head that
        has just started drops connections, and has no job agent, for a few seconds: asked
        again for ``wait`` s. (Resubmitting is safe: the submission id is the job's own, so
        a submission that did arrive is refused, not doubled.)"""
        import time

        deadline = time.monotonic() + wait
        dropped = False
        while True:
            try:
                answer = self._json("POST", "/api/jobs/", request)
            except RayUnreachable:  # (a dashboard still starting drops connections)
                if time.monotonic() > deadline:
                    raise
                dropped = True
                time.sleep(0.5)
                continue
            except FerryError as exc:
                if dropped and "already exists" in exc.message:  # the dropped one arrived
                    return str(request["submission_id"])
                if "No available agent" not in exc.message or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                continue
            return str(answer["submission_id"])

    def job(self, submission_id: str) -> RayJob | None:
        """The job's details; None when the cluster does not know it (a head that
        restarted without its jobs)."""
        data = self._known("GET", f"/api/jobs/{submission_id}", "say how job", submission_id)
        return None if data is None else RayJob.from_json(json.loads(data))

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job (its stop signal, then SIGKILL after
        ``RAY_JOB_STOP_WAIT_TIME_S``); returns whether it was still running."""
        data = self._known("POST", f"/api/jobs/{submission_id}/stop", "stop job", submission_id)
        if data is None:
            return False
        return bool(json.loads(data).get("stopped")) if data else True

    def _known(self, method: str, path: str, what: str, submission_id: str) -> bytes | None:
        """The answer to a request about one job; None when the cluster does not know it."""
        status, data = self._call(method, path)
        if status == 404:
            return None
        if status >= 400:
            raise FerryError(
                f"the Ray cluster at {self.address} did not {what} {submission_id} "
                f"(HTTP {status}: {data.decode(errors='replace')[-200:]})",
                f"see: ray job status {submission_id}, and the cluster's dashboard log",
            )
        return data

    def logs(self, submission_id: str) -> str:
        """What the job's entrypoint printed, as Ray kept it."""
        answer = self._json("GET", f"/api/jobs/{submission_id}/logs")
        return str(answer.get("logs", "")) if answer else ""


def zip_folder(folder: Path) -> tuple[bytes, str]:
    """The files under ``folder`` as a zip (relative names, fixed times, so the same files
    give the same bytes), and a hash of their names and contents."""
    digest = hashlib.sha1(usedforsecurity=False)
    buffer = io.BytesIO()
    root = folder.resolve()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for dirpath, dirs, names in os.walk(root, followlinks=True):
            dirs.sort()
            for name in sorted(names):
                path = Path(dirpath) / name
                if not path.is_file():
                    continue
                relative = path.relative_to(root).as_posix()
                data = path.read_bytes()
                digest.update(relative.encode() + b"\0" + hashlib.sha1(data).digest())
                info = zipfile.ZipInfo(relative, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (path.stat().st_mode & 0o7777) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
    return buffer.getvalue(), digest.hexdigest()
