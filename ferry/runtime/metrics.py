"""``report()``: metrics from the training loop, at a fraction of a microsecond per call.

A call appends to an in-memory queue; a background thread writes the queue to the
attempt's metrics file (JSON lines) twice a second, and once more when the process exits,
so the training thread never waits on the disk. Safe from many threads (the queue is a
deque) and from every rank of a distributed job (each line carries its rank).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import threading
import time
from typing import Any

# How often the writer thread empties the queue (seconds).
FLUSH_INTERVAL = 0.5

_path = os.environ.get("FERRY_METRICS_FILE") or None
_rank_text = os.environ.get("RANK") or os.environ.get("FERRY_NODE_RANK") or "0"
_rank = int(_rank_text) if _rank_text.isdigit() else 0
_queue: collections.deque[tuple[float, int | None, dict[str, Any]]] = collections.deque()
_writer: threading.Thread | None = None
_wake = threading.Event()
_lock = threading.Lock()  # one writer at a time (the thread, atexit, flush())
_time = time.time


def report(step: int | None = None, fold: int | None = None, **metrics: float) -> None:
    """Record ``metrics`` (names to numbers) at ``step``. Returns at once.

    ``fold``: the cross-validation fold they are of; each is kept as ``NAME/foldK``, and a
    sweep's objective ``NAME`` is then the mean over the folds of each one's last value."""
    if _path is None:
        return
    if fold is not None:
        metrics = {f"{name}/fold{int(fold)}": value for name, value in metrics.items()}
    _queue.append((_time(), step, metrics))
    if _writer is None:
        _start()


def flush(blocking: bool = True) -> None:
    """Write what is queued now (the writer thread also does, twice a second). Without
    ``blocking`` (from a signal handler, which may have interrupted the very code holding
    the lock), wait at most a second for a write under way: the writer thread's ends
    sooner, and the points queued after it are written too rather than lost."""
    if _path is None or not _queue:
        return
    if not _lock.acquire(timeout=-1 if blocking else 1.0):
        return
    try:
        _drain()
    finally:
        _lock.release()


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


def _drain() -> None:
    lines = []
    while _queue:
        t, step, metrics = _queue.popleft()
        values = {k: v for k, v in ((k, _number(v)) for k, v in metrics.items()) if v is not None}
        if not values:
            continue
        record: dict[str, Any] = {"t": round(t, 6), "rank": _rank, "m": values}
        if step is not None:
            record["step"] = int(step)
        # NaN and infinities stay visible (alerts look for them): JSON's NaN/Infinity words
        lines.append(json.dumps(record, allow_nan=True))
    if lines and _path:
        with open(_path, "a") as file:
            file.write("\n".join(lines) + "\n")


def _run() -> None:
    while True:
        _wake.wait(FLUSH_INTERVAL)
        _wake.clear()
        if _queue:
            with _lock:
                _drain()


def _start() -> None:
    global _writer
    with _lock:
        if _writer is not None:
            return
        _writer = threading.Thread(target=_run, name="ferry-metrics", daemon=True)
        _writer.start()
        atexit.register(flush)


def _after_fork_in_child() -> None:
    # the writer thread does not survive a fork: a child (a DataLoader worker, say) that
    # reports starts its own
    global _writer, _lock
    _writer = None
    _lock = threading.Lock()  # the parent's writer may have held it at the fork
    _queue.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
