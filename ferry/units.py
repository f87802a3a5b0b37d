"""Parsing of the quantities people type: sizes (``32GB``) and durations (``6h``).

Each parser returns a plain number and raises ``ValueError`` with a sentence that says what
would be valid; the spec turns that into a field-named error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
_SIZE_HELP = "a size such as 512MB, 32GB, 32GiB or 32g"
_MAX_BYTES = 2**63 - 1  # what SQLite stores as an integer; anything larger is a typo


def parse_size(value: object) -> int:
    """Return a size in bytes from ``32GB``, ``32 GiB``, ``32g`` or a plain number of bytes.

    Decimal units (``GB``, ``g``) are powers of 1000 and binary ones (``GiB``) powers of 1024,
    as on cloud price pages.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {_SIZE_HELP}, not {value!r}")
    if isinstance(value, int | float):
        number = float(value) if abs(value) < _MAX_BYTES else float("inf")
        unit = 1
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        if not match or match.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"expected {_SIZE_HELP}, not {value!r}")
        number, unit = float(match.group(1)), _SIZE_UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"expected {_SIZE_HELP}, not {value!r}")
    if not 0 <= number * unit <= _MAX_BYTES:  # also false for nan
        raise ValueError(f"expected {_SIZE_HELP} (at most 8 EiB), not {value!r:.40}")
    return int(number * unit)


def format_size(n: float) -> str:
    """``1536000000 -> '1.5 GB'``: decimal units, as people read disk and memory sizes."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < (1000 if unit == "B" else 999.95) or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


_DURATION_UNITS = {
    "ms": 0.001,
    "s": 1,
    "sec": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "hr": 3600,
    "d": 86400,
}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]+)")
_DURATION_HELP = "a duration such as 90s, 10m, 6h, 1h30m or a number of seconds"
_MAX_SECONDS = 10 * 365 * 86400.0


def parse_duration(value: object) -> float:
    """Return seconds from ``90s``, ``10m``, ``6h``, ``1h30m``, ``1d`` or a plain number."""
    if isinstance(value, bool):
        raise ValueError(f"expected {_DURATION_HELP}, not {value!r}")
    if isinstance(value, int | float):
        if not 0 < value <= _MAX_SECONDS:
            raise ValueError(
                f"expected {_DURATION_HELP} (above 0, at most 10 years), not {value!r:.40}"
            )
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected {_DURATION_HELP}, not {value!r}")
    text = value.strip().lower().replace(" ", "")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
        pos = 0
        total = 0.0
        for match in _DURATION_PART.finditer(text):
            unit = _DURATION_UNITS.get(match.group(2))
            if match.start() != pos or unit is None:
                break
            total += float(match.group(1)) * unit
            pos = match.end()
        else:
            if pos == len(text) and pos > 0:
                seconds = total
    if not 0 < seconds <= _MAX_SECONDS:
        raise ValueError(
            f"expected {_DURATION_HELP} (above 0, at most 10 years), not {value!r:.40}"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """``5400 -> '1h30m'``; short durations keep one decimal (``'2.5s'``)."""
    if seconds < 59.5:
        return f"{seconds:.1f}s" if seconds < 9.95 else f"{seconds:.0f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{u}" for n, u in parts if n]
    return "".join(shown[:2])


def format_usd(amount: float) -> str:
    """``'1,234.50'``; a non-zero amount under a cent is ``'<0.01'`` rather than ``'0.00'``."""
    if 0 < abs(amount) < 0.005:
        return "<0.01" if amount > 0 else ">-0.01"
    return f"{amount:,.2f}"


def expand_home(path: str | Path) -> Path:
    """A path as people type it: ``~`` and ``~user`` expanded; a user that does not exist is
    left as written, to be reported as a missing path (pathlib's expanduser would raise)."""
    return Path(os.path.expanduser(path))
