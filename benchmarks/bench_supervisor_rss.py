"""Control-plane memory per running job: the resident size of each job's supervisor.

Budget (docs: Performance budgets): ≤ 60 MB RSS per running job. Five jobs sleep at once
(0.1 CPU each, so all fit on 2 cores); each supervisor's VmRSS is read from
/proc/<pid>/status, and its PSS and USS (private clean + dirty) from
/proc/<pid>/smaps_rollup: a supervisor forked from the submitter shares pages with it, which
RSS counts in full and PSS only in part. Two batches: supervisors forked by a
single-threaded submitter (the CLI, scripts) and supervisors started as
``python -m ferry.supervisor`` by a threaded one (Jupyter); the figure is the larger.
Baseline: a bare ``python`` sleeping, measured the same way.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import child_env, emit, log, outcomes, sandbox, wait_for_jobs

JOBS = 5
BUDGET_MB = 60.0
RUNNING_TIMEOUT_S = 30.0
SLEEP = ["python", "-c", "import time; time.sleep(30)"]
BASELINE = ["python", "-c", "import time; time.sleep(5)"]


def memory_mb(pid: int) -> dict[str, float | None]:
    """RSS, PSS and USS of a process in MB (PSS/USS None where smaps_rollup is missing)."""
    kb: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                kb["rss"] = int(line.split()[1])
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            for line in file:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Private_Clean", "Private_Dirty"):
                    kb[key] = int(rest.split()[0])
    except OSError:  # no smaps_rollup on this kernel: RSS alone is reported
        kb.clear()
    uss = kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0) if "Pss" in kb else None
    return {
        "rss_mb": kb["rss"] / 1024,
        "pss_mb": kb["Pss"] / 1024 if "Pss" in kb else None,
        "uss_mb": uss / 1024 if uss is not None else None,
    }


def settled_memory(pid: int, timeout: float = 5.0) -> dict[str, float | None]:
    """Memory once it stops growing (two reads 0.2 s apart agree within 1 %)."""
    end = time.monotonic() + timeout
    previous = memory_mb(pid)
    while time.monotonic() < end:
        time.sleep(0.2)
        current = memory_mb(pid)
        if abs(float(current["rss_mb"] or 0) - float(previous["rss_mb"] or 0)) <= 0.01 * float(
            previous["rss_mb"] or 1
        ):
            return current
        previous = current
    return previous


def stats(values: list[float | None]) -> dict[str, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {"max": None, "median": None}
    return {"max": round(max(known), 2), "median": round(statistics.median(known), 2)}


def baseline_memory() -> dict[str, float | None]:
    proc = subprocess.Popen(
        BASELINE, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    try:
        # wait until the interpreter has started and is sleeping
        end = time.monotonic() + 5
        while time.monotonic() < end:
            state = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0]
            if state == "S":
                break
            time.sleep(0.02)
        return settled_memory(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def measure_batch(code: Path, label: str) -> tuple[list[dict[str, Any]], dict[str, int], bool]:
    """Run JOBS sleeping jobs, read their supervisors' memory, cancel them.

    Returns (memory per job, outcomes after the cancel, whether all ended).
    """
    import ferry
    from ferry.store import open_store

    jobs = [
        ferry.submit(command=SLEEP, code=str(code), resources={"cpus": 0.1}) for _ in range(JOBS)
    ]
    store = open_store()
    end = time.monotonic() + RUNNING_TIMEOUT_S
    while True:
        records = [store.get_job(job.id) for job in jobs]
        if all(r.status.value == "RUNNING" for r in records):
            break
        if time.monotonic() >= end or any(r.status.is_terminal() for r in records):
            break
        time.sleep(0.1)
    running = [r for r in records if r.status.value == "RUNNING" and r.supervisor_pid]
    log(f"{label}: {len(running)} of {JOBS} jobs running: {outcomes(records)}")

    per_job: list[dict[str, Any]] = []
    for record in running:
        assert record.supervisor_pid is not None
        try:
            memory = settled_memory(record.supervisor_pid, timeout=2.0)
            per_job.append({"job": record.id, **memory})
        except OSError as exc:
            log(f"cannot read the supervisor of {record.id}: {exc}")

    for job in jobs:
        job.cancel()
    final, finished = wait_for_jobs([job.id for job in jobs], timeout=30.0)
    log(f"{label}: after cancel: {outcomes(final.values())}")
    return per_job, outcomes(final.values()), finished


def report(per_job: list[dict[str, Any]], ended: dict[str, int], finished: bool) -> dict[str, Any]:
    return {
        "jobs_measured": len(per_job),
        "rss_mb": stats([m["rss_mb"] for m in per_job]),
        "pss_mb": stats([m["pss_mb"] for m in per_job]),
        "uss_mb": stats([m["uss_mb"] for m in per_job]),
        "outcomes_after_cancel": ended,
        "all_ended": finished,
    }


def main() -> int:
    with sandbox() as code:
        baseline = baseline_memory()
        log(f"bare python: RSS {baseline['rss_mb']:.1f} MB, PSS {baseline['pss_mb']:.1f} MB")
        # A single-threaded submitter forks its supervisors (the CLI, scripts) ...
        forked = report(*measure_batch(code, "forked supervisors"))
        # ... a threaded one (Jupyter) starts `python -m ferry.supervisor` instead.
        stop = threading.Event()
        helper = threading.Thread(target=stop.wait, daemon=True)
        helper.start()
        try:
            executed = report(*measure_batch(code, "executed supervisors"))
        finally:
            stop.set()
            helper.join()

    maxima = [r["rss_mb"]["max"] for r in (forked, executed)]
    measured_all = all(r["jobs_measured"] == JOBS for r in (forked, executed))
    worst = max((m for m in maxima if m is not None), default=None)
    ok = measured_all and worst is not None and worst <= BUDGET_MB
    emit(
        {
            "bench": "supervisor_rss",
            "metric": "max_rss_mb",
            "value": worst,
            "unit": "MB",
            "budget": BUDGET_MB,
            "rule": "<=",
            "ok": ok,
            "jobs_per_batch": JOBS,
            "forked": forked,
            "executed": executed,
            "baseline_python_mb": {k: round(v, 2) if v else v for k, v in baseline.items()},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
