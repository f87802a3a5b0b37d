"""A job's bundle for another machine: Ferry's own wheel (installed here by real pip), and
the code and wheel uploaded under content hashes to S3 (moto's server, over HTTP) and to
a folder; unchanged, nothing is sent."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ferry.errors import FerryError
from ferry.packaging import bundle
from ferry.packaging.wheel import ferry_wheel


def test_ferrys_wheel_installs_with_pip_and_is_made_once(home: Path, tmp_path: Path) -> None:
    import ferry

    wheel = ferry_wheel()
    assert wheel.name == f"ferry-{ferry.__version__}-py3-none-any.whl"
    made = wheel.stat()
    kept = ferry_wheel().stat()  # (kept: not made again)
    assert (kept.st_ino, kept.st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "ferry/runtime/__init__.py" in names and not any("__pycache__" in n for n in names)
    dist = f"ferry-{ferry.__version__}.dist-info"
    meta = archive.read(f"{dist}/METADATA").decode()
    assert "Requires-Dist: pydantic" in meta and f"Version: {ferry.__version__}" in meta
    assert "ferry = ferry.cli.main:main" in archive.read(f"{dist}/entry_points.txt").decode()
    for name, digest, size in csv.reader(io.StringIO(archive.read(f"{dist}/RECORD").decode())):
        if name.endswith("RECORD"):
            continue
        data = archive.read(name)
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={want}", len(data)), name
    first = wheel.read_bytes()
    wheel.unlink()
    assert ferry_wheel().read_bytes() == first  # the same files make the same bytes
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    done = subprocess.run(
        [*pip, "--disable-pip-version-check", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    show = "import ferry, ferry.runtime; print(ferry.__version__, ferry.__file__)"
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {show}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    version, where = out.stdout.split()
    assert version == ferry.__version__ and where.startswith(str(target))


def _code(folder: Path) -> Path:
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    (folder / "run.sh").write_text("#!/bin/sh\necho run\n")
    (folder / "run.sh").chmod(0o755)
    (folder / "data").mkdir()
    (folder / "data" / "big.bin").write_bytes(os.urandom(300_000))
    (folder / "requirements.txt").write_text("numpy\n")
    (folder / "data" / "latest.bin").symlink_to("big.bin")  # a link inside: kept
    return folder


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_the_code_and_the_wheel_go_up_once_under_their_hashes(
    home: Path,
    tmp_path: Path,
    where: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = _code(tmp_path / "code")
    if where == "s3":
        import s3fs

        endpoint = request.getfixturevalue("s3_endpoint")
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "FERRY_HOME": str(home),
        }.items():
            monkeypatch.setenv(key, value)
        from ferry import config

        config.set_value("storage.s3.endpoint_url", endpoint)
        s3 = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
        bucket = f"b{os.urandom(4).hex()}"
        s3.mkdir(bucket)
        root = f"s3://{bucket}/team"

        def fetch(uri: str, to: Path) -> None:
            s3.invalidate_cache()
            s3.get_file(uri.removeprefix("s3://"), str(to))
    else:
        root = str(tmp_path / "bucket")

        def fetch(uri: str, to: Path) -> None:
            to.write_bytes(Path(uri).read_bytes())

    lines: list[str] = []
    first = bundle.upload(code, root, lines.append)
    assert first.code.startswith(f"{root}/.ferry/code/") and first.code.endswith(".tar.gz")
    assert first.wheel.endswith(".whl") and "/.ferry/wheels/" in first.wheel
    assert first.sent > 300_000 and any("uploading the code" in line for line in lines)
    # unchanged: nothing sent, the same names
    again = bundle.upload(code, root)
    assert again == bundle.Bundle(first.code, first.wheel, 0)
    # what arrives is the folder: paths, bytes, the executable bit
    archive = tmp_path / "got.tar.gz"
    fetch(first.code, archive)
    unpacked = tmp_path / "unpacked"
    bundle.extract(archive, unpacked)
    assert os.readlink(unpacked / "data" / "latest.bin") == "big.bin"
    for path in code.rglob("*"):
        if path.is_file() and not path.is_symlink():
            twin = unpacked / path.relative_to(code)
            assert twin.read_bytes() == path.read_bytes(), path
            assert os.access(twin, os.X_OK) == os.access(path, os.X_OK), path
    # one file changed: a new code archive; the wheel is not sent again
    (code / "train.py").write_text("print('changed')\n")
    changed = bundle.upload(code, root)
    assert changed.code != first.code and changed.wheel == first.wheel
    assert 0 < changed.sent < first.sent  # (the archive only)
    # for a bare machine, the bootstrap beside the wheel; then, again, nothing sent
    beside = first.wheel.rsplit("/", 1)[0] + "/bootstrap.py"
    booted = bundle.upload(code, root, bootstrap=True)
    assert booted.wheel == first.wheel and 0 < booted.sent < 10_000  # (the bootstrap only)
    fetch(beside, tmp_path / "bootstrap.py")
    assert "ferry bootstrap" in (tmp_path / "bootstrap.py").read_text()
    assert bundle.upload(code, root, bootstrap=True).sent == 0
    # a link that leaves the folder: the other machine would not have it
    (code / "outside").symlink_to(tmp_path)
    with pytest.raises(FerryError, match="link outside points outside it"):
        bundle.upload(code, root)


def test_an_unreachable_bucket_is_one_sentence(home: Path, tmp_path: Path) -> None:
    from ferry import config

    config.set_value("storage.s3.endpoint_url", "http://127.0.0.1:9")  # nothing listens
    with pytest.raises(FerryError) as raised:
        bundle.upload(_code(tmp_path / "code"), "s3://nowhere/root")
    assert "the job's code" in str(raised.value) and "Traceback" not in str(raised.value)


def test_a_snapshot_trees_digest_is_taken_once(home: Path, project: Path) -> None:
    """A job's code is a code-store tree: its manifest hash is kept, and an unchanged
    folder is not read again."""
    from tests.backends.test_local import wait_status
    from tests.conftest import ferry_json, submit

    (project / "train.py").write_text("print('hi')\n")
    os.utime(project / "train.py", (1e9, 1e9))  # (a file just written is copied, not linked)
    job = submit("--", "python", "train.py", cwd=project)
    wait_status(job, "SUCCEEDED")
    code = home / "jobs" / job / "code"
    assert code.is_symlink()  # (a code-store tree)
    digest = bundle.code_digest(code)
    assert digest == bundle.code_digest(project)  # (the folder it was taken from, read)
    kept = home / "code-store" / "digests" / code.resolve().name
    assert kept.read_text().split()[0] == digest
    record = kept.read_text().split()[1]
    kept.write_text(f"{'f' * 64} {record}\n")  # what is kept is what is used ...
    assert bundle.code_digest(code) == "f" * 64
    tree_record = home / "code-store" / "trees" / f"{code.resolve().name}.files"
    tree_record.write_bytes(tree_record.read_bytes() + b"\n")  # ... while the record stands
    assert bundle.code_digest(code) == digest
    assert ferry_json("jobs")[0]["id"] == job


@pytest.mark.parametrize(
    "entry",
    [
        ("../evil.txt", None),  # a file above the folder
        ("link", "/etc"),  # a link leaving it
        ("sub/link", "../../x"),
    ],
)
def test_an_archive_with_an_entry_leaving_its_folder_is_refused_whole(
    tmp_path: Path, entry: tuple[str, str | None]
) -> None:
    import io
    import tarfile

    name, link = entry
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        good = tarfile.TarInfo("fine.txt")
        good.size = 2
        tar.addfile(good, io.BytesIO(b"ok"))
        bad = tarfile.TarInfo(name)
        if link is None:
            bad.size = 4
            tar.addfile(bad, io.BytesIO(b"evil"))
        else:
            bad.type, bad.linkname = tarfile.SYMTYPE, link
            tar.addfile(bad)
    with pytest.raises(FerryError, match="holds an entry that leaves its folder"):
        bundle.extract(archive, tmp_path / "out")
    # the check Python 3.10 before 3.10.12 uses (no tarfile filters there) refuses it too
    with tarfile.open(archive) as tar, pytest.raises(FerryError, match="leaves its folder"):
        bundle._check_members(tar, tmp_path / "out2", archive.name)
    assert not (tmp_path / "evil.txt").exists()
