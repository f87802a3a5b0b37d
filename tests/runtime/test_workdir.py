"""Each attempt runs in a fresh working folder, as on a new machine; files a script keeps
there (the PyTorch DDP tutorial's ``snapshot.pt``) carry over only through
``checkpoint.paths``, and the event before each new attempt says what it starts from."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ferry, job_status, submit, wait_for

pytestmark = pytest.mark.slow

# Like the DDP tutorial: the snapshot lives in the working folder, beside scratch files.
TRAIN = """
import json, os, time
attempt = os.environ["FERRY_ATTEMPT"]
left = sorted(n for n in os.listdir(".") if n.startswith("scratch-"))
print(f"attempt {attempt} finds {left}", flush=True)
start = 0
if os.path.exists("snapshot.pt"):
    start = json.load(open("snapshot.pt"))["epoch"] + 1
print(f"attempt {attempt} starts at epoch {start}", flush=True)
open(f"scratch-{attempt}", "w").write("scratch")
# the first attempt runs until it is preempted (at most a minute); the next one ends soon
end = start + 5 if attempt != "1" else 1200
for epoch in range(start, end):
    time.sleep(0.05)
    with open("snapshot.tmp", "w") as f:
        json.dump({"epoch": epoch}, f)
    os.replace("snapshot.tmp", "snapshot.pt")
    print(f"epoch {epoch} saved", flush=True)
"""


def _preempted_once(project: Path, spec: str) -> tuple[str, dict[str, Any], str]:
    """Run TRAIN from a spec, preempt it once some epochs are saved; return the job's id,
    its status and its log."""
    (project / "train.py").write_text(TRAIN)
    (project / "job.yaml").write_text("command: python train.py\n" + spec)
    job_id = submit("job.yaml", cwd=project)
    wait_for(lambda: "epoch 5 saved" in ferry("logs", job_id).stdout, 60, "some epochs")
    assert ferry("preempt", job_id).returncode == 0
    assert ferry("wait", job_id, "--timeout", "90s").returncode == 0
    return job_id, job_status(job_id), ferry("logs", job_id).stdout


def _started_at(log: str, attempt: int) -> int:
    return int(log.split(f"attempt {attempt} starts at epoch ")[1].split()[0])


def test_declared_working_folder_files_come_back_in_a_fresh_folder(
    home: Path, project: Path
) -> None:
    _, status, log = _preempted_once(project, "checkpoint: {paths: [snapshot.pt]}\n")
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    # a fresh folder: the first attempt's scratch file is gone, the declared snapshot is back
    assert "attempt 2 finds []" in log
    assert _started_at(log, 2) >= 6
    events = [e["message"] for e in status["events"]]
    start = next(m for m in events if m.startswith("attempt 2 starts"))
    assert "snapshot.pt (" in start and "put back in its working folder (checkpoint.paths)" in start
    left = start.split("the last attempt also left ")[1].split(" in its working folder")[0]
    # (snapshot.tmp too, when the preemption landed between its write and its rename)
    assert set(left.split(", ")) - {"snapshot.tmp"} == {"scratch-1"}  # not the declared file
    outputs = Path(status["outputs"])
    saved = json.loads((outputs / "checkpoints" / ".ferry-workdir" / "snapshot.pt").read_text())
    assert saved == {"epoch": _started_at(log, 2) + 4}  # the final state, with the checkpoints


def test_undeclared_working_folder_files_do_not_carry_over_and_the_event_says_so(
    home: Path, project: Path
) -> None:
    _, status, log = _preempted_once(project, "")
    assert "attempt 2 finds []" in log
    assert _started_at(log, 2) == 0  # a new machine would not have snapshot.pt either
    events = [e["message"] for e in status["events"]]
    assert not any("resuming from the latest checkpoint" in m for m in events)
    start = next(m for m in events if m.startswith("attempt 2 starts"))
    assert start.startswith("attempt 2 starts over: no checkpoint was saved; the last attempt")
    assert "scratch-1, snapshot.pt in its working folder" in start
    assert "list such files in checkpoint.paths" in start


def test_a_runtime_checkpoint_is_named_with_its_step(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "import os, time\nfrom ferry import runtime\n"
        "ckpt = runtime.checkpoint.restore()\n"
        "if ckpt:\n    raise SystemExit(0)\n"
        "runtime.checkpoint.save({'step': 7}, 7)\n"
        "print('saved', flush=True)\n"
        "time.sleep(60)\n"
    )
    job_id = submit("--", "python", "train.py", cwd=project)
    wait_for(lambda: "saved" in ferry("logs", job_id).stdout, 60, "a checkpoint")
    assert ferry("preempt", job_id).returncode == 0
    assert ferry("wait", job_id, "--timeout", "90s").returncode == 0
    events = [e["message"] for e in job_status(job_id)["events"]]
    start = next(m for m in events if m.startswith("attempt 2 starts"))
    assert start.startswith("attempt 2 starts from checkpoint step 7 in ")
    assert start.split(" in ", 1)[1].endswith("/checkpoints")


def test_bad_checkpoint_paths_are_refused(home: Path, project: Path) -> None:
    from tests.conftest import assert_one_line_error

    (project / "job.yaml").write_text("command: echo hi\ncheckpoint: {paths: [../../etc/passwd]}\n")
    line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), 2)
    assert "checkpoint.paths" in line and "not a path inside the working folder" in line


def _state(tmp_path: Path) -> Any:
    from ferry.storage.workdir import WorkdirState

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')")
    state = WorkdirState(tmp_path / "work", tmp_path / "checkpoints", ("snapshot.pt",), code)
    state.fresh()
    return state


def test_a_working_folder_a_crash_cut_short_never_loses_the_saved_state(tmp_path: Path) -> None:
    state = _state(tmp_path)
    (state.workdir / "snapshot.pt").write_text("epoch 7")
    assert state.save(final=True, prune=True) == ["snapshot.pt"]
    (state.workdir / "snapshot.pt").unlink()  # as in a folder whose restore was cut short
    state.harvest()
    assert (state.folder / "snapshot.pt").read_text() == "epoch 7"
    assert state.fresh() == [("snapshot.pt", 7)]
    assert (state.workdir / "snapshot.pt").read_text() == "epoch 7"
    assert sorted(p.name for p in state.workdir.parent.iterdir()) == [
        "checkpoints",
        "code",
        "work",
    ]  # no temporary folder left over


def test_a_file_written_in_place_is_copied_live_only_once_quiet(tmp_path: Path) -> None:
    state = _state(tmp_path)
    snapshot = state.workdir / "snapshot.pt"
    snapshot.write_text("half")  # just written, in place: it may be mid-write
    assert state.save(final=False) == []
    with open(snapshot, "a") as file:
        file.write(" and the rest")  # same inode, still fresh
    assert state.save(final=False) == []
    old = snapshot.stat().st_mtime - 10
    os.utime(snapshot, (old, old))  # written long enough ago
    assert state.save(final=False) == ["snapshot.pt"]
    tmp = state.workdir / "snapshot.tmp"
    tmp.write_text("complete")
    os.replace(tmp, snapshot)  # put in place by a rename: complete at once
    assert state.save(final=False) == ["snapshot.pt"]
    assert (state.folder / "snapshot.pt").read_text() == "complete"
