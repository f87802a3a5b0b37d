"""Hugging Face ``Trainer``, preemptible: ``FerryCallback`` saves a checkpoint on the stop
notice, and ``last_checkpoint(output_dir)`` finds the newest complete one to resume from.

    from ferry.runtime.hf import FerryCallback, last_checkpoint, output_dir
    args = TrainingArguments(output_dir=output_dir(), save_steps=500, ...)
    trainer = Trainer(model, args, train_dataset=..., callbacks=[FerryCallback()])
    trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))

``output_dir()`` is ``FERRY_CHECKPOINT_DIR/hf`` (sent to the bucket, brought back on a new
machine). When the notice comes, the Trainer saves ``checkpoint-<step>`` at the end of the
current step and the script exits (code 143); the next attempt resumes from that step.
A checkpoint folder cut short by a kill is not complete (it lacks ``trainer_state.json``,
which the Trainer writes after the weights) and is passed over.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ferry import runtime

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def output_dir() -> str:
    """Where the Trainer should save: the job's checkpoint folder."""
    return str(runtime.checkpoint.directory() / "hf")


def last_checkpoint(folder: str | Path) -> str | None:
    """The newest complete ``checkpoint-<step>`` folder in ``folder``, or None."""
    found = []
    root = Path(folder)
    if root.is_dir():
        for entry in root.iterdir():
            match = _CHECKPOINT.match(entry.name)
            if match and (entry / "trainer_state.json").is_file():
                found.append((int(match.group(1)), entry))
    return str(max(found)[1]) if found else None


class FerryCallback(TrainerCallback):  # type: ignore[misc]
    """Saves on the stop notice, then ends the script once the checkpoint is written."""

    def __init__(self) -> None:
        self.stopping = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        runtime.preempted()  # listen for the notice; we stop at the end of the step
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if runtime.preempted():
            self.stopping = True
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.stopping:
            raise SystemExit(143)  # as SIGTERM would have ended it, once saved
        return control
