"""Working folders kept for the next attempt: only one a job left exactly as it was given is
reused, and the attempt that takes it cannot tell it from a fresh copy."""

from __future__ import annotations

import mmap
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ferry.packaging.snapshot import snapshot_code
from ferry.storage.workdir import POOL_SIZE, fresh_workdir, recycle
from tests.conftest import ferry, ferry_json
from tests.packaging.test_code_store import PAST_NS, age
from tests.packaging.test_snapshot import copied, tree

FILES = {"train.py": "print('hi')\n", "pkg/model.py": "M = 1\n", "data/x.csv": "1,2\n"}


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A job's code snapshot: a link to a tree of the code store."""
    src = tmp_path / "src"
    tree(src, FILES)
    age(*(p for p in src.rglob("*") if p.is_file()))
    dest = tmp_path / "job" / "code"
    snapshot_code(src, dest, 10**9, store=tmp_path / "store")
    assert dest.is_symlink()
    return dest


def pool_of(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "store" / "work").glob("*/*") if p.is_dir()]


def test_a_folder_left_as_given_is_taken_by_the_next_attempt(code: Path, tmp_path: Path) -> None:
    first = tmp_path / "first" / "work"
    first.parent.mkdir()
    given = fresh_workdir(code, first)
    assert copied(first) == set(FILES)
    (first / "pkg" / "__pycache__").mkdir()  # what `import pkg.model` leaves: dropped
    (first / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    inode = first.stat().st_ino
    assert recycle(code, first, given)
    assert not first.exists() and [p.stat().st_ino for p in pool_of(tmp_path)] == [inode]

    second = tmp_path / "second" / "work"
    second.parent.mkdir()
    fresh_workdir(code, second)
    assert second.stat().st_ino == inode  # taken, not copied
    assert copied(second) == set(FILES)
    for name, text in FILES.items():
        assert (second / name).read_text() == text
    assert pool_of(tmp_path) == []


def _write(work: Path) -> None:
    (work / "train.py").write_text("print('hi')\n")  # the same bytes, written again


def _touch(work: Path) -> None:
    os.utime(work / "data" / "x.csv", ns=(1, 1))


def _chmod(work: Path) -> None:
    os.chmod(work / "train.py", 0o700)


def _add(work: Path) -> None:
    (work / "data" / "out.csv").write_text("new")


def _remove(work: Path) -> None:
    (work / "pkg" / "model.py").unlink()


def _rename_back(work: Path) -> None:
    os.rename(work / "train.py", work / "t.py")
    os.rename(work / "t.py", work / "train.py")


def _replace(work: Path) -> None:
    (work / "new.py").write_text("print('hi')\n")
    os.replace(work / "new.py", work / "train.py")


def _empty_folder(work: Path) -> None:
    (work / "runs").mkdir()


def _mapped_write(work: Path) -> None:
    """A write through a shared memory map: no write() call at all."""
    with open(work / "pkg" / "model.py", "r+b") as file, mmap.mmap(file.fileno(), 0) as mem:
        mem[0:1] = b"N"


def _replace_folder(work: Path) -> None:
    """The working folder moved away and another one, with the same files, put in its place."""
    copy = work.with_name("copy")
    shutil.copytree(work, copy, copy_function=shutil.copy2)
    work.rename(work.with_name("moved"))
    copy.rename(work)


CHANGES = [
    _write,
    _touch,
    _chmod,
    _add,
    _remove,
    _rename_back,
    _replace,
    _empty_folder,
    _mapped_write,
    _replace_folder,
]


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "file-by-file"])
@pytest.mark.parametrize("change", CHANGES)
def test_a_folder_a_job_changed_in_any_way_is_never_reused(
    code: Path, tmp_path: Path, change: Callable[[Path], None], watched: bool
) -> None:
    """Both ways of telling: the kernel's watch (Linux), and looking at each file where
    there is none."""
    work = tmp_path / "work"
    given = fresh_workdir(code, work)
    assert given is not None
    assert (given.watch is not None) == sys.platform.startswith("linux")
    if not watched:
        given.close()
    change(work)
    assert not recycle(code, work, given)
    assert work.is_dir() and pool_of(tmp_path) == []  # left where it was, for a look


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "file-by-file"])
def test_a_folder_only_read_is_kept_either_way(code: Path, tmp_path: Path, watched: bool) -> None:
    work = tmp_path / "work"
    given = fresh_workdir(code, work)
    assert given is not None
    if not watched:
        given.close()
    for path in work.rglob("*"):
        if path.is_file():
            path.read_bytes()
    os.listdir(work / "pkg")
    (work / "pkg" / "__pycache__").mkdir()
    assert recycle(code, work, given)
    assert not (pool_of(tmp_path)[0] / "pkg" / "__pycache__").exists()


@pytest.mark.parametrize("change", [_add, _remove, _rename_back])
def test_a_change_is_seen_in_a_folder_whose_time_was_noted(
    code: Path, tmp_path: Path, change: Callable[[Path], None]
) -> None:
    work = tmp_path / "work"
    assert recycle(code, work, fresh_workdir(code, work))
    time.sleep(1.1)  # the copy's folders settle: the next look notes their times
    assert recycle(code, work, fresh_workdir(code, work))
    given = fresh_workdir(code, work)  # (taken again: listed only where a time moved)
    assert pool_of(tmp_path) == []
    change(work)
    assert not recycle(code, work, given)


def test_the_pool_holds_a_few_folders_per_tree(code: Path, tmp_path: Path) -> None:
    made = []
    for i in range(POOL_SIZE + 2):
        work = tmp_path / f"w{i}"
        made.append((work, fresh_workdir(code, work)))
    kept = [recycle(code, work, given) for work, given in made]
    assert kept == [True] * POOL_SIZE + [False, False]


def test_a_change_in_one_folder_is_not_blamed_on_another(code: Path, tmp_path: Path) -> None:
    """One watching instance serves the whole process: each event goes to its own folder."""
    made = [(tmp_path / name, fresh_workdir(code, tmp_path / name)) for name in "abc"]
    _write(made[1][0])
    assert [recycle(code, work, given) for work, given in made] == [True, False, True]


def test_keeping_a_folder_again_and_again_creates_and_removes_no_file(
    code: Path, tmp_path: Path
) -> None:
    """A listing is written over in place: every file created or removed costs the next
    file created a scan on some file systems (ext4 without a journal)."""
    work = tmp_path / "work"
    assert recycle(code, work, fresh_workdir(code, work))
    listings = list((tmp_path / "store" / "work").glob("*/*.files"))
    inodes = [p.stat().st_ino for p in listings]
    age(*listings)  # (a write would give it the time of now)
    for _ in range(3):
        assert recycle(code, work, fresh_workdir(code, work))
    assert len(listings) == 1 and list(listings[0].parent.glob("*.files")) == listings
    assert [p.stat().st_ino for p in listings] == inodes
    if sys.platform.startswith("linux"):  # (watched: the listing still holds, not rewritten)
        assert [p.stat().st_mtime_ns for p in listings] == [PAST_NS]


def test_a_folder_taken_with_another_folders_listing_is_listed_anew(
    code: Path, tmp_path: Path
) -> None:
    """Two jobs giving back at once, or one taking a folder before its listing is written:
    a listing that names another folder is not used (it would make the job's folder look
    changed when it ends, and a copy would be made for the next job)."""
    made = []
    for name in ("a", "b"):
        work = tmp_path / name / "work"
        work.parent.mkdir()
        made.append((work, fresh_workdir(code, work)))
    assert all(recycle(code, work, given) for work, given in made)
    zero, one = (next((tmp_path / "store" / "work").glob(f"*/{i}.files")) for i in (0, 1))
    swapped = one.read_bytes(), zero.read_bytes()
    zero.write_bytes(swapped[0])
    one.write_bytes(swapped[1])
    work = tmp_path / "c" / "work"
    work.parent.mkdir()
    given = fresh_workdir(code, work)
    assert given is not None and copied(work) == set(FILES)
    assert recycle(code, work, given)


def test_a_job_runs_in_a_kept_folder_as_in_a_fresh_copy(home: Path, project: Path) -> None:
    tree(project, {**FILES, "ls.py": "import os\nprint(sorted(os.listdir('.')))\n"})
    age(*(p for p in project.rglob("*") if p.is_file()), project / "pkg", project / "data")
    runs = [ferry("run", "--", sys.executable, "ls.py", cwd=project) for _ in range(3)]
    assert [r.stdout for r in runs] == ["['data', 'ls.py', 'pkg', 'train.py']\n"] * 3
    jobs = ferry_json("jobs")
    assert all(not (home / "jobs" / job["id"] / "work").exists() for job in jobs)
    assert len(list((home / "code-store" / "work").glob("*/*.files"))) == 1


def test_a_job_from_a_snapshot_changed_under_it_runs_what_was_taken(
    home: Path, project: Path
) -> None:
    """Someone edits a job's ``code`` folder, which is the tree every snapshot of the same
    files shares: the next job made from it finds that out as its folder is copied, and
    runs the files as they are in the code folder, unchanged since."""
    script = "import os\nopen('out.txt', 'w').write('x')\nprint(open('train.py').read())\n"
    tree(project, {**FILES, "show.py": script})
    age(*(p for p in project.rglob("*") if p.is_file()), project / "pkg", project / "data")
    first = ferry("run", "--", sys.executable, "show.py", cwd=project)  # (its folder changed:
    assert first.returncode == 0, first.stderr  # not kept, so the next one copies the tree)
    job = ferry_json("jobs")[0]["id"]
    (home / "jobs" / job / "code" / "train.py").write_text("print('edited')\n")
    second = ferry("run", "--", sys.executable, "show.py", cwd=project)
    assert second.returncode == 0, second.stderr
    assert "print('hi')" in second.stdout
    latest = ferry_json("jobs")[0]["id"]
    events = [e["message"] for e in ferry_json("status", latest)["events"]]
    assert any("changed after it was taken (train.py)" in e for e in events), events


def test_a_watch_inherited_by_a_forked_process_tells_nothing(code: Path, tmp_path: Path) -> None:
    """A supervisor forks others; their copy of a watch reads a descriptor number the fork
    closed (and may have reused): it must not be taken as the folder unchanged."""
    work = tmp_path / "work"
    given = fresh_workdir(code, work)
    assert given is not None and given.watch is not None
    pid = os.fork()
    if pid == 0:  # (the child answers through its exit code)
        os._exit(0 if given.watch.unchanged() is False else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert recycle(code, work, given)  # the parent's watch is untouched
