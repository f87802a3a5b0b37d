"""Offerings and prices (a shipped snapshot, refreshable), the estimator and the optimizer.

``from ferry.catalog import load_catalog`` reads the offerings; ``ferry.catalog.optimizer``
ranks the ones that fit a job's resources; ``ferry.catalog.refresh`` fetches current prices
from the providers' public price lists.
"""

from __future__ import annotations

from ferry.catalog.offerings import Catalog, Flagged, Offering, load_catalog

__all__ = ["Catalog", "Flagged", "Offering", "load_catalog"]
