"""A Vertex AI JobService test server, and the provider double behind it.

What it simulates, over HTTP as the REST API serves ``JobServiceClient(transport="rest")``
(``/v1/{parent}/customJobs``, ``/v1/{name}``, ``/v1/{name}:cancel``):

- **Requests**: each body is parsed as ``aiplatform_v1.CustomJob`` with unknown fields
  refused, then held to the ``aiplatform.v1`` discovery document (output-only fields,
  required ones, deprecated enum values, the ``parent``'s pattern:
  tests/backends/vertex_schema.py), as the API answers a bad request (HTTP 400,
  INVALID_ARGUMENT). Jobs are
  answered in the API's JSON (``CustomJob.to_json``) with their ``name``, ``state``,
  times and ``error`` (a ``google.rpc.Status``).
- **Life cycle**: QUEUED, then PENDING while the machine is "provisioned", RUNNING while
  the job's command runs, SUCCEEDED on exit 0, else FAILED with Vertex AI's words for a
  replica's non-zero exit. A cancel is CANCELLING, SIGTERM to the command, SIGKILL after
  ``grace`` seconds, then CANCELLED (at once for a job whose command has not started).
- **Scripted failures** (``script``, taken by the next create): ``quota`` answers the
  create with HTTP 429 RESOURCE_EXHAUSTED ("The following quota metrics exceed quota
  limits: …"); ``stockout`` leaves the job PENDING, then FAILED with code 8 ("Resources
  are insufficient in region: …"), its command never started; ``lost-answer`` makes the
  job but answers the create with HTTP 503, as when an answer is lost on the way.
- **Flex-start** (``scheduling.strategy`` FLEX_START, the Dynamic Workload Scheduler): a
  request Vertex AI documents as refused is answered with HTTP 400 (a GPU other than L4,
  A100, H100, H200 or B200, a ``timeout`` over 7 days, worker pools on different
  machines); an accepted job stays PENDING for ``flex_wait`` seconds while its machines
  are "gathered", then runs as any other.
- **Lists** of custom jobs filtered on one label (``labels.KEY="VALUE"``).
- **What the preflight asks** (``ferry check``): Service Usage's quota metrics of
  ``aiplatform.googleapis.com``, one by its name
  (``/v1beta1/projects/P/services/…/consumerQuotaMetrics/METRIC``, with ``quotaBuckets``
  by region from ``quotas``, a 404 for one it does not have) and IAM's service accounts
  (``/v1/projects/-/serviceAccounts/EMAIL``: found when in ``service_accounts``).
- **Spot preemption** (:meth:`VertexServer.preempt`): SIGTERM to every replica's command,
  SIGKILL after ``grace``, then FAILED with code 8 and a STOCKOUT message, as Vertex AI fails a
  spot job whose VM was taken back (it may also restart it; this double does not).

**The provider double** runs what the request says, as Vertex AI would on a fresh VM of
the prebuilt image for each replica of each worker pool: in a fresh folder, it downloads
``packageUris`` from the bucket emulator and pip-installs them into the "image's" Python
(an interpreter whose packages are the test session's, Ferry excepted), then runs
``python -m pythonModule args`` (or a ``containerSpec``'s command and args) with the
request's ``env`` and the variables Vertex AI sets: ``CLOUD_ML_JOB_ID``,
``CLOUD_ML_PROJECT_ID``, ``CLUSTER_SPEC`` (every replica's ``workerpoolN-I:PORT``, and
this one's task), and ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and
``AIP_TENSORBOARD_LOG_DIR`` from ``baseOutputDirectory``. The replicas of one job share
this machine: their names resolve to it, and their port is one that is free here rather
than Vertex AI's 2222. The job ends when every replica has; the first that fails has the
others stopped (tests/backends/machines.py). The VM's access to storage is the
emulator's address (``STORAGE_EMULATOR_HOST``), as a real VM's is its service account.
Each VM has ``/gcs/<bucket>/...`` for the buckets the request names, Cloud Storage FUSE
simulated by copies (tests/backends/gcs_fuse.py says how far), in a private mount
namespace (Ferry's own container-paths helper, as the local backend uses it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ferry.contract.container_paths import wrap
from tests.backends.gcs_fuse import GcsMount, buckets_named
from tests.backends.machines import image_python, names_here, start, stop_with_grace, wait_all
from tests.backends.vertex_schema import parent_problem, problems

RESOURCE_EXHAUSTED = 8
# acceleratorType values that flex-start runs on, and its longest timeout
# (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, Requirements)
FLEX_START_GPUS = {
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
}
FLEX_START_TIMEOUT = 7 * 24 * 3600


@dataclass
class Job:
    """One custom job the server holds."""

    name: str
    body: dict[str, Any]
    state: str = "JOB_STATE_QUEUED"
    error: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # one per replica
    failed: str = "workerpool0-0"  # the replica that failed first
    cancelled: bool = False
    preempted: bool = False

    def answer(self) -> dict[str, Any]:
        out = dict(self.body)
        out["name"] = self.name
        out["state"] = self.state
        out["createTime"] = _stamp(self.created)
        if self.started:
            out["startTime"] = _stamp(self.started)
        if self.ended:
            out["endTime"] = _stamp(self.ended)
        if self.error:
            out["error"] = self.error
        return out


def _stamp(t: float) -> str:
    """A time as the REST API writes a protobuf Timestamp (RFC 3339, to the microsecond)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class VertexServer:
    """The server: ``endpoint`` is its address; ``jobs`` what was created; ``script`` a
    list of behaviours the next creates take (``"quota"``, ``"stockout"``, ``"run"``)."""

    def __init__(self, root: Path, storage: str, grace: float = 5.0) -> None:
        self.root = root
        self.storage = storage  # the bucket emulator's address
        self.grace = grace
        image_python(root / "probe")  # (fails early, here, if the image cannot be made)
        self.jobs: dict[str, Job] = {}
        self.requests: list[dict[str, Any]] = []  # every create's body, parsed
        self.script: list[str] = []
        self.provision = 0.5  # s a job stays PENDING before its command starts
        self.flex_wait = 2.0  # s a flex-start job stays PENDING while its machines gather
        # Service Usage: metric -> region -> effective limit; IAM: the service accounts
        self.quotas: dict[str, dict[str, int]] = {}
        self.service_accounts: set[str] = set()
        self._lock = threading.Lock()
        self._count = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, code: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlsplit

                parts = urlsplit(self.path)
                if "/consumerQuotaMetrics/" in parts.path:
                    from urllib.parse import unquote

                    metric = server.quota_metric(unquote(parts.path.rsplit("/", 1)[1]))
                    if metric is None:
                        return self._send(404, _status(404, "NOT_FOUND", "no such metric"))
                    return self._send(200, metric)
                account = parts.path.removeprefix("/v1/projects/-/serviceAccounts/")
                if account != parts.path:
                    if account in server.service_accounts:
                        return self._send(200, {"email": account})
                    return self._send(404, _status(404, "NOT_FOUND", f"{account} not found"))
                path = parts.path[len("/v1/") :]
                if path.endswith("/customJobs"):  # a list, by a filter on one label
                    asked = (parse_qs(parts.query).get("filter") or [""])[0]
                    key, _, value = asked.partition("=")
                    label = key.removeprefix("labels.")
                    with server._lock:
                        found = [
                            j.answer()
                            for j in server.jobs.values()
                            if j.name.startswith(path)
                            and j.body.get("labels", {}).get(label) == value.strip('"')
                        ]
                    return self._send(200, {"customJobs": found})
                job = server.jobs.get(path)
                if job is None:
                    return self._send(404, _status(404, "NOT_FOUND", f"{path} not found"))
                with server._lock:
                    self._send(200, job.answer())

            def do_POST(self) -> None:
                path = self.path.split("?")[0][len("/v1/") :]
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if path.endswith(":cancel"):
                    code, data = server.cancel(path[: -len(":cancel")])
                    return self._send(code, data)
                if path.endswith("/customJobs"):
                    code, data = server.create(path[: -len("/customJobs")], raw)
                    return self._send(code, data)
                self._send(404, _status(404, "NOT_FOUND", f"no method at {path}"))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    # -- the API -----------------------------------------------------------------------

    def create(self, parent: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        from google.cloud.aiplatform_v1 import CustomJob
        from google.protobuf.json_format import MessageToDict

        try:
            parsed = CustomJob.from_json(raw.decode(), ignore_unknown_fields=False)
        except Exception as exc:
            return 400, _status(400, "INVALID_ARGUMENT", f"Invalid JSON payload: {exc}")
        body = MessageToDict(CustomJob.pb(parsed))  # (names, defaults left out)
        said = [*problems(body), parent_problem(parent)]
        refused = next((each for each in said if each), None) or _flex_start_refusal(
            body["jobSpec"]
        )
        if refused:
            return 400, _status(400, "INVALID_ARGUMENT", refused)
        self.requests.append(body)  # (as the API reads it: enum names, defaults left out)
        behaviour = self.script.pop(0) if self.script else "run"
        region = parent.split("/")[3]
        if behaviour == "quota":
            return 429, _status(
                429,
                "RESOURCE_EXHAUSTED",
                "The following quota metrics exceed quota limits: aiplatform.googleapis.com/"
                f"custom_model_training_nvidia_t4_gpus (region {region})",
            )
        with self._lock:
            self._count += 1
            name = f"{parent}/customJobs/{1000 + self._count}"
            job = self.jobs[name] = Job(name, body)
        threading.Thread(target=self._life, args=(job, behaviour, region), daemon=True).start()
        if behaviour == "lost-answer":  # made, but the answer is a server error
            return 503, _status(503, "UNAVAILABLE", "The service is currently unavailable.")
        return 200, job.answer()

    def quota_metric(self, metric: str) -> dict[str, Any] | None:
        """Service Usage's ConsumerQuotaMetric ``metric`` (None: not one it has)."""
        if metric not in self.quotas:
            return None
        buckets = [
            {"effectiveLimit": str(limit), "defaultLimit": "0", "dimensions": {"region": r}}
            for r, limit in sorted(self.quotas[metric].items())
        ]
        return {
            "metric": metric,
            "displayName": metric.rsplit("/", 1)[-1],
            "consumerQuotaLimits": [
                {
                    "metric": metric,
                    "unit": "1/{project}/{region}",
                    # the default bucket first, without dimensions (0: left out, as proto3)
                    "quotaBuckets": [{}, *buckets],
                }
            ],
        }

    def cancel(self, name: str) -> tuple[int, dict[str, Any]]:
        job = self.jobs.get(name)
        if job is None:
            return 404, _status(404, "NOT_FOUND", f"{name} not found")
        with self._lock:
            if job.state in _ENDED:
                return 400, _status(400, "FAILED_PRECONDITION", f"{name} has ended")
            job.cancelled = True
            job.state = "JOB_STATE_CANCELLING"
            if not job.procs:  # no machine yet: nothing to stop
                job.state = "JOB_STATE_CANCELLED"
                job.error = {"code": 1, "message": "CANCELED"}
                job.ended = time.time()
        self._stop(job)
        return 200, {}

    def preempt(self, name: str) -> None:
        """The spot VM of ``name`` is taken back."""
        job = self.jobs[name]
        job.preempted = True
        self._stop(job)

    def _stop(self, job: Job) -> None:
        for proc in job.procs:
            if proc.poll() is None:
                stop_with_grace(proc, self.grace)

    # -- a job's life -------------------------------------------------------------------

    def _life(self, job: Job, behaviour: str, region: str) -> None:
        time.sleep(0.2)
        self._set(job, "JOB_STATE_PENDING")
        flex = job.body["jobSpec"].get("scheduling", {}).get("strategy") == "FLEX_START"
        time.sleep(self.flex_wait if flex else self.provision)
        if job.cancelled:
            return  # (ended by the cancel)
        if behaviour == "stockout":
            error = {
                "code": RESOURCE_EXHAUSTED,
                "message": f"Resources are insufficient in region: {region}. Try a different "
                "region or use a different accelerator.",
            }
            return self._end(job, "JOB_STATE_FAILED", error)
        try:
            code = self._run(job)
        except Exception as exc:  # the double itself failed: said as an internal error
            return self._end(job, "JOB_STATE_FAILED", {"code": 13, "message": repr(exc)})
        if job.cancelled:
            self._end(job, "JOB_STATE_CANCELLED", {"code": 1, "message": "CANCELED"})
        elif job.preempted:
            message = f"The replica {job.failed} was preempted: STOCKOUT (Spot VM taken back)"
            self._end(job, "JOB_STATE_FAILED", {"code": RESOURCE_EXHAUSTED, "message": message})
        elif code == 0:
            self._end(job, "JOB_STATE_SUCCEEDED", None)
        else:
            message = (
                f"The replica {job.failed} exited with a non-zero status of {code}. "
                "To find out more about why your job exited please check the logs"
            )
            self._end(job, "JOB_STATE_FAILED", {"code": 3, "message": message})

    def _run(self, job: Job) -> int:
        """What the job's VMs run (one per replica of each worker pool); returns the exit
        code of the replica that failed first, else 0."""
        from ferry.runner.run import free_port

        number = job.name.rsplit("/", 1)[1]
        spec = job.body["jobSpec"]
        replicas = [
            (f"workerpool{p}", index, pool)
            for p, pool in enumerate(spec["workerPoolSpecs"])
            for index in range(int(pool.get("replicaCount") or 1))
        ]
        # Vertex AI gives every replica port 2222 on a VM of its own; here they share this
        # machine, so one port that is free on it
        port = free_port()
        cluster: dict[str, list[str]] = {}
        for kind, index, _ in replicas:
            cluster.setdefault(kind, []).append(f"{kind}-{index}:{port}")
        names = [f"{kind}-{index}" for kind, index, _ in replicas]
        machines, mounts = [], []
        for n, (kind, index, pool) in enumerate(replicas):
            vm = self.root / (f"vm-{number}" if len(replicas) == 1 else f"vm-{number}-{n}")
            task = {"type": kind, "index": index}
            made = self._machine(job, vm, pool, {"cluster": cluster, "task": task})
            if isinstance(made, int):  # (its install failed)
                return made
            argv, env = made
            mount = GcsMount(vm / "gcs", buckets_named(job.body))  # Cloud Storage FUSE
            mount.fill()
            mounts.append(mount)
            binds = [(str(mount.folder), "/gcs")]
            if len(replicas) > 1:  # each replica reaches the others by their names
                binds.append(names_here(vm, names))
            argv = wrap(argv, str(vm / "home"), vm / "mnt", binds)
            machines.append((argv, env, vm))
        with self._lock:
            if job.cancelled:  # (cancelled while the VMs got ready)
                return -signal.SIGTERM
            job.procs = start(machines, home=True)
        self._set(job, "JOB_STATE_RUNNING", started=True)
        code, failed = wait_all(job.procs, self.grace)
        job.failed = names[failed]
        for mount in mounts:  # (what the commands wrote under /gcs, into the buckets)
            mount.send_back()
        return code

    def _machine(
        self, job: Job, vm: Path, pool: dict[str, Any], cluster: dict[str, Any]
    ) -> tuple[list[str], dict[str, str]] | int:
        """One replica's VM made ready (its image, the package installed): its command and
        variables, or the install's exit code when it failed."""
        import gcsfs

        number = job.name.rsplit("/", 1)[1]
        (vm / "home").mkdir(parents=True)
        (vm / "tmp").mkdir()
        python = image_python(vm)  # a fresh VM: its own image, nothing installed by another
        spec = job.body["jobSpec"]
        base = spec.get("baseOutputDirectory", {}).get("outputUriPrefix", "").rstrip("/")
        env = {
            "PATH": f"{python.parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(vm / "home"),
            "TMPDIR": str(vm / "tmp"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "CLOUD_ML_JOB_ID": number,
            "CLOUD_ML_PROJECT_ID": "123456789012",
            "CLUSTER_SPEC": json.dumps(
                {**cluster, "environment": "cloud", "job": json.dumps(spec)}
            ),
            # the VM's access to storage (a real one's: its service account)
            "STORAGE_EMULATOR_HOST": self.storage,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }
        if base:
            env["AIP_MODEL_DIR"] = f"{base}/model/"
            env["AIP_CHECKPOINT_DIR"] = f"{base}/checkpoints/"
            env["AIP_TENSORBOARD_LOG_DIR"] = f"{base}/logs/"
        if "pythonPackageSpec" not in pool:
            container = pool["containerSpec"]
            env.update({e["name"]: e["value"] for e in container.get("env", [])})
            command = [str(python) if w == "python3" else w for w in container["command"]]
            return [*command, *container.get("args", [])], env
        package = pool["pythonPackageSpec"]
        env.update({e["name"]: e["value"] for e in package.get("env", [])})
        fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
        local = []
        for uri in package.get("packageUris", []):
            target = vm / "packages" / uri.rsplit("/", 1)[1]
            target.parent.mkdir(exist_ok=True)
            fs.get_file(uri[len("gs://") :], str(target))
            local.append(str(target))
        pip = [str(python), "-m", "pip", "install", "--no-input", *local]
        pip += ["--disable-pip-version-check", "--no-index"]  # (here: no network)
        with open(vm / "log.txt", "ab") as log:
            installed = subprocess.run(pip, env=env, cwd=vm / "home", stdout=log, stderr=log)
        if installed.returncode:
            return installed.returncode
        return [str(python), "-m", package["pythonModule"], *package.get("args", [])], env

    def _set(self, job: Job, state: str, started: bool = False) -> None:
        with self._lock:
            if job.state in _ENDED or (job.cancelled and state != "JOB_STATE_CANCELLED"):
                return
            job.state = state
            if started:
                job.started = time.time()

    def _end(self, job: Job, state: str, error: dict[str, Any] | None) -> None:
        with self._lock:
            job.state = state
            job.error = error
            job.ended = time.time()

    def close(self) -> None:
        for job in self.jobs.values():
            for proc in job.procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        self.httpd.shutdown()


_ENDED = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}


def _flex_start_refusal(spec: dict[str, Any]) -> str | None:
    """What Vertex AI refuses in a flex-start job spec (None: nothing, or not flex-start)."""
    scheduling = spec.get("scheduling", {})
    if scheduling.get("strategy") != "FLEX_START":
        return None
    machines = [pool.get("machineSpec", {}) for pool in spec["workerPoolSpecs"]]
    if any(m != machines[0] for m in machines):
        return "FLEX_START requires the same machine spec in every worker pool"
    if machines[0].get("acceleratorType") not in FLEX_START_GPUS:
        return f"FLEX_START does not support {machines[0].get('acceleratorType', 'CPU-only')}"
    if float(scheduling.get("timeout", "0s").rstrip("s")) > FLEX_START_TIMEOUT:
        return "FLEX_START requires a timeout of at most 7 days"
    return None


def _status(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
