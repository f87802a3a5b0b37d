"""The job store: jobs, attempts and events (SQLite by default)."""

from __future__ import annotations

from ferry.store.base import Store
from ferry.store.records import Allocation, Attempt, Event, Job

__all__ = ["Allocation", "Attempt", "Event", "Job", "Store", "open_store"]


def open_store() -> Store:
    """The store under FERRY_HOME (created on first use)."""
    from ferry.config import ferry_home
    from ferry.store.sqlite import SQLiteStore

    return SQLiteStore(ferry_home() / "ferry.db")
