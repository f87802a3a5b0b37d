"""TensorBoard event files of a job's metrics, written by the supervisor without TensorFlow.

An event file is a sequence of TFRecords (length, masked CRC-32C of the length, an
``Event`` protocol buffer, masked CRC-32C of the data). Each ``Event`` holds a wall time, a
step and a ``Summary`` of scalar values, encoded here by hand: the fields used are
``Event.wall_time`` (1, double), ``Event.step`` (2, int64), ``Event.file_version`` (3),
``Event.summary`` (5), ``Summary.value`` (1), ``Value.tag`` (1) and ``Value.simple_value``
(2, float), as in TensorFlow's ``event.proto`` and ``summary.proto``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

Point = tuple[int, int | None, float, str, float]  # (rank, step, time, name, value)


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


def _python_crc32c(data: bytes) -> int:
    table = _TABLE
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE = _crc32c_table()


def _pick_crc32c() -> Callable[[bytes], int]:
    try:  # a C implementation, present with the gs:// extra
        import google_crc32c

        return google_crc32c.value  # type: ignore[no-any-return]
    except ImportError:
        return _python_crc32c


crc32c = _pick_crc32c()


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # int64 as protobuf writes negatives
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


_FLOAT32_MAX = 3.4028234663852886e38


def _float32(value: float) -> float:
    """``value`` as a 32-bit float holds it: beyond its range, infinite."""
    if value > _FLOAT32_MAX:
        return float("inf")
    if value < -_FLOAT32_MAX:
        return float("-inf")
    return value


def record(data: bytes) -> bytes:
    """One TFRecord around ``data``."""
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


def event(wall_time: float, step: int, scalars: Iterable[tuple[str, float]] = ()) -> bytes:
    """An ``Event`` with the given scalars (none: the file-version event)."""
    head = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)
    values = b"".join(
        _field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", _float32(value)))
        for tag, value in scalars
    )
    if not values:
        return head + _field(3, b"brain.Event:2")
    return head + _field(5, values)


class EventWriter:
    """Appends a job attempt's metric points to one event file under ``folder``."""

    def __init__(self, folder: Path, suffix: str) -> None:
        self.folder = folder
        self.suffix = suffix
        self.path: Path | None = None
        self._buffer: list[bytes] = []
        self._counters: dict[str, int] = {}
        self._last_step: int | None = None

    def add(self, points: Iterable[Point]) -> None:
        """Queue points; those sharing a step and time become one event."""
        groups: dict[tuple[int, float], list[tuple[str, float]]] = {}
        for rank, step, t, name, value in points:
            tag = name if not rank else f"rank{rank}/{name}"
            if step is None:  # telemetry: shown at the script's latest step, or counted
                if self._last_step is not None:
                    step = self._last_step
                else:
                    step = self._counters.get(tag, 0)
                    self._counters[tag] = step + 1
            else:
                self._last_step = step
            groups.setdefault((step, t), []).append((tag, value))
        for (step, t), scalars in groups.items():
            self._buffer.append(record(event(t, step, scalars)))

    def flush(self) -> None:
        """Write what was queued (the file is created on the first write)."""
        if not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer = []
        if self.path is None:
            import time

            from ferry.procs import hostname

            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"events.out.tfevents.{int(time.time())}.{hostname()}.{self.suffix}"
            self.path = self.folder / name
            data = record(event(time.time(), 0)) + data
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
