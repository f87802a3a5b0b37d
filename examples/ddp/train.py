"""Data-parallel training of a small classifier on scikit-learn's bundled digits: one
process per rank, gradients averaged over gloo (CPU) or NCCL (GPU).

Ferry starts the processes itself (``resources.procs_per_node``) and tells each its rank
as ``torchrun`` would, so the same script runs under ``torchrun --nproc_per_node=2
train.py`` too. Rank 0 checkpoints every epoch; a preempted gang resumes from it.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn

from ferry import runtime


def main() -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else "cpu"
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    mine = torch.arange(rank, len(x), world)  # each rank trains on its share
    print(f"rank {rank} of {world}: {len(mine)} of {len(x)} digits on {device}", flush=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    start = 0
    if (ckpt := runtime.checkpoint.restore(map_location="cpu")) is not None:
        model.load_state_dict(ckpt.state["model"])
        start = ckpt.state["epoch"] + 1
        print(f"rank {rank}: resuming at epoch {start}", flush=True)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    epochs = int(runtime.hparams().get("epochs", 30))
    for epoch in range(start, epochs):
        for batch in mine[
            torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))
        ].split(64):
            loss = nn.functional.cross_entropy(ddp(x[batch].to(device)), y[batch].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            with torch.no_grad():
                accuracy = (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()
            print(
                f"epoch={epoch + 1}/{epochs} loss={loss.item():.4f} accuracy={accuracy:.3f}",
                flush=True,
            )
            runtime.checkpoint.save({"model": model.state_dict(), "epoch": epoch}, epoch)
    if rank == 0:
        out = Path(os.environ.get("FERRY_MODEL_DIR", "model"))
        out.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), out / "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
