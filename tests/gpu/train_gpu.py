"""A training loop that keeps a GPU busy, for checking Ferry on a real NVIDIA GPU.

Run by tests/gpu/check.sh on a machine with a GPU (CI has none, so pytest does not collect
it). It trains a wide MLP on generated data, reports the loss every step through
``ferry.runtime``, saves a checkpoint every 50 steps to FERRY_CHECKPOINT_DIR (and on the
stop notice), resumes from it, and writes the model to FERRY_MODEL_DIR.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch
from torch import nn

from ferry import runtime

STEPS = int(os.environ.get("STEPS", "600"))
notice = False


def on_notice(signum: int, frame: object) -> None:
    global notice
    notice = True


def main() -> int:
    signal.signal(signal.SIGTERM, on_notice)
    if torch.cuda.is_available():
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(0)
    elif os.environ.get("ALLOW_CPU"):  # a rehearsal of check.sh without a GPU
        device, name = torch.device("cpu"), "cpu"
    else:
        print("no CUDA device visible to the job", flush=True)
        return 1
    # a wide model keeps a GPU busy; a rehearsal on the CPU needs a small one
    width = int(os.environ.get("WIDTH") or (4096 if device.type == "cuda" else 256))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"device {name} CUDA_VISIBLE_DEVICES={visible}", flush=True)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ckpt_dir = Path(os.environ.get("FERRY_CHECKPOINT_DIR", "checkpoints"))
    ckpt = ckpt_dir / "last.pt"
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
        print(f"resumed from step {start}", flush=True)

    def save(step: int) -> None:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        tmp = ckpt_dir / ".tmp-last.pt"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        os.replace(tmp, ckpt)

    x = torch.randn(2 * width, width, device=device)
    y = x[:, :1].clone()
    for step in range(start, STEPS):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for _ in range(6):  # more matrix work per step, so utilisation is high
            model(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        runtime.report(step=step, loss=loss.item())
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            save(step)
        if notice:
            save(step)
            print(f"notice at step {step}: saved", flush=True)
            return 143
        time.sleep(0.01)
    model_dir = Path(os.environ.get("FERRY_MODEL_DIR", "model"))
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), model_dir / "model.pt")
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
