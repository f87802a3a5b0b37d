"""Reading attempt logs: each line is ``<UTC timestamp> <tag> <text>``, the tag being ``O``
(stdout) or ``E`` (stderr), followed by the process's rank in a gang when it is not 0
(``O1``, ``E3``).

Readers take only complete lines, so following a log that is being written never shows half
a line; the position to continue from is a byte offset.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

_STAMP_LEN = 24  # 2026-12-03T05:02:07.123Z


@dataclass(frozen=True)
class LogLine:
    """One line of a job's output."""

    at: str  # ISO-8601 UTC timestamp
    stream: str  # "stdout" or "stderr"
    text: str
    rank: int = 0  # the process's rank, in a gang


_TAGGED = re.compile(rb"^(.{24}) ([OE])(\d*)(?: (.*)|$)", re.S)


def parse_line(raw: bytes) -> LogLine:
    """Split a stored log line (without its newline)."""
    match = _TAGGED.match(raw)
    if match is None:
        return LogLine("", "stdout", raw.decode("utf-8", "replace"))
    stamp, kind, rank, text = match.groups()
    return LogLine(
        stamp.decode(),
        "stderr" if kind == b"E" else "stdout",
        (text or b"").decode("utf-8", "replace"),
        int(rank or 0),
    )


_STDERR_LINE = re.compile(rb"^.{24} E\d* ", re.M)
_PREFIX = re.compile(rb"^.{24} [OE]\d* ", re.M)
_STAMP_ONLY = re.compile(rb"^(.{24}) [OE]\d* ", re.M)
# (timestamp, tag, rank digits, text with its newline) of every line
_LINE = re.compile(rb"^(.{24}) ([OE])(\d*) (.*\n)", re.M)
CHUNK = 1 << 20  # followers read at most about this much per step
STREAMS = ("stdout", "stderr")
_KIND = {"stdout": b"O", "stderr": b"E"}
# (timestamp, text with its newline) of one stream's lines
_TEXT_OF = {
    "stdout": re.compile(rb"^(.{24}) O\d* (.*\n)", re.M),
    "stderr": re.compile(rb"^(.{24}) E\d* (.*\n)", re.M),
}


@cache
def _raw_line(stream: str | None, rank: int | None) -> re.Pattern[bytes]:
    """Whole raw lines: of any stream (None) or of one; of any rank (None) or of one."""
    if stream is None and rank is None:
        return re.compile(rb"^.*\n", re.M)
    kind = _KIND[stream] if stream else b"[OE]"
    digits = rb"\d*" if rank is None else str(rank).encode() if rank else b""
    return re.compile(rb"^.{24} " + kind + digits + rb" .*\n", re.M)


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


def tail_block(
    path: str, n: int, stream: str | None = None, rank: int | None = None
) -> tuple[bytes, int]:
    """The last ``n`` complete lines (raw), read from the end; only ``stream``'s lines
    ("stdout" or "stderr") and ``rank``'s when given. Also returns the file's end offset."""
    line = _raw_line(stream, rank)
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


def text_of(
    block: bytes,
    timestamps: bool,
    stream: str | None = None,
    rank: int | None = None,
    show_rank: bool = False,
) -> bytes:
    """The text of raw log lines, in their order, without their prefixes (or with the
    timestamp only); with ``stream`` ("stdout" or "stderr"), only that stream's lines;
    with ``rank``, only that process's; with ``show_rank``, each led by ``[rank] ``."""
    if not block:
        return b""
    if rank is not None or show_rank:
        kind = _KIND[stream] if stream else None
        want = None if rank is None else str(rank or "").encode()
        out = bytearray()
        for stamp, tag, digits, text in _LINE.findall(block):
            if (kind is not None and tag != kind) or (want is not None and digits != want):
                continue
            if timestamps:
                out += stamp + b" "
            if show_rank:
                out += b"[" + (digits or b"0") + b"] "
            out += text
        return bytes(out)
    if stream is None:
        return _STAMP_ONLY.sub(rb"\1 ", block) if timestamps else _PREFIX.sub(b"", block)
    keep = _TEXT_OF[stream].findall(block)
    return b"".join(stamp + b" " + text if timestamps else text for stamp, text in keep)


def split_block(
    block: bytes, timestamps: bool, rank: int | None = None, show_rank: bool = False
) -> tuple[bytes, bytes]:
    """(stdout text, stderr text) of raw log lines, as :func:`text_of` gives them. Blocks
    with no stderr line, the common case, take the fast path."""
    if not _STDERR_LINE.search(block):
        return text_of(block, timestamps, None, rank, show_rank), b""
    return (
        text_of(block, timestamps, "stdout", rank, show_rank),
        text_of(block, timestamps, "stderr", rank, show_rank),
    )


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
