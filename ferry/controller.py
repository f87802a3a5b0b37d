"""One job's life: submission, admission, attempts, retries, limits, cancel and recovery
of lost supervisors.

This module is the only writer of a job's status. :func:`submit` stores a job and starts a
supervisor for it when the backend has room; :func:`supervise` is what that detached
supervisor runs; :func:`reconcile` (called by every ``ferry`` command) turns a supervisor
that vanished into a lost attempt; :func:`schedule` admits queued jobs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config, defaults
from ferry.contract.env import env_key
from ferry.errors import FerryError, TransitionError, UsageError
from ferry.procs import environ_of, hostname, is_supervisor, start_time
from ferry.status import ACTIVE, AttemptStatus, JobStatus
from ferry.store import Job, Store, open_store
from ferry.store.base import IdTaken

if TYPE_CHECKING:
    from ferry.backends.local import LocalAttempt
    from ferry.contract.env import JobDirs
    from ferry.spec import JobSpec
    from ferry.storage.outputs import OutputSync

_S = JobStatus
_SLUG_RE = re.compile(r"[^a-z0-9]+")
LAUNCH_FILE = "launch.json"  # private (0600): the submitter's environment and secret values


# ---------------------------------------------------------------------------------------
# Submission


def derive_name(command: tuple[str, ...] | list[str]) -> str:
    """A job name from its command: the script's stem (``train.py`` -> ``train``)."""
    for word in command:
        stem = Path(word).stem
        if word.endswith((".py", ".sh", ".ipynb")) and stem:
            return stem
    if len(command) >= 3 and command[1] == "-m":
        return command[2].rpartition(".")[2]
    return Path(command[0]).name


def _slug(name: str) -> str:
    slug = _SLUG_RE.sub("-", name.lower()).strip("-")[:40].strip("-")
    return slug or "job"


def jobs_root() -> Path:
    """Where job folders live."""
    root = config.ferry_home() / "jobs"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def submit(
    spec: JobSpec, *, store: Store | None = None, environ: dict[str, str] | None = None
) -> Job:
    """Store a job, snapshot its code, and start it when its backend has room.

    Args:
        spec: the validated job spec.
        store: the job store (default: the one under FERRY_HOME).
        environ: the environment the job starts from (default: this process's). Secret
            values are read from it now and kept only in the job's private folder.

    Returns:
        The stored job (QUEUED, or STARTING if it was admitted at once).
    """
    from ferry.backends.registry import get_backend

    store = store or open_store()
    environ = dict(os.environ if environ is None else environ)
    if not spec.command:
        raise UsageError(
            "the job has no command",
            "give one after --, e.g. ferry run -- python train.py, or set command: in the spec",
        )
    backend_name = spec.backend or str(config.get("backend"))
    backend = get_backend(backend_name)
    backend.check(spec)
    if spec.inputs or (spec.outputs and "://" in spec.outputs):
        from ferry.storage.staging import check_locations

        check_locations({n: i.uri for n, i in spec.inputs.items()}, spec.outputs)
    missing = [name for name in spec.secrets if name not in environ]
    if missing:
        raise UsageError(
            f"secret {missing[0]} is not set in this environment",
            f"export {missing[0]}=... before submitting, or remove it from secrets",
        )
    name = spec.name or derive_name(spec.command)
    spec = spec.with_defaults(name=name, backend=backend_name).with_absolute_paths(Path.cwd())
    reconcile(store, admit=False)  # admission follows below, with this job in the queue

    root = jobs_root()
    staging = root / f".incoming-{os.urandom(6).hex()}"
    staging.mkdir(mode=0o700)
    try:
        from ferry.packaging.snapshot import snapshot_code

        max_size = int(config.get("snapshot.max_size"))
        snapshot_code(spec.code, staging / "code", max_size, skip=(config.ferry_home(),))
        launch = {"env": {**environ, **spec.env, **{k: environ[k] for k in spec.secrets}}}
        launch_path = staging / LAUNCH_FILE
        fd = os.open(launch_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(launch, file)
        if spec.paths == "auto":  # decided once, on the code as submitted
            from ferry.contract.container_paths import mentions_container_paths

            paths = "container" if mentions_container_paths(staging / "code") else "host"
            spec = spec.model_copy(update={"paths": paths})
            backend.check(spec)
        job = _store_job(store, spec, name, backend_name, staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    schedule(store, backend_name)
    return store.get_job(job.id)


def _store_job(
    store: Store, spec: JobSpec, name: str, backend: str, staging: Path, root: Path
) -> Job:
    """Give the prepared job folder a fresh id and store the job under it."""
    outputs_template = spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
    for tries in range(100):
        job_id = f"{_slug(name)}-{os.urandom(2 if tries < 20 else 4).hex()}"
        job_dir = root / job_id
        try:
            staging.rename(job_dir)  # fails if the folder exists: the id is taken
        except OSError:
            continue
        outputs = outputs_template.replace("{job_id}", job_id)
        if "://" not in outputs:
            outputs = str(Path(outputs).expanduser().absolute())
        try:
            return store.create_job(
                job_id=job_id,
                name=name,
                backend=backend,
                spec=spec.to_json(),
                job_dir=str(job_dir),
                outputs=outputs,
            )
        except IdTaken:
            job_dir.rename(staging)
    raise FerryError("could not find a free job id", "try again")


# ---------------------------------------------------------------------------------------
# Admission


def schedule(store: Store, backend_name: str = "local", *, adopt: bool = False) -> list[Job]:
    """Admit the queued jobs that fit now and start a supervisor for each.

    With ``adopt`` (a supervisor whose job just ended), the first admitted job is left for
    the caller to supervise itself, which saves starting a process per job.
    """
    from ferry.backends.registry import get_backend

    backend = get_backend(backend_name)
    admitted = store.admit(backend.admit, backend_name)
    for job in admitted[1:] if adopt else admitted:
        try:
            from ferry.supervisor import spawn_supervisor

            spawn_supervisor(job)
        except OSError as exc:
            _finish_job(store, job.id, _S.FAILED, f"could not start its supervisor: {exc}")
    return admitted


# ---------------------------------------------------------------------------------------
# Cancel


def cancel(store: Store, job: Job) -> Job:
    """Ask a job to stop: a queued job is cancelled at once, a running one is stopped by its
    supervisor (SIGTERM, grace, SIGKILL)."""
    if job.status.is_terminal() or job.status is _S.CANCELLING:
        return job
    if job.status is _S.QUEUED:
        try:
            job = _finish_job(store, job.id, _S.CANCELLED, "cancelled while queued", {_S.QUEUED})
            schedule(store, job.backend)  # it may have held back jobs queued behind it
            return job
        except TransitionError:
            job = store.get_job(job.id)  # admitted meanwhile: stop it like a running one
    try:
        job = store.transition(
            job.id, _S.CANCELLING, expected=ACTIVE - {_S.CANCELLING}, reason="cancel requested"
        )
    except TransitionError:
        return store.get_job(job.id)
    if job.supervisor_pid and job.supervisor_host == hostname() and supervisor_alive(job):
        try:  # (checked first: a reused pid would be killed by SIGUSR1)
            os.kill(job.supervisor_pid, signal.SIGUSR1)  # wake it now rather than at its next poll
        except (ProcessLookupError, PermissionError):
            pass
    return job


def _finish_job(
    store: Store,
    job_id: str,
    status: JobStatus,
    reason: str,
    expected: frozenset[JobStatus] | set[JobStatus] | None = None,
    **fields: Any,
) -> Job:
    job = store.transition(
        job_id,
        status,
        expected=expected or (ACTIVE | {_S.QUEUED}),
        reason=reason,
        ended_at=time.time(),
        **fields,
    )
    launch = Path(job.job_dir) / LAUNCH_FILE
    launch.unlink(missing_ok=True)
    return job


# ---------------------------------------------------------------------------------------
# Lost supervisors


def supervisor_alive(job: Job) -> bool:
    """Whether the job's supervisor still runs (heartbeat TTL for other hosts)."""
    now = time.time()
    if job.supervisor_pid is None:
        # Admitted, but its supervisor never registered: the admitting process died.
        return now - job.updated_at < defaults.START_TIMEOUT
    if job.supervisor_host == hostname():
        started = start_time(job.supervisor_pid)
        return started is not None and abs(started - (job.supervisor_started or started)) < 1.0
    beat = job.heartbeat_at or job.updated_at
    return now - beat < defaults.HEARTBEAT_INTERVAL + defaults.HEARTBEAT_GRACE


def _kill_orphans(job: Job, pgid: str | None) -> None:
    """Kill what is left of a lost job: its attempt's process group, and every process of
    this user that carries the job's FERRY_JOB_ID (those that left the group)."""
    marker = f"FERRY_JOB_ID={job.id}".encode()
    if pgid and pgid.isdigit():
        # The group id is the main process's pid. While any member lives, Linux does not
        # reuse it; if a live process has that pid, it must be the job's own to be killed.
        leader_alive = start_time(int(pgid)) is not None
        if not leader_alive or marker in environ_of(int(pgid)):
            try:
                os.killpg(int(pgid), signal.SIGKILL)
            except OSError:
                pass
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me or is_supervisor(int(entry)):
            continue
        if marker in environ_of(int(entry)):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                continue


def reconcile(store: Store, admit: bool = True) -> list[Job]:
    """Turn jobs whose supervisor vanished (kill -9, reboot) into lost attempts, then (with
    ``admit``) start queued jobs that fit: room may have been freed by a lost job, a cancel,
    or a change of config. Returns the jobs found lost."""
    lost: list[Job] = []
    for job in store.list_jobs(ACTIVE):
        if job.backend != "local" or supervisor_alive(job):
            continue
        attempts = store.attempts(job.id)
        last = attempts[-1] if attempts else None
        _kill_orphans(job, last.handle if last else None)
        if last and not last.status.is_terminal():
            store.update_attempt(
                job.id,
                last.number,
                status=AttemptStatus.LOST,
                ended_at=time.time(),
                reason="supervisor lost",
            )
        try:
            reason = "supervisor lost (it stopped without recording how the job ended)"
            if job.status is _S.CANCELLING:
                lost.append(_finish_job(store, job.id, _S.CANCELLED, "cancelled; " + reason))
            else:
                lost.append(_finish_job(store, job.id, _S.FAILED, reason))
        except TransitionError:
            continue  # its supervisor finished it meanwhile
    if admit:
        waiting = store.list_jobs([_S.QUEUED], limit=1)
        for backend in sorted({job.backend for job in [*lost, *waiting]}):
            schedule(store, backend)
    return lost


# ---------------------------------------------------------------------------------------
# The supervisor's work


def describe_exit(code: int) -> str:
    """``'exit code 3'`` or ``'killed by SIGKILL'``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


def exit_status(job: Job) -> int:
    """The exit code a shell should see for a finished job (``ferry run``, ``ferry wait``)."""
    if job.status is _S.SUCCEEDED:
        return 0
    if job.status is _S.CANCELLED:
        return 130
    if job.reason and job.reason.startswith("max_runtime"):
        return 124
    if job.exit_code is not None and job.exit_code != 0:
        return job.exit_code if job.exit_code > 0 else 128 - job.exit_code
    return 1


@dataclass
class Control:
    """Flags set by the supervisor's signal handlers."""

    wake_read: int  # becomes readable when a signal arrives (signal.set_wakeup_fd)
    woken: bool = False  # SIGUSR1 arrived: look at the store now (cancel)
    terminated: int = 0  # the signal that asked the supervisor itself to stop


def _failure_reason(code: int, tail: list[str], killed_by_us: bool) -> str:
    reason = describe_exit(code)
    if code == -signal.SIGKILL and not killed_by_us:
        reason += " (out of memory?)"
    lines = [line.strip()[:200] for line in tail if line.strip()]
    if lines:
        reason += " (last log lines: " + " | ".join(lines[-defaults.REASON_LOG_LINES :]) + ")"
    return reason


def _command_argv(spec: dict[str, Any]) -> list[str]:
    from ferry.contract.sagemaker import arguments

    command = [str(w) for w in spec["command"]]
    extra = arguments(spec.get("contract", "ferry"), spec.get("hyperparameters") or {})
    if spec.get("shell"):  # words are joined with spaces, as ssh does
        import shlex

        return ["/bin/sh", "-c", " ".join([*command, *map(shlex.quote, extra)])]
    return [*command, *extra]


def _launch_env(job: Job) -> dict[str, str]:
    try:
        with open(Path(job.job_dir) / LAUNCH_FILE) as file:
            env: dict[str, str] = json.load(file)["env"]
    except (OSError, ValueError, KeyError):
        env = {k: v for k, v in os.environ.items()}
    # `python` in the command means the interpreter Ferry runs with (environment: current).
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] != bin_dir:
        env["PATH"] = bin_dir + os.pathsep + path
    return env


def supervise(job_id: str, control: Control, store: Store | None = None) -> None:
    """Run a job's attempts to the end. Called in the detached supervisor process."""
    from ferry.backends.base import LaunchRequest
    from ferry.backends.local import LocalBackend, become_subreaper
    from ferry.contract import sagemaker
    from ferry.contract.env import JobDirs, contract_env
    from ferry.storage.outputs import OutputSync

    store = store or open_store()
    job = store.get_job(job_id)
    # Recorded with each attempt; before the first, START_TIMEOUT covers a vanished supervisor.
    me: dict[str, Any] = {
        "supervisor_pid": os.getpid(),
        "supervisor_host": hostname(),
        "supervisor_started": start_time(os.getpid()),
    }
    become_subreaper()
    backend = LocalBackend()
    spec = job.spec
    base_env = _launch_env(job)
    sync = OutputSync.for_outputs(job.outputs, Path(job.job_dir))
    dirs = JobDirs.under(str(sync.local))
    grace = float(config.get("local.stop_grace"))
    max_runtime = (spec.get("limits") or {}).get("max_runtime")
    retries_left = int((spec.get("retries") or {}).get("on_error", 0))
    contract = spec.get("contract", "ferry")
    opt_ml = Path(job.job_dir) / "opt_ml"
    try:
        dirs.create()
    except OSError as exc:
        _finish_job(store, job_id, _S.FAILED, f"cannot create outputs in {sync.local}: {exc}")
        return
    errors = 0
    while True:
        job = store.get_job(job_id)
        if job.status is _S.CANCELLING:
            when = "between attempts" if store.attempts(job_id) else "before it started"
            _finish_job(store, job_id, _S.CANCELLED, f"cancelled {when}")
            return
        if job.status.is_terminal():  # declared lost while this supervisor was starting
            return
        attempt = store.add_attempt(
            job_id, backend="local", host=hostname(), log_dir=job.job_dir, **me
        )
        try:
            inputs = _stage_inputs(store, job)
        except FerryError as exc:
            Path(attempt.log_path).write_text("")
            _end(
                store, job_id, attempt.number, AttemptStatus.FAILED, _S.FAILED, str(exc), None, sync
            )
            return
        env = {
            **base_env,
            **contract_env(
                job_id=job_id,
                attempt=attempt.number,
                dirs=dirs,
                gpus=job.allocation.gpus,
                cpus=job.allocation.cpus,
                hyperparameters=spec.get("hyperparameters") or {},
                inputs=inputs,
                checkpoint_every=(spec.get("checkpoint") or {}).get("every"),
                bucket_root=_bucket_root(job.outputs),
            ),
        }
        argv = _command_argv(spec)
        container = spec.get("paths") == "container"
        if contract == "sagemaker" or container:
            (opt_ml / "output" / "failure").unlink(missing_ok=True)
            sm_env = sagemaker.prepare(opt_ml, dirs, spec.get("hyperparameters") or {}, inputs)
            if contract == "sagemaker":
                env.update(sm_env)
        if container:
            argv = _in_container_paths(job, argv, env, dirs, opt_ml, inputs, sync, contract)
        request = LaunchRequest(
            job=job,
            attempt=attempt.number,
            argv=argv,
            cwd=str(Path(job.job_dir) / "code"),
            env=env,
            log_path=attempt.log_path,
        )
        try:
            running = backend.launch(request, control.wake_read)
        except FerryError as exc:
            Path(attempt.log_path).write_text("")
            _end(
                store, job_id, attempt.number, AttemptStatus.FAILED, _S.FAILED, str(exc), None, sync
            )
            return
        try:
            job = store.transition(
                job_id,
                _S.RUNNING,
                expected={_S.STARTING, _S.RECOVERING},
                started_at=job.started_at or time.time(),
                heartbeat_at=time.time(),
                attempt=(
                    attempt.number,
                    {"status": AttemptStatus.RUNNING, "handle": running.handle},
                ),
            )
        except TransitionError:
            store.update_attempt(
                job_id, attempt.number, status=AttemptStatus.RUNNING, handle=running.handle
            )
            job = store.get_job(job_id)  # cancelled while launching: _watch stops it at once
            if job.status.is_terminal():  # or finished elsewhere (declared lost): stop now
                _abandon(store, job_id, attempt.number, running)
                return
        outcome, code = _watch(store, job, running, control, grace, max_runtime, sync)
        if outcome == "abandoned":
            _abandon(store, job_id, attempt.number, running)
            return
        marker = sagemaker.failure_text(opt_ml) if contract == "sagemaker" else None
        if outcome == "exited" and marker:  # the script said why it failed, as on SageMaker
            reason = f"{marker} (from /opt/ml/output/failure; {describe_exit(code)})"
            ending = (AttemptStatus.FAILED, _S.FAILED, reason)
        elif outcome == "exited" and code == 0:
            ending = (AttemptStatus.SUCCEEDED, _S.SUCCEEDED, "exit code 0")
        elif outcome == "cancelled":
            ending = (AttemptStatus.CANCELLED, _S.CANCELLED, "cancelled")
        elif outcome == "timeout":
            reason = f"max_runtime {_fmt_seconds(max_runtime)} reached"
            ending = (AttemptStatus.TIMED_OUT, _S.FAILED, reason)
        elif outcome == "stopped":
            reason = f"its supervisor was stopped by {signal.Signals(control.terminated).name}"
            ending = (AttemptStatus.FAILED, _S.FAILED, reason)
        else:
            reason = _failure_reason(code, running.tail(defaults.REASON_LOG_LINES), running._killed)
            ending = (AttemptStatus.FAILED, _S.FAILED, reason)
        if ending[0] is not AttemptStatus.FAILED or outcome != "exited" or errors >= retries_left:
            _end(store, job_id, attempt.number, *ending, code, sync)
            return
        errors += 1
        ended = {
            "status": AttemptStatus.FAILED,
            "ended_at": time.time(),
            "exit_code": code,
            "reason": reason,
        }
        try:
            store.transition(
                job_id,
                _S.RECOVERING,
                expected={_S.RUNNING},
                reason=f"retry {errors} of {retries_left} after {reason}",
                attempt=(attempt.number, ended),
            )
        except TransitionError:  # cancelled meanwhile: the loop's first check finishes it
            store.update_attempt(job_id, attempt.number, **ended)
            continue
        _backoff(store, job_id, errors, control)


def _in_container_paths(
    job: Job,
    argv: list[str],
    env: dict[str, str],
    dirs: JobDirs,
    opt_ml: Path,
    inputs: dict[str, str],
    sync: OutputSync,
    contract: str,
) -> list[str]:
    """Run ``argv`` where /opt/ml and /gcs/<bucket> exist (and point ``env`` at them)."""
    from ferry.contract import container_paths as cp

    gcs: dict[str, str] = {}
    if sync.remote and (where := cp.gcs_path(sync.target.uri)):
        gcs[where] = str(sync.local)
    for name, item in (job.spec.get("inputs") or {}).items():
        where = cp.gcs_path(item["uri"])
        if where and "://" not in inputs[name]:
            gcs[where] = inputs[name]
    binds = cp.binds_for(opt_ml, dirs.model, dirs.checkpoints, dirs.output, dirs.tensorboard, gcs)
    if contract == "sagemaker":  # as inside a SageMaker container
        env.update(
            SM_MODEL_DIR="/opt/ml/model",
            SM_OUTPUT_DATA_DIR="/opt/ml/output/data",
            SM_INPUT_DIR="/opt/ml/input",
            SM_INPUT_CONFIG_DIR="/opt/ml/input/config",
            SM_OUTPUT_DIR="/opt/ml/output",
        )
        for name in inputs:
            env[f"SM_CHANNEL_{env_key(name)}"] = f"/opt/ml/input/data/{name}"
    if contract == "vertex" and sync.remote and sync.target.protocol == "gs":
        for var, folder in (
            ("AIP_MODEL_DIR", "model"),
            ("AIP_CHECKPOINT_DIR", "checkpoints"),
            ("AIP_TENSORBOARD_LOG_DIR", "tensorboard"),
        ):
            env[var] = sync.target.child(folder).uri + "/"  # as Vertex AI gives them
    local_inputs = tuple(
        path
        for name, path in inputs.items()
        if "://" not in path and "://" not in job.spec["inputs"][name]["uri"]
    )
    return cp.wrap(
        argv, str(Path(job.job_dir) / "code"), Path(job.job_dir) / "root", binds, local_inputs
    )


def _abandon(store: Store, job_id: str, number: int, running: LocalAttempt) -> None:
    """The job was finished by someone else (declared lost): stop its attempt, record why."""
    running.kill()
    while running.wait(1.0) is None:
        pass
    store.update_attempt(
        job_id,
        number,
        status=AttemptStatus.LOST,
        ended_at=time.time(),
        reason="the job was declared lost while this attempt ran; it was stopped",
    )


def _end(
    store: Store,
    job_id: str,
    number: int,
    attempt_status: AttemptStatus,
    status: JobStatus,
    reason: str,
    code: int | None,
    sync: OutputSync,
) -> None:
    """Send the outputs (manifest last), then record how the attempt ended and finish the
    job in one transaction: a finished job's outputs are complete."""
    ended: dict[str, Any] = {"status": attempt_status, "ended_at": time.time(), "exit_code": code}
    try:
        job = store.get_job(job_id)
        patterns = job.spec.get("collect") or []
        if patterns:
            sync.collect(Path(job.job_dir) / "code", patterns)
        logs = [Path(a.log_path) for a in store.attempts(job_id)]
        manifest = sync.finish(logs, job_id)
        store.add_event(job_id, f"outputs: {len(manifest['files'])} files in {sync.target.uri}")
    except Exception as exc:  # a bucket that refused, a full disk: the job did not deliver
        status = _S.FAILED if status is _S.SUCCEEDED else status
        reason = f"{reason}; outputs could not be written to {sync.target.uri}: {exc}"
    if attempt_status is not AttemptStatus.SUCCEEDED:
        ended["reason"] = reason
    _finish_job(store, job_id, status, reason, attempt=(number, ended), exit_code=code)


def _stage_inputs(store: Store, job: Job) -> dict[str, str]:
    """Bring the job's inputs to this machine; returns name -> what FERRY_INPUT_<NAME> holds."""
    from ferry.storage.cache import InputCache
    from ferry.storage.staging import stage_input
    from ferry.units import format_duration, format_size

    items = (job.spec.get("inputs") or {}).items()
    if not items:
        return {}
    cache = InputCache(config.ferry_home() / "cache")
    progress = _StagingProgress(Path(job.job_dir) / STAGING_FILE)
    staged: dict[str, str] = {}
    try:
        for name, item in items:
            result = stage_input(
                name,
                item["uri"],
                item.get("mode", "copy"),
                Path(job.job_dir) / "inputs",
                cache,
                progress,
            )
            staged[name] = result.path
            if result.files:
                store.add_event(
                    job.id,
                    f"input {name}: {result.files} files, {format_size(result.bytes_downloaded)} "
                    f"copied, {format_size(result.bytes_from_cache)} from the cache, in "
                    f"{format_duration(result.seconds)}",
                )
    finally:
        progress.close()
    return staged


STAGING_FILE = "staging.json"  # progress of input staging, read by `ferry run`


class _StagingProgress:
    """Writes staging progress for followers, at most a few times a second."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last = 0.0

    def __call__(self, name: str, done: int, total: int, files: int, all_files: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "input": name,
                    "done": done,
                    "total": total,
                    "files": files,
                    "all_files": all_files,
                }
            )
        )
        os.replace(tmp, self.path)

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def _bucket_root(outputs: str) -> str:
    """The bucket that holds the job's outputs (for BUCKET_ROOT), or the local outputs root."""
    from ferry.storage.locations import parse_uri

    loc = parse_uri(outputs)
    if loc.is_local:
        return str(Path(loc.path).parent)
    return f"{loc.protocol}://{loc.bucket}"


def _fmt_seconds(seconds: float | None) -> str:
    from ferry.units import format_duration

    return format_duration(seconds or 0)


def _backoff(store: Store, job_id: str, n: int, control: Control) -> None:
    """Wait before retry ``n`` (1 s, 2 s, 4 s ... at most 30 s), or until a cancel arrives."""
    import selectors

    end = time.monotonic() + min(2 ** (n - 1), 30)
    selector = selectors.DefaultSelector()
    selector.register(control.wake_read, selectors.EVENT_READ)
    while time.monotonic() < end:
        selector.select(min(defaults.CONTROL_POLL, end - time.monotonic()))
        if store.get_job(job_id).status is _S.CANCELLING or control.terminated:
            break
    selector.close()


def _watch(
    store: Store,
    job: Job,
    running: LocalAttempt,
    control: Control,
    grace: float,
    max_runtime: float | None,
    sync: OutputSync,
) -> tuple[str, int]:
    """Wait for the attempt, heartbeating, and stop it on cancel, timeout or SIGTERM."""
    deadline = (job.started_at or time.time()) + max_runtime if max_runtime else None
    last_beat = last_control = last_sync = time.monotonic()
    sync_every = float(config.get("outputs.sync_interval"))
    stopping: str | None = None
    stop_sent = 0.0
    while True:
        now_wall = time.time()
        waits = [defaults.HEARTBEAT_INTERVAL, defaults.CONTROL_POLL]
        if deadline and not stopping:
            waits.append(max(0.0, deadline - now_wall))
        if stopping:
            waits.append(max(0.0, stop_sent + grace - time.monotonic()))
        code = running.wait(min(waits))
        if code is not None:
            return (stopping or "exited"), code
        mono = time.monotonic()
        if sync.remote and mono - last_sync >= sync_every:
            last_sync = mono
            try:  # checkpoints reach the bucket while the job runs
                sync.sync()
            except Exception as exc:
                store.add_event(job.id, f"syncing outputs to {sync.target.uri} failed: {exc}")
        if mono - last_beat >= defaults.HEARTBEAT_INTERVAL:
            store.update_job(job.id, heartbeat_at=time.time())
            last_beat = mono
        if stopping is None:
            if control.terminated:
                stopping = "stopped"
            elif deadline and time.time() >= deadline:
                stopping = "timeout"
            elif mono - last_control >= defaults.CONTROL_POLL or _woken(control):
                last_control = mono
                status = store.get_job(job.id).status
                if status is _S.CANCELLING:
                    stopping = "cancelled"
                elif status.is_terminal():  # declared lost meanwhile: not ours any more
                    return "abandoned", -signal.SIGKILL
            if stopping:
                store.add_event(
                    job.id,
                    f"stopping the attempt ({stopping}): SIGTERM, then SIGKILL after {grace:g}s",
                )
                running.stop()
                stop_sent = mono
        elif mono - stop_sent >= grace:
            running.kill()


def _woken(control: Control) -> bool:
    woken, control.woken = control.woken, False
    return woken
