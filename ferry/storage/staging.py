"""Bring a job's inputs to it before its command starts.

``copy`` inputs from buckets are downloaded in parallel into the input cache and hard-linked
into the job; an object already cached (same URI, size and version) costs no transfer.
Local paths are given to the job as they are, ``stream`` inputs as their URI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fsspec.callbacks import Callback

from ferry.errors import FerryError, SpecError
from ferry.storage.cache import InputCache
from ferry.storage.failures import bucket_errors, check_bucket, missing
from ferry.storage.locations import Location, parse_uri
from ferry.storage.registry import filesystem

# Progress callback: (input name, bytes done, bytes in all, files done, files in all)
Progress = Callable[[str, int, int, int, int], None]


@dataclass(frozen=True)
class StagedInput:
    """What the job gets for one input, and what it cost."""

    name: str
    uri: str
    path: str  # what FERRY_INPUT_<NAME> holds: a local file or folder, or the URI (stream)
    files: int = 0
    bytes_total: int = 0
    bytes_downloaded: int = 0
    bytes_from_cache: int = 0
    seconds: float = 0.0


def _version(info: dict[str, Any]) -> str:
    """What the store changes whenever the object is rewritten."""
    keys = ("generation", "ETag", "etag", "md5Hash", "LastModified", "last_modified", "mtime")
    for key in (*keys, "created"):
        value = info.get(key)
        if value:
            return str(value)
    return ""


@contextlib.contextmanager
def _reading(name: str, loc: Location) -> Iterator[None]:
    """Turn a missing, unreachable or forbidden input into one sentence with the fix."""
    try:
        with bucket_errors(loc, context=f"input {name!r}"):
            yield
    except FileNotFoundError:
        raise missing(loc, f"input {name!r}") from None


def _list(name: str, loc: Location) -> tuple[dict[str, dict[str, Any]], bool]:
    """The objects under ``loc`` (key -> info) and whether ``loc`` is a single object."""
    with _reading(name, loc):
        fs = filesystem(loc.protocol)
        info = fs.info(loc.path)
        if info.get("type") == "directory":
            found = fs.find(loc.path, detail=True)
            objects = {k: v for k, v in found.items() if v.get("type", "file") == "file"}
            return objects, False
    return {loc.path: info}, True


class _FilesDone(Callback):  # type: ignore[misc]
    """Counts finished files: fsspec advances it once per file it has fetched."""

    def __init__(self, report: Callable[[int], object]) -> None:
        super().__init__()
        self._report = report

    def call(self, *args: Any, **kwargs: Any) -> None:
        self._report(int(self.value))


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or links not allowed: copy instead
        shutil.copyfile(source, target)


def stage_input(
    name: str,
    uri: str,
    mode: str,
    dest: Path,
    cache: InputCache,
    progress: Progress | None = None,
) -> StagedInput:
    """Make one input available to the job under ``dest / name``."""
    began = time.monotonic()
    loc = parse_uri(uri)
    if loc.is_local:
        if not os.path.exists(loc.path):
            raise SpecError(f"input {name!r}: {loc.path} does not exist", "check the path")
        return StagedInput(name, uri, loc.path)
    if mode == "stream":
        return StagedInput(name, uri, loc.uri)
    objects, single = _list(name, loc)
    root = dest / name
    total = sum(int(info.get("size") or 0) for info in objects.values())
    todo: list[tuple[str, Path, str, str, Path]] = []  # (remote, tmp, key, version, target)
    cached = 0
    for key_path, info in objects.items():
        relative = Path(key_path).name if single else key_path[len(loc.path) :].lstrip("/")
        target = root / relative
        size = int(info.get("size") or 0)
        version = _version(info)
        key = cache.key(f"{loc.protocol}://{key_path}", size, version)
        hit = cache.lookup(key, size)
        if hit is not None:
            _link(hit, target)
            cached += size
        else:
            todo.append((key_path, cache.staging_file(), key, version, target))
    done = cached
    if progress:
        progress(name, done, total, len(objects) - len(todo), len(objects))
    if todo:
        fs = filesystem(loc.protocol)
        todo_bytes = total - cached
        callback = _FilesDone(
            lambda n: (
                progress
                and progress(
                    name,
                    cached + todo_bytes * n // len(todo),
                    total,
                    len(objects) - len(todo) + n,
                    len(objects),
                )
            )
        )
        try:  # one call: fsspec's async stores (S3, GCS, Azure) fetch the files concurrently
            with bucket_errors(loc, context=f"input {name!r}"):
                fs.get([c[0] for c in todo], [str(c[1]) for c in todo], callback=callback)
        except FileNotFoundError as exc:
            raise FerryError(
                f"input {name!r}: {exc} vanished while it was being copied",
                "run the job again once the data is in place",
            ) from None
        for remote, tmp, key, version, target in todo:
            data = cache.insert(key, tmp, f"{loc.protocol}://{remote}", version)
            _link(data, target)
        cache.flush_index()
        if progress:
            progress(name, total, total, len(objects), len(objects))
    path = root / Path(next(iter(objects))).name if single else root
    if not single:
        root.mkdir(parents=True, exist_ok=True)  # an empty prefix is an empty folder
    return StagedInput(
        name,
        uri,
        str(path),
        files=len(objects),
        bytes_total=total,
        bytes_downloaded=total - cached,
        bytes_from_cache=cached,
        seconds=time.monotonic() - began,
    )


def check_locations(inputs: dict[str, str], outputs: str | None, named: str = "outputs") -> None:
    """At submit: every input exists and every store is reachable, so a job never waits
    in the queue only to fail on a typo. ``inputs`` maps name -> URI; ``outputs`` is the
    job's outputs as written (``{job_id}`` in it), ``named`` what a message calls it."""
    for name, uri in inputs.items():
        try:
            loc = parse_uri(uri)
        except ValueError as exc:
            raise SpecError(f"input {name!r}: {exc}") from None
        if loc.is_local:
            if not os.path.exists(loc.path):
                raise SpecError(f"input {name!r}: {loc.path} does not exist", "check the path")
        else:
            _list_head(name, loc)
    if outputs and "://" in outputs:
        try:
            loc = parse_uri(outputs.replace("{job_id}", "x"))
        except ValueError as exc:
            raise SpecError(f"{named}: {exc}") from None
        if not loc.is_local:  # (named as written: the job's id is not known yet)
            check_bucket(replace(loc, uri=outputs), named, write=True)


def _list_head(name: str, loc: Location) -> None:
    with _reading(name, loc):
        filesystem(loc.protocol).info(loc.path)
