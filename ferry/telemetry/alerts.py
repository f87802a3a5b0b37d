"""Alert rules the supervisor checks while a job runs.

The monitor is fed what the supervisor already sees: metric points as they are stored,
the growth of the job's log, and telemetry samples. ``due()`` returns the alerts that
became true since the last call. Each rule fires once per episode: a NaN once per metric,
a stall or a low-utilisation spell once until progress or utilisation comes back.

The NaN rule watches the metrics that say whether training is healthy: every metric the
script reports (runtime.report, cloudml-hypertune), and, of the numbers it only prints, the
losses (``is_loss_name``) and the sweep's objective. Any other printed number may be
infinite by design (LightGBM's ``best gain: -inf``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ferry.units import format_duration, format_size

Point = tuple[int, int | None, float, str, float]  # (rank, step, time, name, value)

_INPUT_HINT = (
    "the input pipeline is likely the bottleneck: use more DataLoader workers (num_workers),"
    " pin_memory and prefetching, or a larger batch"
)


# the words of a metric name that mean a loss: loss, val_loss, train/loss, trainLoss, nll
_LOSS_WORDS = frozenset({"loss", "losses", "nll"})
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])|[^A-Za-z0-9]+")
_DIRECTIONS = frozenset({"min", "max", "minimize", "maximize"})


def is_loss_name(name: str) -> bool:
    """Whether the metric ``name`` is a loss: one of its words (split at punctuation, at
    camelCase humps and before digits) is ``loss``, ``losses`` or ``nll``."""
    return any(word.lower() in _LOSS_WORDS for word in _WORD_BREAK.split(name))


def objective_name(spec: dict[str, Any]) -> str | None:
    """The metric a sweep optimises (``sweep.objective``: ``"val_loss:min"``, ``"val_loss"``
    or ``{name: val_loss, ...}``), or None when the spec has no sweep or an unreadable one."""
    sweep = spec.get("sweep")
    objective = sweep.get("objective") if isinstance(sweep, dict) else None
    if isinstance(objective, dict):
        objective = objective.get("name") or objective.get("metric")
    if not isinstance(objective, str) or not objective.strip():
        return None
    name, colon, direction = objective.strip().rpartition(":")
    return name if colon and direction.lower() in _DIRECTIONS else objective.strip()


@dataclass(frozen=True)
class Alert:
    """Something a person should hear about."""

    kind: str  # nan | no_progress | gpu_util | memory | gpu_memory | succeeded | failed | ...
    message: str


@dataclass
class Rules:
    """Thresholds from the spec's ``alerts`` (None switches a rule off)."""

    nan: bool = True
    no_progress: float | None = 1800.0
    gpu_util_below: float | None = 10.0
    gpu_util_for: float = 600.0
    memory_above: float | None = 90.0
    gpu_memory_above: float | None = None  # off unless asked: frameworks reserve GPU memory

    @classmethod
    def from_spec(cls, alerts: dict[str, Any] | None) -> Rules:
        alerts = alerts or {}
        rules = cls()
        for name in (
            "nan",
            "no_progress",
            "gpu_util_below",
            "gpu_util_for",
            "memory_above",
            "gpu_memory_above",
        ):
            if name in alerts:
                setattr(rules, name, alerts[name])
        return rules


@dataclass
class AlertMonitor:
    """The state of each rule for one attempt."""

    rules: Rules
    memory_limit: float  # bytes the job may hold before it risks being killed
    started: float  # when the attempt started (time.time())
    objective: str | None = None  # the sweep's objective, watched even when only printed
    last_progress: float = 0.0
    stalled: bool = False
    nan_seen: set[str] = field(default_factory=set)
    low_gpu_since: float | None = None
    low_gpu_fired: bool = False
    memory_fired: bool = False
    gpu_memory_fired: set[str] = field(default_factory=set)
    pending: list[Alert] = field(default_factory=list)
    gpu_util: list[float] = field(default_factory=list)  # the last spell's samples

    def __post_init__(self) -> None:
        self.last_progress = self.started

    def saw_points(self, points: Iterable[Point], now: float, printed: bool = False) -> None:
        """Metric points the script reported, or ``printed``: of these, only the losses and
        the objective are watched for NaN."""
        progressed = False
        for rank, step, _t, name, value in points:
            progressed = True
            if (
                self.rules.nan
                and not math.isfinite(value)
                and name not in self.nan_seen
                and (not printed or name == self.objective or is_loss_name(name))
            ):
                self.nan_seen.add(name)
                at = f" at step {step}" if step is not None else ""
                who = f" (rank {rank})" if rank else ""
                word = "NaN" if math.isnan(value) else "infinite"
                self.pending.append(
                    Alert(
                        "nan",
                        f"{name} is {word}{at}{who}: training has likely diverged; a lower"
                        " learning rate or gradient clipping usually helps",
                    )
                )
        if progressed:
            self.saw_output(now)

    def saw_output(self, now: float) -> None:
        """The job logged a line or reported a metric: it is making progress."""
        self.last_progress = now
        self.stalled = False

    def saw_sample(self, sample: dict[str, float], now: float) -> None:
        """A telemetry sample of the job's processes and GPUs."""
        self._memory(sample)
        utils = [v for k, v in sample.items() if k.endswith("/util_percent")]
        below = self.rules.gpu_util_below
        if not utils or below is None:
            return
        mean = sum(utils) / len(utils)
        if mean >= below:
            self.low_gpu_since, self.low_gpu_fired, self.gpu_util = None, False, []
            return
        if self.low_gpu_since is None:
            self.low_gpu_since = now
        self.gpu_util.append(mean)
        if not self.low_gpu_fired and now - self.low_gpu_since >= self.rules.gpu_util_for:
            self.low_gpu_fired = True
            average = sum(self.gpu_util) / len(self.gpu_util)
            gpus = "GPU" if len(utils) == 1 else f"{len(utils)} GPUs"
            self.pending.append(
                Alert(
                    "gpu_util",
                    f"{gpus} averaged {average:.0f}% utilisation over the last "
                    f"{format_duration(now - self.low_gpu_since)}: {_INPUT_HINT}",
                )
            )

    def _memory(self, sample: dict[str, float]) -> None:
        above = self.rules.memory_above
        if above is None:
            return
        # the proportional share when measured (resident sizes count shared pages twice)
        rss = sample.get("sys/pss_bytes", sample.get("sys/rss_bytes"))
        if rss is not None and self.memory_limit > 0:
            share = 100.0 * rss / self.memory_limit
            if share >= above and not self.memory_fired:
                self.memory_fired = True
                self.pending.append(
                    Alert(
                        "memory",
                        f"memory at {share:.0f}% of the job's {format_size(self.memory_limit)}"
                        f" ({format_size(rss)} in use): it may be killed for lack of memory;"
                        " lower the batch size or ask for more (resources.memory)",
                    )
                )
            elif share < above - 5:
                self.memory_fired = False
        above = self.rules.gpu_memory_above
        if above is None:
            return
        for key, used in sample.items():
            if not key.endswith("/memory_used_bytes"):
                continue
            gpu = key.split("/", 1)[0]
            total = sample.get(f"{gpu}/memory_total_bytes") or 0.0
            if total <= 0:
                continue
            share = 100.0 * used / total
            if share >= above and gpu not in self.gpu_memory_fired:
                self.gpu_memory_fired.add(gpu)
                self.pending.append(
                    Alert(
                        "gpu_memory",
                        f"{gpu.upper()} memory at {share:.0f}% of {format_size(total)}:"
                        " the next larger batch or sequence may not fit (CUDA out of memory)",
                    )
                )
            elif share < above - 5:
                self.gpu_memory_fired.discard(gpu)

    def due(self, now: float) -> list[Alert]:
        """The alerts raised since the last call (checks the no-progress rule too)."""
        limit = self.rules.no_progress
        if limit is not None and not self.stalled and now - self.last_progress >= limit:
            self.stalled = True
            self.pending.append(
                Alert(
                    "no_progress",
                    f"no progress for {format_duration(now - self.last_progress)}: no metric"
                    " reported and no line logged; the job may be stuck (a hung data loader,"
                    " a deadlocked collective, a prompt waiting for input)",
                )
            )
        out, self.pending = self.pending, []
        return out
