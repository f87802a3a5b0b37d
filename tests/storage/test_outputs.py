"""Outputs sent to buckets: checkpoints while the job runs, everything at the end, the
manifest last; and `ferry outputs` to list and fetch them."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ferry, ferry_json, job_status, submit, wait_for

pytestmark = pytest.mark.slow

TRAIN = textwrap.dedent("""
    import os, time
    ck = os.environ["FERRY_CHECKPOINT_DIR"]
    open(os.path.join(ck, "step-1.pt"), "wb").write(b"c" * 1000)
    gate = os.path.join(os.environ["FERRY_TEST_TMP"], "finish")
    while not os.path.exists(gate):
        time.sleep(0.05)
    open(os.path.join(os.environ["FERRY_MODEL_DIR"], "model.bin"), "wb").write(b"m" * 2048)
    open(os.path.join(os.environ["FERRY_OUTPUT_DIR"], "notes.txt"), "w").write("done")
    print("trained", os.environ["BUCKET_ROOT"])
""")


def test_outputs_reach_the_bucket_with_the_manifest_last(
    stores: dict[str, Any], home: Path, project: Path, tmp_path: Path
) -> None:
    s3, bucket = stores["s3"], stores["bucket"]
    ferry("config", "set", "outputs.sync_interval", "0.3s")
    (project / "train.py").write_text(TRAIN)
    job_id = submit(
        "--outputs", f"s3://{bucket}/runs/{{job_id}}", "--", "python", "train.py", cwd=project
    )
    root = f"{bucket}/runs/{job_id}"
    # the checkpoint arrives while the job still runs; the manifest does not
    wait_for(
        lambda: s3.invalidate_cache() or s3.exists(f"{root}/checkpoints/step-1.pt"),
        30,
        "the live checkpoint sync",
    )
    assert job_status(job_id)["status"] == "RUNNING"
    assert not s3.exists(f"{root}/manifest.json")
    (tmp_path / "finish").write_text("")
    assert ferry("wait", job_id).returncode == 0
    s3.invalidate_cache()
    manifest = json.loads(s3.cat_file(f"{root}/manifest.json"))
    assert manifest["complete"] is True and manifest["job_id"] == job_id
    by_path = {f["path"]: f for f in manifest["files"]}
    # besides Ferry's TensorBoard export of the samples it takes (tensorboard/ferry/)
    assert {p for p in by_path if not p.startswith("tensorboard/ferry/")} == {
        "checkpoints/step-1.pt",
        "model/model.bin",
        "output/notes.txt",
        "logs/attempt-1.log",
    }
    assert by_path["model/model.bin"]["sha256"] == hashlib.sha256(b"m" * 2048).hexdigest()
    assert s3.cat_file(f"{root}/model/model.bin") == b"m" * 2048
    assert f"trained s3://{bucket}" in s3.cat_file(f"{root}/logs/attempt-1.log").decode()
    listed = ferry_json("outputs", job_id)
    assert listed["complete"] and {f["path"] for f in listed["files"]} == set(by_path)
    fetched = tmp_path / "fetched"
    assert ferry("outputs", job_id, "--download", str(fetched)).returncode == 0
    assert (fetched / "model" / "model.bin").read_bytes() == b"m" * 2048
    assert json.loads((fetched / "manifest.json").read_text())["job_id"] == job_id


def test_local_outputs_get_logs_and_a_manifest(home: Path, project: Path) -> None:
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'x')\nprint('saved')\n"
    )
    assert ferry("run", "--", "python", "save.py", cwd=project).returncode == 0
    job = ferry_json("jobs")[0]
    out = Path(job["outputs"])
    manifest = json.loads((out / "manifest.json").read_text())
    delivered = {f["path"] for f in manifest["files"]}
    assert {p for p in delivered if not p.startswith("tensorboard/ferry/")} == {
        "model/m.bin",
        "logs/attempt-1.log",
    }
    assert "saved" in (out / "logs" / "attempt-1.log").read_text()
    text = ferry("outputs", job["id"]).stdout
    assert "complete" in text and "model/m.bin" in text


def test_unwritable_outputs_fail_the_job_with_the_reason(
    stores: dict[str, Any], home: Path, project: Path
) -> None:
    s3, bucket = stores["s3"], stores["bucket"]
    # the bucket exists at submit, and is gone by the time the job ends
    (project / "gate.py").write_text(
        "import os, time\n"
        "g = os.path.join(os.environ['FERRY_TEST_TMP'], 'go')\n"
        "while not os.path.exists(g): time.sleep(0.05)\n"
    )
    job_id = submit(
        "--outputs", f"s3://{bucket}/runs/{{job_id}}", "--", "python", "gate.py", cwd=project
    )
    wait_for(lambda: job_status(job_id)["status"] == "RUNNING", 30, "the job to run")
    s3.rm(bucket, recursive=True)
    (Path(os.environ["FERRY_TEST_TMP"]) / "go").write_text("")
    assert ferry("wait", job_id).returncode == 1
    reason = job_status(job_id)["reason"]
    assert f"outputs could not be written to s3://{bucket}/runs/{job_id}" in reason


def test_collect_brings_files_from_the_working_folder(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text(
        "command: python -c \"import os; os.makedirs('lightning_logs/v0', exist_ok=True); "
        "open('lightning_logs/v0/events.out', 'w').write('e'); open('scratch.tmp', 'w').write('t')\"\n"
        "collect: ['lightning_logs/**']\n"
    )
    assert ferry("run", "job.yaml", cwd=project).returncode == 0
    out = Path(ferry_json("jobs")[0]["outputs"])
    assert (out / "lightning_logs" / "v0" / "events.out").read_text() == "e"
    assert not (out / "scratch.tmp").exists()
    files = {f["path"] for f in json.loads((out / "manifest.json").read_text())["files"]}
    assert "lightning_logs/v0/events.out" in files


def test_vertex_script_writing_to_gcs_fuse_paths(
    stores: dict[str, Any], home: Path, project: Path
) -> None:
    gs, bucket = stores["gs"], stores["bucket"]
    (project / "task.py").write_text(
        "import os\n"
        "model_dir = os.environ['AIP_MODEL_DIR']\n"
        "assert model_dir.startswith('gs://'), model_dir\n"
        "local = model_dir.replace('gs://', '/gcs/')  # what Vertex AI users write\n"
        "os.makedirs(local, exist_ok=True)\n"
        "open(local + 'model.txt', 'w').write('vertex')\n"
    )
    (project / "job.yaml").write_text(
        f"command: python task.py\ncontract: vertex\noutputs: gs://{bucket}/runs/{{job_id}}\n"
    )
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    job = ferry_json("jobs")[0]
    assert job["spec"]["paths"] == "container"
    gs.invalidate_cache()
    assert gs.cat_file(f"{bucket}/runs/{job['id']}/model/model.txt") == b"vertex"
    manifest = json.loads(gs.cat_file(f"{bucket}/runs/{job['id']}/manifest.json"))
    assert "model/model.txt" in {f["path"] for f in manifest["files"]}


def test_outputs_to_azure_blob(stores: dict[str, Any], home: Path, project: Path) -> None:
    az, bucket = stores["az"], stores["bucket"]
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'az')\n"
    )
    result = ferry(
        "run", "--outputs", f"az://{bucket}/runs/{{job_id}}", "--", "python", "save.py", cwd=project
    )
    assert result.returncode == 0, result.stderr
    job_id = ferry_json("jobs")[0]["id"]
    az.invalidate_cache()
    assert az.cat_file(f"{bucket}/runs/{job_id}/model/m.bin") == b"az"
    assert json.loads(az.cat_file(f"{bucket}/runs/{job_id}/manifest.json"))["complete"] is True


CHECKPOINTING = textwrap.dedent("""
    import os, time
    from ferry import runtime
    for step in (1, 2, 3):
        runtime.checkpoint.save({"step": step}, step)
        time.sleep(0.3)
    gate = os.path.join(os.environ["FERRY_TEST_TMP"], "finish")
    while not os.path.exists(gate):
        time.sleep(0.05)
""")


def test_checkpoints_reach_the_bucket_as_written_and_a_fresh_machine_gets_them(
    stores: dict[str, Any],
    home: Path,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ferry.storage.outputs import OutputSync

    s3, bucket = stores["s3"], stores["bucket"]
    ferry("config", "set", "outputs.sync_interval", "1h")  # only the new checkpoints trigger it
    (project / "train.py").write_text(CHECKPOINTING)
    (project / "job.yaml").write_text(
        f"command: python train.py\noutputs: s3://{bucket}/runs/{{job_id}}\ncheckpoint: {{keep: 2}}\n"
    )
    job_id = submit("job.yaml", cwd=project)
    root = f"{bucket}/runs/{job_id}/checkpoints"

    def remote() -> set[str]:
        s3.invalidate_cache()
        return {p[len(root) + 1 :] for p in s3.find(root)} if s3.exists(root) else set()

    expected = {f"ckpt-00000000000{n}/{f}" for n in (2, 3) for f in ("MANIFEST.json", "state.pt")}
    wait_for(lambda: remote() == expected, 30, "the last two checkpoints, and only those")
    assert job_status(job_id)["status"] == "RUNNING"
    (tmp_path / "finish").write_text("")
    assert ferry("wait", job_id).returncode == 0

    # a new attempt on a machine that has nothing: the bucket's checkpoints come first
    fresh = tmp_path / "fresh"
    s3.pipe(f"{root}/ckpt-000000000009/state.pt", b"half")  # its upload never finished
    s3.pipe(f"{root}/lightning/last.ckpt", b"weights")  # a framework's own files come too
    sync = OutputSync.for_outputs(f"s3://{bucket}/runs/{job_id}", fresh)
    assert sync.pull_checkpoints() == 5 and sync.pull_checkpoints() == 0
    assert not (sync.local / "checkpoints" / "ckpt-000000000009").exists()
    assert (sync.local / "checkpoints" / "lightning" / "last.ckpt").read_bytes() == b"weights"
    monkeypatch.setenv("FERRY_CHECKPOINT_DIR", str(sync.local / "checkpoints"))
    from ferry.runtime import checkpoint

    found = checkpoint.restore()
    assert found is not None and found.step == 3 and found.state == {"step": 3}


BIG_CHECKPOINT = textwrap.dedent("""
    import os, signal, sys, time
    def on_notice(*_):
        with open(os.path.join(os.environ["FERRY_TEST_TMP"], "notice"), "w") as f:
            f.write(repr(time.time()))
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_notice)
    folder = os.environ["FERRY_CHECKPOINT_DIR"]
    with open(os.path.join(folder, ".tmp-weights"), "wb") as f:  # in place whole: renamed
        f.write(b"w" * (384 << 20))
    os.replace(os.path.join(folder, ".tmp-weights"), os.path.join(folder, "weights.bin"))
    print("saved", flush=True)
    while True:
        time.sleep(0.05)
""")


def test_a_file_being_written_is_never_sent_nor_listed(
    stores: dict[str, Any], tmp_path: Path
) -> None:
    from ferry.storage.outputs import OutputSync

    s3, bucket = stores["s3"], stores["bucket"]
    sync = OutputSync.for_outputs(f"s3://{bucket}/runs/partial", tmp_path / "job")
    checkpoints = sync.local / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / ".tmp-weights").write_bytes(b"half")  # renamed once whole; cut short here
    (checkpoints / "opt.pt.tmp").write_bytes(b"half")
    (checkpoints / "weights.bin").write_bytes(b"whole")
    assert sync.sync() == len(b"whole")
    manifest = sync.finish([], "partial")
    assert [f["path"] for f in manifest["files"]] == ["checkpoints/weights.bin"]
    s3.invalidate_cache()
    root = f"{bucket}/runs/partial/"
    assert sorted(p[len(root) :] for p in s3.find(root)) == [
        "checkpoints/weights.bin",
        "manifest.json",
    ]


def test_a_large_checkpoint_going_up_never_delays_the_notice(
    stores: dict[str, Any], s3_endpoint: str, home: Path, project: Path, tmp_path: Path
) -> None:
    import time

    import boto3

    s3, bucket = stores["s3"], stores["bucket"]
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    ferry("config", "set", "outputs.sync_interval", "1h")  # only the new checkpoint syncs
    (project / "train.py").write_text(BIG_CHECKPOINT)
    job_id = submit(
        "--outputs", f"s3://{bucket}/runs/{{job_id}}", "--", "python", "train.py", cwd=project
    )
    wait_for(
        lambda: client.list_multipart_uploads(Bucket=bucket).get("Uploads"),
        60,
        "the checkpoint's upload to start",
    )
    asked = time.time()
    assert ferry("cancel", job_id).returncode == 0
    notice = tmp_path / "notice"
    got = float(wait_for(lambda: notice.exists() and notice.read_text(), 30, "the notice"))
    # before, the notice waited for the upload (7.5 s here); now it comes at once
    assert got - asked < 2.0, f"the notice came {got - asked:.1f}s after the cancel"
    assert ferry("wait", job_id).returncode != 0
    data = job_status(job_id)
    assert data["status"] == "CANCELLED"
    s3.invalidate_cache()  # the checkpoint went up whole all the same, before the job ended
    assert s3.size(f"{bucket}/runs/{job_id}/checkpoints/weights.bin") == 384 << 20
