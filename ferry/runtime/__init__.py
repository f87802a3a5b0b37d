"""Imported by the user's script: ``from ferry import runtime``.

``runtime.report(step=100, loss=0.31, val_acc=0.92)`` records metrics for the job; outside
Ferry (no ``FERRY_METRICS_FILE``) every call is a cheap no-op, so the script still runs
with plain ``python``.
"""

from __future__ import annotations

from ferry.runtime.metrics import flush, report

__all__ = ["flush", "report"]
