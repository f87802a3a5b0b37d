"""Metrics that a script only prints: JSON lines, ``key=value`` pairs, and the user's own
regular expressions (``metrics: {val_loss: 'val_loss: ([0-9.e-]+)'}``, SageMaker's
MetricDefinitions). The supervisor reads the attempt's stdout as it is logged."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from ferry.runtime.ingest import Follower, Point
from ferry.store import Store

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
# `loss=0.31`, `epoch=3/20` (a step and its total); a value must end where the word ends
_PAIR = re.compile(
    rf"(?<![\w.?&/])([A-Za-z_][\w.-]*)[=:]\s?({_NUMBER})(?:/(\d+))?(?=[\s,;|)\]]|$)", re.IGNORECASE
)
_STEP_NAMES = ("step", "global_step", "iteration", "iter", "epoch")
CHUNK = 4 << 20


def parse_line(
    text: str, patterns: dict[str, re.Pattern[str]], generic: bool = True
) -> tuple[int | None, dict[str, float]]:
    """(step, metrics) found in one printed line; without ``generic``, only the user's
    patterns are looked for (the script reports through runtime.report already)."""
    metrics: dict[str, float] = {}
    step: int | None = None
    stripped = text.strip()
    if not generic:
        metrics = {}
    elif stripped.startswith("{") and stripped.endswith("}"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key, value in data.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    metrics[str(key)] = float(value)
    else:
        for match in _PAIR.finditer(text):
            metrics[match.group(1)] = float(match.group(2))
            if match.group(3) and match.group(1) in _STEP_NAMES:  # epoch=3/20: 20 in all
                metrics["steps_total"] = float(match.group(3))
    for name in _STEP_NAMES:
        if name in metrics:
            step = int(metrics.pop(name))
            break
    for name, pattern in patterns.items():
        found = pattern.search(text)
        if found:
            try:
                metrics[name] = float(found.group(1))
            except (IndexError, ValueError):
                continue
    return step, metrics


class PrintedMetricsReader(Follower):
    """Follows one attempt's log and stores the metrics its stdout lines print."""

    def __init__(
        self,
        store: Store,
        job_id: str,
        attempt: int,
        log: Path,
        patterns: dict[str, str],
        listener: Callable[[list[Point]], None] | None = None,
    ) -> None:
        super().__init__(store, job_id, attempt, log, listener)
        self.patterns = {name: re.compile(p) for name, p in patterns.items()}
        self.offset = 0

    def read(self, generic: bool = True) -> int:
        """Store what the lines logged since the last call print; returns the points."""
        from ferry.logs import read_block

        stored = 0
        while True:
            block, offset = read_block(str(self.path), self.offset, CHUNK)
            if not block:
                return stored
            self.offset = offset
            points: list[Point] = []
            for raw in block.split(b"\n")[:-1]:
                if raw[25:26] != b"O":  # stdout lines only
                    continue
                at, text = raw[:24].decode(errors="replace"), raw[27:].decode(errors="replace")
                step, metrics = parse_line(text, self.patterns, generic)
                if metrics:
                    t = _epoch(at)
                    points += [(0, step, t, k, v) for k, v in metrics.items()]
            stored += self.keep(points)


def _epoch(stamp: str) -> float:
    import calendar
    import time

    try:
        seconds = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
        return seconds + int(stamp[20:23]) / 1000
    except ValueError:
        return time.time()
