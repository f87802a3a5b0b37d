"""Checkpoints and preemption: saving and restoring a 1 GB state against raw sequential
writes and reads of the same bytes on the same disk (same run), the time from a preemption
notice to the resumed script's first step, and the work lost per preemption against the
checkpoint interval.

Budgets (docs: Performance budgets): checkpoint save and restore at ≥ 80 % of the disk's
sequential bandwidth; notice to first resumed step ≤ 5 s plus the script's own start-up;
work lost per preemption ≤ one checkpoint interval + 5 s.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import FERRY_EXE, child_env, discard, emit, log, sandbox, scratch

SIZE = 1 << 30  # bytes of state
TENSORS = 16
ROUNDS = 8  # the best of each (see IO)
BUDGET_RATIO = 0.8
BUDGET_NOTICE_S = 5.0
PREEMPTIONS = 4
STEP_S = 0.05
EVERY_STEPS = 20  # a checkpoint every second

IO = """
import os, sys, time, json
import torch
os.environ["FERRY_CHECKPOINT_DIR"] = sys.argv[1]
from ferry.runtime import checkpoint
size, tensors, rounds = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
state = {f"w{i}": torch.rand(size // tensors // 4) for i in range(tensors)}
raw_bytes = [t.numpy().tobytes() for t in state.values()]
os.makedirs(sys.argv[1], exist_ok=True)
raw = os.path.join(sys.argv[1], "raw.bin")

def evict(path):  # read from the disk, not the page cache
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)

def raw_write():
    with open(raw, "wb") as f:
        for block in raw_bytes:
            f.write(block)
        f.flush()
        os.fsync(f.fileno())

block = bytearray(8 << 20)

def raw_read():  # the fastest plain read: into one buffer, no copies
    with open(raw, "rb", buffering=0) as f:
        while f.readinto(block):
            continue

out = {"raw_write": [], "save": [], "raw_read": [], "restore": []}

def timed(name, fn):
    t = time.perf_counter()
    result = fn()
    out[name].append(time.perf_counter() - t)
    return result

def raw_round():
    timed("raw_write", raw_write)
    evict(raw)
    timed("raw_read", raw_read)
    os.unlink(raw)

def checkpoint_round(r):
    path = timed("save", lambda: checkpoint.save(state, r, keep=1))
    for name in os.listdir(path):
        evict(str(path / name))
    found = timed("restore", checkpoint.restore)
    assert found.step == r and torch.equal(found.state["w0"], state["w0"])
    del found

# This VM hands memory it has not touched for a while back to its host, and backing it again
# is slow (seconds per gigabyte): whichever writer comes first after a pause pays for it.
# The two take turns at going first, and the best round of each is kept.
for r in range(rounds):
    if r % 2:
        checkpoint_round(r)
        raw_round()
    else:
        raw_round()
        checkpoint_round(r)
print(json.dumps(out))
"""

# reports a step every STEP_S, checkpoints every EVERY_STEPS, resumes from the latest
TRAIN = """
import os, sys, time
from ferry import runtime
step_s, every, total = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ckpt = runtime.checkpoint.restore()
step = ckpt.state["step"] + 1 if ckpt else 0
while step < total:
    runtime.report(step=step, t=time.time())
    runtime.flush()
    time.sleep(step_s)
    if step % every == every - 1:
        runtime.checkpoint.save({"step": step}, step)
    step += 1
"""

START = (
    "import time; t = time.perf_counter(); from ferry import runtime; "
    "print(time.perf_counter() - t)"
)


def _io(folder: Path) -> dict[str, list[float]]:
    result = subprocess.run(
        [sys.executable, "-c", IO, str(folder), str(SIZE), str(TENSORS), str(ROUNDS)],
        env=child_env(),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"checkpoint I/O benchmark failed: {result.stderr.strip()[-500:]}")
    data: dict[str, list[float]] = json.loads(result.stdout)
    return data


def _preemptions(code: Path) -> tuple[list[float], list[float], float]:
    """Preempt a running job several times: (notice to first resumed step, seconds of
    work lost) for each, and the script's own start-up time."""
    from ferry.store import open_store

    (code / "train.py").write_text(TRAIN)
    total = 100_000
    job_id = subprocess.run(
        [
            FERRY_EXE,
            "run",
            "--detach",
            "--",
            "python",
            "train.py",
            str(STEP_S),
            str(EVERY_STEPS),
            str(total),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    store = open_store()

    def points() -> list[tuple[int, int, float]]:  # (attempt, step, time reported)
        rows = store.metrics_after(job_id, 0, 10_000_000)
        return [(r[1], r[3], r[6]) for r in rows if r[5] == "t"]

    notice_s, lost_s = [], []
    for attempt in range(1, PREEMPTIONS + 1):
        end = time.monotonic() + 60
        while (
            time.monotonic() < end
            and sum(1 for p in points() if p[0] == attempt) < 2 * EVERY_STEPS + 7 * attempt
        ):
            time.sleep(0.05)
        mine = [p for p in points() if p[0] == attempt]
        last_step = max(p[1] for p in mine)
        sent = time.time()
        subprocess.run(
            [FERRY_EXE, "preempt", job_id], env=child_env(), check=True, capture_output=True
        )
        end = time.monotonic() + 60
        while time.monotonic() < end and not [p for p in points() if p[0] == attempt + 1]:
            time.sleep(0.02)
        first_new = min((p for p in points() if p[0] == attempt + 1), key=lambda p: p[2])
        done_before = max(p[1] for p in points() if p[0] == attempt)
        notice_s.append(first_new[2] - sent)
        lost_s.append(max(0, done_before - first_new[1] + 1) * STEP_S)
        log(
            f"preemption {attempt}: at step ~{last_step}, resumed at step {first_new[1]} "
            f"{notice_s[-1]:.2f}s after the notice; lost {lost_s[-1]:.2f}s of work"
        )
    subprocess.run([FERRY_EXE, "cancel", job_id, "--wait"], env=child_env(), capture_output=True)
    starts = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-c", START], env=child_env(), capture_output=True, text=True
        )
        starts.append(float(out.stdout))
    python_start = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=child_env())
        python_start.append(time.perf_counter() - t)
    return notice_s, lost_s, statistics.median(python_start) + statistics.median(starts)


def main() -> int:
    with sandbox() as code:
        folder = Path(scratch("ckpt"))  # not in the snapshot
        try:
            io = _io(folder)
        finally:
            discard(folder)
        best = {k: min(v) for k, v in io.items()}
        save_ratio = best["raw_write"] / best["save"]
        restore_ratio = best["raw_read"] / best["restore"]
        gb = SIZE / 1e9
        log(
            f"1 GB: raw write {gb / best['raw_write']:.2f} GB/s, checkpoint.save "
            f"{gb / best['save']:.2f} GB/s ({save_ratio:.0%}); raw read {gb / best['raw_read']:.2f}"
            f" GB/s, checkpoint.restore {gb / best['restore']:.2f} GB/s ({restore_ratio:.0%})"
        )
        notice_s, lost_s, startup_s = _preemptions(code)
    interval = EVERY_STEPS * STEP_S
    emit(
        {
            "bench": "checkpoint",
            "metric": "save_vs_raw_write",
            "value": round(save_ratio, 3),
            "unit": "x raw sequential write",
            "budget": BUDGET_RATIO,
            "rule": ">=",
            "ok": save_ratio >= BUDGET_RATIO
            and restore_ratio >= BUDGET_RATIO
            and max(notice_s) <= BUDGET_NOTICE_S + startup_s
            and max(lost_s) <= interval + 5,
            "restore_vs_raw_read": round(restore_ratio, 3),
            "bytes": SIZE,
            "raw_write_s": round(best["raw_write"], 3),
            "save_s": round(best["save"], 3),
            "raw_read_s": round(best["raw_read"], 3),
            "restore_s": round(best["restore"], 3),
            "notice_to_first_step_s": [round(x, 2) for x in notice_s],
            "notice_budget_s": round(BUDGET_NOTICE_S + startup_s, 2),
            "script_startup_s": round(startup_s, 3),
            "work_lost_s": [round(x, 2) for x in lost_s],
            "checkpoint_interval_s": interval,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
