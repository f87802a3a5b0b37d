"""Whether an outputs location already holds files that are not the job's: such a place is
refused at submit (a second job would mix its results with the first one's, overwrite its
manifest and logs), unless the spec says ``outputs_exist_ok``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ferry.errors import SpecError
from ferry.storage.locations import parse_uri

BEFORE_FILE = "outputs-before.json"  # in the job folder: what a shared outputs folder held


def local_outputs(outputs: str) -> Path | None:
    """The folder of a local outputs location (relative to the current folder), else None."""
    loc = parse_uri(outputs)
    return Path(loc.path) if loc.is_local else None


def files_in(outputs: str, most: int = 3) -> list[str]:
    """Up to ``most`` names of what the outputs location already holds."""
    folder = local_outputs(outputs)
    if folder is not None:
        if not folder.exists() and not folder.is_symlink():
            return []
        if not folder.is_dir():
            return [folder.name]
        with os.scandir(folder) as entries:
            names = []
            for entry in entries:
                names.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
                if len(names) >= most:
                    break
            return sorted(names)
    from ferry.storage.failures import Kind, StorageError, bucket_errors, classify
    from ferry.storage.registry import filesystem

    loc = parse_uri(outputs)
    try:
        with bucket_errors(loc, context="outputs"):
            found = filesystem(loc.protocol).ls(loc.path, detail=False)
    except FileNotFoundError:
        return []
    except StorageError as exc:
        if exc.__cause__ is None or classify(exc.__cause__).kind is not Kind.PERMISSION:
            raise
        raise SpecError(
            f"outputs: {outputs} cannot be listed with these credentials, so Ferry cannot "
            "tell whether it already holds another job's files",
            "choose a place with {job_id} in it, or allow it with --outputs-exist-ok",
        ) from None
    prefix = loc.path.rstrip("/") + "/"
    names = [str(p)[len(prefix) :] if str(p).startswith(prefix) else str(p) for p in found]
    return sorted(n for n in names if n)[:most]


def refuse_occupied(outputs: str, claimed_by: str | None = None) -> None:
    """Raise unless the outputs location is new or empty, and no unfinished job
    (``claimed_by``) is about to write there."""
    if claimed_by is not None:
        raise SpecError(
            f"outputs: job {claimed_by} already writes its results to {outputs}",
            "choose another place, such as the default or a path with {job_id} in it; wait "
            f"for that job (ferry wait {claimed_by}); or allow it with --outputs-exist-ok",
        )
    found = files_in(outputs)
    if not found:
        return
    shown = ", ".join(found) + (", ..." if len(found) >= 3 else "")
    raise SpecError(
        f"outputs: {outputs} already holds files ({shown}), which this job's results would "
        "mix with",
        "choose a new place, such as the default or a path with {job_id} in it, or allow it "
        "with --outputs-exist-ok, or outputs_exist_ok: true in the spec",
    )


def record_before(outputs: str, job_dir: Path) -> None:
    """For a shared local outputs folder: note each file it holds (size, mtime) as the job
    starts, once, so the job's manifest lists only what the job wrote."""
    folder = local_outputs(outputs)
    if folder is None or not folder.is_dir() or (job_dir / BEFORE_FILE).exists():
        return
    held: dict[str, list[int]] = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            try:
                stat = path.stat()
            except OSError:  # a dangling link
                continue
            held[path.relative_to(folder).as_posix()] = [stat.st_size, stat.st_mtime_ns]
    (job_dir / BEFORE_FILE).write_text(json.dumps(held))


def read_before(job_dir: Path) -> dict[str, tuple[int, int]]:
    """What :func:`record_before` noted (empty if nothing)."""
    try:
        held = json.loads((job_dir / BEFORE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): (int(v[0]), int(v[1])) for k, v in held.items()}
