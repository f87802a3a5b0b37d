"""Whether anything in a folder changed while a job ran, told by the kernel (Linux inotify)
rather than by looking at every file afterwards.

A watch on each folder of a working folder costs one system call per folder; comparing
every file's times when the job ends costs one per file, and the working folder of a
200-file project is checked as every job from it ends (:class:`ferry.storage.workdir.Pool`).
The watch reports every change made through the folder: a write, or a file opened for
writing and closed (so a write through a shared memory map shows too), a change of mode,
times or owner, an entry created, removed or renamed. What it cannot see is a write through
a second name: a hard link to one of the files made in a folder it does not watch (outside,
or in a ``__pycache__`` folder, whose contents are dropped anyway), written through and
perhaps removed again. Making the link is not reported to the folder's watch either. A job
would have to do that on purpose; the file-by-file check, which compares change times,
would see it.

One inotify instance serves a process for its whole life, and each watch is removed on its
own: closing an instance waits for the kernel's grace period (up to 20 ms here), far longer
than the check itself. Where inotify is missing (not Linux) or exhausted
(``fs.inotify.max_user_instances``, ``max_user_watches``), :func:`watch` returns None and the
caller looks at every file instead.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from functools import cache

# inotify(7)
_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_ONLYDIR = 0x1000000
_IN_DONT_FOLLOW = 0x2000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows

MAX_FOLDERS = 512  # a bigger tree is checked file by file (watches are a per-user quota)


class FolderWatch:
    """Watches on a folder and the folders in it, from :func:`watch` until
    :meth:`unchanged` or :meth:`close`."""

    def __init__(self, kernel: _Inotify, folders: dict[int, str]) -> None:
        self._kernel = kernel
        self._folders = folders  # watch -> the folder's path relative to the top ("")
        self._top = next(iter(folders))
        self._caches: list[str] = []
        self._changed = False

    def unchanged(self) -> bool:
        """Whether nothing changed in the folder since the watch began, apart from the
        folder itself being renamed and Python caches (``__pycache__`` folders) made in
        it, which :meth:`caches` names. Ends the watch."""
        if not self._folders or self._kernel.pid != os.getpid():
            return False  # (ended already, or a forked child's: no longer known)
        self._kernel.read()
        self.close()
        return not self._changed

    def quiet(self) -> bool:
        """Whether nothing has changed in the folder since the watch began (as
        :meth:`unchanged`), watching on."""
        if not self._folders or self._kernel.pid != os.getpid():
            return False
        self._kernel.read()
        return not self._changed

    def caches(self) -> list[str]:
        """The ``__pycache__`` folders made in the folder (paths relative to it)."""
        return list(self._caches)

    def close(self) -> None:
        """Stop watching (the folder can then be changed without a trace)."""
        if self._folders and self._kernel.pid == os.getpid():  # (not in a forked child)
            self._kernel.remove(self._folders)
        self._folders = {}

    def _event(self, wd: int, mask: int, name: bytes) -> None:
        if wd == self._top and mask & _IN_MOVE_SELF:
            return  # the folder put in its place (the caller checks where it is now)
        if mask & _IN_CREATE and mask & _IN_ISDIR and name == b"__pycache__":
            parent = self._folders[wd]
            self._caches.append(f"{parent}/__pycache__" if parent else "__pycache__")
            return
        # any other event is a change, or may hide one (an overflow of the queue, a watch
        # gone with its folder)
        self._changed = True


class _Inotify:
    """This process's inotify instance, and which watch each event is for."""

    def __init__(self, libc: object, fd: int) -> None:
        self.libc = libc
        self.fd = fd
        self.pid = os.getpid()
        self.owners: dict[int, FolderWatch] = {}

    def add(self, folder: str, subfolders: list[str]) -> FolderWatch | None:
        self.read()  # (events still queued for watches already removed go first)
        add = self.libc.inotify_add_watch  # type: ignore[attr-defined]
        prefix = folder.encode("utf-8", "surrogateescape") + b"/"
        folders: dict[int, str] = {}
        for rel in ["", *subfolders]:
            path = prefix + rel.encode("utf-8", "surrogateescape") if rel else prefix[:-1]
            wd = add(self.fd, path, _MASK)
            if wd < 0 or wd in folders or wd in self.owners:  # (a folder watched already)
                mine = wd >= 0 and wd not in self.owners  # (reached twice: a bind mount)
                self.remove({w: r for w, r in folders.items() if mine or w != wd})
                return None
            folders[wd] = rel
        found = FolderWatch(self, folders)
        for wd in folders:
            self.owners[wd] = found
        return found

    def remove(self, folders: dict[int, str]) -> None:
        for wd in folders:
            self.libc.inotify_rm_watch(self.fd, wd)  # type: ignore[attr-defined]
            self.owners.pop(wd, None)

    def read(self) -> None:
        """Hand every queued event to the watch it is for."""
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:  # (cannot happen on a good descriptor): every watch changed
                for every in list(self.owners.values()):
                    every._changed = True
                return
            if not data:  # (never, on an inotify descriptor)
                return
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                offset = start + length
                owner = self.owners.get(wd)
                if owner is not None:
                    owner._event(wd, mask, data[start:offset].rstrip(b"\0"))
                elif wd == -1:  # the queue overflowed: any watch may have missed a change
                    for other in list(self.owners.values()):
                        other._changed = True


@cache
def _libc() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_instance: _Inotify | None = None


def _kernel() -> _Inotify | None:
    """This process's instance (a forked child makes its own: the parent's is not its)."""
    global _instance
    if _instance is not None and _instance.pid == os.getpid():
        return _instance
    libc = _libc()
    if libc is None:
        return None
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)  # type: ignore[attr-defined]
    if fd < 0:
        return None
    _instance = _Inotify(libc, fd)
    return _instance


def watch(folder: str, subfolders: list[str]) -> FolderWatch | None:
    """Start watching ``folder`` and its ``subfolders`` (paths relative to it: every folder
    in it); None where the kernel cannot (then look at every file instead)."""
    if len(subfolders) >= MAX_FOLDERS:
        return None
    kernel = _kernel()
    if kernel is None:
        return None
    with contextlib.suppress(OSError):
        return kernel.add(folder, subfolders)
    return None
