"""Job and attempt states, and the one table of allowed job transitions.

The controller is the only writer of a job's status; every change is a guarded update in
the store, which moves a job only along :data:`TRANSITIONS` (``Store.transition``).
"""

from __future__ import annotations

import signal
from enum import Enum


class JobStatus(str, Enum):
    """Where a job is in its life."""

    QUEUED = "QUEUED"  # stored, waiting for resources on its backend
    STARTING = "STARTING"  # admitted; a supervisor is preparing or launching an attempt
    RUNNING = "RUNNING"  # an attempt's command is running
    RECOVERING = "RECOVERING"  # between attempts: preempted, lost or retrying an error
    CANCELLING = "CANCELLING"  # cancel asked; the attempt is being stopped
    SUCCEEDED = "SUCCEEDED"  # the last attempt exited 0
    FAILED = "FAILED"  # gave up: exit code, limit reached, supervisor lost, ...
    CANCELLED = "CANCELLED"  # stopped on request

    def is_terminal(self) -> bool:
        """Whether the job can never change again."""
        return self in TERMINAL

    def is_active(self) -> bool:
        """Whether the job holds resources on its backend (admitted and not finished)."""
        return self in ACTIVE

    def __str__(self) -> str:
        return self.value


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
ACTIVE = frozenset(
    {JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RECOVERING, JobStatus.CANCELLING}
)

_S = JobStatus
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _S.QUEUED: frozenset({_S.STARTING, _S.CANCELLED, _S.FAILED}),
    _S.STARTING: frozenset({_S.RUNNING, _S.RECOVERING, _S.CANCELLING, _S.SUCCEEDED, _S.FAILED}),
    _S.RUNNING: frozenset({_S.RECOVERING, _S.CANCELLING, _S.SUCCEEDED, _S.FAILED}),
    _S.RECOVERING: frozenset({_S.STARTING, _S.RUNNING, _S.RECOVERING, _S.CANCELLING, _S.FAILED}),
    _S.CANCELLING: frozenset({_S.CANCELLED, _S.FAILED, _S.SUCCEEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


def can_move(old: JobStatus, new: JobStatus) -> bool:
    """Whether the table allows ``old -> new``."""
    return new in TRANSITIONS[old]


def sources_of(new: JobStatus) -> frozenset[JobStatus]:
    """Every state from which ``new`` may be reached."""
    return frozenset(old for old, targets in TRANSITIONS.items() if new in targets)


# How an event naming the provider's own job (its console page) starts: an attached
# `ferry run` prints it as it comes
PROVIDER_JOB_PREFIX = "provider job: "


class AttemptStatus(str, Enum):
    """How one attempt went."""

    STARTING = "STARTING"  # being launched
    RUNNING = "RUNNING"  # the command runs
    SUCCEEDED = "SUCCEEDED"  # exited 0
    FAILED = "FAILED"  # exited non-zero or could not start
    TIMED_OUT = "TIMED_OUT"  # stopped at limits.max_runtime
    CANCELLED = "CANCELLED"  # stopped on request
    LOST = "LOST"  # its supervisor vanished; how the command ended is unknown
    PREEMPTED = "PREEMPTED"  # its capacity was taken back (or `ferry preempt`, simulate:)

    def is_terminal(self) -> bool:
        """Whether the attempt has ended."""
        return self not in (AttemptStatus.STARTING, AttemptStatus.RUNNING)

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------------------------------
# Exit codes


def shell_code(code: int) -> int:
    """An exit status as a shell shows it: 128+N for a death by signal N.

    The store keeps what the process reported (``-N`` for signal N); everything a person or a
    script sees goes through here, so ``ferry status``, ``--json``, ``ferry wait`` and the
    Python API all say 143 for a job ended by SIGTERM.
    """
    return 128 - code if code < 0 else code


def signal_name(code: int | None) -> str | None:
    """``'SIGTERM'`` for a stored death by signal (``-15``); None for an exit of its own."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_exit(code: int) -> str:
    """``'exit code 3'``, or ``'exit code 143 (SIGTERM)'`` for a death by signal."""
    name = signal_name(code)
    return f"exit code {shell_code(code)}" + (f" ({name})" if name else "")


def exit_fields(code: int | None) -> dict[str, int | str | None]:
    """The ``exit_code`` (128+N for signal N) and ``signal`` (its name, or None) of --json
    output and of the Python API."""
    return {"exit_code": None if code is None else shell_code(code), "signal": signal_name(code)}
