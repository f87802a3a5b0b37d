"""The supervisor's side of ``report()``: read what the script wrote to its metrics file
since the last read, and store it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ferry.store import Store

# At most this much of the file is read per pass, so a flood of reports never stalls the
# supervisor's loop.
CHUNK = 4 << 20
Point = tuple[int, int | None, float, str, float]  # (rank, step, time, name, value)


class Follower:
    """Stores the metric points one source of an attempt yields (a file it follows), and
    tells the listener of each batch (alerts, exports)."""

    def __init__(
        self,
        store: Store,
        job_id: str,
        attempt: int,
        path: Path,
        listener: Callable[[list[Point]], None] | None = None,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.attempt = attempt
        self.path = path
        self.listener = listener
        self.names: set[str] = set()  # the metric names stored so far

    def keep(self, points: list[Point]) -> int:
        """Store ``points``; returns how many."""
        self.store.add_metrics(self.job_id, self.attempt, points)
        self.names.update(point[3] for point in points)
        if self.listener and points:
            self.listener(points)
        return len(points)


class MetricsReader(Follower):
    """Follows one attempt's metrics file."""

    offset = 0

    def read(self) -> int:
        """Store the complete lines written since the last call; returns the points stored."""
        stored = 0
        while True:
            try:
                with open(self.path, "rb") as file:
                    file.seek(self.offset)
                    data = file.read(CHUNK)
            except FileNotFoundError:
                return stored
            end = data.rfind(b"\n")
            if end < 0:
                return stored
            points: list[Point] = []
            for line in data[:end].split(b"\n"):
                try:
                    record = json.loads(line)
                    rank, step, t = (
                        int(record.get("rank", 0)),
                        record.get("step"),
                        float(record["t"]),
                    )
                    points += [(rank, step, t, str(k), float(v)) for k, v in record["m"].items()]
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue  # a line the script mangled: skip it, keep the rest
            self.keep(points)
            self.offset += end + 1
            stored += len(points)
            if len(data) < CHUNK:
                return stored


class HypertuneReader(Follower):
    """Follows cloudml-hypertune's metric file (``CLOUD_ML_HP_METRIC_FILE``). The library
    rewrites the whole file on each report, keeping the last 100 entries (one JSON object a
    line: the metric's tag and value as text, ``global_step``, ``timestamp``), so entries
    are taken by their timestamp rather than by file offset."""

    _NOT_METRICS = frozenset({"timestamp", "global_step", "trial", "checkpoint_path"})
    last = 0.0  # timestamp of the newest entry stored

    def read(self) -> int:
        try:
            lines = self.path.read_bytes().splitlines()
        except OSError:
            return 0
        points: list[Point] = []
        newest = self.last
        for line in lines:
            try:
                entry = json.loads(line)
                t = float(entry["timestamp"])
                step = int(float(entry.get("global_step") or 0))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a line being rewritten: the next read sees it whole
            if t <= self.last:
                continue
            for key, value in entry.items():
                if key in self._NOT_METRICS:
                    continue
                try:
                    points.append((0, step, t, str(key), float(value)))
                except (TypeError, ValueError):
                    continue
            newest = max(newest, t)
        self.last = newest
        return self.keep(points)
