"""What follows an attempt's end: a pure function of how it ended, what came before, and
the job's retry limits.

Every backend ends an attempt in one of the :class:`Outcome` states; :func:`decide` says
how the attempt is recorded, whether the job ends (and how), or which counter the next
attempt uses and how long it waits. It reads no store, clock or configuration, so the whole
policy is tested in-process, and every backend gets the same one.

One counter covers preemptions: a preempted attempt, an attempt the backend lost, and a
lost supervisor all count against ``retries.on_preemption``; the count is kept on the job
(:attr:`ferry.store.Job.preemptions`), so a new supervisor goes on from where the last one
stopped.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ferry.status import AttemptStatus, JobStatus, describe_exit, shell_code

# retries.on_exit_codes are not counted against on_error, but not endless either
MAX_CODE_RETRIES = 100


class Outcome(enum.Enum):
    """How an attempt ended."""

    EXITED = "exited"  # its command exited by itself (any code, a signal included)
    PREEMPTED = "preempted"  # its capacity was taken back (spot, `ferry preempt`, simulate)
    LOST = "lost"  # the backend lost it (a node died, a head restarted): resumed like a preemption
    PROVIDER_FAILED = "provider_failed"  # the backend could not run it, with the provider's reason
    NO_CAPACITY = "no_capacity"  # refused for capacity or quota: the next offering is tried
    CANCELLED = "cancelled"  # stopped on request
    TIMED_OUT = "timed_out"  # limits.max_runtime
    BUDGET = "budget"  # limits.max_cost
    MONTHLY_BUDGET = "monthly_budget"  # budget.monthly with budget.hard
    ALERT = "alert"  # an alert, with on_alert: stop


@dataclass(frozen=True)
class Ended:
    """An attempt's end, as the controller saw it."""

    outcome: Outcome
    code: int | None = None  # its exit status (``-N``: signal N), when it exited
    # what ended it, in words: the log's last lines for a failing exit, who preempted it,
    # the provider's reason, the limit or alert that stopped it
    detail: str = ""
    # what the script wrote to its failure file, and where that file is (SageMaker's way
    # to say why it failed, even with exit code 0)
    said: tuple[str, str] | None = None


@dataclass(frozen=True)
class History:
    """What the job's earlier attempts used of its limits."""

    preemptions: int = 0  # preempted or lost attempts, and lost supervisors
    retries: int = 0  # failed attempts started again under retries.on_error
    code_retries: int = 0  # failed attempts started again under retries.on_exit_codes


@dataclass(frozen=True)
class Limits:
    """The job's ``retries`` section."""

    on_preemption: int = 20
    on_error: int = 0
    on_exit_codes: frozenset[int] = frozenset()

    @classmethod
    def of(cls, retries: Mapping[str, Any] | None) -> Limits:
        """From a stored spec's ``retries`` (defaults where absent)."""
        given = retries or {}
        return cls(
            on_preemption=int(given.get("on_preemption", 20)),
            on_error=int(given.get("on_error", 0)),
            on_exit_codes=frozenset(int(c) for c in given.get("on_exit_codes") or ()),
        )


class Counter(enum.Enum):
    """The History counter a new attempt is charged to."""

    PREEMPTIONS = "preemptions"
    RETRIES = "retries"
    CODE_RETRIES = "code_retries"


@dataclass(frozen=True)
class Decision:
    """What follows an attempt: the job ends (``job`` set), or a new attempt starts."""

    attempt: AttemptStatus  # how the attempt is recorded
    reason: str  # the attempt's reason; also the job's when it ends
    job: JobStatus | None = None  # the job's final state; None: another attempt follows
    charge: Counter | None = None  # the counter the next attempt uses
    why: str = ""  # why another attempt starts (the event's text)
    backoff: int = 0  # rounds of backoff before it starts (0: at once)

    @property
    def retry(self) -> bool:
        return self.job is None


def resume_allowed(history: History, limits: Limits) -> tuple[bool, int]:
    """Whether one more preemption (or loss) still allows a new attempt, and its number."""
    used = history.preemptions + 1
    return used <= limits.on_preemption, used


def decide(ended: Ended, history: History, limits: Limits) -> Decision:
    """What follows an attempt that ended as ``ended``, after ``history``, under ``limits``."""
    outcome, code = ended.outcome, ended.code
    if outcome is Outcome.EXITED and code is None:
        raise ValueError("an attempt that exited has an exit code")
    if outcome is Outcome.EXITED and ended.said:
        text, where = ended.said
        reason = f"{text} (from {where}; {describe_exit(code or 0)})"
        return _failed(reason, history, limits)  # the script said why: never a code retry
    if outcome is Outcome.EXITED and code == 0:
        return Decision(AttemptStatus.SUCCEEDED, "exit code 0", JobStatus.SUCCEEDED)
    if outcome is Outcome.EXITED:
        reason = ended.detail or describe_exit(code or 0)
        shown = shell_code(code or 0)
        if shown in limits.on_exit_codes:
            done = history.code_retries
            if done >= MAX_CODE_RETRIES:
                reason = f"{reason}; retried {MAX_CODE_RETRIES} times (retries.on_exit_codes)"
                return Decision(AttemptStatus.FAILED, reason, JobStatus.FAILED)
            why = f"{reason}; exit code {shown} is always retried (retries.on_exit_codes)"
            return Decision(
                AttemptStatus.FAILED,
                reason,
                charge=Counter.CODE_RETRIES,
                why=why,
                backoff=max(done + 1, history.retries, 1),
            )
        return _failed(reason, history, limits)
    if outcome in (Outcome.PREEMPTED, Outcome.LOST):
        status = AttemptStatus.PREEMPTED if outcome is Outcome.PREEMPTED else AttemptStatus.LOST
        allowed, used = resume_allowed(history, limits)
        word = "preempted" if outcome is Outcome.PREEMPTED else "lost"
        what = f" ({ended.detail})" if ended.detail else ""
        if not allowed:
            reason = f"{word} {used} times (retries.on_preemption is {limits.on_preemption})"
            return Decision(status, reason, JobStatus.FAILED)
        reason = f"{word}{what}; {used} of {limits.on_preemption}"
        # capacity comes back at once: no backoff
        return Decision(status, reason, charge=Counter.PREEMPTIONS, why=reason)
    if outcome is Outcome.NO_CAPACITY:  # (charged as a preemption: capacity, not the job)
        allowed, used = resume_allowed(history, limits)
        what = ended.detail or "no capacity"
        if not allowed:
            reason = f"no capacity: {what}; {used} attempts refused or preempted"
            return Decision(AttemptStatus.FAILED, reason, JobStatus.FAILED)
        reason = f"no capacity: {what}"
        why = f"{reason}; trying the next offering ({used} of {limits.on_preemption})"
        return Decision(AttemptStatus.FAILED, reason, charge=Counter.PREEMPTIONS, why=why)
    if outcome is Outcome.PROVIDER_FAILED:
        return _failed(ended.detail or "the backend could not run the attempt", history, limits)
    if outcome is Outcome.CANCELLED:
        return Decision(AttemptStatus.CANCELLED, "cancelled", JobStatus.CANCELLED)
    if outcome is Outcome.TIMED_OUT:
        reason = ended.detail or "max_runtime reached"
        return Decision(AttemptStatus.TIMED_OUT, reason, JobStatus.FAILED)
    # the job's cost cap, the monthly budget, an alert: the job ends, never retried
    reason = ended.detail or outcome.value.replace("_", " ")
    return Decision(AttemptStatus.FAILED, reason, JobStatus.FAILED)


def _failed(reason: str, history: History, limits: Limits) -> Decision:
    """A failing attempt: retried while retries.on_error allows, else the job fails."""
    if history.retries < limits.on_error:
        n = history.retries + 1
        return Decision(
            AttemptStatus.FAILED,
            reason,
            charge=Counter.RETRIES,
            why=f"retry {n} of {limits.on_error} after {reason}",
            backoff=max(n, history.code_retries, 1),
        )
    return Decision(AttemptStatus.FAILED, reason, JobStatus.FAILED)
