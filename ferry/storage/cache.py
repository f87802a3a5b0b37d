"""The input cache: remote objects kept under FERRY_HOME by content identity, so an input
that did not change is never downloaded twice (re-runs and retries start at once).

An object's key is a hash of (URI, size, version), where the version is what the store
changes on every write (S3 ETag, GCS generation, Azure ETag). Jobs get hard links to the
cached data. Each data file carries a modification time derived from its key: a job that
writes into its linked copy changes that time (or the size), and the entry is then dropped
and fetched again rather than served changed. ``index.jsonl`` records which URI each key
came from, for ``ferry cache ls``; it is appended once per staging, not once per object.
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
from typing import Any


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


def _stamp(key: str) -> int:
    """The modification time (ns) a cached object keeps while it is unchanged."""
    return int(key[:15], 16)


class InputCache:
    """Content-addressed objects under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._pending: list[dict[str, object]] = []

    @staticmethod
    def key(uri: str, size: int, version: str) -> str:
        return hashlib.sha256(f"{uri}\0{size}\0{version}".encode()).hexdigest()

    def _data(self, key: str) -> Path:
        return self.root / "objects" / key[:2] / key

    def lookup(self, key: str, size: int) -> Path | None:
        """The cached data for ``key``, or None (also when it was changed in place)."""
        data = self._data(key)
        try:
            stat = data.stat()
        except OSError:
            return None
        if stat.st_size != size or stat.st_mtime_ns != _stamp(key):
            with contextlib.suppress(OSError):  # someone wrote into a linked copy
                data.unlink()
            return None
        with contextlib.suppress(OSError):  # last use, for pruning: the access time
            os.utime(data, ns=(time.time_ns(), stat.st_mtime_ns))
        return data

    def staging_file(self) -> Path:
        """A fresh temporary path inside the cache (same filesystem as the objects)."""
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
        return tmp / f"{os.getpid()}-{os.urandom(6).hex()}"

    def insert(self, key: str, downloaded: Path, uri: str, version: str) -> Path:
        """Move a finished download into the cache; returns the data path."""
        data = self._data(key)
        data.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(downloaded, 0o444)
        os.utime(downloaded, ns=(time.time_ns(), _stamp(key)))
        os.replace(downloaded, data)
        self._pending.append({"key": key, "uri": uri, "version": version, "added": time.time()})
        return data

    def flush_index(self) -> None:
        """Record the URIs of the objects inserted since the last flush (one append)."""
        if not self._pending:
            return
        lines = "".join(json.dumps(p) + "\n" for p in self._pending)
        with open(self.root / "index.jsonl", "a") as index:
            index.write(lines)
        self._pending.clear()

    def _index(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(FileNotFoundError), open(self.root / "index.jsonl") as index:
            for line in index:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    entry = json.loads(line)
                    found[str(entry["key"])] = entry
        return found

    def entries(self) -> Iterator[CacheEntry]:
        """Every cached object."""
        for key, info in self._index().items():
            data = self._data(key)
            try:
                stat = data.stat()
            except OSError:
                continue
            yield CacheEntry(
                key=key,
                uri=str(info["uri"]),
                size=stat.st_size,
                version=str(info["version"]),
                added=float(info["added"]),
                last_used=stat.st_atime,
                path=data,  # type: ignore[arg-type]
            )

    def prune(
        self, older_than: float | None = None, max_bytes: int | None = None
    ) -> tuple[int, int]:
        """Remove entries unused for ``older_than`` seconds, then the least recently used
        until the cache holds at most ``max_bytes``. Returns (entries, bytes) removed."""
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        now = time.time()
        doomed = [e for e in entries if older_than is not None and now - e.last_used > older_than]
        kept = [e for e in entries if e not in doomed]
        if max_bytes is not None:
            total = sum(e.size for e in kept)
            for entry in list(kept):
                if total <= max_bytes:
                    break
                total -= entry.size
                doomed.append(entry)
                kept.remove(entry)
        for entry in doomed:
            with contextlib.suppress(FileNotFoundError):
                entry.path.unlink()
        index = self._index()
        survivors = "".join(json.dumps(index[e.key]) + "\n" for e in kept if e.key in index)
        tmp = self.root / f"index.jsonl.{os.getpid()}.tmp"
        if self.root.exists():
            tmp.write_text(survivors)
            os.replace(tmp, self.root / "index.jsonl")
        for leftover in (self.root / "tmp").glob("*"):  # downloads cut short long ago
            with contextlib.suppress(OSError):
                if now - leftover.stat().st_mtime > 3600:
                    leftover.unlink()
        return len(doomed), sum(e.size for e in doomed)
