"""Checkpoints a preempted or crashed job resumes from: ``from ferry.runtime import checkpoint``.

``checkpoint.save(state, step)`` writes ``ckpt-<step>/`` in the job's checkpoint folder
(``FERRY_CHECKPOINT_DIR``; outside Ferry ``AIP_CHECKPOINT_DIR``, ``/opt/ml/checkpoints`` or
``./checkpoints``). The files are written and fsynced in a hidden temporary folder, then
``MANIFEST.json`` (each file's size and CRC-32), then the folder is renamed into place and
its parent fsynced: a checkpoint either exists whole or not at all, whatever kills the
process and when. The last ``keep`` are kept (``checkpoint.keep`` in the spec, 3 by default).

``checkpoint.restore()`` returns the newest checkpoint whose files match their manifest,
skipping partial or corrupt ones, or None on a first start. With ``background=True``,
``save()`` copies the tensors to host memory and returns; a thread writes them while
training goes on (the next save, a preemption notice and the process's exit wait for it).

State is written with ``torch.save`` when torch is in use, else with pickle; a path (a file
or folder the script wrote itself) is copied in as it is.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.json"
STATE_FILE = "state.pt"
DEFAULT_KEEP = 3
_NAME = re.compile(r"^ckpt-(\d+)$")
_CHUNK = 8 << 20


def directory() -> Path:
    """Where checkpoints go: the job's checkpoint folder, or a local one outside Ferry."""
    for var in ("FERRY_CHECKPOINT_DIR", "AIP_CHECKPOINT_DIR"):
        value = os.environ.get(var)
        if value:
            if value.startswith("gs://"):  # Vertex AI mounts buckets at /gcs
                value = "/gcs/" + value[len("gs://") :]
            return Path(value)
    if Path("/opt/ml/checkpoints").is_dir():  # SageMaker's
        return Path("/opt/ml/checkpoints")
    return Path("checkpoints")


def _keep() -> int:
    text = os.environ.get("FERRY_CHECKPOINT_KEEP", "")
    return int(text) if text.isdigit() and int(text) > 0 else DEFAULT_KEEP


def _rank() -> int:
    text = os.environ.get("RANK") or os.environ.get("FERRY_NODE_RANK") or "0"
    return int(text) if text.isdigit() else 0


@dataclass
class Checkpoint:
    """A complete checkpoint on disk."""

    step: int
    path: Path  # the ckpt-<step> folder
    format: str = "files"  # torch | pickle | files
    files: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> size, crc32
    state: Any = None  # what save() was given, once restore() has loaded it

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    def verify(self) -> None:
        """Raise ValueError unless every file matches the manifest."""
        for name, meta in self.files.items():
            if _crc_of(self.path / name) != (meta["size"], meta["crc32"]):
                raise ValueError(f"{name} does not match its manifest")


class CheckpointError(Exception):
    """A checkpoint could not be written (the previous ones are intact)."""


def _crc_of(path: Path) -> tuple[int, int]:
    """(size, CRC-32) of a file, read once: a helper thread checksums one block while the
    next is read into another (three buffers in turn, allocated once)."""
    import queue

    buffers = [bytearray(_CHUNK) for _ in range(3)]
    free: queue.Queue[int] = queue.Queue()
    full: queue.Queue[tuple[int, int] | None] = queue.Queue()
    for index in range(len(buffers)):
        free.put(index)
    result = [0]

    def checksum() -> None:
        while (item := full.get()) is not None:
            index, count = item
            result[0] = zlib.crc32(memoryview(buffers[index])[:count], result[0])
            free.put(index)

    worker = threading.Thread(target=checksum, daemon=True)
    worker.start()
    size = 0
    try:
        with open(path, "rb", buffering=0) as file:
            with contextlib.suppress(AttributeError, OSError):  # a larger read-ahead
                os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while True:
                index = free.get()
                count = file.readinto(buffers[index])
                if not count:
                    break
                size += count
                full.put((index, count))
    finally:
        full.put(None)
        worker.join()
    return size, result[0]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sealed(path: Path) -> dict[str, int]:
    """Size and CRC-32 of a file just written, once it is on disk: the checksum is computed
    from the page cache while a helper thread waits for the disk (fsync), so it costs
    little more than the plain write."""
    failed: list[OSError] = []

    def sync(fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:  # EIO, ENOSPC, EDQUOT: raised below
            failed.append(exc)

    size = crc = 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        syncing = threading.Thread(target=sync, args=(file.fileno(),), daemon=True)
        syncing.start()
        try:
            while count := file.readinto(buffer):
                crc = zlib.crc32(view[:count], crc)
                size += count
        finally:
            syncing.join()
    if failed:
        raise failed[0]
    return {"size": size, "crc32": crc}


_crc_option = threading.Lock()


@contextlib.contextmanager
def _without_zip_crc(serialization: Any) -> Iterator[None]:
    """``torch.save`` without the zip's own per-record CRC (the manifest's covers the whole
    file, and computing both halves the speed); torch < 2.6 always computes it."""
    if not hasattr(serialization, "set_crc32_options"):
        yield
        return
    with _crc_option:
        before = serialization.get_crc32_options()
        serialization.set_crc32_options(False)
        try:
            yield
        finally:
            serialization.set_crc32_options(before)


def _torch_save(state: Any, path: Path) -> None:
    """``torch.save`` to a path: its C++ writer, much faster than through a Python file."""
    import torch

    try:
        with _without_zip_crc(torch.serialization):
            torch.save(state, path)
    except RuntimeError as exc:  # the C++ writer keeps no errno: a full disk is recognised
        disk = os.statvfs(path.parent)
        if disk.f_bavail * disk.f_frsize < 1 << 20:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from exc
        raise OSError(f"torch.save failed: {str(exc).splitlines()[0]}") from exc


def _serialize(state: Any, folder: Path) -> tuple[str, dict[str, dict[str, int]]]:
    if isinstance(state, str | os.PathLike):
        source = Path(state)
        if not source.exists():
            raise CheckpointError(f"{source} does not exist")
        files = {}
        sources = [source] if source.is_file() else sorted(source.rglob("*"))
        for item in sources:
            if not item.is_file():
                continue
            name = item.name if source.is_file() else item.relative_to(source).as_posix()
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item, folder / name)
            files[name] = _sealed(folder / name)
        return "files", files
    if "torch" in sys.modules:
        _torch_save(state, folder / STATE_FILE)
        return "torch", {STATE_FILE: _sealed(folder / STATE_FILE)}
    with open(folder / STATE_FILE, "wb") as file:
        pickle.dump(state, file, protocol=5)
    return "pickle", {STATE_FILE: _sealed(folder / STATE_FILE)}


def _write(state: Any, step: int, keep: int) -> Path:
    root = directory()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"ckpt-{step:012d}"
    # unique even for a save made from a signal handler while another is under way
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-ckpt-{step:012d}-{os.getpid()}-", dir=root))
    try:
        kind, files = _serialize(state, tmp)
        manifest = {"step": step, "time": time.time(), "format": kind, "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _sealed(tmp / MANIFEST)
        _fsync_dir(tmp)
        _put_in_place(tmp, final)
        _fsync_dir(root)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise CheckpointError(
                f"checkpoint of step {step} could not be written in {root}: {exc.strerror or exc};"
                " the previous checkpoints are intact"
            ) from exc
        raise
    _prune(root, keep, step)
    return final


def _put_in_place(tmp: Path, final: Path) -> None:
    """Rename the finished folder to its name. The same step saved again replaces the old
    one; should that fail, or a signal land in between, the old one is put back."""
    if not final.exists():
        os.replace(tmp, final)
        return
    old = final.with_name(f".old-{final.name}-{os.getpid()}-{tmp.name[-8:]}")
    blocked = {signal.SIGTERM, signal.SIGINT}
    masked = threading.current_thread() is threading.main_thread()
    if masked:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except BaseException:
            os.replace(old, final)
            raise
    finally:
        if masked:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    shutil.rmtree(old, ignore_errors=True)


def _prune(root: Path, keep: int, written: int) -> None:
    """Keep the newest ``keep`` checkpoints: older ones are renamed out of sight at once and
    deleted on a helper thread (gigabytes, perhaps: not part of the save's time), with the
    leftovers of writers that died. Checkpoints of steps after the one just written belong
    to a run that was resumed from an earlier one (the later one was found broken): they
    go first, and the one just written always stays."""
    listed = complete_checkpoints(root)
    later = [(s, p) for s, p in listed if s > written]
    kept = [(s, p) for s, p in listed if s <= written]
    for _, path in later + kept[keep:]:
        with contextlib.suppress(OSError):
            os.replace(path, root / f".old-{path.name}-{os.getpid()}")
    threading.Thread(target=_remove_leftovers, args=(root,), daemon=True).start()


_removing = threading.Lock()


def _remove_leftovers(root: Path) -> None:
    with _removing:
        for path in root.glob(".old-ckpt-*"):
            shutil.rmtree(path, ignore_errors=True)
        for path in root.glob(".tmp-ckpt-*"):
            pid = path.name.split("-")[3] if path.name.count("-") >= 4 else ""
            if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(path, ignore_errors=True)


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Checkpoint folders with a manifest, newest step first (not verified). The
    supervisor reads them too, to say what a new attempt starts from."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            match = _NAME.match(entry.name)
            if match and os.path.exists(os.path.join(entry.path, MANIFEST)):
                found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found, reverse=True)


def _read(path: Path) -> Checkpoint:
    manifest = json.loads((path / MANIFEST).read_text())
    files = {
        str(k): {"size": int(v["size"]), "crc32": int(v["crc32"])}
        for k, v in manifest["files"].items()
    }
    return Checkpoint(int(manifest["step"]), path, str(manifest.get("format", "files")), files)


def checkpoints() -> list[Checkpoint]:
    """The checkpoints present, newest first (their files are not checked)."""
    out = []
    for _, path in complete_checkpoints(directory()):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            out.append(_read(path))
    return out


def latest() -> Checkpoint | None:
    """The newest checkpoint whose files match their manifest (not loaded)."""
    wait()
    for _, path in complete_checkpoints(directory()):
        try:
            found = _read(path)
            found.verify()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"ferry: skipping checkpoint {path.name}: {exc}", file=sys.stderr)
            continue
        return found
    return None


def restore(map_location: Any = None, weights_only: bool = True) -> Checkpoint | None:
    """The newest complete checkpoint with its state loaded (``.state``; for a saved path,
    ``.path`` holds the files), or None when there is none yet. ``map_location`` and
    ``weights_only`` go to ``torch.load``, which maps the file (it has just been read to
    check it, so its pages are in memory) rather than copying it."""
    found = latest()
    if found is None or found.format == "files":
        return found
    if found.format == "torch":
        import torch

        found.state = torch.load(
            found.state_file, map_location=map_location, weights_only=weights_only, mmap=True
        )
    else:
        found.state = pickle.loads(found.state_file.read_bytes())
    return found


# -- saving, now or in the background -----------------------------------------------------

_pending: threading.Thread | None = None
_pending_error: list[BaseException] = []


def wait() -> None:
    """Wait for a background save to finish; raise what it raised."""
    global _pending
    if _pending is not None:
        _pending.join()
        _pending = None
    if _pending_error:
        error = _pending_error.pop()
        raise error


def _to_host(state: Any) -> Any:
    """A copy of ``state`` whose tensors live in host memory (and no longer change)."""
    if "torch" in sys.modules:
        import torch

        if isinstance(state, torch.Tensor):
            return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return type(state)((k, _to_host(v)) for k, v in state.items())
    if isinstance(state, list | tuple):
        items = [_to_host(v) for v in state]
        return type(state)(items) if isinstance(state, list) else tuple(items)
    import copy

    return copy.deepcopy(state)


def save(
    state: Any, step: int, *, keep: int | None = None, background: bool = False
) -> Path | None:
    """Write a checkpoint of ``state`` (an object, or the path of a file or folder) at
    ``step``. Only rank 0 writes (state that every rank holds in part, as FSDP's, is not
    handled yet). Returns the checkpoint's folder (None when written in the background, or
    on another rank). A background save that failed is reported on stderr when the next
    save starts, and that save is made all the same. The metrics reported so far are
    written first: a job that resumes from this checkpoint has every point before it,
    even when a notice ends the process before the metrics writer's next turn."""
    global _pending
    if _rank() != 0:
        return None
    from ferry.runtime import metrics

    metrics.flush(blocking=False)  # (a save may run in a notice handler, mid-flush)
    keep = keep or _keep()
    try:
        wait()  # one save at a time, in order
    except Exception as exc:
        print(f"ferry: the previous background checkpoint failed: {exc}", file=sys.stderr)
    if not background:
        return _write(state, step, keep)
    if isinstance(state, str | os.PathLike):
        raise CheckpointError("background saves take a state object, not a path")
    snapshot = _to_host(state)

    def run() -> None:
        try:
            _write(snapshot, step, keep)
        except BaseException as exc:  # raised by the next wait() or save()
            _pending_error.append(exc)

    worker = threading.Thread(target=run, name="ferry-checkpoint", daemon=True)
    worker.start()
    _pending = worker
    return None


@atexit.register
def _finish_pending() -> None:
    """The process is ending: the last background save is finished first, and a failure
    is not lost (it is printed, and the exit status is 1)."""
    try:
        wait()
    except BaseException as exc:
        print(f"ferry: the last checkpoint could not be written: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
