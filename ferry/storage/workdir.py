"""The working folder an attempt runs in, and the files in it that are checkpoint state.

Every attempt starts in a fresh copy of the job's code snapshot, as it would on a new
machine: nothing a previous attempt left in its working folder is there. Files a script keeps
in its working folder (the PyTorch DDP tutorial's ``snapshot.pt``) carry over only when
``checkpoint.paths`` names them: they are copied into ``checkpoints/.ferry-workdir/``, which
reaches the bucket with the checkpoints, and put back before the next attempt starts.
A working folder a job left exactly as it was given is kept for the next attempt from the
same code (:class:`Pool`), which is then spared the copy.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ferry.storage.watch import FolderWatch

WORKDIR = "work"  # in the job folder: where attempts run
STATE_FOLDER = ".ferry-workdir"  # in the job's checkpoint folder


QUIET_S = 2.0  # a file written in place is taken while the job runs once this quiet


POOL_SIZE = 4  # clean working folders kept per code tree, at most
POOL_MAX_BYTES = 256 << 20  # a bigger working folder is never kept


def fresh_workdir(
    code: Path, work: Path, fill: Callable[[Path], object] | None = None
) -> Given | None:
    """Replace ``work`` with a copy of the code snapshot ``code``, plus what ``fill`` puts
    in it. The folder is made under a temporary name and renamed only when complete, so a
    crash never leaves a working folder without its state.

    The copy is one kept by :func:`recycle` when there is one (see :class:`Pool`). Returns
    what the copy held before ``fill``, watched from then on, for :func:`recycle`; None
    when it cannot be kept (the snapshot is not a shared tree, or too big)."""
    tmp = work.with_name(f".{work.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    pool = Pool.of(code)
    taken = pool.take(tmp) if pool is not None else None
    files = taken.files if taken is not None else None
    if files is None:
        if code.is_dir() or code.is_symlink():
            from ferry.packaging.code_store import copy_snapshot

            copy_snapshot(code, tmp)  # (checked as it is copied: nothing left if it fails)
        else:
            tmp.mkdir(parents=True)
        if pool is not None:
            files = _files(tmp)[0]
    given = None
    if files is not None and sum(entry[3] for entry in files.values()) <= POOL_MAX_BYTES:
        given = Given.watched(tmp, files, taken)  # before fill: what it adds is a change
    if fill is not None:
        fill(tmp)
    if work.exists():
        shutil.rmtree(work)
    os.replace(tmp, work)
    return given


# relative path -> (inode, change time, modification time, size, mode) of each file and
# link of a folder, and (inode, change time or 0, 0, 0, mode) of each folder in it (the
# change time once _unchanged has seen it settled). (Copies carry their
# source's old modification time: a write within the same tick of the coarse clock as
# the copy, which may keep the change time, still changes that.)
Files = dict[str, tuple[int, int, int, int, int]]


def _files(folder: Path) -> tuple[Files, list[str]]:
    """What ``folder`` holds, and the Python caches (``__pycache__``) in it, left out."""
    found: Files = {}
    caches: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(folder, rel)) as entries:
            for entry in entries:
                name = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    found[name] = (
                        st.st_ino,
                        st.st_ctime_ns,
                        st.st_mtime_ns,
                        st.st_size,
                        st.st_mode,
                    )
                elif entry.name == "__pycache__":  # (never in a snapshot)
                    caches.append(name)
                else:  # what a folder holds counts, not its times
                    found[name] = (st.st_ino, 0, 0, 0, st.st_mode)
                    stack.append(name)
    return found, caches


def _unchanged(folder: Path, before: Files) -> bool:
    """Whether ``folder`` holds exactly what it held (``before``), apart from the Python
    caches an import writes, which are then removed. A write, a change of mode or times,
    a rename, each change an inode's change time; new and removed entries show too.

    Each entry is looked up by its name (what :func:`_files` would find, at a fraction of
    the cost: this runs as every job from a shared tree ends). A folder is listed unless
    its change time is the one ``before`` notes for it (an entry added, removed or renamed
    in it changes that); a time is noted, in ``before``, only once it is a second old, so a
    change within the same tick of the clock is never missed."""
    prefix = f"{folder}{os.sep}"
    lstat, is_dir = os.lstat, stat.S_ISDIR
    expected: dict[str, set[str]] = {"": set()}
    folders: dict[str, os.stat_result] = {}
    try:
        for name, record in before.items():
            st = lstat(prefix + name)
            parent, _, base = name.rpartition("/")
            expected.setdefault(parent, set()).add(base)
            if is_dir(record[4]):
                if (st.st_ino, st.st_mode) != (record[0], record[4]):
                    return False
                expected.setdefault(name, set())
                folders[name] = st
            elif (st.st_ino, st.st_ctime_ns, st.st_mtime_ns, st.st_size, st.st_mode) != record:
                return False
        from ferry.packaging.code_store import RACY_NS  # (the clock's tick, with room)

        settled = time.time_ns() - RACY_NS
        caches = []
        for parent, names in expected.items():
            seen = folders.get(parent)
            if seen is not None and seen.st_ctime_ns == before[parent][1]:
                continue  # nothing added, removed or renamed in it since it was noted
            found = set(os.listdir(prefix + parent if parent else folder))
            if "__pycache__" in found and "__pycache__" not in names:
                found.discard("__pycache__")
                cache = f"{prefix}{parent}/__pycache__" if parent else f"{prefix}__pycache__"
                if not is_dir(lstat(cache).st_mode):
                    return False
                caches.append(cache)
                seen = None  # its time changes as the cache goes
            if found != names:
                return False
            if parent:
                noted = seen.st_ctime_ns if seen is not None and seen.st_ctime_ns < settled else 0
                before[parent] = (before[parent][0], noted, 0, 0, before[parent][4])
    except OSError:
        return False
    for cache in caches:
        shutil.rmtree(cache)
    return True


@dataclass
class Given:
    """What a working folder held when its attempt started, and the kernel's watch on it
    since (None where there is none: then every file is looked at when the job ends)."""

    files: Files
    inode: int  # the folder's own: it is renamed into place, and must still be there
    watch: FolderWatch | None = None
    place: str | None = None  # where in the pool it was taken from
    listing: tuple[int, int, int] | None = None  # its listing there, as read (Taken)

    @classmethod
    def watched(cls, folder: Path, files: Files, taken: Taken | None = None) -> Given:
        from ferry.storage.watch import watch

        folders = [name for name, entry in files.items() if stat.S_ISDIR(entry[4])]
        found = watch(str(folder), folders)
        inode = os.lstat(folder).st_ino
        if taken is None:
            return cls(files, inode, found)
        return cls(files, inode, found, taken.place, taken.listing)

    def unchanged(self, folder: Path) -> bool:
        """Whether ``folder`` (this one, wherever it is now) holds exactly what it held,
        apart from Python caches, which are then removed (see :func:`_unchanged`)."""
        watch, self.watch = self.watch, None
        if watch is None:
            self.listing = None  # (the look notes folders' times in the listing: write it)
            return _unchanged(folder, self.files)
        try:
            if not watch.unchanged() or os.lstat(folder).st_ino != self.inode:
                return False
            for cache in watch.caches():
                shutil.rmtree(folder / cache)
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Stop watching: the folder will not be kept."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def __del__(self) -> None:  # (an attempt that failed before its folder was looked at)
        self.close()


class Pool:
    """Clean working folders of one shared code tree (``code-store/work/<tree>/``).

    Copying a code folder for each attempt costs about a third of a millisecond per file;
    a tiny job from a 200-file project would spend more on it than on itself. So when a
    job has ended and its working folder holds exactly the copy it was given (every file
    with the inode and change time it had: nothing written, renamed, added, removed or
    touched), the folder is kept for the next attempt of any job of the same tree, which
    takes it with a rename. A folder a job changed is never kept. Kept folders are removed
    an hour after their last use, with the tree they copy (``CodeStore.prune``). The
    kernel tells what a job did to its folder where it can (:mod:`ferry.storage.watch`);
    elsewhere every entry is looked at when the job ends (:func:`_unchanged`).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def of(cls, code: Path) -> Pool | None:
        """The pool of the snapshot ``code``; None unless it is a shared tree."""
        from ferry.packaging.code_store import POOL

        try:
            tree = Path(os.readlink(code))
        except OSError:  # a folder of its own: nothing else starts from the same files
            return None
        return cls(tree.parent.parent / POOL / tree.name)

    def take(self, target: Path) -> Taken | None:
        """Move a kept folder to ``target``; returns what it holds, or None when there is
        no folder to take."""
        try:
            kept = [name for name in os.listdir(self.folder) if not name.endswith(_LIST)]
        except FileNotFoundError:
            return None
        for name in kept:
            try:
                os.rename(self.folder / name, target)
            except FileNotFoundError:  # taken by another job meanwhile
                continue
            # the listing stays, for the next folder given back into this place; it is
            # this folder's if it names this folder (else it is a listing being written
            # for the folder given back next, or one cut short)
            with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
                with open(self.folder / (name + _LIST), "rb") as file:
                    folder, files = marshal.loads(file.read())
                    seen = os.fstat(file.fileno())
                if folder == os.lstat(target).st_ino and isinstance(files, dict):
                    return Taken(files, name, (seen.st_ino, seen.st_size, seen.st_mtime_ns))
            return Taken(_files(target)[0], name, None)
        return None

    def give(self, work: Path, given: Given) -> bool:
        """Keep ``work`` if it is unchanged since it was ``given``; returns whether it
        was kept.

        A kept folder goes into one of ``POOL_SIZE`` places (``0``, ``1``...), then its
        listing is written beside it, over the last one in place: keeping a folder creates
        and removes no file (each costs more than writing a small one). The listing names
        the folder's inode, so a job that takes the folder before its listing is written
        lists the folder itself. A folder that goes back to the place it came from, whose
        listing there was not written over meanwhile, needs none written."""
        try:
            names = set(os.listdir(self.folder))
        except FileNotFoundError:
            self.folder.mkdir(parents=True, exist_ok=True)
            names = set()
        free = [str(i) for i in range(POOL_SIZE) if str(i) not in names]
        if given.place in free:  # back where it came from: its listing may be there still
            free.remove(given.place)
            free.insert(0, given.place)
        if not free or not given.unchanged(work):
            return False
        inode = os.lstat(work).st_ino
        for place in free:
            try:
                os.rename(work, self.folder / place)  # (fails if another folder is there)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue
                raise
            listing = self.folder / (place + _LIST)
            with contextlib.suppress(OSError):  # (without it, the folder is listed when taken)
                if place == given.place and given.listing is not None:
                    seen = os.stat(listing)  # not written over since it was read: still ours
                    if (seen.st_ino, seen.st_size, seen.st_mtime_ns) == given.listing:
                        return True
                listing.write_bytes(marshal.dumps((inode, given.files)))
            return True
        return False


class Taken(NamedTuple):
    """A folder taken from the pool: what it holds, the place it was kept in, and the
    state of its listing there when read (None when it was listed anew)."""

    files: Files
    place: str
    listing: tuple[int, int, int] | None


_LIST = ".files"  # beside a kept folder: what it holds (so taking it needs no look inside)


def recycle(code: Path, work: Path, given: Given | None) -> bool:
    """The job has ended: keep its working folder for the next attempt from the same
    code if it holds just what it was ``given`` (see :class:`Pool`). Returns whether it
    was kept; a working folder that was not stays where it is."""
    if given is None:
        return False
    pool = Pool.of(code)
    try:
        return pool is not None and work.is_dir() and pool.give(work, given)
    except OSError:
        return False
    finally:
        given.close()


def _copy(source: Path, target: Path, unchanged: tuple[int, int, int] | None = None) -> bool:
    """Copy one file with its times and mode, under a temporary name first, so the copy it
    replaces stays whole until then. With ``unchanged`` (its size, mtime and inode before),
    the copy is kept only if the file still has them afterwards. Returns whether it was."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".tmp")  # never synced (outputs skip *.tmp)
    shutil.copy2(source, partial)
    if unchanged is not None:
        after = source.stat()
        if (after.st_size, after.st_mtime_ns, after.st_ino) != unchanged:
            partial.unlink(missing_ok=True)
            return False
    os.replace(partial, target)
    return True


@dataclass
class WorkdirState:
    """The files of one job's working folder that ``checkpoint.paths`` declares as state."""

    workdir: Path
    checkpoints: Path  # the job's checkpoint folder (FERRY_CHECKPOINT_DIR)
    patterns: tuple[str, ...]
    code: Path  # the code snapshot each working folder starts as
    _inodes: dict[str, int] = field(default_factory=dict)  # each file's inode at the last look
    _given: Given | None = None  # what the working folder held when the attempt started

    @property
    def folder(self) -> Path:
        """Where the saved copies are kept."""
        return self.checkpoints / STATE_FOLDER

    def declared(self) -> dict[str, Path]:
        """The files in the working folder that the patterns match: relative name -> path."""
        found: dict[str, Path] = {}
        for pattern in self.patterns:
            for match in self.workdir.glob(pattern):
                files = [match] if match.is_file() else (p for p in match.rglob("*") if p.is_file())
                for path in files:
                    found[path.relative_to(self.workdir).as_posix()] = path
        return found

    def saved(self) -> dict[str, Path]:
        """The copies kept in the checkpoint folder: relative name -> path."""
        if not self.folder.is_dir():
            return {}
        return {
            p.relative_to(self.folder).as_posix(): p
            for p in self.folder.rglob("*")
            if p.is_file() and not p.name.endswith(".tmp")
        }

    def save(self, final: bool, prune: bool = False) -> list[str]:
        """Copy declared files that changed into the checkpoint folder; returns their names.

        While the attempt runs (``final`` false) a file is taken only if it did not change
        while it was copied, and either was put in place by a rename since the last look
        (complete, then) or has not been written for ``QUIET_S``: a copy never catches a
        script half-way through writing the file in place. When the attempt has ended
        (``final``) every declared file is taken as it was left. With ``prune``, copies of
        files the script removed are removed too.
        """
        if not self.patterns:
            return []
        saved = self.saved()
        taken: list[str] = []
        present = self.declared()
        for name, path in present.items():
            try:
                now = path.stat()
            except FileNotFoundError:
                continue
            state = (now.st_size, now.st_mtime_ns)
            renamed = self._inodes.get(name, now.st_ino) != now.st_ino
            self._inodes[name] = now.st_ino
            copy = saved.get(name)
            if copy is not None:
                kept = copy.stat()
                if (kept.st_size, kept.st_mtime_ns) == state:
                    continue  # unchanged since it was saved
            quiet = time.time() - now.st_mtime >= QUIET_S
            if not final and not (renamed or quiet):
                continue
            with contextlib.suppress(FileNotFoundError):  # removed while we copied
                if _copy(path, self.folder / name, None if final else (*state, now.st_ino)):
                    taken.append(name)
        if prune:
            for name, copy in saved.items():
                if name not in present:
                    copy.unlink(missing_ok=True)
        return taken

    def harvest(self) -> list[str]:
        """Before a new attempt: save the declared files from the last attempt's working
        folder while it is still here (a supervisor that died never saved them), and name
        the other files it wrote, which the new attempt will not have."""
        if not self.workdir.is_dir():
            return []
        self.save(final=True)  # never pruned here: the folder may be one a crash cut short
        return self.left_behind()

    def fresh(self) -> list[tuple[str, int]]:
        """Replace the working folder with a fresh copy of the code snapshot holding the
        saved copies (it appears only when complete); returns (name, size) of each copy."""
        restored: list[tuple[str, int]] = []
        self.recycle()  # the last attempt's folder, harvested already
        self._given = fresh_workdir(
            self.code, self.workdir, lambda folder: restored.extend(self.restore(folder))
        )
        return restored

    def recycle(self) -> bool:
        """Keep the working folder for another attempt from the same code, if it holds
        just the copy it was given (see :class:`Pool`); returns whether it was kept."""
        given, self._given = self._given, None
        return recycle(self.code, self.workdir, given)

    def restore(self, folder: Path | None = None) -> list[tuple[str, int]]:
        """Put the saved copies into ``folder`` (the working folder); returns (name, size)
        of each."""
        restored: list[tuple[str, int]] = []
        for name, copy in sorted(self.saved().items()):
            target = (folder or self.workdir) / name
            _copy(copy, target)
            os.chmod(target, stat.S_IMODE(copy.stat().st_mode) | stat.S_IRUSR | stat.S_IWUSR)
            restored.append((name, copy.stat().st_size))
        return restored

    def left_behind(self, most: int = 3) -> list[str]:
        """Files an attempt wrote or changed in its working folder that no pattern of
        ``checkpoint.paths`` declares (a fresh machine would not have them). A top-level
        folder stands for what it holds; one name more than ``most`` means there are more."""
        return _left_behind(self.workdir, self.code, set(self.declared()), most)


def _left_behind(workdir: Path, code: Path, declared: set[str], most: int) -> list[str]:
    names: list[str] = []
    for dirpath, dirs, files in os.walk(workdir):
        dirs.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            relative = path.relative_to(workdir).as_posix()
            if relative in declared or "__pycache__" in relative.split("/"):
                continue
            if _same_file(path, code / relative):
                continue
            top = relative.split("/", 1)[0] + ("/" if "/" in relative else "")
            if top not in names:
                names.append(top)
                if len(names) > most:
                    return names
    return names


def _same_file(path: Path, original: Path) -> bool:
    """Whether ``path`` is still the snapshot's ``original`` (same size and time); a new
    file, or a dangling link, is not."""
    try:
        mine, theirs = path.stat(), original.stat()
    except FileNotFoundError:
        return False
    return (mine.st_size, int(mine.st_mtime)) == (theirs.st_size, int(theirs.st_mtime))


def other_checkpoint_files(checkpoints: Path) -> int:
    """Files in the checkpoint folder that are not runtime.checkpoint's own (a framework's
    or the script's own checkpoints)."""
    count = 0
    for dirpath, dirs, files in os.walk(checkpoints):
        here = Path(dirpath)
        if here == checkpoints:
            dirs[:] = [d for d in dirs if not d.startswith("ckpt-") and d != STATE_FOLDER]
        dirs[:] = [d for d in dirs if not d.startswith((".tmp-", ".old-"))]
        count += sum(1 for name in files if not name.endswith(".tmp"))
    return count
