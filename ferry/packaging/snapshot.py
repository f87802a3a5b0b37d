"""Snapshot a job's ``code`` folder into its job folder at submit time.

The copy respects ``.gitignore`` and ``.ferryignore`` files (at any depth, git's pattern
rules) and always leaves out VCS folders and Python caches, so the job runs the code as it
was when submitted even if the user edits files afterwards. Files keep their mode (made
owner-writable) and modification time. With a :class:`~ferry.packaging.code_store.CodeStore`,
files unchanged since an earlier snapshot are hard links to the store's copy rather than new
copies, and a snapshot of files that all had their times for a second is a link to the
tree every snapshot of those same files shares. A snapshot over the size limit is refused
with the biggest files named.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ferry.errors import FerryError, SpecError
from ferry.packaging.code_store import CodeStore, copy_file
from ferry.units import expand_home, format_size

_ALWAYS_IGNORED = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".ferry",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}
_IGNORE_FILES = (".gitignore", ".ferryignore")


@dataclass(frozen=True)
class Snapshot:
    """What was taken."""

    files: int
    bytes: int
    linked: int = 0  # files linked from the code store: neither read nor copied
    shared: bool = False  # the snapshot is a link to a tree of the code store


def _ignore_spec(folder: str) -> object | None:
    lines: list[str] = []
    for name in _IGNORE_FILES:
        try:
            with open(os.path.join(folder, name), errors="replace") as file:
                lines += file.read().splitlines()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            continue
    if not lines:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _inside(folder: str) -> str:
    """The prefix of the paths inside ``folder`` (strings: pathlib costs a snapshot more
    than the links it makes)."""
    return folder if folder.endswith(os.sep) else folder + os.sep


_LISTINGS = "listings"  # in the code store: what each code folder held at its last snapshot
_LISTING_VERSION = 3

Ident = tuple[int, int, int, int, int, int]  # a file's inode, device, size, times and mode


def _idents(files: list[tuple[str, os.stat_result]]) -> list[Ident]:
    return [
        (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
        for _, st in files
    ]


@dataclass
class _Listing:
    """What a code folder held at its last snapshot (``code-store/listings/<key>``): its
    folders' states, the paths of its files, and, once a snapshot shared a tree, the
    files' identities and that tree's key (the files still have those identities: the
    same tree, without hashing them again)."""

    path: Path
    states: Looked | None  # None: not to be kept (a folder unreadable, or changed just now)
    names: list[str]
    idents: list[Ident] | None = None
    key: str | None = None

    def tree_key(self, files: list[tuple[str, os.stat_result]]) -> str | None:
        """The tree key remembered for ``files``, if they are the files it was worked
        out for, unchanged."""
        if self.key is None or self.idents is None or len(self.idents) != len(files):
            return None
        return self.key if _idents(files) == self.idents else None

    def save(
        self, files: list[tuple[str, os.stat_result]] | None = None, key: str | None = None
    ) -> None:
        """Keep this listing (with ``files``' identities and their tree ``key``, if given)."""
        if self.states is None:
            return
        if key is not None and files is not None:
            self.idents, self.key = _idents(files), key
        import marshal

        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}-{os.urandom(4).hex()}")
            data = (_LISTING_VERSION, self.states, self.names, self.idents, self.key)
            tmp.write_bytes(marshal.dumps(data))
            os.replace(tmp, self.path)


def _listed(
    root: str, skip: set[str], listings: Path
) -> tuple[list[tuple[str, os.stat_result]], _Listing]:
    """:func:`_collect`, with what it found kept per folder: while no folder of the code
    changed (the times of a folder change when an entry is added, removed or renamed in
    it) and no ignore file did, the same paths are taken again, and only stat'ed. A
    folder changed within the last second is looked through again next time."""
    import hashlib
    import marshal

    key = hashlib.sha256("\0".join([root, *sorted(skip)]).encode(errors="surrogateescape"))
    path = listings / key.hexdigest()[:40]
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError):  # (none, or changed)
        version, folders, names, idents, tree = marshal.loads(path.read_bytes())
        if version == _LISTING_VERSION and all(
            _folder_state(folder, ignores) == state for folder, ignores, state in folders
        ):
            prefix = _inside(root)
            files = [(name, os.lstat(prefix + name)) for name in names]
            return files, _Listing(path, folders, names, idents, tree)
    files, states = _collect(root, skip, looked=[])
    racy = time.time_ns() - 1_000_000_000
    if states is not None and not all(state[2] < racy for _, _, state in states):
        states = None
    listing = _Listing(path, states, [n for n, _ in files])
    listing.save()
    return files, listing


def _folder_state(folder: str, names: tuple[str, ...] = _IGNORE_FILES) -> tuple[int, ...]:
    """What tells that ``folder``'s entries, or its ignore files among ``names``, changed.
    (An ignore file that appears or goes changes the folder's own times.)"""
    st = os.stat(folder)
    state = [st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]
    for name in names:
        try:
            own = os.stat(os.path.join(folder, name))
            state += [own.st_ino, own.st_size, own.st_mtime_ns, own.st_ctime_ns]
        except OSError:
            state.append(-1)
    return tuple(state)


Looked = list[tuple[str, tuple[str, ...], tuple[int, ...]]]  # (folder, ignore files, state)


def _collect(
    root: str, skip: set[str], looked: Looked | None = None
) -> tuple[list[tuple[str, os.stat_result]], Looked | None]:
    """Files to copy (path relative to ``root``, lstat), honouring ignore files at every
    level. With ``looked``, also each folder's state (:func:`_folder_state`) as it was
    before it was read (a change while the walk goes on shows next time); None in its
    place when a folder could not be read (whose later change of mode its parent's times
    do not show)."""
    found: list[tuple[str, os.stat_result]] = []
    prefix = len(_inside(root))
    # each entry: (folder, [(prefix of the folder an ignore file belongs to, its spec)])
    stack: list[tuple[str, list[tuple[str, object]]]] = [(root, [])]
    while stack:
        folder, specs = stack.pop()
        if looked is not None:
            ignores = tuple(n for n in _IGNORE_FILES if os.path.lexists(os.path.join(folder, n)))
            try:
                looked.append((folder, ignores, _folder_state(folder, ignores)))
            except OSError:  # gone meanwhile
                looked = None
        own = _ignore_spec(folder)
        if own is not None:
            specs = [*specs, (_inside(folder), own)]
        try:
            entries = list(os.scandir(folder))
        except PermissionError:
            looked = None
            continue
        for entry in entries:
            path = entry.path
            if entry.name in _ALWAYS_IGNORED or path in skip:
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if specs and _ignored(path, is_dir, specs):
                continue
            if is_dir:
                stack.append((path, specs))
            elif entry.is_symlink() or entry.is_file(follow_symlinks=False):
                found.append((path[prefix:], entry.stat(follow_symlinks=False)))
    return found, looked


def _size(st: os.stat_result) -> int:
    return 0 if stat.S_ISLNK(st.st_mode) else st.st_size


def _ignored(path: str, is_dir: bool, specs: list[tuple[str, object]]) -> bool:
    # As git does: the deepest ignore file with a verdict on the path decides, so a
    # `!keep.csv` in sub/.gitignore brings back what `*.csv` at the top left out.
    for base, spec in reversed(specs):
        rel = path[len(base) :] + ("/" if is_dir else "")
        verdict = spec.check_file(rel).include  # type: ignore[attr-defined]
        if verdict is not None:
            return bool(verdict)
    return False


def snapshot_code(
    code: str | Path,
    dest: Path,
    max_bytes: int,
    skip: tuple[Path, ...] = (),
    store: Path | None = None,
) -> Snapshot:
    """Copy ``code`` into ``dest`` (created); refuse if larger than ``max_bytes``.

    Args:
        code: the folder to snapshot.
        dest: the snapshot's folder (created, or a link to a shared tree; its parents
            are created too).
        max_bytes: the largest snapshot accepted.
        skip: folders inside ``code`` left out (FERRY_HOME, when it is there).
        store: the root of a code store (on the file system of ``dest``) to link unchanged
            files from; None copies every file.
    """
    root = expand_home(code).absolute()
    if not root.exists():
        raise SpecError(f"code folder {code} does not exist", "check code: in the spec, or --code")
    if not root.is_dir():
        raise SpecError(
            f"code {code} is a file, not a folder", "set code: to the folder holding it"
        )
    skipped = {str(p.absolute()) for p in skip}
    listing = None
    if store is not None:
        files, listing = _listed(str(root), skipped, Path(store) / _LISTINGS)
    else:
        files = _collect(str(root), skipped)[0]
    total = sum(_size(st) for _, st in files)
    if total > max_bytes:
        biggest = sorted(files, key=lambda f: -_size(f[1]))[:3]
        names = ", ".join(f"{p} ({format_size(_size(st))})" for p, st in biggest)
        raise FerryError(
            f"the code folder {root} holds {format_size(total)} to snapshot, over the "
            f"{format_size(max_bytes)} limit; biggest: {names}",
            "list data and outputs in .ferryignore (use inputs: for data), or raise the limit "
            "with: ferry config set snapshot.max_size 1GB",
        )
    kept = CodeStore(store) if store is not None else None
    if kept is not None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        key = listing.tree_key(files) if listing is not None else None
        if key is None:
            key = kept.tree_key(str(root), files)
            if key is not None and listing is not None:
                listing.save(files, key)
        shared = kept.share(str(root), files, str(dest), key) if key is not None else None
        if shared is not None:
            kept.prune()
            return Snapshot(files=len(files), bytes=total, linked=shared, shared=True)
    dest.mkdir(parents=True, exist_ok=True)
    made: set[str] = set()
    linked = 0
    for rel, st in files:
        src = os.path.join(root, rel)
        target = os.path.join(dest, rel)
        parent = os.path.dirname(target)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        try:
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), target)
            elif kept is not None:
                linked += kept.place(src, st, target)
            else:
                copy_file(src, target, st)
        except OSError as exc:
            raise FerryError(f"cannot copy {src} into the job's snapshot: {exc.strerror}") from None
    if kept is not None:
        kept.prune()
    return Snapshot(files=len(files), bytes=total, linked=linked)


def retake(code: str | Path, snapshot: Path, store: Path, skip: tuple[Path, ...] = ()) -> bool:
    """After :class:`~ferry.packaging.code_store.SnapshotChanged`: build the shared tree
    ``snapshot`` links to anew from the code folder it was taken from, if that folder still
    holds exactly the files it was taken from (each with the same identity). The job's
    ``snapshot`` names the tree by its path, so it then finds the new tree. Returns whether
    it was built."""
    root = str(expand_home(code).absolute())
    tree = os.path.realpath(snapshot)
    try:
        files, _ = _listed(root, {str(p.absolute()) for p in skip}, Path(store) / _LISTINGS)
    except OSError:  # the code folder is gone
        return False
    kept = CodeStore(store)
    key = kept.tree_key(root, files)
    if key is None or key != os.path.basename(tree):  # changed since: not what was taken
        return False
    probe = snapshot.with_name(f".{snapshot.name}.retake-{os.getpid()}")
    try:
        built = kept.share(root, files, str(probe), key)
        return built is not None and os.path.realpath(probe) == tree and os.path.isdir(tree)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe)
