"""Ferry: train a custom model here first, then on whatever accelerator fits, from one spec.

``import ferry`` stays light: the API below is imported on first use.
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
_imported_ns = _time.time_ns()  # a file of Ferry changed after this is not what runs here

if TYPE_CHECKING:
    from ferry.api import Job, get_job, list_jobs, submit
    from ferry.spec import JobSpec
    from ferry.status import JobStatus

_LAZY = {
    "submit": "ferry.api",
    "Job": "ferry.api",
    "get_job": "ferry.api",
    "list_jobs": "ferry.api",
    "JobSpec": "ferry.spec",
    "JobStatus": "ferry.status",
    "FerryError": "ferry.errors",
}

__all__ = ["FerryError", "Job", "JobSpec", "JobStatus", "get_job", "list_jobs", "submit"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ferry' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
