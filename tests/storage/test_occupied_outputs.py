"""An outputs place that already holds files is refused at submit; with
``--outputs-exist-ok`` it is used, and the manifest lists only what the job wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import assert_one_line_error, ferry, ferry_json

pytestmark = pytest.mark.slow

WRITE_MODEL = (
    "import os; open(os.path.join(os.environ['FERRY_MODEL_DIR'], 'new.bin'), 'wb').write(b'n')"
)


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _own(manifest: dict[str, Any]) -> list[str]:
    """The manifest's files, less the metrics' TensorBoard events every job writes."""
    return [f["path"] for f in manifest["files"] if not f["path"].startswith("tensorboard/")]


@pytest.fixture
def occupied(tmp_path: Path) -> Path:
    folder = tmp_path / "shared-out"
    (folder / "model").mkdir(parents=True)
    (folder / "precious.txt").write_text("keep me")
    (folder / "model" / "old.bin").write_bytes(b"old")
    return folder


def test_a_folder_with_files_is_refused_and_left_as_it_was(
    home: Path, project: Path, occupied: Path
) -> None:
    before = _tree(occupied)
    relative = os.path.relpath(occupied, project)  # as `outputs: ../../..` would be
    result = ferry("run", "--outputs", relative, "--", "python", "-c", WRITE_MODEL, cwd=project)
    line = assert_one_line_error(result, 2)
    assert "already holds files (model/, precious.txt)" in line
    assert "--outputs-exist-ok" in line
    assert _tree(occupied) == before
    assert sorted(p.name for p in occupied.iterdir()) == ["model", "precious.txt"]
    assert ferry_json("jobs") == []


def test_allowed_the_manifest_lists_only_the_jobs_own_files(
    home: Path, project: Path, occupied: Path
) -> None:
    (occupied / "dangling").symlink_to(occupied / "nowhere")
    result = ferry(
        "run",
        "--outputs",
        str(occupied),
        "--outputs-exist-ok",
        "--",
        "python",
        "-c",
        WRITE_MODEL,
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.rstrip().endswith(f"model: new.bin (1 B) in {occupied}/model")
    manifest = json.loads((occupied / "manifest.json").read_text())
    assert _own(manifest) == ["logs/attempt-1.log", "model/new.bin"]
    assert (occupied / "precious.txt").read_text() == "keep me"
    assert (occupied / "model" / "old.bin").read_bytes() == b"old"


def test_a_second_job_to_the_same_place_is_refused(home: Path, project: Path) -> None:
    out = project.parent / "run-out"
    first = ferry("run", "--outputs", str(out), "--", "python", "-c", WRITE_MODEL, cwd=project)
    assert first.returncode == 0, first.stderr  # a new folder is fine
    manifest = (out / "manifest.json").read_text()
    second = ferry("run", "--outputs", str(out), "--", "python", "-c", "pass", cwd=project)
    assert "already holds files" in assert_one_line_error(second, 2)
    assert (out / "manifest.json").read_text() == manifest
    templated = ferry(
        "run", "--outputs", f"{out}/{{job_id}}", "--", "python", "-c", "pass", cwd=project
    )
    assert templated.returncode == 0, templated.stderr  # each job gets its own folder


def test_a_bucket_prefix_with_files_is_refused_unless_allowed(
    stores: dict[str, Any], home: Path, project: Path
) -> None:
    s3, bucket = stores["s3"], stores["bucket"]
    s3.pipe(f"{bucket}/team/run/precious.txt", b"keep me")
    uri = f"s3://{bucket}/team/run"
    refused = ferry("run", "--outputs", uri, "--", "python", "-c", WRITE_MODEL, cwd=project)
    assert f"outputs: {uri} already holds files (precious.txt)" in assert_one_line_error(refused, 2)
    fresh = ferry("run", "--outputs", f"{uri}-2", "--", "python", "-c", WRITE_MODEL, cwd=project)
    assert fresh.returncode == 0, fresh.stderr
    allowed = ferry(
        "run",
        "--outputs",
        uri,
        "--outputs-exist-ok",
        "--",
        "python",
        "-c",
        WRITE_MODEL,
        cwd=project,
    )
    assert allowed.returncode == 0, allowed.stderr
    s3.invalidate_cache()
    manifest = json.loads(s3.cat_file(f"{bucket}/team/run/manifest.json"))
    assert _own(manifest) == ["logs/attempt-1.log", "model/new.bin"]
    assert s3.cat_file(f"{bucket}/team/run/precious.txt") == b"keep me"


def test_a_place_an_unfinished_job_will_write_to_is_refused(
    stores: dict[str, Any], home: Path, project: Path, tmp_path: Path
) -> None:
    s3, bucket = stores["s3"], stores["bucket"]
    (project / "wait.py").write_text(
        "import os, time\n"
        "gate = os.path.join(os.environ['FERRY_TEST_TMP'], 'go')\n"
        "while not os.path.exists(gate):\n"
        "    time.sleep(0.05)\n"
    )
    uri = f"s3://{bucket}/exp1"
    first = ferry("run", "-d", "--outputs", uri, "--", "python", "wait.py", cwd=project)
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.strip()
    assert not s3.exists(f"{bucket}/exp1")  # nothing there yet: the bucket cannot tell
    second = ferry("run", "-d", "--outputs", uri, "--", "python", "-c", "pass", cwd=project)
    line = assert_one_line_error(second, 2)
    assert f"outputs: job {job_id} already writes its results to {uri}" in line
    (tmp_path / "go").write_text("")
    assert ferry("wait", job_id).returncode == 0
