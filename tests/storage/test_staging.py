"""Inputs from buckets: staged through the cache, given to the job, never copied twice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ferry.storage.cache import InputCache
from ferry.storage.staging import stage_input
from tests.conftest import assert_one_line_error, ferry, ferry_json, job_status

pytestmark = pytest.mark.slow


def put(fs: Any, bucket: str, files: dict[str, bytes]) -> None:
    for key, data in files.items():
        fs.pipe(f"{bucket}/{key}", data)


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_prefix_staged_then_served_from_the_cache(
    stores: dict[str, Any], tmp_path: Path, scheme: str
) -> None:
    fs, bucket = stores[scheme], stores["bucket"]
    # (random bytes that never end in \r: gcp-storage-emulator drops an object's last \r
    # from a multipart upload, which made this test fail one run in a hundred or so)
    files = {
        "data/a.bin": os.urandom(2999) + b".",
        "data/sub/b.bin": os.urandom(4999) + b".",
        "other/c.bin": b"x",
    }
    put(fs, bucket, files)
    cache = InputCache(tmp_path / "cache")
    seen: list[tuple[int, int]] = []
    first = stage_input(
        "train",
        f"{scheme}://{bucket}/data",
        "copy",
        tmp_path / "job1",
        cache,
        lambda name, done, total, f, n: seen.append((done, total)),
    )
    assert first.files == 2 and first.bytes_total == 8000
    assert first.bytes_downloaded == 8000 and first.bytes_from_cache == 0
    assert Path(first.path) == tmp_path / "job1" / "train"
    assert (Path(first.path) / "a.bin").read_bytes() == files["data/a.bin"]
    assert (Path(first.path) / "sub" / "b.bin").read_bytes() == files["data/sub/b.bin"]
    assert seen[-1] == (8000, 8000)
    again = stage_input("train", f"{scheme}://{bucket}/data", "copy", tmp_path / "job2", cache)
    assert again.bytes_downloaded == 0 and again.bytes_from_cache == 8000  # nothing copied
    assert (Path(again.path) / "a.bin").read_bytes() == files["data/a.bin"]
    # a new version of one object is fetched again; the other still comes from the cache
    put(fs, bucket, {"data/a.bin": b"new"})
    third = stage_input("train", f"{scheme}://{bucket}/data", "copy", tmp_path / "job3", cache)
    assert third.bytes_downloaded == 3 and third.bytes_from_cache == 5000
    assert (Path(third.path) / "a.bin").read_bytes() == b"new"


def test_single_object_and_stream_mode(stores: dict[str, Any], tmp_path: Path) -> None:
    fs, bucket = stores["gs"], stores["bucket"]
    put(fs, bucket, {"labels.csv": b"a,b\n1,2\n"})
    cache = InputCache(tmp_path / "cache")
    staged = stage_input("labels", f"gs://{bucket}/labels.csv", "copy", tmp_path / "job", cache)
    assert Path(staged.path) == tmp_path / "job" / "labels" / "labels.csv"
    assert Path(staged.path).read_bytes() == b"a,b\n1,2\n"
    streamed = stage_input("labels", f"gs://{bucket}/labels.csv", "stream", tmp_path / "job", cache)
    assert streamed.path == f"gs://{bucket}/labels.csv" and streamed.bytes_downloaded == 0


def test_a_cached_object_changed_in_place_is_fetched_again(
    stores: dict[str, Any], tmp_path: Path
) -> None:
    fs, bucket = stores["s3"], stores["bucket"]
    put(fs, bucket, {"w.bin": b"weights"})
    cache = InputCache(tmp_path / "cache")
    first = stage_input("w", f"s3://{bucket}/w.bin", "copy", tmp_path / "j1", cache)
    linked = Path(first.path)
    linked.chmod(0o644)
    linked.write_bytes(b"scribbled")  # a job wrote into its (hard-linked) input
    second = stage_input("w", f"s3://{bucket}/w.bin", "copy", tmp_path / "j2", cache)
    assert second.bytes_downloaded == 7
    assert Path(second.path).read_bytes() == b"weights"


def test_jobs_get_their_inputs_and_reruns_copy_nothing(
    stores: dict[str, Any], project: Path
) -> None:
    s3, gs, bucket = stores["s3"], stores["gs"], stores["bucket"]
    put(s3, bucket, {"train/x.txt": b"from s3"})
    put(gs, bucket, {"labels.txt": b"from gcs"})
    (project / "read.py").write_text(
        "import os\n"
        "print(open(os.path.join(os.environ['FERRY_INPUT_TRAIN'], 'x.txt')).read())\n"
        "print(open(os.environ['SM_CHANNEL_LABELS']).read())\n"
    )
    args = [
        "run",
        "--input",
        f"train=s3://{bucket}/train",
        "--input",
        f"labels=gs://{bucket}/labels.txt",
        "--",
        "python",
        "read.py",
    ]
    for _ in range(2):
        result = ferry(*args, cwd=project)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "from s3\nfrom gcs\n"
    first, second = reversed(ferry_json("jobs"))
    notes = [
        e["message"] for e in job_status(first["id"])["events"] if e["message"].startswith("input ")
    ]
    assert any("7 B copied, 0 B from the cache" in n for n in notes), notes
    notes = [
        e["message"]
        for e in job_status(second["id"])["events"]
        if e["message"].startswith("input ")
    ]
    assert notes and all(" 0 B copied" in n for n in notes), notes


def test_missing_input_or_bucket_is_refused_at_submit(
    stores: dict[str, Any], project: Path
) -> None:
    bucket = stores["bucket"]
    result = ferry("run", "--input", f"train=s3://{bucket}/nothing-here", "--", "true", cwd=project)
    assert f"input 'train': s3://{bucket}/nothing-here does not exist" in assert_one_line_error(
        result, 2
    )
    result = ferry("run", "--outputs", "gs://no-such-bucket-xyz/runs", "--", "true", cwd=project)
    assert "the bucket gs://no-such-bucket-xyz does not exist" in assert_one_line_error(result, 2)
    result = ferry("run", "--input", "train=ftp://host/x", "--", "true", cwd=project)
    assert "unknown storage scheme ftp://" in assert_one_line_error(result, 2)
    assert ferry_json("jobs") == []


def test_cache_ls_and_prune(stores: dict[str, Any], project: Path) -> None:
    s3, bucket = stores["s3"], stores["bucket"]
    put(s3, bucket, {"d/one.bin": b"1" * 100, "d/two.bin": b"2" * 300})
    result = ferry("run", "--input", f"d=s3://{bucket}/d", "--", "true", cwd=project)
    assert result.returncode == 0, result.stderr
    entries = ferry_json("cache", "ls")
    assert sorted((e["uri"], e["size"]) for e in entries) == [
        (f"s3://{bucket}/d/one.bin", 100),
        (f"s3://{bucket}/d/two.bin", 300),
    ]
    assert "2 objects" in ferry("cache", "ls").stderr
    assert ferry("cache", "prune", "--max-size", "350B").returncode == 0
    assert len(ferry_json("cache", "ls")) == 1
    assert ferry("cache", "prune", "--all").returncode == 0
    assert ferry_json("cache", "ls") == []
    assert ferry("cache", "prune").returncode == 2
