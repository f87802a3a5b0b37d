"""Train a small CNN on scikit-learn's bundled 8x8 digits (CPU, a few seconds).

Runs the same under Ferry and with plain `python train.py`:
- hyperparameters come from the command line, overridden by FERRY_HPARAMS when set;
- the model goes to FERRY_MODEL_DIR (or AIP_MODEL_DIR / SM_MODEL_DIR), else ./model;
- a checkpoint is written to FERRY_CHECKPOINT_DIR after every epoch and picked up again
  when the job restarts, so a retried attempt resumes instead of starting over.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for key, value in json.loads(os.environ.get("FERRY_HPARAMS") or "{}").items():
        setattr(
            args, key.replace("-", "_"), type(getattr(args, key.replace("-", "_"), value))(value)
        )
    return args


def folder(*names: str, default: str) -> Path:
    for name in names:
        if os.environ.get(name):
            return Path(os.environ[name])
    return Path(default)


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, int(os.environ.get("SM_NUM_CPUS", "1"))))
    device = "cuda" if torch.cuda.is_available() else "cpu"

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=args.seed, stratify=digits.target
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_train, y_train, test_size=0.1, random_state=args.seed, stratify=y_train
    )

    def as_tensors(a: np.ndarray, b: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(a).to(device), torch.from_numpy(b).long().to(device)

    (xt, yt), (xv, yv), (xs, ys) = (
        as_tensors(x_train, y_train),
        as_tensors(x_val, y_val),
        as_tensors(x_test, y_test),
    )

    model = DigitsCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    checkpoints = folder("FERRY_CHECKPOINT_DIR", "AIP_CHECKPOINT_DIR", default="checkpoints")
    checkpoint = checkpoints / "last.pt"
    start = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        print(f"resumed from {checkpoint} at epoch {start}", flush=True)

    generator = torch.Generator().manual_seed(args.seed)
    for epoch in range(start, args.epochs):
        began = time.perf_counter()
        model.train()
        order = torch.randperm(len(xt), generator=generator).to(device)
        total = 0.0
        for i in range(0, len(xt), args.batch_size):
            idx = order[i : i + args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        val_acc = accuracy(model, xv, yv)
        print(
            f"epoch={epoch + 1}/{args.epochs} loss={total / len(xt):.4f} val_acc={val_acc:.4f} "
            f"time={time.perf_counter() - began:.2f}s",
            flush=True,
        )
        checkpoints.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint.with_suffix(".tmp")
        torch.save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, tmp
        )
        os.replace(tmp, checkpoint)  # atomic: a kill never leaves half a checkpoint

    test_acc = accuracy(model, xs, ys)
    model_dir = folder("FERRY_MODEL_DIR", "AIP_MODEL_DIR", "SM_MODEL_DIR", default="model")
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), model_dir / "model.pt")
    (model_dir / "metrics.json").write_text(
        json.dumps({"test_accuracy": test_acc, "epochs": args.epochs})
    )
    print(f"test_accuracy={test_acc:.4f}", flush=True)
    print(f"model saved to {model_dir / 'model.pt'}", flush=True)


if __name__ == "__main__":
    main()
