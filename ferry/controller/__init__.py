"""One job's life: submission, admission, attempts, retries, limits, cancel and recovery
of lost supervisors.

This package is the only writer of a job's status. :func:`submit` stores a job and, when
the backend has room, has it followed (by the :data:`Starter` its caller hands it: a
supervisor of its own, or the watcher); :func:`supervise` is what follows it;
:func:`reconcile` (called by every ``ferry`` command) turns a supervisor that vanished into
a lost attempt; :func:`schedule` admits queued jobs. It starts no process itself: the
processes that run it (:mod:`ferry.supervisor`, :mod:`ferry.watcher`) sit above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry.controller.jobs import (
    LAUNCH_FILE,
    Starter,
    cancel,
    exit_status,
    jobs_root,
    preempt,
    reconcile,
    schedule,
    submit,
    supervisor_alive,
)
from ferry.runner.machine import STAGING_FILE
from ferry.status import describe_exit

if TYPE_CHECKING:
    from ferry.controller.attempts import supervise
    from ferry.controller.watch import Control


def __getattr__(name: str) -> Any:
    # the attempts half is the supervisor's: submitting and listing never load it
    if name in ("Control", "supervise"):
        from ferry.controller import attempts

        return getattr(attempts, name)
    raise AttributeError(f"module 'ferry.controller' has no attribute {name!r}")


__all__ = [
    "LAUNCH_FILE",
    "STAGING_FILE",
    "Control",
    "Starter",
    "cancel",
    "describe_exit",
    "exit_status",
    "jobs_root",
    "preempt",
    "reconcile",
    "schedule",
    "submit",
    "supervise",
    "supervisor_alive",
]
