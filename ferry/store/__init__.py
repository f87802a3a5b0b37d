"""The job store: jobs, attempts and events (SQLite by default)."""

from __future__ import annotations

from ferry.store.base import Store
from ferry.store.records import Allocation, Attempt, Event, Job

__all__ = ["Allocation", "Attempt", "Event", "Job", "Store", "open_store", "shared_store"]


_shared: dict[str, Store] = {}


def open_store() -> Store:
    """A new connection to the store under FERRY_HOME (created on first use)."""
    from ferry.config import ferry_home
    from ferry.store.sqlite import SQLiteStore

    return SQLiteStore(ferry_home() / "ferry.db")


def shared_store() -> Store:
    """One store per FERRY_HOME for this process (the Python API's; safe across forks,
    since connections are reopened lazily)."""
    from ferry.config import ferry_home

    key = str(ferry_home())
    if key not in _shared:
        _shared[key] = open_store()
    return _shared[key]
