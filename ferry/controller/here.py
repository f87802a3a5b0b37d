"""An attempt on this machine, made ready by the controller itself before its runner
starts it, and wrapped up after: inputs staged, the environment of
``environment.requirements`` built or reused, checkpoints fetched, a fresh working folder
with the declared state put back, the contract's variables and container paths; then
``checkpoint.paths`` saved and cloudml-hypertune's last metrics noted. (An attempt
elsewhere is made ready by its runner there, :mod:`ferry.runner.machine`.)"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ferry import config
from ferry.contract.env import env_key
from ferry.errors import FerryError
from ferry.runner.machine import STAGING_FILE, bucket_root, command_argv, stage_inputs
from ferry.store import Job, Store

if TYPE_CHECKING:
    from ferry.contract.env import JobDirs
    from ferry.packaging.environments import Held
    from ferry.storage.outputs import OutputSync
    from ferry.storage.workdir import WorkdirState


class NotReady(Exception):
    """This machine could not be made ready for the attempt (the reason says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def prepare_here(
    store: Store,
    job: Job,
    number: int,
    state: WorkdirState,
    dirs: JobDirs,
    sync: OutputSync,
    base_env: dict[str, str],
    holding: list[Held],
) -> tuple[dict[str, str], list[str], Path, Path]:
    """Make this machine ready for attempt ``number`` (inputs, the environment from
    ``environment.requirements``, checkpoints, a fresh working folder, the contract), as
    a runner does on another machine; returns the environment, the command, the failure
    file and the hypertune file. Raises :class:`NotReady`."""
    from ferry.contract import sagemaker
    from ferry.contract.env import contract_env

    job_id = job.id
    plan = job.plan
    contract = plan.contract
    opt_ml = Path(job.job_dir) / "opt_ml"
    try:
        inputs = stage_inputs(
            plan.inputs,
            Path(job.job_dir) / "inputs",
            config.ferry_home() / "cache",
            lambda message: store.add_event(job_id, message),
            Path(job.job_dir) / STAGING_FILE,
        )
    except FerryError as exc:
        raise NotReady(str(exc)) from None
    venv = _environment(store, job, holding, base_env) if plan.requirements else None
    behind = state.harvest() if number > 1 else []
    fetched = 0
    if sync.remote:
        try:  # a fresh machine resumes from the bucket's checkpoints
            fetched = sync.pull_checkpoints()
        except Exception as exc:
            store.add_event(job_id, f"checkpoints could not be fetched: {exc}")
        else:
            if fetched:
                store.add_event(job_id, f"checkpoints: {fetched} files fetched")
    try:  # a fresh working folder, as on a new machine, with the declared state back
        restored = _fresh(store, job, state)
    except (OSError, FerryError) as exc:
        raise NotReady(f"cannot prepare the working folder {state.workdir}: {exc}") from None
    if number > 1:
        store.add_event(job_id, _starting_point(number, dirs, sync, fetched, restored, behind))
    env = {
        **base_env,
        **contract_env(
            job_id=job_id,
            attempt=number,
            dirs=dirs,
            gpus=job.allocation.gpus,
            cpus=job.allocation.cpus,
            hyperparameters=plan.hyperparameters,
            inputs=inputs,
            checkpoint_every=plan.checkpoint.every,
            bucket_root=bucket_root(job.outputs),
        ),
    }
    if venv is not None:  # `python` in the command means the environment's
        env["PATH"] = str(venv.bin) + os.pathsep + env.get("PATH", os.defpath)
        env["VIRTUAL_ENV"] = str(venv.path)
    env["FERRY_METRICS_FILE"] = str(Path(job.job_dir) / f"metrics-{number}.jsonl")
    env["FERRY_CHECKPOINT_KEEP"] = str(plan.checkpoint.keep)
    # a script may say why it failed, as on SageMaker; even when it exits 0. (It is
    # /opt/ml/output/failure too where a script can see the SageMaker tree.)
    container = plan.paths == "container"
    if contract == "sagemaker" or container:
        failure_file = opt_ml / "output" / "failure"
        failure_file.parent.mkdir(parents=True, exist_ok=True)
    else:
        failure_file = Path(job.job_dir) / "failure"
    failure_file.unlink(missing_ok=True)
    env["FERRY_FAILURE_FILE"] = str(failure_file)
    argv = command_argv(plan)
    if contract == "sagemaker" or container:
        sm_env = sagemaker.prepare(opt_ml, dirs, plan.hyperparameters, inputs)
        if contract == "sagemaker":
            env.update(sm_env)
    if container:
        argv = _in_container_paths(job, argv, env, dirs, opt_ml, inputs, sync, contract)
    return env, argv, failure_file, Path(env["CLOUD_ML_HP_METRIC_FILE"])


def _environment(store: Store, job: Job, holding: list[Held], environ: dict[str, str]) -> Held:
    """The environment ``environment.requirements`` asks for, built here the first time
    (with the job's environment ``environ``; its progress shown by ``ferry run``, the
    installer's lines in the job's ``environment.log``), held until the job is no longer
    followed here."""
    import json

    from ferry.packaging.environments import BUILD_LOG, ensure, requirements_file, wanted

    if holding:
        return holding[0]
    plan = job.plan
    assert plan.requirements is not None
    code = Path(job.job_dir) / "code"
    progress_file = Path(job.job_dir) / STAGING_FILE

    def progress(line: str) -> None:
        tmp = progress_file.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps({"line": f"environment: {line[:160]}"}))
            os.replace(tmp, progress_file)

    try:
        file = requirements_file(code, plan.requirements)
        want = wanted(file, code, environ, plan.requirements)
        with open(Path(job.job_dir) / BUILD_LOG, "ab") as log:
            held = ensure(want, code.resolve(), log, progress, environ)
    except (FerryError, OSError) as exc:
        raise NotReady(str(exc)) from None
    finally:
        progress_file.unlink(missing_ok=True)
    holding.append(held)
    try:
        info = held.info()
    except (OSError, ValueError):
        info = {}
    packages = info.get("packages") or []
    more = f" and {len(packages) - 6} more" if len(packages) > 6 else ""
    listed = ", ".join(packages[:6]) + more
    if held.built:
        store.add_event(
            job.id,
            f"environment {want.short}: built from {plan.requirements} with "
            f"{info.get('installer', '?')} in {held.seconds:.1f}s: {listed or 'no packages'}",
        )
    else:
        store.add_event(
            job.id,
            f"environment {want.short}: reused ({len(packages)} packages, "
            f"from {plan.requirements})",
        )
    return held


def after_here(
    store: Store, job_id: str, state: WorkdirState, sync: OutputSync, hypertune: Path
) -> None:
    """After an attempt on this machine: ``checkpoint.paths`` as it left them saved with
    the checkpoints, which reach the bucket before a resume (one saved on the notice
    too), and what it reported through cloudml-hypertune noted."""
    try:
        state.save(final=True, prune=True)
    except OSError as exc:
        store.add_event(job_id, f"saving checkpoint.paths files failed: {exc}")
    if sync.remote:
        try:
            sync.sync(("checkpoints",))
        except Exception as exc:
            store.add_event(job_id, f"syncing checkpoints to {sync.target.uri} failed: {exc}")
    _note_hypertune(store, job_id, hypertune)


def _fresh(store: Store, job: Job, state: WorkdirState) -> list[tuple[str, int]]:
    """``state.fresh()``; again after a shared code snapshot found changed was built anew
    from the job's code folder, when that still holds what was taken."""
    from ferry.packaging.code_store import FOLDER, SnapshotChanged

    try:
        return state.fresh()
    except SnapshotChanged as exc:
        from ferry.packaging.snapshot import retake

        home = config.ferry_home()
        code = job.plan.code
        if not retake(code, state.code, home / FOLDER, skip=(home,)):
            raise
        kept = f"; the changed copy is in {exc.kept} for an hour" if exc.kept else ""
        what = f"had been changed after it was taken ({exc.name})" if exc.name else "was gone"
        store.add_event(
            job.id,
            f"the shared code snapshot {what}; taken again from {code}, which holds the same "
            f"files as then{kept}",
        )
        return state.fresh()


def _starting_point(
    number: int,
    dirs: JobDirs,
    sync: OutputSync,
    fetched: int,
    restored: list[tuple[str, int]],
    behind: list[str],
) -> str:
    """What attempt ``number`` resumes from, in words: a checkpoint (from the bucket or the
    job's checkpoint folder), working-folder files (checkpoint.paths), or nothing."""
    from ferry.runtime.checkpoint import complete_checkpoints
    from ferry.storage.workdir import other_checkpoint_files
    from ferry.units import format_size

    where = f"from {sync.target.child('checkpoints').uri}" if fetched else f"in {dirs.checkpoints}"
    parts = []
    if checkpoints := complete_checkpoints(dirs.checkpoints):
        parts.append(f"checkpoint step {checkpoints[0][0]} {where}")
    elif (others := other_checkpoint_files(dirs.checkpoints)) > 0:
        parts.append(f"{others} files of its own checkpoint folder {where}")
    if restored:
        shown = ", ".join(f"{name} ({format_size(size)})" for name, size in restored[:3])
        more = f" and {len(restored) - 3} more" if len(restored) > 3 else ""
        parts.append(f"{shown}{more} put back in its working folder (checkpoint.paths)")
    if parts:
        text = f"attempt {number} starts from " + " and ".join(parts)
    else:
        text = f"attempt {number} starts over: no checkpoint was saved"
    if behind:
        names = ", ".join(behind[:3]) + (", ..." if len(behind) > 3 else "")
        text += (
            f"; the last attempt also left {names} in its working folder, which a new "
            "attempt does not get (list such files in checkpoint.paths to resume from them)"
        )
    return text


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
    for name, item in job.plan.inputs.items():
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
        if "://" not in path and "://" not in job.plan.inputs[name]["uri"]
    )
    from ferry.storage.workdir import WORKDIR

    return cp.wrap(
        argv, str(Path(job.job_dir) / WORKDIR), Path(job.job_dir) / "root", binds, local_inputs
    )


def _note_hypertune(store: Store, job_id: str, path: Path) -> None:
    """Record the last metrics the script reported through cloudml-hypertune (a JSON
    object per line: the metric, its value, ``global_step``, ``timestamp``)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    for line in reversed(lines):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if not isinstance(report, dict):
            continue
        step = report.get("global_step")
        metrics = {
            k: v
            for k, v in report.items()
            if k not in ("timestamp", "global_step", "trial", "checkpoint_path")
        }
        if metrics:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(metrics.items()))
            at = f" at step {step}" if step not in (None, "") else ""
            store.add_event(job_id, f"metrics reported through cloudml-hypertune: {shown}{at}")
        return
