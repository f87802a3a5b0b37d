"""A gang started by Ferry itself (``resources.procs_per_node: 2``, no torchrun): two DDP
ranks over gloo are preempted, resume from rank 0's checkpoint, and end with exactly the
weights of a run that was never preempted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DDP_RESUMING, ferry, job_status, submit, wait_for

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

TRAIN = (
    DDP_RESUMING
    + """
print(f"attempt {os.environ['FERRY_ATTEMPT']} rank {rank} of {world} starts at step {start}",
      flush=True)
for step in range(start, 40):
    data = torch.randn(8, 4, generator=torch.Generator().manual_seed(1000 * step + rank))
    loss = ddp(data).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step % 3 == 2:
        runtime.checkpoint.save({"model": model.state_dict(), "step": step}, step)
        print(f"saved step {step}", flush=True)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0")))
if rank == 0:
    torch.save(model.state_dict(), os.path.join(os.environ["FERRY_MODEL_DIR"], "weights.pt"))
dist.destroy_process_group()
"""
)


def _weights(job_id: str) -> dict[str, object]:
    path = Path(job_status(job_id)["outputs"]) / "model" / "weights.pt"
    return dict(torch.load(path, weights_only=True))


def test_a_preempted_ddp_gang_ends_with_the_weights_of_an_unbroken_run(
    home: Path, project: Path
) -> None:
    (project / "train.py").write_text(TRAIN)
    (project / "job.yaml").write_text(
        "command: python train.py\nresources: {procs_per_node: 2, cpus: 2}\n"
    )
    broken = submit("job.yaml", "--env", "STEP_SLEEP=0.15", cwd=project)
    wait_for(lambda: "saved step 8" in ferry("logs", broken).stdout, 120, "a few checkpoints")
    assert ferry("preempt", broken).returncode == 0
    assert ferry("wait", broken, "--timeout", "180s").returncode == 0
    status = job_status(broken)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    first = ferry("logs", broken, "-a", "1").stdout
    assert "[0] attempt 1 rank 0 of 2 starts at step 0" in first  # each line led by its rank
    assert "[1] attempt 1 rank 1 of 2 starts at step 0" in first
    second = ferry("logs", broken, "--rank", "1").stdout
    resumed = int(second.split("attempt 2 rank 1 of 2 starts at step ")[1].split()[0])
    assert resumed >= 9 and resumed % 3 == 0  # both ranks from rank 0's checkpoint
    assert "saved step" not in second  # rank 1's lines only
    events = [e["message"] for e in status["events"]]
    assert any(m.startswith("notice (SIGTERM): SIGTERM to 2 process groups") for m in events)

    unbroken = submit("job.yaml", cwd=project)
    assert ferry("wait", unbroken, "--timeout", "180s").returncode == 0
    mine, reference = _weights(broken), _weights(unbroken)
    assert mine.keys() == reference.keys()
    for name in mine:
        assert torch.equal(mine[name], reference[name]), name  # type: ignore[arg-type]
