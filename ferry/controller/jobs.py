"""A job's life outside its attempts: submission, admission, cancel, and noticing lost
supervisors. With :mod:`.attempts`, the only writer of a job's status.

The controller decides; it starts no process. Whatever admits or claims a job (submit,
schedule, cancel, reconcile) is handed a :data:`Starter` by its caller, which starts what
follows the job: the CLI and the API hand :func:`ferry.followers.start` (a supervisor of
its own, or the watcher), a supervisor and the watcher hand their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry import config, defaults, held_secrets
from ferry.errors import FerryError, TransitionError, UsageError, install_hint
from ferry.procs import environ_of, hostname, is_runner, is_supervisor, start_time
from ferry.status import ACTIVE, AttemptStatus, JobStatus, shell_code
from ferry.store import Attempt, Job, Store, open_store
from ferry.store.base import IdTaken
from ferry.units import expand_home

if TYPE_CHECKING:
    from ferry.spec import JobSpec

_S = JobStatus
_SLUG_RE = re.compile(r"[^a-z0-9]+")
LAUNCH_FILE = "launch.json"  # private (0600): the submitter's environment and secret values
SUPERVISOR_LOG = "supervisor.log"  # in the job folder: what followed the job wrote

# Starts what follows an admitted (or claimed) job; raises when it cannot (that job then
# fails, saying why; the others still start).
Starter = Callable[[Job], None]


# ---------------------------------------------------------------------------------------
# Submission


def _slug(name: str) -> str:
    slug = _SLUG_RE.sub("-", name.lower()).strip("-")[:40].strip("-")
    return slug or "job"


def jobs_root() -> Path:
    """Where job folders live."""
    root = config.ferry_home() / "jobs"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def _check_requirements(code: Path, requirements: str, environ: dict[str, str]) -> None:
    """Refuse now requirements the job could not be given: a file that is not there or
    cannot be read, what a shared environment cannot hold, no installer here."""
    from ferry.packaging.environments import installer, requirements_file, wanted

    wanted(requirements_file(code, requirements), code, environ, requirements)
    installer()


def _check_telemetry(spec: JobSpec, environ: dict[str, str]) -> JobSpec:
    """Refuse now what would only fail once the job runs: MLflow tracking without MLflow,
    a notifier naming a variable that is not set. Returns the spec with the configured
    MLflow URI (``tracking.mlflow``), when it names none itself."""
    import importlib.util
    import re

    from ferry.errors import BackendNotInstalled

    if not spec.tracking.mlflow and config.get("tracking.mlflow"):
        tracking = spec.tracking.model_copy(update={"mlflow": config.get("tracking.mlflow")})
        spec = spec.model_copy(update={"tracking": tracking})
    if spec.tracking.mlflow and not importlib.util.find_spec("mlflow"):
        raise BackendNotInstalled("tracking.mlflow needs the MLflow client", install_hint("mlflow"))
    for entry in spec.alerts.notify or ():
        if entry.kind == "command":
            continue  # the shell expands its own variables
        for var in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", entry.target):
            if var not in environ:
                raise UsageError(
                    f"alerts.notify {entry.kind} uses ${{{var}}}, which is not set here",
                    f"export {var}=... before submitting",
                )
    return spec


def submit(
    spec: JobSpec,
    *,
    start: Starter,
    store: Store | None = None,
    environ: dict[str, str] | None = None,
    confirm: Callable[[JobSpec], None] | None = None,
) -> Job:
    """Store a job, snapshot its code, and start it when its backend has room.

    Args:
        spec: the validated job spec.
        start: starts what follows each job admitted now (:func:`ferry.followers.start`).
        store: the job store (default: the one under FERRY_HOME).
        environ: the environment the job starts from (default: this process's). Secret
            values are read from it now and kept only in the job's private folder.
        confirm: called with the spec as it will run, once every check has passed and
            the code is snapshotted, before the job is stored: ``ferry run`` prints the
            plan and its price there, and may ask; what it raises refuses the job.

    Returns:
        The stored job (QUEUED, or STARTING if it was admitted at once).
    """
    from ferry.backends.registry import get_backend

    store = store or open_store()
    environ = dict(os.environ if environ is None else environ)
    spec = _check_telemetry(spec, environ)
    if not spec.command:
        raise UsageError(
            "the job has no command",
            "give one after --, e.g. ferry run -- python train.py, or set command: in the spec",
        )
    backend_name = spec.backend or str(config.get("backend"))
    if backend_name == "auto":  # the cheapest offering that fits, on a backend we have
        backend_name = choose_backend(spec, store)
        spec = spec.model_copy(update={"backend": backend_name})
    backend = get_backend(backend_name)
    backend.check(spec)
    from ferry.controller.budget import check_submission

    check_submission(store)
    missing = [name for name in spec.secrets if name not in environ]
    if missing:
        raise UsageError(
            f"secret {missing[0]} is not set in this environment",
            f"export {missing[0]}=... before submitting, or remove it from secrets",
        )
    # a supervisor this process starts for another job (reconcile, schedule) drops these
    held_secrets.declare(spec.secrets)
    # a cloud's setup (credentials, bucket, quota ...), before the stores are asked: its
    # words for a missing bucket name the cloud's own tools
    checks = backend.preflight(spec)
    if checks:
        from ferry.backends.preflight import refuse_failed

        refuse_failed(checks)
    outputs = spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
    if spec.inputs or "://" in outputs:
        from ferry.storage.staging import check_locations

        named = (
            "outputs" if spec.outputs else f"outputs (outputs_root {config.get('outputs_root')})"
        )
        check_locations({n: i.uri for n, i in spec.inputs.items()}, outputs, named)
    if spec.outputs and "{job_id}" not in spec.outputs and not spec.outputs_exist_ok:
        from ferry.storage.locations import parse_uri
        from ferry.storage.occupancy import refuse_occupied

        place = parse_uri(spec.outputs).uri  # as stored: an absolute path for a local one
        active = store.list_jobs([_S.QUEUED, *ACTIVE])
        claimed = [j.id for j in active if j.outputs in (place, spec.outputs)]
        # a fixed place: it may hold another job's results, or be about to
        refuse_occupied(spec.outputs, claimed[0] if claimed else None)
    name = spec.job_name()
    spec = spec.with_defaults(name=name, backend=backend_name).with_absolute_paths(Path.cwd())
    reconcile(store, start=start, admit=False)  # (admission follows, this job queued)

    root = jobs_root()
    staging = root / f".incoming-{os.urandom(6).hex()}"
    staging.mkdir(mode=0o700)
    try:
        from ferry.packaging import code_store
        from ferry.packaging.snapshot import snapshot_code

        max_size = int(config.get("snapshot.max_size"))
        home = config.ferry_home()
        store_root = home / code_store.FOLDER
        snapshot_code(spec.code, staging / "code", max_size, skip=(home,), store=store_root)
        if spec.environment.requirements:  # (refused now, not when the job starts)
            environment = {**environ, **spec.env}
            _check_requirements(staging / "code", spec.environment.requirements, environment)
        launch = {"env": {**environ, **spec.env, **{k: environ[k] for k in spec.secrets}}}
        launch_path = staging / LAUNCH_FILE
        fd = os.open(launch_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps(launch))  # (dumps: the C encoder; dump streams in Python)
        if spec.paths == "auto":  # decided once, on the code as submitted, for its backend
            spec = backend.resolve_paths(spec, staging / "code")
            backend.check(spec)
        if confirm is not None:  # (the plan and its price, once nothing refuses the job)
            confirm(spec)
        job = _store_job(store, spec, name, backend_name, staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    schedule(store, backend_name, start=start)
    return store.get_job(job.id)


def choose_backend(spec: JobSpec, store: Store | None = None) -> str:
    """The backend of the cheapest usable offering for ``spec`` (``--backend auto``)."""
    from ferry.catalog.estimate import quote

    chosen = quote(spec, backend="auto", store=store)
    if chosen.option is None or chosen.option.backend is None:
        raise UsageError(
            chosen.plan.why_none(),
            "see the offerings with: ferry cost estimate SPEC, or choose a backend",
        )
    return chosen.option.backend


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
            outputs = str(expand_home(outputs).absolute())
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


def schedule(store: Store, backend_name: str, *, start: Starter) -> list[Job]:
    """Admit the queued jobs of ``backend_name`` that fit now, and have ``start`` follow
    each (a supervisor whose job just ended keeps the first for itself, which saves a
    process per job; the watcher keeps them all). Returns the jobs admitted."""
    from ferry.backends.registry import get_backend

    backend = get_backend(backend_name)
    admitted = store.admit(backend.admit, backend_name)
    for job in admitted:
        try:
            start(job)
        except Exception as exc:  # (that job fails; the others still start)
            _finish_job(store, job.id, _S.FAILED, f"could not start its supervisor: {exc}")
    return admitted


# ---------------------------------------------------------------------------------------
# Cancel


def cancel(store: Store, job: Job, *, start: Starter) -> Job:
    """Ask a job to stop: a queued job is cancelled at once (``start`` follows the jobs
    its room then admits), a running one is stopped by its supervisor (SIGTERM, grace,
    SIGKILL)."""
    if job.status.is_terminal() or job.status is _S.CANCELLING:
        return job
    if job.status is _S.QUEUED:
        try:
            job = _finish_job(store, job.id, _S.CANCELLED, "cancelled while queued", {_S.QUEUED})
            schedule(store, job.backend, start=start)  # (it may have held back others)
            return job
        except TransitionError:
            job = store.get_job(job.id)  # admitted meanwhile: stop it like a running one
    try:
        job = store.transition(
            job.id, _S.CANCELLING, expected=ACTIVE - {_S.CANCELLING}, reason="cancel requested"
        )
    except TransitionError:
        return store.get_job(job.id)
    _wake(job)
    return job


def _wake(job: Job) -> None:
    """Have the job's supervisor look at the store now, not at its next poll."""
    if job.supervisor_pid and job.supervisor_host == hostname() and supervisor_alive(job):
        # (alive was checked first: a reused pid would be killed by SIGUSR1)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(job.supervisor_pid, signal.SIGUSR1)


PREEMPT_FILE = "preempt"  # in the job folder: `ferry preempt` asks the supervisor to


def preempt(store: Store, job: Job, source: str = "ferry preempt") -> None:
    """Preempt the job's running attempt as a provider reclaiming capacity would: the
    supervisor sends the stop notice (SIGTERM, grace, SIGKILL), then starts a new attempt
    while retries.on_preemption allows."""
    if job.status is not _S.RUNNING:
        raise UsageError(
            f"job {job.id} is {job.status.value}; only a running job can be preempted",
            "see its state with: ferry status " + job.id,
        )
    path = Path(job.job_dir) / PREEMPT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(source)
    os.replace(tmp, path)
    _wake(job)


def take_preempt_request(job: Job) -> str | None:
    """The pending preemption request's source, consumed; None if there is none."""
    path = Path(job.job_dir) / PREEMPT_FILE
    try:
        source = path.read_text().strip() or "ferry preempt"
        path.unlink()
    except OSError:
        return None
    return source


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
    # Emptied rather than removed: the secrets go with its bytes, and on ext4 without a
    # journal every file removed makes each file created in the next minutes step over it.
    with contextlib.suppress(FileNotFoundError):
        os.truncate(Path(job.job_dir) / LAUNCH_FILE, 0)
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


def _kill_orphans(job: Job, last: Attempt | None) -> None:
    """Kill what is left of a lost job: its last attempt (its backend ends it from here),
    and every process of this user that carries the job's FERRY_JOB_ID (those that left
    their process groups)."""
    marker = f"FERRY_JOB_ID={job.id}".encode()
    if last is not None:
        from ferry.backends.registry import get_backend

        with contextlib.suppress(FerryError):
            get_backend(last.backend).cancel(job, last.number, last.handle)
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me or is_supervisor(int(entry)):
            continue
        if is_runner(int(entry)):  # (another supervisor's: a nested job's, started in it)
            continue
        if marker in environ_of(int(entry)):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                continue


def submitted_env(job: Job) -> dict[str, str] | None:
    """The environment the job was submitted from (kept until it ends), if still there."""
    try:
        with open(Path(job.job_dir) / LAUNCH_FILE) as file:
            env: dict[str, str] = json.load(file)["env"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return env


def _resume(store: Store, job: Job, last: Attempt | None, start: Starter) -> Job | None:
    """Claim a job whose supervisor was lost (kill -9, a reboot) and give it a new
    supervisor, which starts a new attempt from the latest checkpoint; like a preemption,
    it counts against retries.on_preemption. Returns the job resumed, or None when it
    should fail instead (or someone else claimed it first: then ``job`` is returned)."""
    from ferry.controller.policy import History, Limits, resume_allowed

    if job.status is _S.CANCELLING:
        return None
    # one count with the preempted attempts; a supervisor that died before it even started
    # an attempt counts too, so a job whose supervisors keep dying does not go on for ever
    limits = Limits.of(job.plan.retries)
    allowed, used = resume_allowed(History(preemptions=job.preemptions), limits)
    if not allowed:
        return None
    reason = f"{_RESUMING} ({used} of {limits.on_preemption})"
    resumed = _claim(store, job, reason, preemptions=used)
    if resumed is None:
        return job  # claimed (or finished) by someone else meanwhile: theirs to handle
    _lost_attempt(store, job, last)
    _new_supervisor(store, resumed, start)
    return resumed


def _claim(store: Store, job: Job, reason: str, **fields: Any) -> Job | None:
    """Take a job whose supervisor was lost (RECOVERING, no supervisor); None when someone
    else claimed or finished it first."""
    try:
        return store.transition(
            job.id,
            _S.RECOVERING,
            expected={job.status},
            supervised_by=(job.supervisor_pid, job.supervisor_started),
            reason=reason,
            supervisor_pid=None,
            supervisor_host=None,
            supervisor_started=None,
            **fields,
        )
    except TransitionError:
        return None


def _new_supervisor(store: Store, job: Job, start: Starter) -> bool:
    """Start a supervisor for a claimed job; fails the job (False) when none starts."""
    try:
        start(job)
    except Exception as exc:
        _finish_job(store, job.id, _S.FAILED, f"could not start a new supervisor: {exc}")
        return False
    return True


_RESUMING = "supervisor lost; resuming in a new attempt"


def followable(last: Attempt | None) -> bool:
    """Whether ``last`` is an attempt to follow again after its supervisor was lost: it
    has not ended, and it runs elsewhere (where it runs on), under a handle."""
    from ferry.backends.registry import get_backend

    if last is None or last.status.is_terminal() or not last.handle:
        return False
    try:
        return not get_backend(last.backend).runs_here
    except FerryError:  # (a backend this Ferry no longer has)
        return False


def _follow_again(store: Store, job: Job, last: Attempt | None, start: Starter) -> Job | None:
    """A job whose supervisor was lost while its attempt ran elsewhere (a Ray job runs on
    without it): a new supervisor follows that attempt again, which costs no retry.
    Returns the job, or None when its attempt is not one to follow (the caller resumes or
    fails it)."""
    from ferry.backends.registry import get_backend

    if job.status is _S.CANCELLING:  # (finished as cancelled, its attempt stopped)
        return None
    if last is None or not followable(last):
        return None
    claimed = _claim(store, job, f"supervisor lost; following attempt {last.number} again")
    if claimed is None:
        return job  # claimed (or finished) by someone else meanwhile
    if not _new_supervisor(store, claimed, start):
        with contextlib.suppress(FerryError):
            get_backend(last.backend).cancel(job, last.number, last.handle)
    return claimed


def _lost_attempt(store: Store, job: Job, last: Attempt | None) -> None:
    """Stop what the lost supervisor's attempt left running and record it as lost."""
    _kill_orphans(job, last)
    if last and not last.status.is_terminal():
        # it is billed up to the last sign of life, not up to when someone noticed
        now = time.time()
        alive = max(last.started_at, job.heartbeat_at or now) + defaults.HEARTBEAT_INTERVAL
        store.update_attempt(
            job.id,
            last.number,
            status=AttemptStatus.LOST,
            ended_at=min(now, alive),
            reason="supervisor lost",
        )


def reconcile(store: Store, *, start: Starter, admit: bool = True) -> list[Job]:
    """Turn jobs whose supervisor vanished (kill -9, reboot) into lost attempts and resume
    them under a new supervisor (or fail them, past retries.on_preemption), then (with
    ``admit``) start queued jobs that fit: room may have been freed by a lost job, a cancel,
    or a change of config. ``start`` starts what follows each job resumed or admitted.
    Returns the jobs found lost and failed."""
    lost: list[Job] = []
    for job in store.list_jobs(ACTIVE):
        if supervisor_alive(job):
            continue
        job = store.get_job(job.id)  # as it is now, not as listed
        if not job.status.is_active() or supervisor_alive(job):
            continue
        attempts = store.attempts(job.id)
        last = attempts[-1] if attempts else None
        if _follow_again(store, job, last, start) or _resume(store, job, last, start):
            continue
        env = submitted_env(job)  # for announcing the end: gone once the job is finished
        seen = (job.supervisor_pid, job.supervisor_started)
        try:
            reason = "supervisor lost (it stopped without recording how the job ended)"
            if job.status is _S.CANCELLING:
                ended = _finish_job(
                    store,
                    job.id,
                    _S.CANCELLED,
                    "cancelled; " + reason,
                    {_S.CANCELLING},
                    supervised_by=seen,
                )
            else:
                ended = _finish_job(
                    store, job.id, _S.FAILED, reason, {job.status}, supervised_by=seen
                )
        except TransitionError:
            continue  # its supervisor finished it meanwhile
        _lost_attempt(store, job, last)
        lost.append(ended)
        from ferry.telemetry.notify import announce_end

        announce_end(ended.id, ended.status.value, ended.spec, env or {})  # as its supervisor would
    if admit:
        waiting = store.list_jobs([_S.QUEUED], limit=1)
        for backend in sorted({job.backend for job in [*lost, *waiting]}):
            schedule(store, backend, start=start)
    return lost


def end_crashed(store: Store, job_id: str, exc: Exception) -> None:
    """End a job whose supervision failed with ``exc``: its attempts failed (one elsewhere
    stopped there), the job FAILED pointing at its supervisor log. (What is left of its
    processes here is the caller's to end.)"""
    job = store.get_job(job_id)
    for attempt in store.attempts(job_id):
        if not attempt.status.is_terminal():
            if attempt.backend != "local":  # an attempt elsewhere: ended there too
                with contextlib.suppress(Exception):
                    from ferry.backends.registry import get_backend

                    get_backend(attempt.backend).cancel(job, attempt.number, attempt.handle)
            store.update_attempt(
                job_id,
                attempt.number,
                status=AttemptStatus.FAILED,
                ended_at=time.time(),
                reason=f"supervisor failed: {exc}",
            )
    _finish_job(
        store,
        job_id,
        _S.FAILED,
        f"supervisor failed: {exc} (details in {Path(job.job_dir) / SUPERVISOR_LOG})",
    )


# ---------------------------------------------------------------------------------------
# The supervisor's work


def exit_status(job: Job) -> int:
    """The exit code a shell should see for a finished job (``ferry run``, ``ferry wait``)."""
    if job.status is _S.SUCCEEDED:
        return 0
    if job.status is _S.CANCELLED:
        return 130
    if job.reason and job.reason.startswith("max_runtime"):
        return 124
    if job.exit_code is not None and job.exit_code != 0:
        return shell_code(job.exit_code)
    return 1
