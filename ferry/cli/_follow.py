"""Following a job's output live, across its attempts, until it ends."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from ferry import defaults
from ferry.logs import LogLine, read_from

if TYPE_CHECKING:
    from ferry.store import Attempt, Job, Store


def write_lines(lines: list[LogLine], timestamps: bool, split_streams: bool) -> None:
    """Print log lines; stderr lines go to stderr when ``split_streams``."""
    out: dict[str, list[str]] = {"stdout": [], "stderr": []}
    for line in lines:
        text = f"{line.at} {line.text}" if timestamps else line.text
        out["stderr" if split_streams and line.stream == "stderr" else "stdout"].append(text)
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        if out[name]:
            _write(stream, "\n".join(out[name]) + "\n")


def _write(stream: TextIO, text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:  # `ferry logs -f JOB | head`
        raise SystemExit(0) from None


def follow(
    store: Store,
    job_id: str,
    *,
    attempt: int | None = None,
    timestamps: bool = False,
    split_streams: bool = True,
    tail: int | None = None,
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
    while True:
        job = store.get_job(job_id)
        attempts = store.attempts(job_id)
        if current is None:
            pick = [a for a in attempts if attempt is None or a.number == attempt]
            if pick:
                current = pick[-1]
                if tail is not None:
                    lines, offset = read_from(current.log_path, 0)
                    write_lines(lines[-tail:] if tail > 0 else [], timestamps, split_streams)
        if current is not None:
            lines, offset = read_from(current.log_path, offset)
            if lines:
                write_lines(lines, timestamps, split_streams)
                continue
            later = [a for a in attempts if a.number > current.number]
            if attempt is None and later:
                current, offset = later[0], 0
                print(f"ferry: attempt {current.number} of {job_id}", file=sys.stderr, flush=True)
                continue
            mine = next((a for a in attempts if a.number == current.number), current)
            if attempt is not None and mine.status.is_terminal():
                lines, offset = read_from(current.log_path, offset)
                write_lines(lines, timestamps, split_streams)
                return job
        if job.status.is_terminal():
            if current is not None:
                lines, offset = read_from(current.log_path, offset)
                write_lines(lines, timestamps, split_streams)
            return job
        if time.monotonic() - last_check > defaults.HEARTBEAT_INTERVAL:
            last_check = time.monotonic()
            reconcile(store)
        time.sleep(defaults.FOLLOW_POLL)
