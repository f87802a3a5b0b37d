"""Amazon S3 and S3-compatible stores as Ferry drives them: s3fs, with a bounded time to fail.

botocore's legacy retries try a connection five times with growing waits, and s3fs retries
some failures five times more on top: here botocore makes at most
``defaults.STORAGE_S3_ATTEMPTS`` attempts (standard mode, short waits) and s3fs two, with
Ferry's connect and read timeouts.
"""

from __future__ import annotations

from typing import Any

import s3fs

from ferry import defaults


class S3(s3fs.S3FileSystem):  # type: ignore[misc]
    """s3fs with Ferry's timeouts and retries."""

    connect_timeout = defaults.STORAGE_CONNECT_TIMEOUT
    read_timeout = defaults.STORAGE_READ_TIMEOUT
    retries = 2  # s3fs's own loop, around botocore's (throttling, dropped responses)

    def __init__(self, **options: Any) -> None:
        config = dict(options.pop("config_kwargs", None) or {})
        config.setdefault(
            "retries", {"mode": "standard", "total_max_attempts": defaults.STORAGE_S3_ATTEMPTS}
        )
        super().__init__(config_kwargs=config, **options)
