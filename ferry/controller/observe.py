"""What the supervisor watches in an attempt besides its exit: the metrics the script
reports or prints, telemetry samples, the alert rules, and the TensorBoard export."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.runtime.ingest import HypertuneReader, MetricsReader
from ferry.runtime.printed import PrintedMetricsReader
from ferry.store import Job, Store
from ferry.telemetry import ALERT_PREFIX
from ferry.telemetry.alerts import Alert, AlertMonitor, Point, Rules, objective_name
from ferry.telemetry.notify import Notifier

if TYPE_CHECKING:
    from ferry.backends.base import Exit

TENSORBOARD_RUN = "ferry"  # the run (sub-folder of FERRY_TENSORBOARD_DIR) Ferry writes


def memory_limit(job: Job) -> float:
    """The memory the job may use: what it asked for, or this machine's."""
    if job.allocation.memory:
        return float(job.allocation.memory)
    import psutil

    return float(psutil.virtual_memory().total)


class Observer:
    """One attempt's metrics readers, samplers, alert monitor and exports."""

    def __init__(
        self,
        store: Store,
        job: Job,
        attempt: int,
        metrics_file: Path,
        log_path: Path,
        tensorboard_dir: Path,
        notifier: Notifier,
        hypertune_file: Path | None = None,
    ) -> None:
        from ferry.telemetry.tensorboard import EventWriter

        spec, plan = job.spec, job.plan
        alerts = plan.alerts
        self.store = store
        self.job = job
        self.attempt = attempt
        self.notifier = notifier
        self.stop_on_alert = alerts.get("on_alert") == "stop"
        self.stopped_by: Alert | None = None  # the alert that ended the attempt
        self.preempted_by: str | None = None  # who preempted it (ferry preempt, simulate)
        self.reader = MetricsReader(store, job.id, attempt, metrics_file, self._reported)
        self.printed = PrintedMetricsReader(
            store, job.id, attempt, log_path, plan.metrics, self._printed
        )
        self.hypertune = (
            HypertuneReader(store, job.id, attempt, hypertune_file, self._reported)
            if hypertune_file
            else None
        )
        self.monitor = AlertMonitor(
            Rules.from_spec(alerts), memory_limit(job), time.time(), objective_name(spec)
        )
        self.tensorboard = (
            EventWriter(tensorboard_dir / TENSORBOARD_RUN, f"attempt{attempt}")
            if plan.tracking.tensorboard
            else None
        )
        self._samplers: list[Any] | None = None

    def _reported(self, points: list[Point]) -> None:
        self.monitor.saw_points(points, time.time())
        self._export(points)

    def _printed(self, points: list[Point]) -> None:
        self.monitor.saw_points(points, time.time(), printed=True)
        self._export(points)

    def _export(self, points: list[Point]) -> None:
        if self.tensorboard is None:
            return
        try:
            self.tensorboard.add(points)
        except Exception as exc:  # never the job's undoing: its metrics are in the store
            self.store.add_event(self.job.id, f"TensorBoard export stopped: {exc!r}")
            self.tensorboard = None

    def skip_existing(self) -> None:
        """Start after what the metrics file and the log hold now (a supervisor before
        this one stored it)."""
        for reader in (self.reader, self.printed):
            try:
                reader.offset = reader.path.stat().st_size
            except OSError:
                reader.offset = 0

    def read(self, final: bool = False) -> None:
        """Store what the script reported or printed since the last call (``final``: all of
        it, the script has exited). A printed metric is stored only under a name the script
        does not report (through runtime.report or cloudml-hypertune)."""
        self.reader.read()
        reported = self.reader.names
        if self.hypertune:
            self.hypertune.read()
            reported = reported | self.hypertune.names
        before = self.printed.offset
        self.printed.read(reported, final)
        if self.printed.offset != before:
            self.monitor.saw_output(time.time())
        self._flush()

    def sample(
        self,
        pid: int | None,
        last: bool = False,
        ended: Exit | None = None,
        processes_only: bool = False,
    ) -> bool:
        """Sample the job's processes (those below ``pid``, its runner; none when the
        attempt runs elsewhere) and GPUs: first as the attempt starts (which sets the
        samplers up), then every ``telemetry.interval``, and a ``last`` time once it has
        ended (``ended``), so that even a job shorter than the interval has samples.
        Returns whether the sample found the job's processes. ``processes_only``: a look
        for them alone, not the GPUs (again while the runner starts them).

        By the last sample the processes have ended and been reaped, and ``ended`` holds
        what they used as their runner counted it: the CPU time since the previous sample
        (``sys/cpu_percent``) and the peak resident memory of the largest of them
        (``sys/rss_bytes``).
        """
        from ferry.telemetry.sampler import GpuSampler, ProcessTreeSampler

        now = time.time()
        if self._samplers is None:
            self._samplers = [GpuSampler(self.job.allocation.gpus)]
            rules = self.monitor.rules
            pss_above = (
                self.monitor.memory_limit * rules.memory_above / 100 if rules.memory_above else None
            )
            self._ended = _ended_children()  # before any of the attempt's processes ended
            self._cpu_seen = 0.0  # CPU seconds the samples so far have shown
            self._sampled_at = now
            with contextlib.suppress(Exception):  # the process may be gone already
                if pid is None:
                    raise ProcessLookupError("no local processes")
                tree = ProcessTreeSampler(pid, pss_above, include_root=False)
                self._samplers.append(tree)  # (the runner outlives attempts: from now)
        sample: dict[str, float] = {}
        for sampler in self._samplers:
            if not (processes_only and isinstance(sampler, GpuSampler)):
                sample.update(sampler.sample())
        if last and "sys/cpu_percent" not in sample:  # the processes have ended
            if ended is not None and ended.cpu_seconds is not None:
                cpu, peak, base = ended.cpu_seconds, ended.peak_rss or 0.0, (0.0, 0.0)
            else:
                (cpu, peak), base = _ended_children(), self._ended
            if now > self._sampled_at:
                used = max(0.0, cpu - base[0] - self._cpu_seen)
                sample["sys/cpu_percent"] = 100.0 * used / (now - self._sampled_at)
            if peak > base[1]:  # the largest ended process was one of the attempt's
                sample["sys/rss_bytes"] = peak
        if "sys/cpu_percent" in sample:
            self._cpu_seen += sample["sys/cpu_percent"] / 100.0 * (now - self._sampled_at)
        self._sampled_at = now
        points: list[Point] = [(0, None, now, k, v) for k, v in sample.items()]
        self.store.add_metrics(self.job.id, self.attempt, points)
        self.monitor.saw_sample(sample, now)
        self._export(points)
        return "sys/cpu_percent" in sample

    def check(self) -> Alert | None:
        """Raise the alerts that became due (events, notifications); returns the alert that
        should stop the attempt (``on_alert: stop``), if any."""
        for alert in self.monitor.due(time.time()):
            self.store.add_event(self.job.id, ALERT_PREFIX + alert.message)
            self.notifier.send(alert)
            if self.stop_on_alert and self.stopped_by is None:
                self.stopped_by = alert
        for outcome in self.notifier.outcomes():
            self.store.add_event(self.job.id, outcome)
        return self.stopped_by

    def finish(self) -> None:
        """The attempt ended: take its last metrics, and raise what they show."""
        self.read(final=True)
        self.check()

    def _flush(self) -> None:
        if self.tensorboard:
            try:
                self.tensorboard.flush()
            except OSError as exc:  # a full disk: metrics are in the store; stop exporting
                self.store.add_event(self.job.id, f"TensorBoard export stopped: {exc}")
                self.tensorboard = None


def _ended_children() -> tuple[float, float]:
    """(CPU seconds, peak resident bytes of the largest) of this process's ended and reaped
    children, as the kernel counts them."""
    import resource

    from ferry.procs import rss_bytes

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, rss_bytes(usage.ru_maxrss)
