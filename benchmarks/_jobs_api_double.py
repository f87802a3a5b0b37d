"""A stand-in for a Ray head's Jobs API, for measuring Ferry's side of following many jobs.

What it simulates: a Ray cluster with room for every job, whose jobs start at once and run
until they are stopped. It serves the endpoints Ferry's Ray backend calls, with the request
and response fields of Ray 2.60's Jobs API (ray/dashboard/modules/job/pydantic_models.py,
common.py): ``GET /api/version``, ``GET``/``PUT /api/packages/gcs/<name>``, ``POST
/api/jobs/`` (a ``JobSubmitRequest``; answers its ``submission_id``), ``GET
/api/jobs/<id>`` (``JobDetails``: RUNNING, STOPPED once stopped) and ``POST
/api/jobs/<id>/stop``. It runs no entrypoint: no runner starts and nothing is written to a
job's run folder, so what is measured is the controller following jobs, not the jobs.
It counts the requests it answered (``GET /counts``).

Run as ``python _jobs_api_double.py``: it prints its URL on one line and serves until
stdin closes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RAY_VERSION = "2.60.0"


class Cluster:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.packages: set[str] = set()
        self.counts: dict[str, int] = {}

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1


CLUSTER = Cluster()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _answer(self, status: int, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        if path == "/api/version":
            CLUSTER.count("version")
            self._answer(200, {"version": "4", "ray_version": RAY_VERSION, "ray_commit": "x"})
        elif path == "/counts":
            self._answer(200, CLUSTER.counts)
        elif path.startswith("/api/packages/gcs/"):
            CLUSTER.count("package")
            known = path.rsplit("/", 1)[1] in CLUSTER.packages
            self._answer(200 if known else 404, {"msg": "ok" if known else "not found"})
        elif path.startswith("/api/jobs/"):
            CLUSTER.count("job")
            job = CLUSTER.jobs.get(path.rsplit("/", 1)[1])
            if job is None:
                self._answer(404, {"msg": "no such job"})
            else:
                self._answer(200, job)
        else:
            self._answer(404, {"msg": f"not simulated: {path}"})

    def do_PUT(self) -> None:
        if self.path.startswith("/api/packages/gcs/"):
            self._body()
            CLUSTER.packages.add(self.path.rstrip("/").rsplit("/", 1)[1])
            self._answer(200, {"msg": "uploaded"})
        else:
            self._answer(404, {"msg": "not simulated"})

    def do_POST(self) -> None:
        path = self.path.rstrip("/")
        if path == "/api/jobs":
            CLUSTER.count("submit")
            request = json.loads(self._body())
            sid = request["submission_id"]
            with CLUSTER.lock:
                if sid in CLUSTER.jobs:
                    self._answer(400, {"msg": f"Job with submission_id {sid} already exists."})
                    return
                CLUSTER.jobs[sid] = {
                    "type": "SUBMISSION",
                    "submission_id": sid,
                    "entrypoint": request.get("entrypoint"),
                    "status": "RUNNING",
                    "message": "Job is currently running.",
                    "start_time": int(time.time() * 1000),
                    "driver_node_id": "simulated",
                    "runtime_env": request.get("runtime_env"),
                }
            self._answer(200, {"submission_id": sid})
        elif path.startswith("/api/jobs/") and path.endswith("/stop"):
            CLUSTER.count("stop")
            job = CLUSTER.jobs.get(path.split("/")[-2])
            if job is None:
                self._answer(404, {"msg": "no such job"})
                return
            stopped = job["status"] == "RUNNING"
            job.update(status="STOPPED", message="Job was intentionally stopped.")
            self._answer(200, {"stopped": stopped})
        else:
            self._answer(404, {"msg": "not simulated"})


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the benchmark ends
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
