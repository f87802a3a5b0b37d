"""Throughput of tiny jobs: 200 ``python -c pass`` jobs through the Python API, in one process.

Budget (docs: Performance budgets): Ferry completes them at ≥ 50 % of the rate of
``xargs -P2`` running the same 200 commands. Local admission gives each job 1 CPU by
default, so on 2 cores two run at once, as with ``xargs -P2``. The Ferry rate is
200 / (first submit to the last job's end, as the store records it); the xargs rate is
measured before and after Ferry and averaged, so drift in the machine's speed hits both.
Every job must have SUCCEEDED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from _common import child_env, emit, failure_reasons, log, outcomes, sandbox, wait_for_jobs

JOBS = 200
BUDGET_RATIO = 0.5
PARALLEL = 2
WAIT_TIMEOUT_S = 120.0


def xargs_rate() -> float:
    """Jobs per second of ``xargs -P2`` running the same commands."""
    script = f"seq {JOBS} | xargs -P{PARALLEL} -I{{}} python -c pass"
    start = time.perf_counter()
    subprocess.run(script, shell=True, check=True, env=child_env(), stdin=subprocess.DEVNULL)
    return JOBS / (time.perf_counter() - start)


def main() -> int:
    with sandbox() as code:
        import ferry

        xargs_before = xargs_rate()
        log(f"xargs -P{PARALLEL}: {xargs_before:.1f} jobs/s")

        command = ["python", "-c", "pass"]
        ids: list[str] = []
        first_submit = time.time()
        for _ in range(JOBS):
            ids.append(ferry.submit(command=command, code=str(code)).id)
        submitted = time.time() - first_submit
        log(f"submitted {JOBS} jobs in {submitted:.2f}s; waiting for them")
        records, finished = wait_for_jobs(ids, WAIT_TIMEOUT_S)

        xargs_after = xargs_rate()
        log(f"xargs -P{PARALLEL} again: {xargs_after:.1f} jobs/s")

    ended = [r.ended_at for r in records.values() if r.ended_at]
    succeeded = sum(r.status.value == "SUCCEEDED" for r in records.values())
    all_ok = finished and succeeded == JOBS
    ferry_rate = JOBS / (max(ended) - first_submit) if all_ok and ended else None
    xargs = (xargs_before + xargs_after) / 2
    ratio = ferry_rate / xargs if ferry_rate else None
    if ferry_rate:
        log(f"ferry: {ferry_rate:.1f} jobs/s ({ratio:.0%} of xargs)")
    else:
        log(f"ferry: only {succeeded} of {JOBS} jobs succeeded: {outcomes(records.values())}")
    emit(
        {
            "bench": "throughput",
            "metric": "rate_ratio",
            "value": round(ratio, 3) if ratio is not None else None,
            "unit": "x xargs",
            "budget": BUDGET_RATIO,
            "rule": ">=",
            "ok": bool(ratio is not None and ratio >= BUDGET_RATIO),
            "jobs": JOBS,
            "succeeded": succeeded,
            "outcomes": outcomes(records.values()),
            "failure_reasons": failure_reasons(records.values()),
            "ferry_jobs_per_s": round(ferry_rate, 2) if ferry_rate else None,
            "ferry_submit_all_s": round(submitted, 3),
            "xargs_jobs_per_s": round(xargs, 2),
            "xargs_before_jobs_per_s": round(xargs_before, 2),
            "xargs_after_jobs_per_s": round(xargs_after, 2),
            "cpus": os.cpu_count(),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
