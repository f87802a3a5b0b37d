"""A job's training progress as the script reports it: step, total, rate, ETA and the
latest values of its own metrics (shared by `ferry top` and attached `ferry run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferry.telemetry import is_telemetry
from ferry.units import format_duration

if TYPE_CHECKING:
    from ferry.store import Store
    from ferry.store.records import MetricSummary


@dataclass
class Progress:
    step: int | None = None
    total: int | None = None
    per_second: float | None = None
    eta: float | None = None  # seconds
    latest: list[tuple[str, float]] = field(default_factory=list)  # the script's own metrics
    summaries: dict[str, MetricSummary] = field(default_factory=dict)

    @property
    def step_text(self) -> str:
        if self.step is None:
            return ""
        return f"{self.step}/{self.total}" if self.total else str(self.step)

    @property
    def rate_text(self) -> str:
        return f"{self.per_second:.3g}/s" if self.per_second else ""

    @property
    def eta_text(self) -> str:
        return format_duration(self.eta) if self.eta is not None else ""

    def metrics_text(self, limit: int = 3) -> str:
        return ", ".join(f"{name}={value:.4g}" for name, value in self.latest[:limit])

    def line(self) -> str:
        """One line for a terminal: ``step 120/600 · 4.1/s · ETA 1m57s · loss=0.31``."""
        parts = [f"step {self.step_text}" if self.step_text else ""]
        parts += [self.rate_text, f"ETA {self.eta_text}" if self.eta_text else ""]
        parts.append(self.metrics_text(4))
        return " · ".join(p for p in parts if p)


def progress_of(store: Store, job_id: str) -> Progress:
    summaries = {s.name: s for s in store.metric_summaries(job_id)}
    out = Progress(summaries=summaries)
    found = store.step_progress(job_id)
    if found:
        first, t0, last, t1 = found
        out.step = last
        if t1 > t0 and last > first:
            out.per_second = (last - first) / (t1 - t0)
        total = summaries.get("steps_total")
        if total and total.last and total.last > last:
            out.total = int(total.last)
            if out.per_second:
                out.eta = (total.last - last) / out.per_second
        elif total and total.last:
            out.total = int(total.last)
    out.latest = [
        (name, s.last)
        for name, s in summaries.items()
        if not is_telemetry(name) and name != "steps_total" and s.last is not None
    ]
    return out
