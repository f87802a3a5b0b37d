"""What becomes of the storage libraries' own log records (gcsfs, botocore, adlfs ...).

Modes: None leaves logging as the host program set it (Ferry used as a library); "quiet"
drops the records (the `ferry` command, which reports each failure itself in one sentence);
"debug" shows them all on stderr (``ferry --debug``); "log" writes warnings and errors, with
times, to stderr, which is a job's supervisor.log. The mode takes effect when the process
creates its first filesystem, so commands that touch no bucket never import logging.
"""

from __future__ import annotations

import sys

# The storage libraries' loggers, and those of what they run on.
LOGGERS = (
    "gcsfs",
    "google",
    "s3fs",
    "aiobotocore",
    "botocore",
    "adlfs",
    "azure",
    "fsspec",
    "aiohttp",
    "asyncio",
    "urllib3",
)

_mode: str | None = None
_in_use = False  # a filesystem exists: a new mode applies at once


def library_logs(mode: str | None) -> None:
    """Choose what happens to the storage libraries' log records (see the module)."""
    global _mode
    _mode = mode
    if _in_use:
        _apply()


def storage_in_use() -> None:
    """Called as a filesystem is created: the chosen mode takes effect."""
    global _in_use
    _in_use = True
    _apply()


def _apply() -> None:
    if _mode is None:
        return
    import logging

    handler: logging.Handler = logging.NullHandler()
    level = logging.CRITICAL
    if _mode in ("debug", "log"):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        level = logging.DEBUG if _mode == "debug" else logging.WARNING
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
