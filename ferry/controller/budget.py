"""Spending limits: a job's ``limits.max_cost``, and the monthly budget of all jobs
(``ferry budget set --monthly 500 [--hard]``).

A job is stopped through the preemption path (SIGTERM, the grace period, then SIGKILL: the
script can save) once its accrued cost plus the next sampling interval and the grace period
would pass its ``max_cost``: it never costs more, even if the script takes the whole grace
to end. An attempt is not launched once the earlier ones have spent the cap.

Once the month's spending reaches the monthly budget, new submissions are refused; with
``--hard``, running jobs are stopped too. Spending is the attempts' prices (recorded at
launch) over the time they ran, preempted attempts included.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry import config
from ferry.errors import FerryError
from ferry.units import format_usd

if TYPE_CHECKING:
    from ferry.store import Store


class BudgetSpent(FerryError):
    """The monthly budget is spent: nothing new starts."""


def month_start(now: float | None = None) -> float:
    """The start of this calendar month (local time), as a timestamp."""
    today = datetime.datetime.fromtimestamp(time.time() if now is None else now)
    return today.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def spent_since(store: Store, since: float, until: float | None = None) -> float:
    """USD spent by every job between ``since`` and ``until`` (now)."""
    return sum(s.cost for s in store.spending(since, until))


@dataclass(frozen=True)
class Monthly:
    """The monthly budget and what this month has spent of it."""

    limit: float | None
    hard: bool
    spent: float
    since: float

    @property
    def exhausted(self) -> bool:
        """Whether the month's spending has reached the budget."""
        return self.limit is not None and self.spent >= self.limit

    def describe(self) -> str:
        """``'312.40 of 500.00 USD spent this month (62 %)'``."""
        if self.limit is None:
            return f"{format_usd(self.spent)} USD spent this month; no monthly budget set"
        share = 100 * self.spent / self.limit
        hard = ", hard: running jobs stop when it is spent" if self.hard else ""
        return f"{self.spent:,.2f} of {self.limit:,.2f} USD spent this month ({share:.0f} %){hard}"


def monthly(store: Store, now: float | None = None) -> Monthly:
    """The monthly budget as configured, and this month's spending."""
    since = month_start(now)
    return Monthly(
        config.get("budget.monthly"),
        bool(config.get("budget.hard")),
        spent_since(store, since, now),
        since,
    )


def check_submission(store: Store) -> None:
    """Refuse a new job once the monthly budget is spent."""
    if config.get("budget.monthly") is None:
        return
    state = monthly(store)
    if state.exhausted:
        since = datetime.date.fromtimestamp(state.since).isoformat()
        raise BudgetSpent(
            f"the monthly budget of {state.limit:,.2f} USD is spent "
            f"({state.spent:,.2f} USD since {since}); the job was not submitted",
            "raise it with ferry budget set --monthly AMOUNT, or wait for next month",
        )


@dataclass
class CostCap:
    """What one attempt's watcher needs to enforce ``limits.max_cost``."""

    max_cost: float | None
    spent_before: float  # by the job's earlier attempts
    price: float  # USD per hour of this attempt
    started: float  # when this attempt started (time.time())

    def accrued(self, now: float) -> float:
        """USD the job has cost so far."""
        return self.spent_before + self.price * max(0.0, now - self.started) / 3600

    def reached(self, now: float, lookahead: float) -> bool:
        """Whether the cost, ``lookahead`` seconds from now, would pass ``max_cost``."""
        if self.max_cost is None or (self.price <= 0 and self.spent_before < self.max_cost):
            return False
        return self.accrued(now + lookahead) > self.max_cost

    def reason(self) -> str:
        """The failure reason a person reads."""
        return f"budget reached: {self.max_cost or 0:.2f} USD"


def attempts_so_far_cost(store: Store, job_id: str) -> float:
    """USD a job's attempts have cost so far."""
    now = time.time()
    return sum(a.cost_at(now) for a in store.attempts(job_id))
