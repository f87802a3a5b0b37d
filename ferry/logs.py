"""Reading attempt logs: each line is ``<UTC timestamp> <O|E> <text>`` (stdout or stderr).

Readers take only complete lines, so following a log that is being written never shows half
a line; the position to continue from is a byte offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

_STAMP_LEN = 24  # 2026-12-03T05:02:07.123Z


@dataclass(frozen=True)
class LogLine:
    """One line of a job's output."""

    at: str  # ISO-8601 UTC timestamp
    stream: str  # "stdout" or "stderr"
    text: str


def parse_line(raw: bytes) -> LogLine:
    """Split a stored log line (without its newline)."""
    if len(raw) > _STAMP_LEN + 2 and raw[_STAMP_LEN : _STAMP_LEN + 1] == b" ":
        stream = "stderr" if raw[_STAMP_LEN + 1 : _STAMP_LEN + 2] == b"E" else "stdout"
        return LogLine(
            raw[:_STAMP_LEN].decode(), stream, raw[_STAMP_LEN + 3 :].decode("utf-8", "replace")
        )
    if len(raw) == _STAMP_LEN + 2:  # an empty line
        stream = "stderr" if raw[-1:] == b"E" else "stdout"
        return LogLine(raw[:_STAMP_LEN].decode(), stream, "")
    return LogLine("", "stdout", raw.decode("utf-8", "replace"))


def read_from(path: str, offset: int) -> tuple[list[LogLine], int]:
    """Complete lines written after ``offset``, and the offset after them."""
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    lines = [parse_line(raw) for raw in data[:end].split(b"\n")]
    return lines, offset + end + 1


def tail(path: str, n: int | None) -> Iterator[LogLine]:
    """The last ``n`` lines (all when ``n`` is None)."""
    lines, _ = read_from(path, 0)
    yield from (lines if n is None else lines[-n:] if n > 0 else [])
