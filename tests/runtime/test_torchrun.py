"""A multi-process job: `torchrun --standalone --nproc_per_node=2` under Ferry trains with
DDP over gloo, is preempted, and resumes from rank 0's checkpoint (README, journey 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DDP_RESUMING, ferry, job_status, submit, wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

TRAIN = (
    DDP_RESUMING
    + """
if rank == 0:
    print(f"attempt {os.environ['FERRY_ATTEMPT']} starts at step {start} of {world} ranks", flush=True)
# the first attempt runs until it is preempted (at most 100 s); the next one ends soon
end = start + 6 if os.environ["FERRY_ATTEMPT"] != "1" else 1000
for step in range(start, end):
    loss = ddp(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        runtime.report(step=step, loss=loss.item())
        if step % 3 == 2:
            runtime.checkpoint.save({"model": model.state_dict(), "step": step}, step)
            print(f"saved step {step}", flush=True)
    time.sleep(0.1)
dist.destroy_process_group()
"""
)


def test_torchrun_job_resumes_after_a_preemption(home: Path, project: Path) -> None:
    (project / "train.py").write_text(TRAIN)
    (project / "job.yaml").write_text(
        "command: torchrun --standalone --nproc_per_node=2 train.py\nresources: {cpus: 2}\n"
    )
    job_id = submit("job.yaml", cwd=project)
    wait_for(lambda: "saved step 8" in ferry("logs", job_id).stdout, 120, "a few checkpoints")
    assert ferry("preempt", job_id).returncode == 0
    assert ferry("wait", job_id, "--timeout", "180s").returncode == 0
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert "attempt 1 starts at step 0 of 2 ranks" in ferry("logs", job_id, "-a", "1").stdout
    log = ferry("logs", job_id).stdout
    resumed = int(log.split("attempt 2 starts at step ")[1].split()[0])
    assert resumed >= 9 and resumed % 3 == 0  # right after a checkpoint rank 0 saved
    events = [e["message"] for e in status["events"]]
    assert any(m.startswith(f"attempt 2 starts from checkpoint step {resumed - 1}") for m in events)
