"""What a job needs on the machine it runs on, done where it runs.

For an attempt on another machine (a Ray node, a cloud VM) the runner does it all itself,
from the order's :class:`Machine` plan, with nothing but the job's bucket to reach:

- inputs are staged (through this machine's cache) and the job's checkpoints fetched
  from its bucket;
- the working folder is a fresh copy of the code with ``checkpoint.paths`` put back;
- ``environment.requirements`` are installed into this machine's environment for them
  (:mod:`ferry.packaging.environments`: built once per requirements, under its
  ``FERRY_HOME``), which the command's ``python`` then means;
- the contract's variables point at this machine's folders (SageMaker's ``/opt/ml``
  tree too, for ``contract: sagemaker``);
- while it runs, checkpoints and TensorBoard logs go to the bucket (on a helper thread,
  never delaying the notice), and the metrics the script reports go to the run folder;
- when it ends, everything goes up and the run folder records the files sent
  (``outputs.json``), for the controller's manifest.

The supervisor of a local attempt does the same steps on this machine with the same
functions (:func:`stage_inputs`, :class:`LiveSync` ...).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.units import format_duration

if TYPE_CHECKING:
    from ferry.runner.order import RunOrder
    from ferry.runner.record import RunFolderWriter
    from ferry.storage.outputs import OutputSync
    from ferry.storage.workdir import WorkdirState
    from ferry.store.plan import Plan

OUTPUTS = "outputs.json"  # in the run folder: the files the runner sent, for the manifest
STAGING_FILE = "staging.json"  # progress of input staging, read by `ferry run`


@dataclass(frozen=True)
class Machine:
    """The job as the runner on another machine needs it (no store, no spec)."""

    job_id: str
    outputs: str  # where the outputs go: a bucket URI (or a folder this machine sees)
    inputs: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> uri, mode
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    contract: str = "ferry"
    checkpoint_every: float | None = None
    checkpoint_keep: int = 3
    checkpoint_paths: list[str] = field(default_factory=list)
    collect: list[str] = field(default_factory=list)  # globs copied from the working folder
    cpus: float = 1.0
    gpus: int = 0  # this node's GPUs
    sync_interval: float = 30.0  # s between sends of checkpoints and TensorBoard logs
    scratch: str = ""  # where the attempt's folders go on the machine (default: temp)
    # a gang over several nodes (ferry.runner.ray_gang, cloud_gang): how long to wait for them, and
    # the platform's resources each node's share holds besides CPUs and GPUs
    max_pending: float = 600.0
    resources: dict[str, float] = field(default_factory=dict)
    requirements: str = ""  # environment.requirements: a file in the code (empty: none)
    # where they go: "venv", an environment of their own under FERRY_HOME, shared by jobs
    # asking for the same; "interpreter", the runner's own (a provider's framework
    # container, whose packages the job keeps)
    requirements_into: str = "venv"
    # a SageMaker machine's own /opt/ml: what a script writes into its model and
    # output/data folders (paths it hard-codes) joins the job's outputs at the end
    provider_tree: str = ""

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Machine:
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


def command_argv(plan: Plan) -> list[str]:
    """The job's command as run: with the contract's arguments (SageMaker's
    hyperparameters), through ``/bin/sh -c`` for ``shell: true``."""
    from ferry.contract.sagemaker import arguments

    command = list(plan.command)
    extra = arguments(plan.contract, plan.hyperparameters)
    if plan.shell:  # words are joined with spaces, as ssh does
        import shlex

        return ["/bin/sh", "-c", " ".join([*command, *map(shlex.quote, extra)])]
    return [*command, *extra]


def bucket_root(outputs: str) -> str:
    """The bucket that holds the job's outputs (for BUCKET_ROOT), or the local outputs root."""
    from ferry.storage.locations import parse_uri

    loc = parse_uri(outputs)
    if loc.is_local:
        return str(Path(loc.path).parent)
    return f"{loc.protocol}://{loc.bucket}"


def stage_inputs(
    inputs: dict[str, dict[str, str]],
    dest: Path,
    cache_root: Path,
    event: Callable[[str], object],
    progress_file: Path | None = None,
) -> dict[str, str]:
    """Bring the job's inputs to this machine under ``dest``; returns name -> what
    FERRY_INPUT_<NAME> holds. ``event`` hears what each took; ``progress_file`` gets the
    progress for followers (removed at the end)."""
    if not inputs:
        return {}
    from ferry.storage.cache import InputCache
    from ferry.storage.staging import stage_input  # fsspec: only for jobs with inputs
    from ferry.units import format_size

    cache = InputCache(cache_root)
    progress = StagingProgress(progress_file) if progress_file else None
    staged: dict[str, str] = {}
    try:
        for name, item in inputs.items():
            result = stage_input(name, item["uri"], item.get("mode", "copy"), dest, cache, progress)
            staged[name] = result.path
            if result.files:
                event(
                    f"input {name}: {result.files} files, {format_size(result.bytes_downloaded)} "
                    f"copied, {format_size(result.bytes_from_cache)} from the cache, in "
                    f"{format_duration(result.seconds)}"
                )
    finally:
        if progress is not None:
            progress.close()
    return staged


class StagingProgress:
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


class LiveSync:
    """Sends outputs to the bucket on a helper thread, one sync at a time: a checkpoint of
    gigabytes going up never delays a cancel, a preemption notice or the heartbeat."""

    def __init__(self, sync: OutputSync, state: WorkdirState) -> None:
        self.sync = sync
        self.state = state  # checkpoint.paths: copied in before each sync
        self.thread: threading.Thread | None = None
        self._failed: list[str] = []

    def busy(self) -> bool:
        """Whether a sync is under way."""
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        """Start a sync of what changed."""

        def run() -> None:
            try:
                self.state.save(final=False)
                self.sync.sync()
            except Exception as exc:
                self._failed.append(f"syncing outputs to {self.sync.target.uri} failed: {exc}")

        self.thread = threading.Thread(target=run, name="ferry-live-sync", daemon=True)
        self.thread.start()

    def finish(self) -> None:
        """Wait for the sync under way, if any."""
        if self.thread is not None:
            self.thread.join()

    def failures(self) -> list[str]:
        """What went wrong since the last call (events to record)."""
        taken, self._failed = self._failed, []
        return taken


def checkpoints_mtime(path: Path) -> int:
    """The latest modification time of a folder and of the folders in it (changes when a
    checkpoint is renamed into it, or into lightning/, hf/ ...)."""
    try:
        latest = path.stat().st_mtime_ns
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    latest = max(latest, entry.stat(follow_symlinks=False).st_mtime_ns)
    except OSError:
        return 0
    return latest


class Prepared:
    """An attempt made ready on this machine from its order's plan: run it with
    :attr:`argv`, :attr:`cwd` and :attr:`env`, call :meth:`tick` as it runs and
    :meth:`finish` once it has ended."""

    def __init__(self, order: RunOrder, record: RunFolderWriter) -> None:
        assert order.machine is not None
        plan = self.plan = Machine.from_fields(order.machine)
        self.record = record
        base = Path(plan.scratch or tempfile.gettempdir())
        self.scratch = base / f"ferry-{plan.job_id}-{order.attempt}-{order.node_rank}"
        shutil.rmtree(self.scratch, ignore_errors=True)  # (a runner started again)
        self.scratch.mkdir(parents=True, mode=0o700)
        self.venv: Any = None  # the environment of environment.requirements, held
        try:
            self._prepare(order, record)
        except BaseException:
            self.discard()
            raise

    def _prepare(self, order: RunOrder, record: RunFolderWriter) -> None:
        from ferry import config
        from ferry.contract import sagemaker
        from ferry.contract.env import JobDirs, contract_env
        from ferry.storage.outputs import OutputSync
        from ferry.storage.workdir import WorkdirState

        plan = self.plan
        self.sync = OutputSync.for_outputs(plan.outputs, self.scratch)
        self.dirs = dirs = JobDirs.under(str(self.sync.local))
        dirs.create()
        inputs = stage_inputs(
            {name: _in_channel(item) for name, item in plan.inputs.items()},
            self.scratch / "inputs",
            config.ferry_home() / "cache",
            record.event,
        )
        if self.sync.remote:  # a fresh machine resumes from the bucket's checkpoints
            try:
                fetched = self.sync.pull_checkpoints()
            except Exception as exc:
                record.event(f"checkpoints could not be fetched: {exc}")
            else:
                if fetched:
                    record.event(f"checkpoints: {fetched} files fetched")
        self.state = WorkdirState(
            self.scratch / "work", dirs.checkpoints, tuple(plan.checkpoint_paths), Path(order.cwd)
        )
        restored = self.state.fresh()
        if restored:
            names = ", ".join(name for name, _ in restored[:3])
            record.event(f"put back in the working folder (checkpoint.paths): {names}")
        if order.node_rank != 0:  # every node gets the files back; node 0's are the state
            self.state = WorkdirState(self.state.workdir, dirs.checkpoints, (), Path(order.cwd))
        self.cwd = str(self.state.workdir)
        self.metrics_file = self.scratch / "metrics.jsonl"
        self.failure_file = self.scratch / "failure"
        self.gpus = _given_gpus(order.env, plan.gpus)
        env = contract_env(
            job_id=plan.job_id,
            attempt=order.attempt,
            dirs=dirs,
            gpus=self.gpus,
            cpus=plan.cpus,
            hyperparameters=plan.hyperparameters,
            inputs=inputs,
            checkpoint_every=plan.checkpoint_every,
            bucket_root=bucket_root(plan.outputs),
        )
        env["FERRY_METRICS_FILE"] = str(self.metrics_file)
        env["FERRY_CHECKPOINT_KEEP"] = str(plan.checkpoint_keep)
        env["FERRY_FAILURE_FILE"] = str(self.failure_file)
        if plan.contract == "sagemaker":
            opt_ml = self.scratch / "opt_ml"
            env.update(sagemaker.prepare(opt_ml, dirs, plan.hyperparameters, inputs))
            self.failure_file = opt_ml / "output" / "failure"
            env["FERRY_FAILURE_FILE"] = str(self.failure_file)
        # `python` in the command means the interpreter the runner runs with, as here, or
        # the environment built from the job's requirements
        bin_dir = str(Path(sys.executable).parent)
        if plan.requirements and plan.requirements_into == "interpreter":
            self._install_here(Path(order.cwd), order.env, record)
        elif plan.requirements:
            self.venv = self._environment(Path(order.cwd), order.env, record)
            bin_dir = str(self.venv.bin)
            env["VIRTUAL_ENV"] = str(self.venv.path)
        path = order.env.get("PATH", os.defpath)
        if path.split(os.pathsep)[0] != bin_dir:
            env["PATH"] = bin_dir + os.pathsep + path
        self.env = {**order.env, **env}
        self.live = LiveSync(self.sync, self.state)
        self._metrics_read = 0
        self._last_sync = time.monotonic()
        self._last_saved = checkpoints_mtime(dirs.checkpoints)

    def _environment(self, code: Path, environ: dict[str, str], record: RunFolderWriter) -> Any:
        """The environment the job's requirements (in ``code``) ask for, on this machine:
        built here the first time (the installer's output to the run folder's
        ``environment.log``), held until the attempt's folders go."""
        from ferry.packaging.environments import BUILD_LOG, ensure, requirements_file, wanted

        file = requirements_file(code, self.plan.requirements)
        want = wanted(file, code, environ, self.plan.requirements)
        log_path = self.scratch / BUILD_LOG
        try:
            with open(log_path, "ab") as log:
                shown = f"{BUILD_LOG} in the attempt's run folder"
                held = ensure(want, code, log, environ=environ, log_name=shown)
        finally:
            with contextlib.suppress(OSError):
                if log_path.stat().st_size:
                    record.put(BUILD_LOG, log_path.read_bytes())
        packages = held.info().get("packages") or []
        how = f"built in {held.seconds:.1f}s" if held.built else "reused"
        record.event(
            f"environment {want.short} ({self.plan.requirements}): {how}, {len(packages)} packages"
        )
        return held

    def _install_here(self, code: Path, environ: dict[str, str], record: RunFolderWriter) -> None:
        """Install the job's requirements (in ``code``) into the runner's own interpreter;
        pip's lines go to this machine's log (the provider's) and the run folder's
        ``environment.log``."""
        from ferry.packaging.environments import BUILD_LOG, install_here, requirements_file

        file = requirements_file(code, self.plan.requirements)
        log_path = self.scratch / BUILD_LOG
        started = time.monotonic()

        def said(line: str) -> None:
            print(f"ferry: {line}", file=sys.stderr, flush=True)

        record.event(f"installing {self.plan.requirements} with pip")
        try:
            with open(log_path, "ab") as log:
                shown = f"{BUILD_LOG} in the attempt's run folder"
                installed = install_here(file, code, log, said, environ, shown)
        finally:
            with contextlib.suppress(OSError):
                if log_path.stat().st_size:
                    record.put(BUILD_LOG, log_path.read_bytes())
        took = format_duration(time.monotonic() - started)
        what = ", ".join(installed[:8]) + (" …" if len(installed) > 8 else "")
        record.event(
            f"requirements ({self.plan.requirements}) installed in {took}: "
            + (what or "everything was there already")
        )

    def discard(self) -> None:
        """Remove this machine's folders of the attempt (staged inputs, fetched
        checkpoints, the working folder), and let its environment go."""
        if self.venv is not None:
            self.venv.release()
            self.venv = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.scratch)

    def tick(self) -> None:
        """While it runs: new metrics to the run folder; a new checkpoint (or, every
        ``sync_interval``, whatever changed) to the bucket, with ``checkpoint.paths``
        (saved into the outputs at once when they are a folder)."""
        self._copy_metrics()
        for failure in self.live.failures():
            self.record.event(failure)
        if not self.sync.remote:  # outputs in a folder: checkpoint.paths saved there now,
            try:  # in case this machine is lost before the end
                self.state.save(final=False)
            except OSError as exc:
                self.record.event(f"saving checkpoint.paths files failed: {exc}")
            return
        if self.live.busy():
            return
        now = time.monotonic()
        saved = checkpoints_mtime(self.dirs.checkpoints)
        if now - self._last_sync >= self.plan.sync_interval or saved != self._last_saved:
            self._last_sync, self._last_saved = now, saved
            self.live.start()

    def _copy_metrics(self) -> None:
        try:
            with open(self.metrics_file, "rb") as file:
                file.seek(self._metrics_read)
                data = file.read()
        except FileNotFoundError:
            return
        whole = data[: data.rfind(b"\n") + 1]  # a line being written waits for its end
        if whole:
            self.record.write("metrics", whole)
            self._metrics_read += len(whole)

    def failure(self) -> str | None:
        """What the script said of its failure (FERRY_FAILURE_FILE, SageMaker's file)."""
        from ferry.contract import sagemaker

        return sagemaker.failure_text(self.failure_file)

    def finish(self) -> None:
        """Once the processes have ended: the last metrics, ``checkpoint.paths`` and
        ``collect`` into the outputs, everything to the bucket, the files sent into the
        run folder; then the machine's folders go (the outputs are where they belong)."""
        self.live.finish()
        self._copy_metrics()
        for failure in self.live.failures():
            self.record.event(failure)
        if self.plan.provider_tree:
            self._pick_up(Path(self.plan.provider_tree))
        try:
            self.state.save(final=True, prune=True)
        except OSError as exc:
            self.record.event(f"saving checkpoint.paths files failed: {exc}")
        try:
            if self.plan.collect:
                self.sync.collect(self.state.workdir, self.plan.collect)
            self.sync.sync(None)
            listing = self.sync.listing()
        except Exception as exc:  # the controller finds no listing: the outputs failed
            self.record.event(f"outputs could not be written to {self.sync.target.uri}: {exc}")
        else:
            self.record.put(OUTPUTS, json.dumps(listing).encode())
        self.discard()

    def _pick_up(self, tree: Path) -> None:
        """Files the script wrote into the provider's own ``model`` and ``output/data``
        folders (SageMaker's ``/opt/ml``, hard-coded), moved into the job's outputs."""
        for source, target in (
            (tree / "model", self.dirs.model),
            (tree / "output" / "data", self.dirs.output),
        ):
            if not source.is_dir() or source.resolve() == target.resolve():
                continue
            moved = 0
            for path in sorted(source.rglob("*")):
                if not path.is_file() or path.is_symlink():
                    continue
                into = target / path.relative_to(source)
                if into.exists():  # (the job's own folder wins)
                    continue
                try:
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(path), into)
                except OSError as exc:
                    self.record.event(f"{path} could not join the outputs: {exc}")
                    continue
                moved += 1
            if moved:
                self.record.event(f"{moved} files written to {source} joined the outputs")


def _in_channel(item: dict[str, str]) -> dict[str, str]:
    """An input the provider brought (a SageMaker channel: ``uri`` is its folder here,
    ``channel_of`` the bucket's URI): a single object is the file in that folder."""
    source = item.get("channel_of")
    if not source:
        return item
    folder = Path(item["uri"])
    if not source.endswith("/"):
        entries = list(folder.iterdir()) if folder.is_dir() else []
        file = folder / source.rsplit("/", 1)[-1]
        if len(entries) == 1 and file.is_file():
            return {**item, "uri": str(file)}
    return item


def _given_gpus(env: dict[str, str], count: int) -> tuple[int, ...]:
    """The GPUs of this machine the attempt holds: those the platform gave it
    (``CUDA_VISIBLE_DEVICES``, as Ray sets it for a job's entrypoint), else the first
    ``count``."""
    given = env.get("CUDA_VISIBLE_DEVICES", "")
    ids = [part.strip() for part in given.split(",") if part.strip()]
    if ids and all(i.isdigit() for i in ids):
        return tuple(int(i) for i in ids)
    return tuple(range(count))
