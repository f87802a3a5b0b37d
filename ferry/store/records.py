"""Immutable snapshots the store hands out: a job (what was asked), its attempts (each run)
and its events (every change, with time and reason)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferry.status import AttemptStatus, JobStatus

if TYPE_CHECKING:
    from ferry.store.plan import Plan


@dataclass(frozen=True)
class Allocation:
    """What a job holds on its backend while active."""

    cpus: float = 0.0
    memory: int = 0  # bytes
    gpus: tuple[int, ...] = ()  # device indices (local backend)

    def to_json(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "memory": self.memory, "gpus": list(self.gpus)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Allocation:
        if not data:
            return cls()
        return cls(float(data["cpus"]), int(data["memory"]), tuple(data["gpus"]))


@dataclass(frozen=True)
class Job:
    """One job as stored. Fields change only through the store; this is a snapshot."""

    id: str
    name: str
    seq: int  # submission order, used for FIFO admission
    status: JobStatus
    backend: str
    spec: dict[str, Any]  # the validated JobSpec as JSON (no secret values)
    job_dir: str  # private folder: code snapshot, attempt logs
    outputs: str  # where results go
    created_at: float
    updated_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    allocation: Allocation = field(default_factory=Allocation)
    supervisor_pid: int | None = None
    supervisor_host: str | None = None
    supervisor_started: float | None = None  # the supervisor process's start time
    heartbeat_at: float | None = None
    # what its attempts used of its retries (ferry.controller.policy.History): preempted or
    # lost attempts and lost supervisors (one count against retries.on_preemption), failed
    # attempts started again under retries.on_error, and under retries.on_exit_codes
    preemptions: int = 0
    retries: int = 0
    code_retries: int = 0

    @property
    def command(self) -> list[str]:
        return list(self.plan.command)

    @functools.cached_property
    def plan(self) -> Plan:
        """The spec, typed, as the controller reads it."""
        from ferry.store.plan import Plan

        return Plan.of(self.spec)


@dataclass(frozen=True)
class Attempt:
    """One run of a job's command."""

    job_id: str
    number: int  # 1, 2, ...
    status: AttemptStatus
    backend: str
    host: str
    log_path: str
    started_at: float
    handle: str | None = None  # backend's id for the running attempt (local: process group)
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    cost: float = 0.0  # USD accrued so far (kept up to date while it runs)
    price: float = 0.0  # USD per hour, as recorded at launch (spot price for spot)
    offering: str | None = None  # what it ran on: "local", "gcp us-central1 a2-highgpu-1g spot"
    billed: bool = False  # ``cost`` is what the provider billed (it stands as it is)

    def cost_at(self, now: float) -> float:
        """USD spent by ``now``: the price over the time it ran (or has run so far)."""
        end = self.ended_at if self.ended_at is not None else now
        return accrued(self.cost, self.price, self.started_at, end, self.billed)


def accrued(recorded: float, price: float, started: float, ended: float, billed: bool) -> float:
    """An attempt's cost: what its provider billed, when it said (``billed``); else its
    price (USD per hour) over the time it ran, or what was recorded for it if more."""
    if billed:
        return recorded
    return max(recorded, price * max(0.0, ended - started) / 3600)


@dataclass(frozen=True)
class Spend:
    """One attempt's cost, with what a report groups it by."""

    job_id: str
    job_name: str
    attempt: int
    backend: str
    accelerator: str | None  # "A100:1", or None for CPU only
    offering: str | None
    price: float
    started_at: float
    ended_at: float | None
    cost: float  # up to the time of the query for a running attempt


@dataclass(frozen=True)
class Event:
    """Something that happened to a job: a status change or a note."""

    job_id: str
    at: float
    kind: str  # "status" or "note"
    message: str
    old_status: JobStatus | None = None
    new_status: JobStatus | None = None


@dataclass(frozen=True)
class MetricSummary:
    """One metric of a job: how many points, the last value and the extremes."""

    name: str
    points: int
    last: float | None
    last_step: int | None
    last_at: float
    minimum: float | None
    maximum: float | None
