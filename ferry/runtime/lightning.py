"""PyTorch Lightning, preemptible: ``FerryCheckpoint`` saves on the stop notice and
``trainer.fit(model, ckpt_path="last")`` resumes from it.

    from ferry.runtime.lightning import FerryCheckpoint
    trainer = L.Trainer(callbacks=[FerryCheckpoint(every_n_train_steps=200)])
    trainer.fit(model, datamodule, ckpt_path="last")   # from scratch the first time

It is Lightning's ``ModelCheckpoint`` (every option works) writing to the job's checkpoint
folder (``FERRY_CHECKPOINT_DIR/lightning``, which Ferry sends to the bucket and brings back
on a new machine) with ``save_last=True``. When the notice comes (preemption, a limit, a
cancel), it writes ``last.ckpt`` at the end of the current batch, atomically, and the
script exits (code 143); the next attempt resumes from that step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint

from ferry import runtime


class FerryCheckpoint(ModelCheckpoint):  # type: ignore[misc]
    """``ModelCheckpoint`` into the job's checkpoint folder that also saves on the notice."""

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("save_last", True)
        folder = dirpath or runtime.checkpoint.directory() / "lightning"
        super().__init__(dirpath=str(folder), **kwargs)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        runtime.preempted()  # listen for the notice; we stop at the end of the batch

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if runtime.preempted() or getattr(trainer, "received_sigterm", False):
            self.save_now(trainer)
            raise SystemExit(143)  # as SIGTERM would have ended it, once saved

    def save_now(self, trainer: Any) -> Path:
        """Write ``last.ckpt`` now: a temporary file renamed over the old one."""
        path = Path(str(self.dirpath)) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"
        tmp = path.with_name(path.name + ".tmp")
        trainer.save_checkpoint(str(tmp))  # every rank takes part; rank 0 writes
        if trainer.is_global_zero:
            with open(tmp, "rb") as file:
                os.fsync(file.fileno())
            os.replace(tmp, path)
        return path
