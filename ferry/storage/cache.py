"""The input cache: remote objects kept under FERRY_HOME by content identity, so an input
that did not change is never downloaded twice (re-runs and retries start at once).

An object's key is a hash of (URI, size, version), where the version is what the store
changes on every write (S3 ETag, GCS generation, Azure ETag). Each entry is the data file
and a small JSON sidecar; jobs get hard links to the data, and an entry whose data was
changed in place (size or mtime differ from the sidecar) is dropped and fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CacheEntry:
    """One cached object."""

    key: str
    uri: str
    size: int
    version: str
    added: float
    last_used: float
    path: Path


class InputCache:
    """Content-addressed objects under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(uri: str, size: int, version: str) -> str:
        return hashlib.sha256(f"{uri}\0{size}\0{version}".encode()).hexdigest()

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / "objects" / key[:2]
        return folder / key, folder / f"{key}.json"

    def lookup(self, key: str) -> Path | None:
        """The cached data for ``key``, or None (also when it was changed since)."""
        data, meta = self._paths(key)
        try:
            stat = data.stat()
            info = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        if stat.st_size != info["size"] or stat.st_mtime_ns != info["mtime_ns"]:
            self._remove(key)  # someone wrote into a linked copy: never serve it again
            return None
        with contextlib.suppress(OSError):  # last use, for pruning: the access time only
            os.utime(data, ns=(time.time_ns(), stat.st_mtime_ns))
        return data

    def staging_file(self) -> Path:
        """A fresh temporary path inside the cache (same filesystem as the objects)."""
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
        return tmp / f"{os.getpid()}-{os.urandom(6).hex()}"

    def insert(self, key: str, downloaded: Path, uri: str, version: str) -> Path:
        """Move a finished download into the cache; returns the data path."""
        data, meta = self._paths(key)
        data.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(downloaded, 0o444)
        os.replace(downloaded, data)
        stat = data.stat()
        sidecar = {
            "uri": uri,
            "size": stat.st_size,
            "version": version,
            "added": time.time(),
            "mtime_ns": stat.st_mtime_ns,
        }
        tmp = meta.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(sidecar))
        os.replace(tmp, meta)
        return data

    def entries(self) -> Iterator[CacheEntry]:
        """Every cached object."""
        for meta in (self.root / "objects").glob("*/*.json"):
            try:
                info = json.loads(meta.read_text())
                data = meta.with_suffix("")
                stat = data.stat()
            except (OSError, ValueError):
                continue
            yield CacheEntry(
                key=data.name,
                uri=info["uri"],
                size=stat.st_size,
                version=info["version"],
                added=info["added"],
                last_used=stat.st_atime,
                path=data,
            )

    def _remove(self, key: str) -> int:
        data, meta = self._paths(key)
        size = 0
        with contextlib.suppress(OSError):
            size = data.stat().st_size
        for path in (data, meta):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return size

    def prune(
        self, older_than: float | None = None, max_bytes: int | None = None
    ) -> tuple[int, int]:
        """Remove entries unused for ``older_than`` seconds, then the least recently used
        until the cache holds at most ``max_bytes``. Returns (entries, bytes) removed."""
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        removed = freed = 0
        now = time.time()
        kept: list[CacheEntry] = []
        for entry in entries:
            if older_than is not None and now - entry.last_used > older_than:
                freed += self._remove(entry.key)
                removed += 1
            else:
                kept.append(entry)
        if max_bytes is not None:
            total = sum(e.size for e in kept)
            for entry in kept:
                if total <= max_bytes:
                    break
                total -= entry.size
                freed += self._remove(entry.key)
                removed += 1
        for leftover in (self.root / "tmp").glob("*"):  # downloads cut short long ago
            with contextlib.suppress(OSError):
                if now - leftover.stat().st_mtime > 3600:
                    leftover.unlink()
        return removed, freed
