"""Following a job's output live, across its attempts, until it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ferry import defaults
from ferry.logs import read_block, split_block, tail_block

if TYPE_CHECKING:
    from ferry.store import Attempt, Job, Store


def write_block(block: bytes, timestamps: bool, split_streams: bool) -> None:
    """Print raw log lines; stderr lines go to stderr when ``split_streams``."""
    out, err = split_block(block, timestamps)
    if not split_streams:
        out, err = out + err, b""
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
    split_streams: bool = True,
    tail: int | None = None,
    on_tick: Callable[[], None] | None = None,
) -> Job:
    """Print the job's output as it is written until the job ends; return the final job.

    Starts at ``attempt``, or at the latest attempt (the first one, for a new job), and
    moves on to each later attempt unless ``attempt`` pins one. ``tail`` limits the lines
    shown from what was already written when following starts.
    """
    from ferry.controller import reconcile

    current: Attempt | None = None
    offset = 0
    last_check = time.monotonic()
    staging = _StagingLine()
    while True:
        if on_tick is not None:
            on_tick()
        job = store.get_job(job_id)
        attempts = store.attempts(job_id)
        staging.show(job)
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
                    block, offset = tail_block(current.log_path, tail)
                    write_block(block, timestamps, split_streams)
        if current is not None:
            block, offset = read_block(current.log_path, offset)
            if block:
                write_block(block, timestamps, split_streams)
                continue
            later = [a for a in attempts if a.number > current.number]
            if attempt is None and later:
                current, offset = later[0], 0
                print(f"ferry: attempt {current.number} of {job_id}", file=sys.stderr, flush=True)
                continue
            mine = next((a for a in attempts if a.number == current.number), current)
            if attempt is not None and mine.status.is_terminal():
                drain(current.log_path, offset, timestamps, split_streams)
                return job
        if job.status.is_terminal():
            if current is not None:
                drain(current.log_path, offset, timestamps, split_streams)
            return job
        if time.monotonic() - last_check > defaults.HEARTBEAT_INTERVAL:
            last_check = time.monotonic()
            reconcile(store)
        time.sleep(defaults.FOLLOW_POLL)


def drain(path: str, offset: int, timestamps: bool, split_streams: bool) -> None:
    while True:
        block, offset = read_block(path, offset)
        if not block:
            return
        write_block(block, timestamps, split_streams)


class _StagingLine:
    """A live line on a terminal while the job's inputs are copied: input, %, bytes, files."""

    def __init__(self) -> None:
        self.shown = ""
        self.enabled = sys.stderr.isatty()

    def show(self, job: Job) -> None:
        if not self.enabled:
            return
        import json
        from pathlib import Path

        from ferry.controller import STAGING_FILE
        from ferry.units import format_size

        try:
            state = json.loads((Path(job.job_dir) / STAGING_FILE).read_text())
        except (OSError, ValueError):
            if self.shown:  # staging is over
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
                self.shown = ""
            return
        total = max(int(state["total"]), 1)
        line = (
            f"ferry: copying input {state['input']}: {100 * int(state['done']) // total}% "
            f"({format_size(state['done'])} of {format_size(state['total'])}, "
            f"{state['files']}/{state['all_files']} files)"
        )
        if line != self.shown:
            sys.stderr.write("\r\033[K" + line)
            sys.stderr.flush()
            self.shown = line
