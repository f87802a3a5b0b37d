"""Detached submit latency: how long ``ferry run --detach -- python -c pass`` takes to return.

Budget (docs: Performance budgets): ≤ 0.2 s, median, from an empty folder and from a
200-file code folder (the value is the worse of the two). Measured alongside, interleaved:
``python -c pass`` (the interpreter's own start), so the figure can be read against this
machine's speed, and the same submit with the launcher turned off (``cold``: what the first
command costs, before it has started the launcher; reported, not judged). A second
figure is ``ferry.submit()`` from the Python API, in-process. Every job is waited for, and
the check also requires that every submitted job SUCCEEDED: a fast submit that loses the
job is no submit.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from _common import (
    CODE_FILES,
    COLD,
    FERRY_EXE,
    code_folder,
    emit,
    failure_reasons,
    log,
    outcomes,
    sandbox,
    summary,
    timed_run,
    wait_for_jobs,
)

BUDGET_S = 0.2
WARMUPS = 2
RUNS = 20
API_WARMUPS = 2
API_RUNS = 50
WAIT_TIMEOUT_S = 60.0

PYTHON = ["python", "-c", "pass"]
DETACH = [FERRY_EXE, "run", "--detach", "--", "python", "-c", "pass"]


def main() -> int:
    with sandbox() as code, code_folder() as project:
        import ferry

        cli_ids: list[str] = []

        def detach(cwd: Path, env: dict[str, str] | None = None) -> float:
            took, out = timed_run(DETACH, capture=True, cwd=cwd, env=env)
            cli_ids.append(out.strip())
            return took

        for _ in range(WARMUPS):
            timed_run(PYTHON)
            detach(code)
            detach(project)
        plain: list[float] = []
        cold: list[float] = []
        detached: list[float] = []
        detached_files: list[float] = []
        commands = [
            (plain, lambda: timed_run(PYTHON)[0]),
            (cold, lambda: detach(code, COLD)),
            (detached, lambda: detach(code)),
            (detached_files, lambda: detach(project)),
        ]
        for i in range(RUNS):
            turn = commands[i % 4 :] + commands[: i % 4]  # rotate who goes first
            for samples, run in turn:
                samples.append(run())
        log(
            f"python {statistics.median(plain):.4f}s, "
            f"cold {statistics.median(cold):.4f}s, "
            f"ferry run --detach {statistics.median(detached):.4f}s, "
            f"from {CODE_FILES} files {statistics.median(detached_files):.4f}s"
        )

        api_ids: list[str] = []
        api: list[float] = []
        command = ["python", "-c", "pass"]
        for i in range(API_WARMUPS + API_RUNS):
            start = time.perf_counter()
            job = ferry.submit(command=command, code=str(code))
            took = time.perf_counter() - start
            api_ids.append(job.id)
            if i >= API_WARMUPS:
                api.append(took)
        log(f"ferry.submit() {statistics.median(api) * 1000:.1f} ms; waiting for the jobs")

        records, finished = wait_for_jobs([*cli_ids, *api_ids], WAIT_TIMEOUT_S)
        cli_records = [records[i] for i in cli_ids if i in records]
        api_records = [records[i] for i in api_ids if i in records]

    cli_outcomes = outcomes(cli_records)
    api_outcomes = outcomes(api_records)
    succeeded = sum(r.status.value == "SUCCEEDED" for r in records.values())
    jobs_ok = finished and succeeded == len(cli_ids) + len(api_ids)
    median = max(statistics.median(detached), statistics.median(detached_files))
    latency_ok = median <= BUDGET_S
    if not jobs_ok:
        log(f"jobs that did not succeed: cli {cli_outcomes}, api {api_outcomes}")
    emit(
        {
            "bench": "submit",
            "metric": "detached_median_s",
            "value": round(median, 4),
            "unit": "s",
            "budget": BUDGET_S,
            "rule": "<=",
            "ok": latency_ok and jobs_ok,
            "latency_ok": latency_ok,
            "jobs_ok": jobs_ok,
            "ferry_run_detach": summary(detached),
            f"ferry_run_detach_{CODE_FILES}_files": summary(detached_files),
            "baseline_python": summary(plain),
            "ferry_run_detach_cold": summary(cold),
            "api_submit": summary(api),
            "cli_job_outcomes": cli_outcomes,
            "api_job_outcomes": api_outcomes,
            "jobs_succeeded": succeeded,
            "jobs_submitted": len(cli_ids) + len(api_ids),
            "failure_reasons": failure_reasons(records.values()),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
