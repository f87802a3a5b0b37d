"""Throughput of tiny jobs: 200 ``python -c pass`` jobs through the Python API, in one process.

Budget (docs: Performance budgets): Ferry completes them at ≥ 50 % of the rate of
``xargs -P2`` running the same 200 commands, submitted from an empty folder and from a
200-file code folder (each job then starts in its own copy of those files; the value is the
worse of the two). Local admission gives each job 1 CPU by default, so on 2 cores two run
at once, as with ``xargs -P2``. The Ferry rate is
200 / (first submit to the last job's end, as the store records it); the xargs rate is
measured before, between and after the two cases, and each case is compared with the
mean of the runs on either side of it, so drift in the machine's speed hits both.
Every job must have SUCCEEDED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    CODE_FILES,
    child_env,
    code_folder,
    emit,
    failure_reasons,
    log,
    outcomes,
    sandbox,
    wait_for_jobs,
)

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


def run_jobs(code: Path) -> dict[str, Any]:
    """Submit the 200 jobs from ``code`` and wait for them; what became of them."""
    import ferry

    command = ["python", "-c", "pass"]
    ids: list[str] = []
    first_submit = time.time()
    for _ in range(JOBS):
        ids.append(ferry.submit(command=command, code=str(code)).id)
    submitted = time.time() - first_submit
    log(f"submitted {JOBS} jobs from {code} in {submitted:.2f}s; waiting for them")
    records, finished = wait_for_jobs(ids, WAIT_TIMEOUT_S)
    ended = [r.ended_at for r in records.values() if r.ended_at]
    succeeded = sum(r.status.value == "SUCCEEDED" for r in records.values())
    all_ok = finished and succeeded == JOBS
    rate = JOBS / (max(ended) - first_submit) if all_ok and ended else None
    if rate is None:
        log(f"ferry: only {succeeded} of {JOBS} jobs succeeded: {outcomes(records.values())}")
    return {
        "rate": rate,
        "submitted_s": submitted,
        "succeeded": succeeded,
        "outcomes": outcomes(records.values()),
        "failure_reasons": failure_reasons(records.values()),
    }


def main() -> int:
    with sandbox() as code, code_folder() as project:
        xargs_before = xargs_rate()
        log(f"xargs -P{PARALLEL}: {xargs_before:.1f} jobs/s")
        empty = run_jobs(code)
        xargs_between = xargs_rate()
        log(f"xargs -P{PARALLEL} again: {xargs_between:.1f} jobs/s")
        files = run_jobs(project)
        xargs_after = xargs_rate()
        log(f"xargs -P{PARALLEL} again: {xargs_after:.1f} jobs/s")

    # each case against the xargs runs on either side of it, so drift hits both alike
    ratios = []
    for case, xargs in (
        (empty, (xargs_before + xargs_between) / 2),
        (files, (xargs_between + xargs_after) / 2),
    ):
        case["ratio"] = case["rate"] / xargs if case["rate"] else None
        case["xargs"] = xargs
        ratios.append(case["ratio"])
    if None not in ratios:
        log(
            f"ferry: {empty['ratio']:.0%} of xargs (empty folder), "
            f"{files['ratio']:.0%} ({CODE_FILES} files)"
        )
    ratio = None if None in ratios else min(ratios)
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
            "succeeded": empty["succeeded"],
            "outcomes": empty["outcomes"],
            "failure_reasons": empty["failure_reasons"] + files["failure_reasons"],
            "ferry_jobs_per_s": _rounded(empty["rate"], 2),
            "ferry_submit_all_s": round(empty["submitted_s"], 3),
            "rate_ratio_empty": _rounded(empty["ratio"], 3),
            f"rate_ratio_{CODE_FILES}_files": _rounded(files["ratio"], 3),
            f"ferry_jobs_per_s_{CODE_FILES}_files": _rounded(files["rate"], 2),
            f"ferry_submit_all_s_{CODE_FILES}_files": round(files["submitted_s"], 3),
            f"succeeded_{CODE_FILES}_files": files["succeeded"],
            "xargs_jobs_per_s": round((xargs_before + xargs_between + xargs_after) / 3, 2),
            "xargs_before_jobs_per_s": round(xargs_before, 2),
            "xargs_between_jobs_per_s": round(xargs_between, 2),
            "xargs_after_jobs_per_s": round(xargs_after, 2),
            "cpus": os.cpu_count(),
        }
    )
    return 0


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


if __name__ == "__main__":
    sys.exit(main())
