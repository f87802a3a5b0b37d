"""What a job takes to a machine that is not this one, in its bucket under content hashes:
its code snapshot as one archive, and Ferry's own wheel (its requirements travel in the
code folder, where the job names them).

- ``<root>/.ferry/code/<sha256>.tar.gz``: the snapshot's files, their paths, whether each
  is executable, and links inside it (a link that leaves the folder is refused). The hash
  is of a manifest of every file (path, mode, the hash of its bytes), taken as the archive
  is written, so an unchanged folder names an archive that is there already and nothing is
  sent: one existence check. For a snapshot that is a code-store tree (a job's code), the
  manifest's hash is kept while the tree's record stands, so it is not read again either.
- ``<root>/.ferry/wheels/<sha256 prefix>/ferry-<version>-py3-none-any.whl``: the wheel of
  the Ferry this process runs (:mod:`ferry.packaging.wheel`), under the hash of its bytes;
  for a machine that must install it itself (SageMaker), ``bootstrap.py`` beside it
  (:mod:`ferry.runner.bootstrap`, written after the wheel: where it is, both are).

An object is written once, whole: a bucket makes an object visible only when its upload
completes, and a folder gets a temporary file renamed into place. A failed upload leaves
nothing under the name, so the next submission sends it again.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = ".ferry"  # under the bucket root: what Ferry keeps there
BOOTSTRAP = "bootstrap.py"  # beside the wheel: what installs it on a bare machine
_DIGESTS = "digests"  # under the code store: a tree's manifest hash, once taken


@dataclass(frozen=True)
class Bundle:
    """Where a job's code and Ferry's wheel are, and what this upload sent."""

    code: str  # URI of the code archive
    wheel: str  # URI of Ferry's wheel
    sent: int  # bytes uploaded now (0: everything was there)


def upload(
    code: Path,
    root: str,
    progress: Callable[[str], None] = lambda line: None,
    bootstrap: bool = False,
) -> Bundle:
    """Put the code snapshot ``code`` and Ferry's wheel under ``root`` (a bucket URI, or
    a folder), each unless it is there already, and with ``bootstrap`` the bootstrap
    beside the wheel. Raises :class:`FerryError` (a link that leaves the folder, a bucket
    that cannot be reached or written)."""
    from ferry.packaging.wheel import ferry_wheel
    from ferry.storage.locations import parse_uri

    base = parse_uri(root).child(PREFIX)
    digest = code_digest(code)
    sent = 0
    if not _exists(base.child(f"code/{digest}.tar.gz").uri):
        with tempfile.TemporaryDirectory(prefix="ferry-bundle-") as scratch:
            archive = Path(scratch) / "code.tar.gz"
            # named by what it holds, read as it was written (a file changed since the
            # digest above makes another name, never a wrong archive under this one)
            digest = _archive(code, archive)
            at = base.child(f"code/{digest}.tar.gz").uri
            if not _exists(at):
                size = archive.stat().st_size
                progress(f"uploading the code ({_size(size)})")
                _put(archive, at)
                sent += size
    wheel = ferry_wheel()
    wheel_digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    folder = base.child(f"wheels/{wheel_digest[:32]}")
    wheel_at = folder.child(wheel.name)
    beside = folder.child(BOOTSTRAP)
    if bootstrap and _exists(beside.uri):
        return Bundle(base.child(f"code/{digest}.tar.gz").uri, wheel_at.uri, sent)
    if not _exists(wheel_at.uri):
        progress(f"uploading Ferry's wheel ({_size(wheel.stat().st_size)})")
        _put(wheel, wheel_at.uri)
        sent += wheel.stat().st_size
    if bootstrap:
        from ferry.runner import bootstrap as source

        script = Path(source.__file__)
        _put(script, beside.uri)
        sent += script.stat().st_size
    return Bundle(base.child(f"code/{digest}.tar.gz").uri, wheel_at.uri, sent)


def code_digest(code: Path) -> str:
    """The hash of the manifest of the snapshot ``code``: every file's path, whether it is
    executable, and the hash of its bytes (a link: its target). Kept for a code-store tree
    while the tree's record is the one it was taken with (a tree rebuilt in place gets a
    new record, and is read again)."""
    tree = code.resolve()
    cache = _cache(tree)
    if cache is not None:
        with contextlib.suppress(OSError, ValueError):
            kept, record = cache[0].read_text().split()
            if record == cache[1] and len(kept) == 64:
                return kept
    manifest = hashlib.sha256()
    for path, relative, info in _entries(tree):
        _note(manifest, relative, info, path)
        if stat.S_ISREG(info.st_mode):
            content = hashlib.sha256()
            with open(path, "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    content.update(block)
            manifest.update(content.digest())
    digest = manifest.hexdigest()
    if cache is not None:
        with contextlib.suppress(OSError):
            cache[0].parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = cache[0].with_name(f".{cache[0].name}.{os.urandom(6).hex()}")
            tmp.write_text(f"{digest} {cache[1]}\n")
            os.replace(tmp, cache[0])
    return digest


def _note(manifest: Any, relative: str, info: os.stat_result, path: Path) -> None:
    name = relative.encode("utf-8", "surrogateescape")
    manifest.update(name + b"\0" + str(_mode(info.st_mode)).encode() + b"\0")
    if stat.S_ISLNK(info.st_mode):
        manifest.update(b"link " + os.readlink(path).encode("utf-8", "surrogateescape") + b"\0")


def _cache(tree: Path) -> tuple[Path, str] | None:
    """Where the digest of a code-store tree is kept, and the identity of the tree's
    record it must go with (None: ``tree`` is not a recorded tree, and is read each time)."""
    from ferry.config import ferry_home
    from ferry.packaging import code_store

    trees = (ferry_home() / code_store.FOLDER / "trees").resolve()
    if tree.parent != trees:
        return None
    try:
        record = (trees / f"{tree.name}{code_store.RECORD}").stat()
    except OSError:
        return None
    identity = f"{record.st_ino}-{record.st_size}-{record.st_mtime_ns}"
    return trees.parent / _DIGESTS / tree.name, identity


def _entries(tree: Path) -> list[tuple[Path, str, os.stat_result]]:
    """Every regular file and symbolic link under ``tree``, with its path relative to it,
    in name order (a link to a folder is kept as a link, not followed; a FIFO or socket
    is left out). Raises :class:`FerryError` for a link that leaves the folder: the
    machine the job runs on would not have what it names."""
    from ferry.errors import FerryError

    found = []
    for folder, dirs, files in os.walk(tree):
        dirs.sort()
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            path = Path(folder) / name
            info = path.lstat()
            relative = path.relative_to(tree).as_posix()
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
                inside = os.path.normpath(os.path.join(os.path.dirname(relative), target))
                if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                    raise FerryError(
                        f"the code folder's link {relative} points outside it ({target}); "
                        "the machine the job runs on would not have what it names",
                        "copy what it names into the code folder, or give it as an input",
                    )
            elif not stat.S_ISREG(info.st_mode):
                continue
            found.append((path, relative, info))
    return sorted(found, key=lambda item: item[1])


def _mode(mode: int) -> int:
    return 0o755 if mode & 0o111 else 0o644


class _Hashing(io.RawIOBase):
    """A file read through once, its bytes hashed as they pass."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.file.read(size)
        self.hash.update(data)
        return data


def _archive(code: Path, target: Path) -> str:
    """``code`` as a gzipped tar: paths, modes (executable or not) and links; no owners or
    times. Returns the digest of the manifest of what it wrote (:func:`code_digest`)."""
    tree = code.resolve()
    manifest = hashlib.sha256()
    with open(target, "wb") as raw:
        # level 1: most of what compressing gains on source files, at a fraction of the
        # default level's time on data that does not compress (2.5 s less for 100 MB)
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1)
        with gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path, relative, st in _entries(tree):
                _note(manifest, relative, st, path)
                info = tarfile.TarInfo(relative)
                info.mode = _mode(st.st_mode)
                info.mtime = 0
                if stat.S_ISLNK(st.st_mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(path)
                    tar.addfile(info)
                    continue
                info.size = st.st_size
                with open(path, "rb") as file:
                    reader = _Hashing(file)
                    tar.addfile(info, reader)  # type: ignore[arg-type]
                manifest.update(reader.hash.digest())
    return manifest.hexdigest()


def extract(archive: Path, target: Path) -> None:
    """Unpack a code archive into ``target`` (on the machine that runs the job). Raises
    :class:`FerryError` for an entry that would land outside it."""
    from ferry.errors import FerryError

    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        if not hasattr(tarfile, "data_filter"):  # (Python 3.10 before 3.10.12: no filters)
            _check_members(tar, target, archive.name)
            tar.extractall(target)
            return
        try:
            tar.extractall(target, filter="data")
        except tarfile.FilterError as exc:
            raise FerryError(
                f"the code archive {archive.name} holds an entry that leaves its folder ({exc})",
                "submit the job again from its code folder",
            ) from None


def _check_members(tar: tarfile.TarFile, target: Path, name: str) -> None:
    """What the ``data`` filter refuses, checked by hand: an entry or a link's target
    outside ``target``, a device, an absolute link (a leading ``/`` of a name is dropped,
    as the filter drops it)."""
    from ferry.errors import FerryError

    root = target.resolve()
    for member in tar.getmembers():
        member.name = member.name.lstrip("/")
        where = (root / member.name).resolve()
        bad = not where.is_relative_to(root) or not (
            member.isfile() or member.isdir() or member.issym() or member.islnk()
        )
        if member.issym() or member.islnk():
            base = where.parent if member.issym() else root
            bad = bad or os.path.isabs(member.linkname)
            bad = bad or not (base / member.linkname).resolve().is_relative_to(root)
        if bad:
            raise FerryError(
                f"the code archive {name} holds an entry that leaves its folder ({member.name})",
                "submit the job again from its code folder",
            )


def _exists(uri: str) -> bool:
    from ferry.storage.failures import bucket_errors
    from ferry.storage.locations import parse_uri
    from ferry.storage.registry import filesystem

    place = parse_uri(uri)
    if place.is_local:
        return Path(place.path).is_file()
    with bucket_errors(place, context="the job's code"):
        fs = filesystem(place.protocol)
        fs.invalidate_cache(place.path)  # (a listing kept from before another upload)
        return bool(fs.exists(place.path))


def _put(source: Path, uri: str) -> None:
    from ferry.storage.locations import parse_uri
    from ferry.storage.registry import filesystem

    place = parse_uri(uri)
    if place.is_local:
        target = Path(place.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return
    from ferry.storage.failures import bucket_errors

    with bucket_errors(place, write=True, context="the job's code"):
        filesystem(place.protocol).put_file(str(source), place.path)


def _size(n: int) -> str:
    from ferry.units import format_size

    return format_size(n)
