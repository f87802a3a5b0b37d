"""A job's bundle for a cloud: its code (a 100 MB folder) and Ferry's wheel, uploaded to a
bucket under content hashes, the first time and when nothing changed.

Budget (issue: clouds and environments): an unchanged folder sends 0 bytes, in under 1 s
(median), even read afresh (a plain folder, not a code-store tree whose hash is kept: the
worst case). The first upload is reported against the baseline of putting one file of the
same size into the same bucket (the archive, hashing and wheel cost on top of the bytes).
The bucket is moto's S3 server on this machine, over HTTP; the folder is 40 files of
random bytes (2.5 MB each: nothing to compress) and 200 small source files.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from pathlib import Path

from _common import emit, fill_bundle_folder, log, plain_put_s, sandbox

BUDGET_S = 1.0
RUNS = 5


def main() -> int:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with sandbox() as code:
            return _measure(code, endpoint)
    finally:
        server.stop()


def _measure(code: Path, endpoint: str) -> int:
    import s3fs

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ[key] = value
    from ferry import config
    from ferry.packaging import bundle

    config.set_value("storage.s3.endpoint_url", endpoint)
    total = fill_bundle_folder(code)
    s3 = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
    s3.mkdir("bench")
    # the baseline: one file of the same size, put in the same bucket
    put_s = plain_put_s(s3, code, "bench/plain.bin")
    started = time.perf_counter()
    first = bundle.upload(code, "s3://bench/root")
    first_s = time.perf_counter() - started
    unchanged = []
    for _ in range(RUNS):
        started = time.perf_counter()
        again = bundle.upload(code, "s3://bench/root")
        unchanged.append(time.perf_counter() - started)
        if again.sent:
            raise RuntimeError(f"an unchanged folder sent {again.sent} bytes")
    median = statistics.median(unchanged)
    log(
        f"{total / 1e6:.0f} MB folder: first upload {first_s:.2f}s ({first.sent / 1e6:.1f} MB "
        f"sent; one plain put of the same size {put_s:.2f}s); unchanged {median:.3f}s, 0 bytes"
    )
    emit(
        {
            "bench": "bundle",
            "metric": "unchanged_s",
            "value": round(median, 4),
            "unit": "s",
            "budget": BUDGET_S,
            "rule": "<=",
            "ok": median <= BUDGET_S,
            "unchanged_bytes_sent": 0,
            "folder_mb": round(total / 1e6, 1),
            "first_upload_s": round(first_s, 3),
            "first_bytes_sent": first.sent,
            "baseline_plain_put_s": round(put_s, 3),
            "first_vs_plain_put": round(first_s / put_s, 2),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
