"""Following a job's output live, across its attempts, until it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry import defaults
from ferry.logs import STREAMS, read_block, split_block, tail_block, text_of
from ferry.status import PROVIDER_JOB_PREFIX, JobStatus

if TYPE_CHECKING:
    from ferry.store import Attempt, Job, Store


@dataclass(frozen=True)
class Ranks:
    """Which processes of a gang are shown: one (``only``), or all of them, each line led by
    its rank (``prefix``) when there are several."""

    only: int | None = None
    prefix: bool = False

    @classmethod
    def of(cls, job: Job, only: int | None) -> Ranks:
        """For ``job``: ``only`` that rank (None: all), refused when it has no such rank."""
        from ferry.runner.gang import procs_per_node

        size = procs_per_node(job.plan) * job.plan.resources.nodes
        if only is not None and not 0 <= only < size:
            from ferry.errors import UsageError

            have = f"ranks 0 to {size - 1}" if size > 1 else "one process, rank 0"
            raise UsageError(f"job {job.id} has no rank {only}; it has {have}")
        return cls(only, only is None and size > 1)


ALL = Ranks()


def write_block(block: bytes, timestamps: bool, streams: str, ranks: Ranks = ALL) -> None:
    """Print raw log lines: with ``streams`` "split", stdout lines to stdout and stderr lines
    to stderr (as the script wrote them); with "all", both to stdout in their order; with
    "stdout" or "stderr", only that stream's lines, to stdout. ``ranks``: whose lines."""
    if streams == "split":
        out, err = split_block(block, timestamps, ranks.only, ranks.prefix)
    else:
        only = streams if streams in STREAMS else None
        out, err = text_of(block, timestamps, only, ranks.only, ranks.prefix), b""
    for data, stream in ((out, sys.stdout), (err, sys.stderr)):
        if data:
            try:
                stream.flush()
                stream.buffer.write(data)
                stream.buffer.flush()
            except BrokenPipeError:
                raise SystemExit(0) from None


def follow(
    store: Store,
    job_id: str,
    *,
    attempt: int | None = None,
    timestamps: bool = False,
    streams: str = "split",
    tail: int | None = None,
    on_tick: Callable[[], None] | None = None,
    progress: bool = False,
    rank: int | None = None,
) -> Job:
    """Print the job's output as it is written until the job ends; return the final job.

    Starts at ``attempt``, or at the latest attempt (the first one, for a new job), and
    moves on to each later attempt unless ``attempt`` pins one. ``tail`` limits the lines
    shown from what was already written when following starts; ``streams`` says which
    lines are printed where (see :func:`write_block`). With ``progress``, a line
    under the output shows the step, rate, ETA and latest metrics (on a terminal). A gang's
    lines are each led by their rank, unless ``rank`` keeps one process's.
    """
    status = _StatusLine(progress)
    ranks = Ranks.of(store.get_job(job_id), rank)
    try:
        return _follow(store, job_id, attempt, timestamps, streams, tail, on_tick, status, ranks)
    finally:
        status.end()


def _follow(
    store: Store,
    job_id: str,
    attempt: int | None,
    timestamps: bool,
    streams: str,
    tail: int | None,
    on_tick: Callable[[], None] | None,
    status: _StatusLine,
    ranks: Ranks,
) -> Job:
    from ferry.controller import reconcile
    from ferry.followers import start

    current: Attempt | None = None
    offset = 0
    last_check = time.monotonic()

    def write(block: bytes) -> None:
        status.clear()
        write_block(block, timestamps, streams, ranks)
        status.redraw()

    while True:
        if on_tick is not None:
            on_tick()
        job = store.get_job(job_id)
        attempts = store.attempts(job_id)
        status.show(store, job)
        finished = attempt is not None and attempts and job.status.is_terminal()
        if finished and all(a.number != attempt for a in attempts):
            from ferry.errors import FerryError

            raise FerryError(
                f"job {job_id} has no attempt {attempt}",
                f"it has attempts 1 to {len(attempts)}",
            )
        if current is None:
            pick = [a for a in attempts if attempt is None or a.number == attempt]
            if pick:
                current = pick[-1]
                if tail is not None:
                    only = streams if streams in STREAMS else None
                    block, offset = tail_block(current.log_path, tail, only, ranks.only)
                    write(block)
        if current is not None:
            block, offset = read_block(current.log_path, offset)
            if block:
                write(block)
                continue
            later = [a for a in attempts if a.number > current.number]
            if attempt is None and later:
                ended = next((a for a in attempts if a.number == current.number), current)
                current, offset = later[0], 0
                if status.progress:  # (the attached run: what the last attempt said first)
                    status.next_alerts = 0.0
                    status.alerts(store, job)
                status.clear()
                why = f" ({_ended(ended)})" if ended.status.is_terminal() else ""
                print(
                    f"ferry: attempt {current.number} of {job_id}{why}", file=sys.stderr, flush=True
                )
                status.redraw()
                continue
            mine = next((a for a in attempts if a.number == current.number), current)
            if attempt is not None and mine.status.is_terminal():
                status.clear()
                drain(current.log_path, offset, timestamps, streams, ranks)
                return job
        if job.status.is_terminal():
            if current is not None:
                status.clear()
                drain(current.log_path, offset, timestamps, streams, ranks)
            status.final(store, job)
            return job
        if time.monotonic() - last_check > defaults.HEARTBEAT_INTERVAL:
            last_check = time.monotonic()
            reconcile(store, start=start)
        time.sleep(defaults.FOLLOW_POLL)


def _ended(attempt: Attempt) -> str:
    """``'attempt 1 failed: no capacity: …'``: how an attempt ended, for the next one's line."""
    said = f"attempt {attempt.number} {attempt.status.value.lower().replace('_', ' ')}"
    if not attempt.reason:
        return said
    first = attempt.reason.strip().splitlines()[0] if attempt.reason.strip() else ""
    return f"{said}: {first[:300]}" + ("…" if len(first) > 300 else "")


def drain(path: str, offset: int, timestamps: bool, streams: str, ranks: Ranks = ALL) -> None:
    """Print the log from ``offset`` to its end (see :func:`write_block`)."""
    while True:
        block, offset = read_block(path, offset)
        if not block:
            return
        write_block(block, timestamps, streams, ranks)


class _StatusLine:
    """A live line under the streamed output, on a terminal only: the copy of the inputs
    while it runs, then the training progress the script reports (``progress``)."""

    def __init__(self, progress: bool) -> None:
        self.shown = ""
        self.enabled = sys.stderr.isatty()
        self.progress = progress
        self.next_progress = 0.0
        self.next_alerts = 0.0
        self.alerts_seen = 0
        self.staging = False

    def clear(self) -> None:
        """Take the line away for a moment (output is about to be written)."""
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def redraw(self) -> None:
        if self.shown:
            sys.stderr.write(self.shown)
            sys.stderr.flush()

    def _set(self, line: str) -> None:
        """Show ``line``, cut to the terminal's width (a wrapped line could not be redrawn
        in place) and without control characters (metric names come from the script)."""
        import os

        line = "".join(c if c.isprintable() else "?" for c in line)
        try:
            width = os.get_terminal_size(sys.stderr.fileno()).columns or 80  # 0: not set
        except OSError:
            width = 80
        if len(line) >= width:
            line = line[: max(width - 2, 0)] + "…"
        if line != self.shown:
            sys.stderr.write("\r\033[K" + line)
            sys.stderr.flush()
            self.shown = line

    def alerts(self, store: Store, job: Job) -> None:
        """Print the job's alerts raised since the last call, as they happen."""
        from ferry.telemetry import ALERT_PREFIX, is_alert

        now = time.monotonic()
        if now < self.next_alerts:
            return
        self.next_alerts = now + _PROGRESS_EVERY
        found = [
            e.message
            for e in store.events(job.id)
            if is_alert(e.message) or e.message.startswith(PROVIDER_JOB_PREFIX)
        ]
        if len(found) > self.alerts_seen:
            self.clear()
            for message in found[self.alerts_seen :]:
                if is_alert(message):
                    print(f"ferry: ALERT {message.removeprefix(ALERT_PREFIX)}", file=sys.stderr)
                else:  # the provider's job, with its console page
                    print(f"ferry: {message.removeprefix(PROVIDER_JOB_PREFIX)}", file=sys.stderr)
            sys.stderr.flush()
            self.redraw()
            self.alerts_seen = len(found)

    def show(self, store: Store, job: Job) -> None:
        if self.progress:  # the attached `ferry run`, terminal or not
            self.alerts(store, job)
        if not self.enabled:
            return
        if self._staging(job):
            return
        if self.progress and job.status is JobStatus.RUNNING:  # (on a terminal)
            now = time.monotonic()
            if now >= self.next_progress:
                from ferry.cli._progress import progress_of

                line = progress_of(store, job.id).line()
                spent = time.monotonic() - now
                # at most once a second, and never more than a tenth of the time
                self.next_progress = time.monotonic() + max(_PROGRESS_EVERY, 10 * spent)
                self._set(f"ferry: {line}" if line else "")

    def final(self, store: Store, job: Job) -> None:
        """The job has ended: show its last alerts, and its progress as it ended if it was
        being shown."""
        if self.progress:
            self.next_alerts = 0.0
            self.alerts(store, job)
        if self.shown and self.progress and not self.staging:
            from ferry.cli._progress import progress_of

            line = progress_of(store, job.id).line()
            self.shown = ""
            self._set(f"ferry: {line}" if line else "")
        self.end()

    def end(self) -> None:
        """Leave the last line in place (the job's final progress) and move past it."""
        if self.shown:
            sys.stderr.write("\n" if not self.staging else "\r\033[K")
            sys.stderr.flush()
            self.shown = ""

    def _staging(self, job: Job) -> bool:
        import json
        from pathlib import Path

        from ferry.controller import STAGING_FILE
        from ferry.units import format_size

        try:
            state = json.loads((Path(job.job_dir) / STAGING_FILE).read_text())
        except (OSError, ValueError):
            if self.staging:  # staging is over
                self._set("")
                self.staging = False
            return False
        self.staging = True
        if "line" in state:  # (the environment being built)
            self._set(f"ferry: {state['line']}")
            return True
        total = max(int(state["total"]), 1)
        self._set(
            f"ferry: copying input {state['input']}: {100 * int(state['done']) // total}% "
            f"({format_size(state['done'])} of {format_size(state['total'])}, "
            f"{state['files']}/{state['all_files']} files)"
        )
        return True


_PROGRESS_EVERY = 1.0
