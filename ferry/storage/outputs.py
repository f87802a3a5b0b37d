"""Send a job's folders to its ``outputs`` location.

Checkpoints and TensorBoard logs are synced while the job runs (only files that changed),
so they survive the machine vanishing; at the end everything is sent, then
``manifest.json`` (every file's path, size and SHA-256) is written last: an outputs
location with a manifest is complete.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ferry.storage.failures import bucket_errors
from ferry.storage.locations import Location, parse_uri
from ferry.storage.registry import filesystem

MANIFEST = "manifest.json"
CHECKPOINT_MANIFEST = "MANIFEST.json"  # written last in each checkpoint (runtime.checkpoint)
LIVE_FOLDERS = ("checkpoints", "tensorboard")


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _on_bucket(write: bool) -> Callable[[_Method], _Method]:
    """An OutputSync method whose storage failures leave as one sentence (StorageError)."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def run(self: OutputSync, *args: Any, **kwargs: Any) -> Any:
            with bucket_errors(self.target, write=write):
                return method(self, *args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class OutputSync:
    """The job's local output folder and where it must end up."""

    local: Path  # holds model/, checkpoints/, tensorboard/, output/, logs/
    target: Location  # equal to ``local`` for local outputs
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (size, mtime_ns)
    bytes_sent: int = 0

    @classmethod
    def for_outputs(cls, outputs: str, job_dir: Path) -> OutputSync:
        target = parse_uri(outputs)
        local = Path(target.path) if target.is_local else job_dir / "outputs"
        return cls(local, target)

    @property
    def remote(self) -> bool:
        return not self.target.is_local

    def _changed(self, folders: tuple[str, ...] | None) -> list[tuple[str, Path, tuple[int, int]]]:
        changed = []
        roots = [self.local / f for f in folders] if folders else [self.local]
        for root in roots:
            for dirpath, dirs, files in os.walk(root):
                # checkpoints being written or removed (ferry.runtime.checkpoint)
                dirs[:] = [d for d in dirs if not _in_progress(d)]
                for name in files:
                    path = Path(dirpath) / name
                    relative = path.relative_to(self.local).as_posix()
                    if relative == MANIFEST or _in_progress(name):
                        continue
                    try:
                        stat = path.stat()
                    except FileNotFoundError:  # removed while we looked
                        continue
                    state = (stat.st_size, stat.st_mtime_ns)
                    if self.sent.get(relative) != state:
                        changed.append((relative, path, state))
        return changed

    @_on_bucket(write=True)
    def sync(self, folders: tuple[str, ...] | None = LIVE_FOLDERS) -> int:
        """Send files that changed since the last sync; returns the bytes sent."""
        if not self.remote:
            return 0
        changed = self._changed(folders)
        gone = self._removed_checkpoints(folders)
        if not changed and not gone:
            return 0
        fs = filesystem(self.target.protocol)
        # a checkpoint's manifest goes after its data: what has a manifest there is whole
        for batch in (
            [c for c in changed if not c[0].endswith("/" + CHECKPOINT_MANIFEST)],
            [c for c in changed if c[0].endswith("/" + CHECKPOINT_MANIFEST)],
        ):
            if batch:
                fs.put([str(c[1]) for c in batch], [self.target.child(c[0]).path for c in batch])
        if gone:  # checkpoints the script's keep-the-last-K removed: manifest first
            gone.sort(key=lambda relative: not relative.endswith("/" + CHECKPOINT_MANIFEST))
            for relative in gone:
                with contextlib.suppress(FileNotFoundError):
                    fs.rm(self.target.child(relative).path)
                self.sent.pop(relative, None)
        sent = 0
        for relative, _, state in changed:
            self.sent[relative] = state
            sent += state[0]
        self.bytes_sent += sent
        return sent

    def _removed_checkpoints(self, folders: tuple[str, ...] | None) -> list[str]:
        """Sent files under ``checkpoints/`` no longer here: the bucket mirrors the folder,
        so checkpoints pruned here (keep the last K, a Trainer's save_total_limit) go there
        too."""
        if folders is not None and "checkpoints" not in folders:
            return []
        return [
            relative
            for relative in self.sent
            if relative.startswith("checkpoints/") and not (self.local / relative).exists()
        ]

    @_on_bucket(write=False)
    def pull_checkpoints(self) -> int:
        """Bring the bucket's checkpoints here before an attempt starts (a fresh machine, or
        a folder lost with the old one): complete checkpoints missing locally are
        downloaded, manifest last. Returns the files fetched."""
        if not self.remote:
            return 0
        fs = filesystem(self.target.protocol)
        remote = self.target.child("checkpoints").path
        try:
            found = fs.find(remote)
        except FileNotFoundError:
            return 0
        relatives = {path: "checkpoints/" + path[len(remote) :].lstrip("/") for path in found}
        # a ckpt-<step> folder counts only with its manifest (sent last): else it is partial
        complete = {
            r.rsplit("/", 1)[0] for r in relatives.values() if r.endswith("/" + CHECKPOINT_MANIFEST)
        }
        wanted = []
        for path, relative in relatives.items():
            parts = relative.split("/")
            if ".." in parts or any(p.startswith((".tmp-", ".old-")) for p in parts):
                continue  # never outside the folder, nor a checkpoint being written
            if parts[1].startswith("ckpt-") and "/".join(parts[:2]) not in complete:
                continue
            if (self.local / relative).exists():
                continue
            wanted.append((path, relative))
        wanted.sort(key=lambda item: item[1].endswith("/" + CHECKPOINT_MANIFEST))
        for path, relative in wanted:
            target = self.local / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".tmp")
            fs.get(path, str(partial))
            os.replace(partial, target)  # never a half-fetched file under the real name
            stat = target.stat()
            self.sent[relative] = (stat.st_size, stat.st_mtime_ns)
        return len(wanted)

    def collect(self, workdir: Path, patterns: tuple[str, ...] | list[str]) -> int:
        """Copy files matching ``patterns`` (globs, ``**`` for any depth) from the job's
        working folder into the outputs, keeping their relative paths. Returns the count."""
        copied = 0
        found: set[Path] = set()
        for pattern in patterns:
            for match in workdir.glob(pattern):
                # a folder matched (`logs`, or `logs/**`) stands for every file under it
                found.update(
                    [match] if match.is_file() else (p for p in match.rglob("*") if p.is_file())
                )
        for path in sorted(found):
            target = self.local / path.relative_to(workdir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied += 1
        return copied

    def listing(self, before: dict[str, tuple[int, int]] | None = None) -> list[dict[str, Any]]:
        """The files of the local folder as the manifest lists them (path, size, sha256),
        leaving out those there before the job, unchanged (``before``: path -> size,
        mtime), and files being written."""
        files: list[dict[str, Any]] = []
        for dirpath, dirs, names in os.walk(self.local):
            dirs[:] = [d for d in dirs if not _in_progress(d)]
            for name in sorted(names):
                if _in_progress(name):  # (cut short by the end: never sent, never listed)
                    continue
                path = Path(dirpath) / name
                relative = path.relative_to(self.local).as_posix()
                if relative == MANIFEST:
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:  # a dangling link
                    continue
                if before and before.get(relative) == (stat.st_size, stat.st_mtime_ns):
                    continue
                if not path.is_file():
                    continue
                files.append({"path": relative, "size": stat.st_size, "sha256": _sha256(path)})
        return files

    def _sizes(self) -> dict[str, int]:
        """Each file under the bucket prefix: relative path -> size."""
        fs = filesystem(self.target.protocol)
        root = self.target.path.rstrip("/")
        with bucket_errors(self.target):
            try:
                found = fs.find(root, detail=True)
            except FileNotFoundError:
                return {}
        return {
            path[len(root) :].lstrip("/"): int(info.get("size") or 0)
            for path, info in found.items()
        }

    def finish(
        self,
        logs: list[Path],
        job_id: str,
        before: dict[str, tuple[int, int]] | None = None,
        sent: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Copy the logs in, send everything, then write the manifest last. Files that were
        there before the job, unchanged (``before``: path -> size, mtime), are not its own
        and stay out of the manifest. ``sent``: the files runners on other machines sent
        to the bucket (their listings); the manifest lists those the bucket still holds as
        listed, and the logs sent from here."""
        log_dir = self.local / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        for log in logs:
            if not log.exists():
                continue
            target = log_dir / log.name
            target.unlink(missing_ok=True)
            try:
                os.link(log, target)  # logs can be large: share them rather than copy
            except OSError:
                shutil.copyfile(log, target)
        self.sync(None)
        files = self.listing(before)
        if sent is not None and self.remote:  # (a folder here was listed whole above)
            here = {f["path"] for f in files}
            there = self._sizes()  # what the bucket holds now: pruned checkpoints are gone
            files += [
                f for f in sent if f["path"] not in here and there.get(f["path"]) == f["size"]
            ]
        manifest = {
            "job_id": job_id,
            "complete": True,
            "written_at": time.time(),
            "files": sorted(files, key=lambda f: str(f["path"])),
        }
        data = json.dumps(manifest, indent=1).encode()
        if self.remote:
            with bucket_errors(self.target, write=True):
                filesystem(self.target.protocol).pipe(self.target.child(MANIFEST).path, data)
        else:
            tmp = self.local / f"{MANIFEST}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self.local / MANIFEST)
        return manifest


def _in_progress(name: str) -> bool:
    """Whether a file or folder of the outputs is one being written, to be renamed once
    whole (``.tmp-x``, ``x.tmp``), or one on its way out (``.old-x``): never sent."""
    return name.startswith((".tmp-", ".old-")) or name.endswith(".tmp")


def read_manifest(outputs: str) -> dict[str, Any] | None:
    """The manifest at an outputs location, or None while it is incomplete."""
    target = parse_uri(outputs)
    try:
        with bucket_errors(target):
            data = filesystem(target.protocol).cat_file(target.child(MANIFEST).path)
    except FileNotFoundError:
        return None
    manifest: dict[str, Any] = json.loads(data)
    return manifest
