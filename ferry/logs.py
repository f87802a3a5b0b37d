"""Reading attempt logs: each line is ``<UTC timestamp> <O|E> <text>`` (stdout or stderr).

Readers take only complete lines, so following a log that is being written never shows half
a line; the position to continue from is a byte offset.
"""

from __future__ import annotations

import re
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


_STDERR_LINE = re.compile(rb"^.{24} E ", re.M)
_PREFIX = re.compile(rb"^.{24} [OE] ", re.M)
_STAMP_ONLY = re.compile(rb"^(.{24}) [OE] ", re.M)
CHUNK = 1 << 20  # followers read at most about this much per step


def read_block(path: str, offset: int, limit: int = CHUNK) -> tuple[bytes, int]:
    """Complete lines (raw, each ending in a newline) from ``offset``, about ``limit``
    bytes at most, and the offset after them."""
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read(limit)
            end = data.rfind(b"\n")
            while end < 0 and len(data) >= limit:  # one line longer than the limit
                more = file.read(limit)
                if not more:
                    break
                data += more
                end = data.rfind(b"\n")
    except FileNotFoundError:
        return b"", offset
    if end < 0:
        return b"", offset
    return data[: end + 1], offset + end + 1


def tail_block(path: str, n: int) -> tuple[bytes, int]:
    """The last ``n`` complete lines (raw), read from the end; and the file's end offset."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, 2)
            data = file.read(0)
            pos = size
            while pos > 0 and data.count(b"\n") <= n:
                step = min(CHUNK, pos)
                pos -= step
                file.seek(pos)
                data = file.read(step) + data
    except FileNotFoundError:
        return b"", 0
    end = data.rfind(b"\n")
    if end < 0 or n <= 0:
        return b"", size
    data = data[: end + 1]
    lines = data.split(b"\n")[:-1]
    keep = lines[-n:]
    return b"\n".join(keep) + b"\n", pos + end + 1


def split_block(block: bytes, timestamps: bool) -> tuple[bytes, bytes]:
    """(stdout text, stderr text) of raw log lines, without their prefixes (or with the
    timestamp only). Blocks with no stderr line, the common case, take the fast path."""
    if not block:
        return b"", b""
    if not _STDERR_LINE.search(block):
        return (_STAMP_ONLY.sub(rb"\1 ", block) if timestamps else _PREFIX.sub(b"", block)), b""
    out: list[bytes] = []
    err: list[bytes] = []
    for raw in block.split(b"\n")[:-1]:
        line = parse_line(raw)
        text = f"{line.at} {line.text}" if timestamps and line.at else line.text
        (err if line.stream == "stderr" else out).append(text.encode())
    return (b"\n".join(out) + b"\n" if out else b""), (b"\n".join(err) + b"\n" if err else b"")


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
