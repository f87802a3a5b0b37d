"""The code snapshot: ignore files honoured at every depth, oversized folders refused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ferry.errors import FerryError, SpecError
from ferry.packaging.snapshot import snapshot_code


def tree(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def copied(dest: Path) -> set[str]:
    return {
        p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() or p.is_symlink()
    }


@pytest.mark.parametrize("through_store", [False, True])
def test_ignore_files_at_every_level(tmp_path: Path, through_store: bool) -> None:
    """Exact, with or without the code store (twice through it: copied, then linked)."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    tree(
        src,
        {
            "train.py": "print(1)",
            ".gitignore": "*.log\ndata/\n!keep.log\n",
            ".ferryignore": "secrets.env\n",
            "secrets.env": "X=1",
            "run.log": "x",
            "keep.log": "kept",
            "data/big.bin": "x" * 100,
            "pkg/model.py": "m",
            "pkg/.gitignore": "generated/\n",
            "pkg/generated/out.txt": "x",
            "pkg/sub/deep.py": "d",
            ".git/HEAD": "ref",
            "pkg/__pycache__/model.cpython-311.pyc": "x",
        },
    )
    (src / "link.txt").symlink_to("keep.log")
    wanted = {"train.py", ".gitignore", ".ferryignore", "keep.log", "link.txt"}
    wanted |= {"pkg/model.py", "pkg/.gitignore", "pkg/sub/deep.py"}
    store = tmp_path / "store" if through_store else None
    old = 1_600_000_000 * 10**9  # not just written: the store keeps such files
    for path in src.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, ns=(old, old))
    for _ in range(2 if through_store else 1):
        if dest.is_symlink():  # a tree shared through the store
            dest.unlink()
        shutil.rmtree(dest, ignore_errors=True)
        result = snapshot_code(src, dest, 10**6, store=store)
        assert copied(dest) == wanted
        assert result.files == 8
        for name in wanted:
            assert (dest / name).read_bytes() == (src / name).read_bytes()
    assert result.linked == (7 if through_store else 0)


def test_a_deeper_ignore_file_can_bring_files_back(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    tree(
        src,
        {
            ".gitignore": "*.csv\n",
            "top.csv": "x",
            "sub/.gitignore": "!keep.csv\n",
            "sub/keep.csv": "k",
            "sub/drop.csv": "d",
        },
    )
    snapshot_code(src, dest, 10**6)
    assert copied(dest) == {".gitignore", "sub/.gitignore", "sub/keep.csv"}


def test_modes_and_symlinks_are_kept(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    tree(src, {"run.sh": "#!/bin/sh\necho hi\n", "a.txt": "a"})
    (src / "run.sh").chmod(0o755)
    (src / "link.txt").symlink_to("a.txt")
    snapshot_code(src, dest, 10**6)
    assert (dest / "run.sh").stat().st_mode & 0o111
    assert (dest / "link.txt").is_symlink() and (dest / "link.txt").read_text() == "a"


def test_oversized_snapshot_names_the_biggest_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    tree(src, {"train.py": "x", "weights.bin": b"\0" * 50_000, "data/huge.npy": b"\0" * 80_000})
    with pytest.raises(FerryError) as info:
        snapshot_code(src, tmp_path / "dest", 100_000)
    message = str(info.value)
    assert "130.0 KB" in message and "100.0 KB limit" in message
    assert message.index("data/huge.npy") < message.index("weights.bin")
    assert ".ferryignore" in message and "snapshot.max_size" in message
    assert not (tmp_path / "dest").exists()


def test_missing_or_file_code_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        snapshot_code(tmp_path / "nope", tmp_path / "dest", 10)
    (tmp_path / "file.py").write_text("x")
    with pytest.raises(SpecError, match="is a file"):
        snapshot_code(tmp_path / "file.py", tmp_path / "dest", 10)


def test_job_runs_the_code_as_submitted(tmp_path: Path, home: Path, project: Path) -> None:
    from tests.conftest import ferry, submit, wait_for

    (project / "gate.py").write_text(
        "import os, time\n"
        "p = os.path.join(os.environ['FERRY_TEST_TMP'], 'go')\n"
        "while not os.path.exists(p): time.sleep(0.05)\n"
        "print(open('version.txt').read())\n"
    )
    (project / "version.txt").write_text("v1")
    job_id = submit("--", "python", "gate.py", cwd=project)
    (project / "version.txt").write_text("v2")  # edited after submitting
    (tmp_path / "go").write_text("")
    wait_for(lambda: ferry("wait", job_id).returncode == 0, 60, "the job")
    assert ferry("logs", job_id).stdout == "v1\n"
