"""The job store's contract: every store (SQLite now, others later) implements this.

The controller is the only caller that changes a job's status, and does so only through
:meth:`Store.transition` (or :meth:`Store.admit` for QUEUED -> STARTING), which succeed only
when the job is still in one of the expected states; a lost race raises
:class:`ferry.errors.TransitionError`, so two processes never both move one job. Records
handed out are immutable snapshots.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ferry.errors import TransitionError
from ferry.status import JobStatus, sources_of
from ferry.store.records import Allocation, Attempt, Event, Job, MetricSummary, Spend

# Decides admissions: given the queued jobs (oldest first) and the active ones, returns the
# (job id, allocation) pairs to move from QUEUED to STARTING.
AdmitFn = Callable[[Sequence[Job], Sequence[Job]], list[tuple[str, Allocation]]]


class IdTaken(Exception):
    """The job id chosen for a new job already exists (the caller picks another)."""


class Store(abc.ABC):
    """Jobs, attempts and events, safe under many concurrent processes."""

    @abc.abstractmethod
    def create_job(
        self,
        *,
        job_id: str,
        name: str,
        backend: str,
        spec: dict[str, Any],
        job_dir: str,
        outputs: str,
    ) -> Job:
        """Store a new QUEUED job; raise :class:`IdTaken` if ``job_id`` is in use."""

    @abc.abstractmethod
    def get_job(self, job_id: str) -> Job:
        """The job with exactly this id; raises JobNotFound."""

    @abc.abstractmethod
    def find_jobs(self, prefix: str) -> list[Job]:
        """Jobs whose id is ``prefix`` or starts with it (exact match alone if there is one)."""

    @abc.abstractmethod
    def list_jobs(
        self, statuses: Iterable[JobStatus] | None = None, limit: int | None = None
    ) -> list[Job]:
        """Jobs, newest first, optionally only those in ``statuses``."""

    def transition(
        self,
        job_id: str,
        new: JobStatus,
        *,
        expected: Iterable[JobStatus],
        reason: str | None = None,
        attempt: tuple[int, dict[str, Any]] | None = None,
        supervised_by: tuple[int | None, float | None] | None = None,
        **fields: Any,
    ) -> Job:
        """Move a job to ``new`` if it is in one of ``expected`` and the transition table
        (:data:`ferry.status.TRANSITIONS`) allows the move from there; record an event.

        With ``supervised_by`` (a supervisor's pid and start time), only if those are
        still the job's: whoever finds a supervisor lost claims its job exactly once.

        ``fields`` are other job columns to set in the same update (``exit_code``,
        ``ended_at``, ...); ``attempt`` is ``(number, fields)`` of one of its attempts to
        update in the same transaction. Raises TransitionError when the job is in another
        state (and then changes nothing).
        """
        allowed = frozenset(expected) & sources_of(new)
        if not allowed:
            shown = " or ".join(sorted(s.value for s in expected))
            raise TransitionError(f"a job never moves from {shown} to {new.value}")
        return self._transition(
            job_id,
            new,
            expected=allowed,
            reason=reason,
            attempt=attempt,
            supervised_by=supervised_by,
            **fields,
        )

    @abc.abstractmethod
    def _transition(
        self,
        job_id: str,
        new: JobStatus,
        *,
        expected: frozenset[JobStatus],
        reason: str | None,
        attempt: tuple[int, dict[str, Any]] | None,
        supervised_by: tuple[int | None, float | None] | None,
        **fields: Any,
    ) -> Job:
        """:meth:`transition`'s guarded update, with ``expected`` already narrowed to the
        states the table allows: one atomic change, or TransitionError and no change."""

    @abc.abstractmethod
    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set non-status fields (heartbeat, supervisor pid)."""

    @abc.abstractmethod
    def beat(self, job_ids: Sequence[str], pid: int, host: str, when: float) -> None:
        """Set the heartbeat of those of ``job_ids`` that the supervisor ``pid`` on
        ``host`` still has (a watcher beats for every job it follows at once)."""

    @abc.abstractmethod
    def admit(self, decide: AdmitFn, backend: str) -> list[Job]:
        """Move the jobs ``decide`` picks to STARTING, atomically: no other process changes
        the jobs between the decision and the move (a store may decide without the write
        lock and take it only to write, redeciding if something changed).

        ``decide`` sees the oldest queued jobs (at most ``defaults.ADMISSION_WINDOW``).
        """

    @abc.abstractmethod
    def add_attempt(
        self,
        job_id: str,
        *,
        backend: str,
        host: str,
        log_dir: str,
        price: float = 0.0,
        offering: str | None = None,
        **job_fields: Any,
    ) -> Attempt:
        """Start the next numbered attempt of a job, recording what it runs on and its price
        in USD per hour (and set ``job_fields`` on the job, such as its supervisor, in the
        same transaction)."""

    @abc.abstractmethod
    def update_attempt(self, job_id: str, number: int, **fields: Any) -> Attempt:
        """Set fields of one attempt."""

    @abc.abstractmethod
    def attempts(self, job_id: str) -> list[Attempt]:
        """A job's attempts, first to last."""

    @abc.abstractmethod
    def spending(self, since: float, until: float | None = None) -> list[Spend]:
        """The cost of every attempt that ran between ``since`` and ``until`` (default now),
        oldest first: the part of it spent in that window (a running attempt's, up to now)."""

    @abc.abstractmethod
    def add_event(self, job_id: str, message: str) -> None:
        """Record a note about a job (not a status change)."""

    @abc.abstractmethod
    def events(self, job_id: str) -> list[Event]:
        """A job's events, oldest first."""

    @abc.abstractmethod
    def add_metrics(
        self, job_id: str, attempt: int, points: list[tuple[int, int | None, float, str, float]]
    ) -> None:
        """Store metric points: (rank, step, time, name, value)."""

    @abc.abstractmethod
    def metrics_after(
        self, job_id: str, after: int, limit: int = 10_000
    ) -> list[tuple[int, int, int, int | None, float, str, float | None]]:
        """Points stored after point id ``after``, oldest first, for followers:
        (id, attempt, rank, step, time, name, value)."""

    @abc.abstractmethod
    def metric_series(
        self, job_id: str, name: str, max_points: int = 2000
    ) -> list[tuple[float, int | None, float | None]]:
        """(time, step, value) points of one metric, oldest first, averaged down to at most
        about ``max_points`` for charts."""

    @abc.abstractmethod
    def step_progress(self, job_id: str) -> tuple[int, float, int, float] | None:
        """(first step, its time, last step, its time) over the job's reported steps."""

    @abc.abstractmethod
    def metric_summaries(self, job_id: str) -> list[MetricSummary]:
        """Per metric of a job: count, last value (latest time), minimum and maximum."""

    def close(self) -> None:  # noqa: B027 - optional for stores without resources
        """Release connections."""
