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

Snapshots of the same files share one tree of such links (``trees/<key>``, the key naming
every file's path and identity): a job's ``code`` is then a symbolic link to the tree, and
a snapshot of a folder that did not change makes no folder and no link but that one. Each
tree has a companion symbolic link, ``trees/<key>.link``, and a job's ``code`` is a hard
link to it: the companion's link count is the number of jobs using the tree, so a tree no
job uses any more is found without looking at the jobs (and removed an hour later).
What a tree holds is recorded beside it (``trees/<key>.files``) by the first snapshot that
links it, after looking at its files; later snapshots trust a recorded tree, and
:func:`copy_snapshot` checks it as it is read, so a tree written to through a job's link
is never run.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

from ferry.errors import FerryError

FOLDER = "code-store"  # under FERRY_HOME, beside the job folders (links need one file system)
TREES = "trees"  # shared snapshots: a folder of links per set of files
POOL = "work"  # clean working folders of each tree, for the next attempt (storage.workdir)
TREE_FOLDER_NS = 1_000_000_000  # a tree's folders' time (1970): any change of entries shows
RACY_NS = 1_000_000_000  # files modified this recently are copied, not kept (clock ticks)
PRUNE_AFTER_S = 3600.0  # an unlinked entry or a crashed copy is removed after this long
_PRUNED = "pruned"  # its modification time says when the store was last pruned
RECORD = ".files"  # beside a tree: what it holds (trees/<key>.files), checked as it is read

# What a tree holds: path -> (size, modification time, mode) of a file, a link's target, or
# None for a folder.
Record = dict[str, "tuple[int, int, int] | str | None"]


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


def copy_tree(
    src: str | os.PathLike[str],
    target: str | os.PathLike[str],
    seen: Record | None = None,
    rel: str = "",
) -> None:
    """Copy the folder ``src`` to ``target`` (created): files as :func:`copy_file` does,
    symlinks as links. A fifth of the system calls of ``shutil.copytree``, which copies
    extended attributes and stats each file several times. With ``seen``, what was copied
    is noted in it, as :func:`record` notes the files of a tree."""
    os.mkdir(target)
    with os.scandir(src) as entries:
        for entry in entries:
            path = os.path.join(target, entry.name)
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                link = os.readlink(entry.path)
                os.symlink(link, path)
                if seen is not None:
                    seen[name] = link
            elif entry.is_dir():
                copy_tree(entry.path, path, seen, name)
                if seen is not None:
                    seen[name] = None
            else:
                st = entry.stat(follow_symlinks=False)
                copy_file(entry.path, path, st)
                if seen is not None:
                    seen[name] = (st.st_size, st.st_mtime_ns, file_mode(st))


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
        key = hashlib.sha256(_identity(src, st)).hexdigest()[:40]
        return os.path.join(self._objects, key[:2], key[2:])

    def tree_key(self, root: str, files: list[tuple[str, os.stat_result]]) -> str | None:
        """The name of the tree ``files`` (paths relative to ``root``, with their lstat)
        share: a hash of every path and identity. None when they cannot share one (a file
        modified within the last second: its times do not tell its content yet)."""
        digest = hashlib.sha256()
        for rel, st in sorted(files):
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(os.path.join(root, rel))
                digest.update(f"{rel}\0->{target}\n".encode("utf-8", "surrogateescape"))
                continue
            if st.st_mtime_ns >= self._now_ns - RACY_NS:
                return None
            digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            digest.update(_identity(os.path.join(root, rel), st) + b"\n")
        return digest.hexdigest()[:40]

    def share(
        self,
        root: str,
        files: list[tuple[str, os.stat_result]],
        dest: str,
        key: str | None = None,
    ) -> int | None:
        """Make ``dest`` (absent; its folder exists) the snapshot of ``files`` (paths
        relative to ``root``, with their lstat) as a link to the tree they share with every
        other snapshot of the same files, building the tree if there is none yet. ``key``
        is their :meth:`tree_key`, when known. Returns how many files were linked rather
        than copied; None, with nothing made, when the files cannot share a tree (see
        :meth:`tree_key`) or this file system has no links."""
        if not self._usable:
            return None
        key = key or self.tree_key(root, files)
        if key is None:
            return None
        tree = os.path.join(str(self.root), TREES, key)
        linked = sum(not stat.S_ISLNK(st.st_mode) for _, st in files)
        for _ in range(3):  # (a prune may take the tree away between our steps)
            try:
                os.link(tree + ".link", dest, follow_symlinks=False)
            except FileNotFoundError:
                built = self._build(root, files, tree)
                if built is None:
                    return None
                linked = built
                continue
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP):
                    raise
                self._usable = False  # no hard links here
                return None
            if not os.path.isdir(tree):  # set aside (found changed): build it again, and
                os.unlink(dest)  # keep its companion, which counts the jobs using it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tree + RECORD)  # (one left behind)
                built = self._build(root, files, tree)
                if built is None:
                    return None
                linked = built
                continue
            if os.path.exists(tree + RECORD):  # checked as it is read (copy_snapshot)
                return linked
            if _intact(tree, files):  # a tree new, or made before trees had records
                _write_record(tree, files)
                return linked
            # Written through a job's link: the jobs using it keep it as it is, and new
            # snapshots of these files are copies of their own until it has been pruned.
            os.unlink(dest)
            return None
        return None

    def _build(self, root: str, files: list[tuple[str, os.stat_result]], tree: str) -> int | None:
        """Build the tree (and its companion link) for ``files``, unless another process
        did meanwhile; returns how many files were linked from existing entries."""
        tmp = os.path.join(self._tmp, f"tree-{os.getpid()}-{os.urandom(6).hex()}")
        linked = 0
        try:
            os.mkdir(tmp)
            made = {tmp}
            for rel, st in files:
                src, target = os.path.join(root, rel), os.path.join(tmp, rel)
                parent = os.path.dirname(target)
                if parent not in made:
                    os.makedirs(parent, exist_ok=True)
                    made.add(parent)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(src), target)
                else:
                    linked += self.place(src, st, target)
            if not self._usable:  # an entry could not be linked: no sharing here
                return None
            for folder in made:  # a file added to the tree later changes its folder's time
                os.utime(folder, ns=(TREE_FOLDER_NS, TREE_FOLDER_NS))
            os.makedirs(os.path.dirname(tree), exist_ok=True)
            try:
                os.rename(tmp, tree)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            companion = f"{tmp}.link"
            os.symlink(tree, companion)
            try:
                os.link(companion, tree + ".link", follow_symlinks=False)
            except FileExistsError:
                pass  # made by another process: the one jobs already count on
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{tmp}.link")
            if os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
        return linked

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
        """Remove, once they are older than ``after`` seconds: trees no job uses, kept
        working folders, crashed copies, then entries nothing links any more. At most once
        per ``after``. Returns how many entries, trees and folders were removed."""
        import fcntl

        marker = self.root / _PRUNED
        now = time.time()
        with contextlib.suppress(FileNotFoundError):  # (never pruned yet)
            if now - marker.stat().st_mtime < after:
                return 0
        with open(marker, "a") as lock:
            try:  # one prune at a time; another one under way does this one's work
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return 0
            os.utime(marker)
            return self._prune(now, after)

    def _prune(self, now: float, after: float) -> int:
        removed = self._prune_trees(now, after) + self._prune_pool(now, after)
        for top in (self._tmp, self._objects):
            for folder, _dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(folder, name)
                    try:
                        st = os.lstat(path)
                        if st.st_nlink == 1 and now - st.st_ctime >= after:
                            os.unlink(path)
                            removed += 1
                    except FileNotFoundError:
                        continue
            if top == self._tmp:  # folders a crash left: a tree or a copy being made
                with os.scandir(top) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False) and _older(entry.path, now, after):
                            shutil.rmtree(entry.path, ignore_errors=True)
                            removed += 1
        return removed

    def _prune_trees(self, now: float, after: float) -> int:
        trees = os.path.join(str(self.root), TREES)
        removed = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(trees) as entries:
            for entry in list(entries):
                if not entry.is_dir(follow_symlinks=False):
                    key, _, kind = entry.name.partition(".")  # (kind: "link", "files"...)
                    if os.path.isdir(os.path.join(trees, key)):
                        continue  # (its notes, and those being written: "files.<tmp>")
                    # a removed tree's note, or the companion of one set aside and not built
                    # again, once no job uses it
                    with contextlib.suppress(FileNotFoundError):
                        if kind != "link" or _unused(entry.path, now, after):
                            os.unlink(entry.path)
                    continue
                try:  # the companion's link count: its own name, plus one per job
                    companion = os.lstat(entry.path + ".link")
                    users, changed = companion.st_nlink - 1, companion.st_ctime
                except FileNotFoundError:  # a crash between the tree and its companion
                    users, changed = 0, os.lstat(entry.path).st_ctime
                if users or now - changed < after:
                    continue
                doomed = self._set_aside(entry.path)
                if doomed is None:  # pruned by another process meanwhile
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if os.lstat(entry.path + ".link").st_nlink > 1:  # a job took it meanwhile
                        os.rename(doomed, entry.path)
                        continue
                    os.unlink(entry.path + ".link")
                shutil.rmtree(doomed, ignore_errors=True)
                removed += 1
        return removed

    def _prune_pool(self, now: float, after: float) -> int:
        pool = os.path.join(str(self.root), POOL)
        removed = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(pool) as trees:
            for tree in list(trees):
                alive = os.path.isdir(os.path.join(str(self.root), TREES, tree.name))
                with contextlib.suppress(FileNotFoundError), os.scandir(tree.path) as kept:
                    for folder in list(kept):
                        if alive and not _older(folder.path, now, after):
                            continue
                        if not folder.is_dir(follow_symlinks=False):  # a folder's listing
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(folder.path)
                            continue
                        doomed = self._set_aside(folder.path)
                        if doomed is not None:  # (else taken meanwhile)
                            shutil.rmtree(doomed, ignore_errors=True)
                            removed += 1
                with contextlib.suppress(OSError):  # (not empty: kept)
                    os.rmdir(tree.path)
        return removed

    def _set_aside(self, path: str) -> str | None:
        """Move ``path`` out of use (into ``tmp/``, in one rename) before removing it;
        where it went, or None when it was gone already."""
        doomed = os.path.join(self._tmp, f"old-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            return None
        return doomed


class SnapshotChanged(FerryError):
    """A shared snapshot was written to after it was taken (through some job's ``code``),
    or is gone: set aside so, or pruned (``name`` None)."""

    def __init__(self, tree: str, name: str | None, kept: str | None) -> None:
        if name is None:
            message = f"the job's code snapshot is gone ({tree} was set aside or removed)"
        else:
            where = f"; it was set aside in {kept}" if kept else ""
            message = (
                f"the job's code snapshot was changed after it was taken ({name} in {tree} is "
                f"not as it was snapshotted: something wrote into it, perhaps through a job's "
                f"code folder{where})"
            )
        super().__init__(message, "submit the job again: it gets a snapshot of its own")
        self.tree = tree
        self.name = name
        self.kept = kept


def record(files: list[tuple[str, os.stat_result]], root: str) -> Record:
    """What a tree made of ``files`` (paths relative to ``root``, with their lstat) holds."""
    held: Record = {}
    for rel, st in files:
        parent = rel.rpartition("/")[0]
        while parent and parent not in held:
            held[parent] = None
            parent = parent.rpartition("/")[0]
        if stat.S_ISLNK(st.st_mode):
            held[rel] = os.readlink(os.path.join(root, rel))
        else:
            held[rel] = (st.st_size, st.st_mtime_ns, file_mode(st))
    return held


def _write_record(tree: str, files: list[tuple[str, os.stat_result]]) -> None:
    import marshal

    tmp = f"{tree}{RECORD}.{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "wb") as file:
            file.write(marshal.dumps(record(files, tree)))
        os.replace(tmp, tree + RECORD)
    except OSError:  # (no record: the next snapshot looks at the tree's files again)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def copy_snapshot(snapshot: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Copy a job's code snapshot to ``target`` (created).

    A shared tree is checked against its record (``trees/<key>.files``) as it is copied:
    snapshots trust a recorded tree rather than look at each of its files again, so a tree
    written to since (through some job's ``code``) is found here, and never run. It is
    then set aside (into ``tmp/``, where it stays for an hour) and its record dropped: the
    next snapshot of the same files builds the tree again in its place, and the jobs
    linked to it (through its companion, which stays) find the new one. Raises
    :class:`SnapshotChanged` then, with no ``target`` left, and when the tree is gone (see
    :func:`ferry.packaging.snapshot.retake`)."""
    import marshal

    tree = os.path.realpath(snapshot)
    try:
        folder = os.stat(tree)
    except FileNotFoundError:
        if os.path.islink(snapshot):  # a tree set aside (or pruned) under the job
            raise SnapshotChanged(tree, None, None) from None
        raise
    try:
        with open(tree + RECORD, "rb") as file:
            kept: Record | None = marshal.loads(file.read())
    except (OSError, ValueError, EOFError, TypeError):  # none: a folder of its own, or a
        kept = None  # tree made before records (looked at when snapshots linked it)
    if kept is None:
        copy_tree(tree, target)
        return
    seen: Record = {}
    copy_tree(tree, target, seen)
    if seen == kept:
        return
    shutil.rmtree(target, ignore_errors=True)
    differs = sorted(n for n in seen.keys() | kept.keys() if seen.get(n, 0) != kept.get(n, 0))
    raise SnapshotChanged(tree, differs[0], _set_aside_tree(tree, folder.st_ino))


def _set_aside_tree(tree: str, inode: int) -> str | None:
    """Take the changed tree (the folder ``inode``) out of use: its record first (no
    snapshot trusts it from then on), then the folder; where it went, or None when it is
    no longer there (set aside by another process, and perhaps built again already)."""
    root = os.path.dirname(os.path.dirname(tree))
    doomed = os.path.join(root, "tmp", f"changed-{os.path.basename(tree)}-{os.urandom(4).hex()}")
    try:
        if os.lstat(tree).st_ino != inode:
            return None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tree + RECORD)
        os.rename(tree, doomed)
    except FileNotFoundError:
        return None
    return doomed


def remembered(snapshot: str | os.PathLike[str], name: str, find: Callable[[], str]) -> str:
    """What ``find`` says of a shared snapshot (a link to a tree), worked out once per tree
    and kept beside it as ``<tree>.<name>``."""
    tree = os.path.realpath(snapshot)
    note = f"{tree}.{name}"
    with contextlib.suppress(FileNotFoundError), open(note) as file:  # (not worked out yet)
        return file.read()
    found = find()
    tmp = f"{note}.{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "w") as file:
            file.write(found)
        os.replace(tmp, note)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return found


def _identity(src: str, st: os.stat_result) -> bytes:
    return (
        f"{src}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0"
        f"{st.st_ctime_ns}\0{file_mode(st)}"
    ).encode("utf-8", "surrogateescape")


def _intact(tree: str, files: list[tuple[str, os.stat_result]]) -> bool:
    """Whether each file of the tree still has the size, time and mode it was made with,
    and no folder of it has had an entry added, removed or renamed. (Run at each snapshot
    of an unchanged folder: a loop kept tight.)"""
    prefix = tree + os.sep
    lstat, is_link, mode_of = os.lstat, stat.S_ISLNK, stat.S_IMODE
    parents = {rel.rpartition("/")[0] for rel, _ in files}
    folders = {tree, *(prefix + parent for parent in parents if parent)}
    try:
        for rel, st in files:
            if is_link(st.st_mode):
                continue
            kept = lstat(prefix + rel)
            if (
                kept.st_mtime_ns != st.st_mtime_ns
                or kept.st_size != st.st_size
                or mode_of(kept.st_mode) != file_mode(st)
            ):
                return False
        return all(os.stat(folder).st_mtime_ns == TREE_FOLDER_NS for folder in folders)
    except OSError:
        return False


def _unused(companion: str, now: float, after: float) -> bool:
    """Whether no job has used the tree of ``companion`` for ``after`` seconds."""
    st = os.lstat(companion)
    return st.st_nlink == 1 and now - st.st_ctime >= after


def _older(path: str, now: float, after: float) -> bool:
    """Whether ``path`` has not changed for ``after`` seconds."""
    try:
        return now - os.lstat(path).st_ctime >= after
    except FileNotFoundError:
        return False
