"""Input staging: the first copy from a bucket against a plain recursive download of the
same objects with the same client, and a re-run, which must copy 0 bytes.

Budgets (docs: Performance budgets): first copy ≥ 80 % of the plain download's speed (the
cache and the links into the job cost little); re-run copies 0 bytes. The bucket is moto's
S3 server on 127.0.0.1, started here; the baseline runs in the same process, interleaved.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from pathlib import Path

from _common import discard, emit, log, sandbox, scratch

FILES = 24
SIZE = 4_000_000  # bytes per object: 96 MB in all
ROUNDS = 3
BUDGET = 0.8


def main() -> int:
    with sandbox():
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
        )
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        from ferry import config

        config.set_value("storage.s3.endpoint_url", endpoint)
        from ferry.storage.cache import InputCache
        from ferry.storage.registry import filesystem
        from ferry.storage.staging import stage_input

        fs = filesystem("s3")
        fs.mkdir("bench")
        for i in range(FILES):
            fs.pipe(f"bench/data/part-{i:03d}.bin", os.urandom(SIZE))
        total = FILES * SIZE
        plain: list[float] = []
        first: list[float] = []
        rerun_bytes: list[int] = []
        rerun: list[float] = []
        work = Path(scratch("staging"))
        try:
            fs.get("bench/data/", str(work / "warm-up") + "/", recursive=True)
            for round_ in range(ROUNDS):

                def download(n: int = round_) -> None:
                    start = time.perf_counter()
                    fs.get("bench/data/", str(work / f"plain-{n}") + "/", recursive=True)
                    plain.append(time.perf_counter() - start)

                def stage(n: int = round_) -> InputCache:
                    cache = InputCache(work / f"cache-{n}")
                    staged = stage_input("d", "s3://bench/data", "copy", work / f"job-{n}", cache)
                    assert staged.bytes_downloaded == total, staged
                    first.append(staged.seconds)
                    return cache

                if round_ % 2:
                    cache = stage()
                    download()
                else:
                    download()
                    cache = stage()
                again = stage_input("d", "s3://bench/data", "copy", work / f"again-{round_}", cache)
                rerun.append(again.seconds)
                rerun_bytes.append(again.bytes_downloaded)
        finally:
            discard(work)
            server.stop()
    plain_s, first_s = statistics.median(plain), statistics.median(first)
    ratio = plain_s / first_s
    plain_rate, first_rate = total / plain_s / 1e6, total / first_s / 1e6
    log(
        f"plain download {plain_rate:.0f} MB/s, first staging {first_rate:.0f} MB/s, "
        f"re-run {statistics.median(rerun) * 1000:.1f} ms copying {max(rerun_bytes)} bytes"
    )
    emit(
        {
            "bench": "staging",
            "metric": "first_copy_vs_plain",
            "value": round(ratio, 3),
            "unit": "x plain download",
            "budget": BUDGET,
            "rule": ">=",
            "ok": ratio >= BUDGET and max(rerun_bytes) == 0,
            "bytes": total,
            "files": FILES,
            "plain_download_s": round(plain_s, 3),
            "first_staging_s": round(first_s, 3),
            "rerun_s": round(statistics.median(rerun), 4),
            "rerun_bytes_copied": max(rerun_bytes),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
