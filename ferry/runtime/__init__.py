"""Imported by the user's script: ``from ferry import runtime``.

- ``runtime.report(step=100, loss=0.31, val_acc=0.92)`` records metrics for the job.
- ``runtime.checkpoint.save(state, step)`` / ``runtime.checkpoint.restore()``: checkpoints a
  preempted job resumes from.
- ``runtime.preempted()`` / ``runtime.on_preemption(fn)``: the stop notice.
- ``runtime.hparams()``: the job's hyperparameters.

Outside Ferry every call is a cheap no-op or works on local folders, so the script still
runs with plain ``python``.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from ferry.runtime.metrics import flush, report
from ferry.runtime.preemption import on_preemption, preempted

if TYPE_CHECKING:
    from ferry.runtime import checkpoint


def __getattr__(name: str) -> Any:
    # `runtime.checkpoint` is imported when first used: report() alone stays light
    if name == "checkpoint":
        import importlib

        return importlib.import_module("ferry.runtime.checkpoint")
    raise AttributeError(f"module 'ferry.runtime' has no attribute {name!r}")


def hparams() -> dict[str, Any]:
    """The job's hyperparameters (``FERRY_HPARAMS``; SageMaker's ``SM_HPS``), or ``{}``."""
    for var in ("FERRY_HPARAMS", "SM_HPS"):
        text = os.environ.get(var)
        if text:
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return {}


__all__ = ["checkpoint", "flush", "hparams", "on_preemption", "preempted", "report"]
