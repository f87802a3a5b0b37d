"""The code store: unchanged files are linked, not copied again; a changed file is taken
anew; a job's copy never changes under it; a snapshot killed midway leaves nothing broken."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.packaging.code_store import (
    PRUNE_AFTER_S,
    RECORD,
    CodeStore,
    SnapshotChanged,
    copy_snapshot,
)
from ferry.packaging.snapshot import retake, snapshot_code
from tests.packaging.test_snapshot import copied, tree

PAST_NS = 1_600_000_000 * 10**9  # a modification time long gone (2020): not "just written"


def age(*paths: Path, mtime_ns: int = PAST_NS) -> None:
    """Give files an old modification time, as files not edited for a while have."""
    for path in paths:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def snap(src: Path, dest: Path, store: Path) -> int:
    """Snapshot ``src`` into ``dest`` through ``store``; returns how many files were linked."""
    return snapshot_code(src, dest, 10**9, store=store).linked


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    tree(root, {"train.py": "print('v1')\n", "pkg/model.py": "M = 1\n", "data.txt": "abc"})
    age(*(p for p in root.rglob("*") if p.is_file()))
    return root


def test_unchanged_files_are_linked_not_copied(src: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert snap(src, tmp_path / "a", store) == 0  # first time: copied into the store
    assert snap(src, tmp_path / "b", store) == 3
    for name in ("train.py", "pkg/model.py", "data.txt"):
        first, second = (tmp_path / "a" / name).stat(), (tmp_path / "b" / name).stat()
        assert first.st_ino == second.st_ino  # one copy, two snapshots
        assert second.st_nlink == 2  # the store's entry and the tree both snapshots share
        assert first.st_ino != (src / name).stat().st_ino  # never the user's own file
        assert (tmp_path / "b" / name).read_bytes() == (src / name).read_bytes()


@pytest.mark.parametrize(
    "change",
    ["same size, new mtime", "same mtime, new size", "same size and mtime", "replaced"],
)
def test_a_changed_file_is_taken_anew(src: Path, tmp_path: Path, change: str) -> None:
    store = tmp_path / "store"
    snap(src, tmp_path / "a", store)
    path = src / "train.py"
    if change == "same size, new mtime":
        path.write_text("print('v2')\n")
        age(path, mtime_ns=PAST_NS + 10**9)
    elif change == "same mtime, new size":
        path.write_text("print('v22')\n")
        age(path)
    elif change == "same size and mtime":  # restored times (cp -p, rsync -t): ctime tells
        path.write_text("print('v2')\n")
        age(path)
    else:  # an editor's save: a new file renamed over the old one
        (src / "new.tmp").write_text("print('v2')\n")
        age(src / "new.tmp")
        os.replace(src / "new.tmp", path)
    assert snap(src, tmp_path / "b", store) == 2
    assert (tmp_path / "a" / "train.py").read_text() == "print('v1')\n"
    assert (tmp_path / "b" / "train.py").read_text() == path.read_text()
    assert snap(src, tmp_path / "c", store) == 3  # and the new version is kept from now on
    assert (tmp_path / "c" / "train.py").read_text() == path.read_text()


def test_editing_the_source_after_the_snapshot_leaves_the_job_copy(
    src: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    snap(src, tmp_path / "a", store)
    snap(src, tmp_path / "b", store)
    with open(src / "train.py", "r+") as file:  # edited in place: the same inode
        file.write("print('v9')\n")
    assert (tmp_path / "a" / "train.py").read_text() == "print('v1')\n"
    assert (tmp_path / "b" / "train.py").read_text() == "print('v1')\n"
    assert snap(src, tmp_path / "c", store) == 2
    assert (tmp_path / "c" / "train.py").read_text() == "print('v9')\n"


def test_files_written_just_now_are_copied_every_time(tmp_path: Path) -> None:
    src, store = tmp_path / "src", tmp_path / "store"
    tree(src, {"fresh.py": "x = 1\n"})  # within one clock tick of another write
    assert snap(src, tmp_path / "a", store) == 0
    assert snap(src, tmp_path / "b", store) == 0
    assert (tmp_path / "a" / "fresh.py").stat().st_ino != (
        tmp_path / "b" / "fresh.py"
    ).stat().st_ino
    assert not any((store / "objects").rglob("*/*"))


def test_modes_and_times_are_kept(src: Path, tmp_path: Path) -> None:
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o750)
    (src / "ro.txt").write_text("r")
    (src / "ro.txt").chmod(0o444)
    age(src / "run.sh", src / "ro.txt")
    store = tmp_path / "store"
    for dest in (tmp_path / "a", tmp_path / "b"):
        snap(src, dest, store)
        assert (dest / "run.sh").stat().st_mode & 0o777 == 0o750
        assert (dest / "ro.txt").stat().st_mode & 0o777 == 0o644  # owner-writable, as before
        assert (dest / "train.py").stat().st_mtime_ns == PAST_NS
    (src / "run.sh").chmod(0o700)  # a new mode is a new entry
    snap(src, tmp_path / "c", store)
    assert (tmp_path / "c" / "run.sh").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "b" / "run.sh").stat().st_mode & 0o777 == 0o750


# Snapshots on a thread and kills itself with SIGKILL as soon as a copy into the store is
# under way (a 48 MB file takes long enough to copy for the poll to see it).
_SNAPSHOT_KILLED_MIDWAY = """
import os, signal, sys, threading
from pathlib import Path
from ferry.packaging.snapshot import snapshot_code
src, dest, store = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
worker = threading.Thread(target=snapshot_code, args=(src, dest, 10**10, (), store))
worker.start()
while worker.is_alive():
    if os.path.isdir(store / "tmp") and os.listdir(store / "tmp"):
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_snapshot_killed_midway_leaves_nothing_broken(tmp_path: Path) -> None:
    src, store = tmp_path / "src", tmp_path / "store"
    blob = os.urandom(1 << 20) * 48
    tree(src, {"weights.bin": blob, **{f"m{i:03}.py": f"x = {i}\n" for i in range(100)}})
    age(*src.iterdir())
    argv = [str(src), str(tmp_path / "a"), str(store)]
    killed = subprocess.run([sys.executable, "-c", _SNAPSHOT_KILLED_MIDWAY, *argv], timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert any((store / "tmp").iterdir())  # the copy it was making is left half done
    for number, dest in enumerate((tmp_path / "b", tmp_path / "c")):
        linked = snap(src, dest, store)
        assert copied(dest) == {p.name for p in src.iterdir()}
        for path in src.iterdir():
            assert (dest / path.name).read_bytes() == path.read_bytes()
        assert number == 0 or linked == 101


def test_prune_removes_unlinked_entries_and_crashed_copies(src: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snap(src, tmp_path / "a", store)
    (store / "tmp" / "123-crashed").write_text("half")
    kept = CodeStore(store)
    assert kept.prune(after=0) == 1  # the crashed copy; the tree is used, its entries linked
    (tmp_path / "a").unlink()  # the job's snapshot gone: its tree is used no more
    assert kept.prune(after=0) == 1  # the tree, which held the last links to the entries
    assert kept.prune(after=0) == 3  # no snapshot links them any more
    assert snap(src, tmp_path / "b", store) == 0


def test_prune_runs_at_most_once_per_period(src: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snap(src, tmp_path / "a", store)  # prunes (the first time), then not for an hour
    (store / "tmp" / "123-crashed").write_text("half")
    assert CodeStore(store).prune(after=PRUNE_AFTER_S) == 0
    assert (store / "tmp" / "123-crashed").exists()


def test_snapshots_of_the_same_files_share_one_tree(src: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    jobs = [tmp_path / "jobs" / name / "code" for name in ("a", "b", "c")]
    for code in jobs:
        snapshot_code(src, code, 10**9, store=store)
    tree = Path(os.readlink(jobs[0]))
    assert tree.parent == store / "trees"
    assert all(code.is_symlink() and Path(os.readlink(code)) == tree for code in jobs)
    assert copied(jobs[2]) == {"train.py", "pkg/model.py", "data.txt"}
    companion = Path(f"{tree}.link")
    assert companion.lstat().st_nlink == 4  # its own name and one per job
    shutil.rmtree(tmp_path / "jobs" / "a")  # a job folder removed
    assert companion.lstat().st_nlink == 3
    (src / "new.py").write_text("n = 1\n")
    age(src / "new.py")
    other = tmp_path / "jobs" / "d" / "code"
    snapshot_code(src, other, 10**9, store=store)
    assert os.readlink(other) != str(tree)  # other files, another tree
    assert (other / "new.py").read_text() == "n = 1\n"


def test_an_unused_tree_is_pruned_and_a_used_one_kept(src: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    kept, dropped = tmp_path / "kept" / "code", tmp_path / "dropped" / "code"
    snapshot_code(src, kept, 10**9, store=store)
    tree = Path(os.readlink(kept))
    (src / "more.py").write_text("m = 2\n")
    age(src / "more.py")
    snapshot_code(src, dropped, 10**9, store=store)
    gone = Path(os.readlink(dropped))
    dropped.unlink()  # its job folder was removed
    CodeStore(store).prune(after=0)
    assert not gone.exists() and not Path(f"{gone}.link").exists()
    assert tree.is_dir() and (kept / "train.py").read_text() == "print('v1')\n"
    kept.unlink()
    CodeStore(store).prune(after=0)
    assert not tree.exists()
    CodeStore(store).prune(after=0)  # its entries, unlinked just now, at the next prune
    assert not any((store / "objects").rglob("*/*"))


@pytest.mark.parametrize(
    ("write", "named"),
    [
        ("train.py", "train.py"),
        ("pkg/__pycache__/m.pyc", "pkg/__pycache__"),
        ("out.txt", "out.txt"),
    ],
)
def test_a_tree_written_through_a_job_is_found_when_read_and_taken_again(
    src: Path, tmp_path: Path, write: str, named: str
) -> None:
    """Snapshots trust a tree once its record is written; a copy made from it checks it.
    A changed tree is set aside, and built again from the code folder, which still holds
    what was taken: every job linked to it then sees the files as they were taken."""
    store = tmp_path / "store"
    first, later = tmp_path / "a" / "code", tmp_path / "b" / "code"
    snapshot_code(src, first, 10**9, store=store)
    written = first / write  # into the tree, through a job's link
    written.parent.mkdir(exist_ok=True)
    written.write_text("changed\n")
    snapshot_code(src, later, 10**9, store=store)
    assert later.is_symlink()  # linked: the files are not looked at again
    work = tmp_path / "work"
    with pytest.raises(SnapshotChanged) as caught:
        copy_snapshot(later, work)
    assert caught.value.name == named and not work.exists()
    assert caught.value.kept and (Path(caught.value.kept) / write).read_text() == "changed\n"
    assert "submit the job again" in str(caught.value)
    assert not first.exists()  # the tree is out of use
    assert retake(src, later, store)
    copy_snapshot(later, work)
    assert copied(work) == copied(first) == {"train.py", "pkg/model.py", "data.txt"}
    assert (first / "train.py").read_text() == "print('v1')\n"
    companion = Path(f"{os.path.realpath(first)}.link")
    assert companion.lstat().st_nlink == 3  # the jobs on the old tree count on the new one
    CodeStore(store).prune(after=0)
    assert (later / "train.py").read_text() == "print('v1')\n"  # (used: not pruned)


def test_a_job_whose_tree_is_gone_has_it_built_again(src: Path, tmp_path: Path) -> None:
    """A job linked to a tree that another job found changed and set aside (its new tree
    not built yet, or built and pruned since) copies nothing it should not: it asks for
    the tree to be built again."""
    store = tmp_path / "store"
    code = tmp_path / "a" / "code"
    snapshot_code(src, code, 10**9, store=store)
    tree = os.path.realpath(code)
    os.rename(tree, tmp_path / "elsewhere")
    with pytest.raises(SnapshotChanged, match="snapshot is gone") as caught:
        copy_snapshot(code, tmp_path / "work")
    assert caught.value.name is None and not (tmp_path / "work").exists()
    assert retake(src, code, store)
    copy_snapshot(code, tmp_path / "work")
    assert copied(tmp_path / "work") == {"train.py", "pkg/model.py", "data.txt"}


def test_a_tree_is_not_taken_again_from_a_code_folder_changed_since(
    src: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    code = tmp_path / "a" / "code"
    snapshot_code(src, code, 10**9, store=store)
    (code / "train.py").write_text("print('mine')\n")
    (src / "train.py").write_text("print('v2')\n")  # the user went on editing
    age(src / "train.py")
    with pytest.raises(SnapshotChanged):
        copy_snapshot(code, tmp_path / "work")
    assert not retake(src, code, store)
    assert not code.exists()  # the job cannot start: what it was given is gone
    companion = Path(f"{os.path.realpath(code)}.link")
    CodeStore(store).prune(after=0)
    assert companion.is_symlink()  # the job still counts on it
    code.unlink()  # its job folder removed
    CodeStore(store).prune(after=0)
    assert not companion.is_symlink()


def test_a_tree_made_before_records_is_looked_at_when_linked(src: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = tmp_path / "a" / "code"
    snapshot_code(src, first, 10**9, store=store)
    record = Path(f"{os.path.realpath(first)}{RECORD}")
    record.unlink()  # (as an older Ferry made it)
    (first / "train.py").write_text("print('mine')\n")
    fresh = tmp_path / "b" / "code"
    snapshot_code(src, fresh, 10**9, store=store)
    assert not fresh.is_symlink()  # a copy of its own
    assert (fresh / "train.py").read_text() == "print('v1')\n"
    assert not record.exists()
    other = tmp_path / "c" / "src"
    shutil.copytree(src, other, copy_function=shutil.copy2)
    snapshot_code(other, tmp_path / "c" / "code", 10**9, store=store)
    made = Path(f"{os.path.realpath(tmp_path / 'c' / 'code')}{RECORD}")
    Path(made).unlink()
    snapshot_code(other, tmp_path / "d" / "code", 10**9, store=store)  # intact: recorded
    assert made.exists()


def test_the_listing_of_an_unchanged_folder_is_reused_and_any_change_is_seen(
    src: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    run = iter(range(100))

    def snap_files() -> set[str]:
        dest = tmp_path / f"s{next(run)}" / "code"
        snapshot_code(src, dest, 10**9, store=store)
        return copied(dest)

    def settle(*paths: Path) -> None:  # folders changed within the last second are re-read
        age(*paths, mtime_ns=PAST_NS)

    settle(src, src / "pkg")
    assert snap_files() == {"train.py", "pkg/model.py", "data.txt"}
    assert len(list((store / "listings").iterdir())) == 1
    (src / "pkg" / "extra.py").write_text("e = 1\n")  # a new file in a sub-folder
    age(src / "pkg" / "extra.py")
    settle(src / "pkg")  # (an older time than before: only a changed time counts)
    assert "pkg/extra.py" in snap_files()
    (src / ".gitignore").write_text("data.txt\n")  # an ignore file appears
    age(src / ".gitignore")
    settle(src)
    assert snap_files() == {"train.py", "pkg/model.py", "pkg/extra.py", ".gitignore"}
    with open(src / ".gitignore", "w") as file:  # edited in place: the folder keeps its times
        file.write("*.py\n")
    age(src / ".gitignore")
    assert snap_files() == {"data.txt", ".gitignore"}
