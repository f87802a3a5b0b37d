"""Copies of code files kept under FERRY_HOME, so a snapshot of a folder that barely changed
links what it already holds instead of copying (or reading) those files again.

A file's entry is named by a hash of its identity on disk: (path, device, inode, size,
modification time, change time, mode). Any write changes the size or one of the two times,
and a file replaced by another (an editor's save, ``git checkout``) has a new inode, so a
changed file never matches an old entry. The entry is Ferry's own copy, not a link to the
user's file: editing the source while a job runs never changes what the job sees.

Entries appear only by an atomic rename of a complete copy (a process killed mid-copy
leaves a temporary file, never a half entry), and carry the source's modification time: a
snapshot checks it, and the size, after linking, so an entry changed in place through a
link is dropped and copied afresh rather than handed to a job. A file modified in the last
second is copied without an entry: within one tick of the file system's clock a second
write could keep the same times and size. Entries no snapshot links any more (link count
1) are removed an hour later, along with temporary files a crash left.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from pathlib import Path

FOLDER = "code-store"  # under FERRY_HOME, beside the job folders (links need one file system)
RACY_NS = 1_000_000_000  # files modified this recently are copied, not kept (clock ticks)
PRUNE_AFTER_S = 3600.0  # an unlinked entry or a crashed copy is removed after this long
_PRUNED = "pruned"  # its modification time says when the store was last pruned


def file_mode(st: os.stat_result) -> int:
    """The permission bits a snapshot gives a file: the source's, always owner-writable."""
    return stat.S_IMODE(st.st_mode) | stat.S_IRUSR | stat.S_IWUSR


def copy_file(src: str | Path, target: str | Path, st: os.stat_result) -> None:
    """Copy ``src`` (as ``st`` describes it) to the new file ``target``, with the snapshot's
    mode and the source's times. An existing ``target`` is an error: never write through a
    link."""
    source = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        copy = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            done = 0
            while True:  # (sendfile: the kernel copies, the bytes never come up to Python)
                try:
                    sent = os.sendfile(copy, source, done, max(st.st_size - done, 1 << 20))
                except OSError as exc:
                    if done or exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    _read_write(source, copy)  # a file system without sendfile (FUSE, 9p)
                    break
                if not sent:
                    break
                done += sent
            os.fchmod(copy, file_mode(st))
            os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(copy)
    finally:
        os.close(source)


def _read_write(source: int, copy: int) -> None:
    while block := os.read(source, 1 << 20):
        view = memoryview(block)
        while view:
            view = view[os.write(copy, view) :]


def copy_tree(src: str | Path, target: str | Path) -> None:
    """Copy the folder ``src`` to ``target`` (created): files as :func:`copy_file` does,
    symlinks as links. A fifth of the system calls of ``shutil.copytree``, which copies
    extended attributes and stats each file several times."""
    os.mkdir(target)
    with os.scandir(src) as entries:
        for entry in entries:
            path = os.path.join(target, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), path)
            elif entry.is_dir():
                copy_tree(entry.path, path)
            else:
                copy_file(entry.path, path, entry.stat(follow_symlinks=False))


class CodeStore:
    """The entries under ``root`` (``objects/``, ``tmp/``); one per user (FERRY_HOME)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._objects = str(root / "objects")
        self._tmp = str(root / "tmp")
        self._usable = True  # False once linking proved impossible (another file system)
        self._now_ns = time.time_ns()
        os.makedirs(self._objects, exist_ok=True)
        os.makedirs(self._tmp, exist_ok=True)

    def entry(self, src: str, st: os.stat_result) -> str:
        """Where the copy of ``src`` as ``st`` describes it is kept."""
        identity = (
            f"{src}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0"
            f"{st.st_ctime_ns}\0{file_mode(st)}"
        )
        key = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:40]
        return os.path.join(self._objects, key[:2], key[2:])

    def place(self, src: str, st: os.stat_result, target: str) -> bool:
        """Put the file ``src`` (as ``st`` describes it) at ``target``; return True when an
        entry was linked and nothing was copied."""
        if not self._usable or st.st_mtime_ns >= self._now_ns - RACY_NS:
            copy_file(src, target, st)
            return False
        entry = self.entry(src, st)
        try:
            os.link(entry, target)
        except FileNotFoundError:
            pass  # not kept yet
        except OSError as exc:
            if exc.errno != errno.EMLINK:  # EXDEV, EPERM: no links here; copy from now on
                self._usable = False
                copy_file(src, target, st)
                return False
        else:
            linked = os.lstat(target)
            kept = (linked.st_size, linked.st_mtime_ns, stat.S_IMODE(linked.st_mode))
            if kept == (st.st_size, st.st_mtime_ns, file_mode(st)):
                return True
            os.unlink(target)  # written through another link: never hand it out again
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry)
        self._keep(src, st, target, entry)
        return False

    def _keep(self, src: str, st: os.stat_result, target: str, entry: str) -> None:
        """Copy ``src`` into a new entry (when it did not change meanwhile) and link it."""
        tmp = os.path.join(self._tmp, f"{os.getpid()}-{os.urandom(6).hex()}")
        try:
            copy_file(src, tmp, st)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        try:
            os.link(tmp, target)
        except OSError:  # no links from the store to the job's folder (another file system)
            os.unlink(tmp)
            self._usable = False
            copy_file(src, target, st)
            return
        try:
            after = os.lstat(src)
            unchanged = (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) == (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
            if unchanged:  # else it was written while we copied: only this job has that copy
                os.makedirs(os.path.dirname(entry), exist_ok=True)
                os.replace(tmp, entry)  # (an entry with too many links is replaced too)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def prune(self, after: float = PRUNE_AFTER_S) -> int:
        """Remove entries no snapshot links and crashed copies, older than ``after``
        seconds; at most once per ``after``. Returns how many files were removed."""
        marker = self.root / _PRUNED
        now = time.time()
        with contextlib.suppress(FileNotFoundError):  # (never pruned yet)
            if now - marker.stat().st_mtime < after:
                return 0
        marker.touch()
        removed = 0
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                path = os.path.join(folder, name)
                if path == str(marker):
                    continue
                try:
                    st = os.lstat(path)
                    if st.st_nlink == 1 and now - st.st_ctime >= after:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed
