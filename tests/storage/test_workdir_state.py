"""checkpoint.paths with outputs in a bucket: the declared working-folder files reach the
bucket while the job runs, and a fresh machine gets them back before its attempt."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ferry, job_status, submit, wait_for

pytestmark = pytest.mark.slow

TRAIN = textwrap.dedent("""
    import json, os, time
    gate = os.path.join(os.environ["FERRY_TEST_TMP"], "finish")
    epoch = 0
    while not os.path.exists(gate):
        epoch += 1
        with open("snapshot.tmp", "w") as f:
            json.dump({"epoch": epoch}, f)
        os.replace("snapshot.tmp", "snapshot.pt")
        time.sleep(0.2)
    os.makedirs("ckpt", exist_ok=True)
    open("ckpt/optimizer.pt", "w").write("adam")
""")


def test_declared_files_reach_the_bucket_and_come_back_on_a_fresh_machine(
    stores: dict[str, Any], home: Path, project: Path, tmp_path: Path
) -> None:
    from ferry.storage.outputs import OutputSync
    from ferry.storage.workdir import WorkdirState

    s3, bucket = stores["s3"], stores["bucket"]
    ferry("config", "set", "outputs.sync_interval", "0.3s")
    (project / "train.py").write_text(TRAIN)
    (project / "job.yaml").write_text(
        "command: python train.py\n"
        f"outputs: s3://{bucket}/runs/{{job_id}}\n"
        "checkpoint: {paths: [snapshot.pt, 'ckpt/*.pt']}\n"
    )
    job_id = submit("job.yaml", cwd=project)
    saved = f"{bucket}/runs/{job_id}/checkpoints/.ferry-workdir/snapshot.pt"
    # while it runs: a copy taken once the file stopped changing, never a half-written one
    wait_for(lambda: s3.invalidate_cache() or s3.exists(saved), 30, "the live copy")
    assert job_status(job_id)["status"] == "RUNNING"
    assert json.loads(s3.cat_file(saved))["epoch"] >= 1
    (tmp_path / "finish").write_text("")
    assert ferry("wait", job_id).returncode == 0

    # a machine that has nothing: the bucket's copies come back into a fresh working folder
    fresh = tmp_path / "fresh"
    sync = OutputSync.for_outputs(f"s3://{bucket}/runs/{job_id}", fresh)
    assert sync.pull_checkpoints() == 2
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    work = fresh / "work"
    state = WorkdirState(work, sync.local / "checkpoints", ("snapshot.pt", "ckpt/*.pt"), code)
    restored = dict(state.fresh())
    assert set(restored) == {"snapshot.pt", "ckpt/optimizer.pt"}
    assert (work / "ckpt" / "optimizer.pt").read_text() == "adam"
    final = json.loads((work / "snapshot.pt").read_text())["epoch"]
    assert final >= 1 and (work / "train.py").read_text() == TRAIN
