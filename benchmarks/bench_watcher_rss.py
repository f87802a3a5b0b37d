"""Control-plane memory while following 200 jobs that run elsewhere.

Budget (issue: the portable runner): 200 followed remote jobs in under 100 MB of
control-plane RSS in total. The jobs go to a Ray cluster; here a stand-in for its Jobs API
(``_jobs_api_double.py``: every job starts at once and runs until stopped, and no
entrypoint runs) in a process of its own, so that only Ferry's side is measured. They are
submitted through the Python API from this single-threaded process, as a script would;
once all 200 are RUNNING, the memory of every process that supervises them (watchers and
supervisors, found through the store) is summed: RSS, and PSS where the kernel has it (a
forked watcher shares pages with the submitter, which RSS counts in full).

Baseline, in the same run: the same process following one job, the cost a supervisor per
job would multiply (``one_process_per_job_mb`` = 200 times it). Also reported: the CPU the
watcher used while following the 200 (a share of one core, over 10 s) and how many
requests it made to the cluster each second. All jobs are cancelled at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import emit, log, outcomes, sandbox, wait_for_jobs
from bench_supervisor_rss import settled_memory

JOBS = 200
BUDGET_MB = 100.0
RUNNING_TIMEOUT_S = 120.0
CPU_WINDOW_S = 10.0
COMMAND = ["python", "-c", "pass"]  # (never run: the stand-in runs no entrypoint)


def wait_running(store: Any, job_ids: list[str]) -> list[Any]:
    """The jobs' records once all are RUNNING (or ended, or the time is up)."""
    end = time.monotonic() + RUNNING_TIMEOUT_S
    while True:
        records = [store.get_job(job_id) for job_id in job_ids]
        if all(r.status.value == "RUNNING" for r in records) or time.monotonic() >= end:
            return records
        if any(r.status.is_terminal() for r in records):
            return records
        time.sleep(0.25)


def followers(records: list[Any]) -> set[int]:
    return {r.supervisor_pid for r in records if r.supervisor_pid}


def total_memory(pids: set[int]) -> dict[str, float]:
    rss = pss = 0.0
    for pid in pids:
        memory = settled_memory(pid, timeout=3.0)
        rss += float(memory["rss_mb"] or 0)
        pss += float(memory["pss_mb"] or memory["rss_mb"] or 0)
    return {"rss_mb": round(rss, 2), "pss_mb": round(pss, 2)}


def counts(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/counts", timeout=10) as answer:
        data: dict[str, int] = json.loads(answer.read())
    return data


def cpu_seconds(pids: set[int]) -> float:
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> int:
    import ferry
    from ferry.store import open_store

    double = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_jobs_api_double.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert double.stdout is not None
    url = double.stdout.readline().strip()
    try:
        with sandbox() as code:
            os.environ["RAY_ADDRESS"] = url
            store = open_store()
            submitted = [ferry.submit(command=COMMAND, code=str(code), backend="ray")]
            first = wait_running(store, [submitted[0].id])
            one = total_memory(followers(first))
            log(f"1 job followed: RSS {one['rss_mb']:.1f} MB (PSS {one['pss_mb']:.1f})")
            started = time.monotonic()
            submitted += [
                ferry.submit(command=COMMAND, code=str(code), backend="ray")
                for _ in range(JOBS - 1)
            ]
            log(f"{JOBS - 1} more submitted in {time.monotonic() - started:.1f}s")
            records = wait_running(store, [job.id for job in submitted])
            running = sum(r.status.value == "RUNNING" for r in records)
            pids = followers(records)
            log(f"{running} of {JOBS} running, followed by {len(pids)} process(es)")
            time.sleep(3.0)  # every thread past its first polls
            many = total_memory(pids)
            before, asked = cpu_seconds(pids), counts(url)
            time.sleep(CPU_WINDOW_S)
            cpu = (cpu_seconds(pids) - before) / CPU_WINDOW_S
            polls = (counts(url).get("job", 0) - asked.get("job", 0)) / CPU_WINDOW_S
            log(
                f"{JOBS} jobs followed: RSS {many['rss_mb']:.1f} MB (PSS {many['pss_mb']:.1f}); "
                f"CPU {cpu * 100:.1f}% of a core, {polls:.0f} job polls/s"
            )
            for job in submitted:
                job.cancel()
            final, finished = wait_for_jobs([job.id for job in submitted], timeout=120.0)
            log(f"after cancel: {outcomes(final.values())}")
    finally:
        if double.stdin is not None:
            double.stdin.close()
        double.wait(timeout=10)
    ok = running == JOBS and many["rss_mb"] < BUDGET_MB and finished
    emit(
        {
            "bench": "watcher_rss",
            "metric": "control_plane_rss_mb",
            "value": many["rss_mb"],
            "unit": "MB",
            "budget": BUDGET_MB,
            "rule": "<",
            "ok": ok,
            "jobs_followed": running,
            "following_processes": len(pids),
            "pss_mb": many["pss_mb"],
            "baseline_one_job_mb": one,
            "one_process_per_job_mb": round(one["rss_mb"] * JOBS, 1),
            "per_job_kb": round((many["rss_mb"] - one["rss_mb"]) * 1024 / (JOBS - 1), 1),
            "cpu_share_of_a_core": round(cpu, 3),
            "job_polls_per_s": round(polls, 1),
            "outcomes_after_cancel": outcomes(final.values()),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
