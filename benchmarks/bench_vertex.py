"""From ``ferry run --backend vertex --detach`` to the CustomJob request reaching Vertex AI,
with a 100 MB code folder: the first time, and when nothing changed.

Budget (issue: clouds): an unchanged folder uploads 0 bytes, and its request is sent within
1 s (median of the runs after the first: those find the watcher that follows cloud jobs
running, with the SDK imported; the first run starts it). Measured alongside, in the same
run:

- ``sdk``: a fresh Python process that creates the same kind of custom job with
  ``aiplatform_v1.JobServiceClient`` itself (import, client, one create): what sending a
  job costs without Ferry;
- ``plain_put``: one put of a file the size of the folder into the same bucket: what the
  first upload costs at the least.

Vertex AI is a small HTTP server here that records when each create arrives and answers
with the job (QUEUED; cancelled at the end); the bucket is gcp-storage-emulator, over HTTP.
The folder is 40 files of random bytes (2.5 MB each) and 200 small source files.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _common import FERRY_EXE, child_env, emit, fill_bundle_folder, log, plain_put_s, sandbox

BUDGET_S = 1.0
RUNS = 5


class Recorder:
    """Creates are recorded (the time they arrived) and answered; a get says QUEUED."""

    def __init__(self) -> None:
        self.arrived: list[float] = []
        self.names: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:
                now = time.time()
                path = self.path.split("?")[0][len("/v1/") :]
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if path.endswith(":cancel"):
                    return self._send({})
                recorder.arrived.append(now)
                name = f"{path}/{1000 + len(recorder.arrived)}"
                recorder.names.append(name)
                job = json.loads(body)
                job.update(name=name, state="JOB_STATE_QUEUED")
                self._send(job)

            def do_GET(self) -> None:
                path = self.path.split("?")[0][len("/v1/") :]
                self._send({"name": path, "displayName": "x", "state": "JOB_STATE_QUEUED"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait(self, count: int, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while len(self.arrived) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the create request never arrived")
            time.sleep(0.005)
        return self.arrived[count - 1]


SDK_CREATE = """
import sys, time
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
client = aiplatform_v1.JobServiceClient(
    client_options=ClientOptions(api_endpoint=sys.argv[1]), transport="rest",
    credentials=AnonymousCredentials())
job = aiplatform_v1.CustomJob(display_name="sdk", job_spec={"worker_pool_specs": [{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "python_package_spec": {
        "executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest",
        "package_uris": ["gs://bench/pkg.whl"], "python_module": "trainer.task"}}]})
client.create_custom_job(parent="projects/p/locations/us-central1", custom_job=job)
"""


def _bytes_sent(job_id: str, env: dict[str, str]) -> int:
    """What the job's launch uploaded, as its events say (they reach the store at the
    supervisor's next heartbeat)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(
            [FERRY_EXE, "status", job_id, "--json"], capture_output=True, text=True, env=env
        )
        said = [
            e["message"] for e in json.loads(out.stdout)["events"] if "bytes sent" in e["message"]
        ]
        if said:  # "code and Ferry's wheel: N bytes sent", or "... unchanged: 0 bytes sent"
            return 0 if "unchanged" in said[0] else int(said[0].split()[-3])
        time.sleep(0.2)
    raise RuntimeError(f"{job_id} never said what it uploaded")


def main() -> int:
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
    storage = create_server("127.0.0.1", 0, in_memory=True)
    storage.start()
    gcs = f"http://127.0.0.1:{storage._api._httpd.server_address[1]}"
    os.environ["STORAGE_EMULATOR_HOST"] = gcs
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    vertex = Recorder()
    try:
        with sandbox() as code:
            return _measure(code, vertex)
    finally:
        vertex.httpd.shutdown()
        storage.stop()


def _measure(code: Path, vertex: Recorder) -> int:
    import gcsfs

    total = fill_bundle_folder(code)
    (code / "job.yaml").write_text("name: bench\ncommand: python module_0.py\n")
    gs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
    gs.mkdir("bench")
    env = child_env()
    for key, value in (
        ("vertex.endpoint", vertex.endpoint),
        ("vertex.project", "bench"),
        ("outputs_root", "gs://bench/runs"),
    ):
        subprocess.run([FERRY_EXE, "config", "set", key, value], check=True, env=env)
    # the baselines: one plain put of the folder's size; one create through the SDK
    put_s = plain_put_s(gs, code, "bench/plain.bin")
    sdk = []
    for _ in range(3):
        started = time.time()
        subprocess.run([sys.executable, "-c", SDK_CREATE, vertex.endpoint], check=True, env=env)
        sdk.append(vertex.wait(len(vertex.arrived)) - started)
    sdk_s = statistics.median(sdk)
    took, jobs = [], []
    for i in range(1 + RUNS):
        count = len(vertex.arrived) + 1
        started = time.time()
        out = subprocess.run(
            [FERRY_EXE, "run", "--backend", "vertex", "--detach", "job.yaml"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        took.append(vertex.wait(count) - started)
        jobs.append(out.stdout.strip())
        log(f"run {i}: request sent {took[-1]:.3f}s after the command started")
    sent = [_bytes_sent(job_id, env) for job_id in jobs]
    for job_id in jobs:
        subprocess.run([FERRY_EXE, "cancel", job_id], capture_output=True, env=env)
    first, unchanged = took[0], statistics.median(took[1:])
    log(
        f"{total / 1e6:.0f} MB folder: first {first:.2f}s ({sent[0] / 1e6:.1f} MB sent; a plain "
        f"put {put_s:.2f}s); unchanged {unchanged:.3f}s, bytes {sent[1:]}; the SDK alone "
        f"{sdk_s:.3f}s"
    )
    ok = unchanged <= BUDGET_S and not any(sent[1:])
    emit(
        {
            "bench": "vertex_submit",
            "metric": "unchanged_to_request_s",
            "value": round(unchanged, 4),
            "unit": "s",
            "budget": BUDGET_S,
            "rule": "<=",
            "ok": ok,
            "unchanged_bytes_sent": max(sent[1:]),
            "folder_mb": round(total / 1e6, 1),
            "first_to_request_s": round(first, 3),
            "first_bytes_sent": sent[0],
            "baseline_plain_put_s": round(put_s, 3),
            "baseline_sdk_create_s": round(sdk_s, 3),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
