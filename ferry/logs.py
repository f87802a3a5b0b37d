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
STREAMS = ("stdout", "stderr")
# a whole raw line: of any stream (None), or of one
_RAW_LINE = {
    None: re.compile(rb"^.*\n", re.M),
    "stdout": re.compile(rb"^.{24} O .*\n", re.M),
    "stderr": re.compile(rb"^.{24} E .*\n", re.M),
}
# (timestamp, text with its newline) of one stream's lines
_TEXT_OF = {
    "stdout": re.compile(rb"^(.{24}) O (.*\n)", re.M),
    "stderr": re.compile(rb"^(.{24}) E (.*\n)", re.M),
}


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


def tail_block(path: str, n: int, stream: str | None = None) -> tuple[bytes, int]:
    """The last ``n`` complete lines (raw), read from the end; only ``stream``'s lines
    ("stdout" or "stderr") when given. Also returns the file's end offset."""
    line = _RAW_LINE[stream]
    pos = size = 0
    data = b""
    count = 0  # lines found, not counting the first of ``data`` (cut, unless at the start)
    try:
        with open(path, "rb") as file:
            size = pos = file.seek(0, 2)
            while pos > 0 and count < n:
                step = min(CHUNK, pos)
                pos -= step
                file.seek(pos)
                chunk = file.read(step)
                joined = data.find(b"\n") + 1  # the old first line is whole now
                data = chunk + data
                first = data.find(b"\n") + 1 if pos > 0 else 0
                count += len(line.findall(data, first, len(chunk) + joined))
    except FileNotFoundError:
        return b"", 0
    end = data.rfind(b"\n")
    if end < 0 or n <= 0:
        return b"", size
    first = data.find(b"\n") + 1 if pos > 0 else 0
    keep = line.findall(data, first, end + 1)[-n:]
    return b"".join(keep), pos + end + 1


def text_of(block: bytes, timestamps: bool, stream: str | None = None) -> bytes:
    """The text of raw log lines, in their order, without their prefixes (or with the
    timestamp only); with ``stream`` ("stdout" or "stderr"), only that stream's lines."""
    if not block:
        return b""
    if stream is None:
        return _STAMP_ONLY.sub(rb"\1 ", block) if timestamps else _PREFIX.sub(b"", block)
    keep = _TEXT_OF[stream].findall(block)
    return b"".join(stamp + b" " + text if timestamps else text for stamp, text in keep)


def split_block(block: bytes, timestamps: bool) -> tuple[bytes, bytes]:
    """(stdout text, stderr text) of raw log lines, as :func:`text_of` gives them. Blocks
    with no stderr line, the common case, take the fast path."""
    if not _STDERR_LINE.search(block):
        return text_of(block, timestamps), b""
    return text_of(block, timestamps, "stdout"), text_of(block, timestamps, "stderr")


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
