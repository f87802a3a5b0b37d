"""Metrics: the cost of ``runtime.report()`` in a training loop, and ``ferry metrics`` on a
job with a million points.

Budgets (docs: Performance budgets): report() ≤ 20 µs per call (measured against a bare
Python call with the same arguments, in the same run); a training loop that reports every
step ≤ 1 % slower than the same loop without; 1 M points per job stored, and
``ferry metrics`` on such a job in ≤ 1 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from _common import FERRY_EXE, child_env, emit, log, sandbox

CALLS = 200_000
POINTS = 1_000_000
BUDGET_CALL_US = 20.0
BUDGET_SUMMARY_S = 1.0
BUDGET_SLOWDOWN = 0.01  # a loop reporting every step is at most 1 % slower

TIMING = """
import os, sys, time
from ferry import runtime
def bare(step=None, **metrics):
    return None
n = int(sys.argv[1])
for fn in (bare, runtime.report):  # warm up both
    for i in range(1000):
        fn(step=i, loss=0.5, acc=0.9)
best = {}
for name, fn in (("bare", bare), ("report", runtime.report)) * 2:
    start = time.perf_counter()
    for i in range(n):
        fn(step=i, loss=0.5, acc=0.9)
    took = (time.perf_counter() - start) / n * 1e6
    best[name] = min(best.get(name, took), took)
runtime.flush()
# a training loop whose step is a small matrix product (about a millisecond, a small
# model's CPU step), with and without a report() per step; best of several rounds each
import numpy as np
a = np.random.rand(256, 256)
def loop(steps, reporting):
    start = time.perf_counter()
    for i in range(steps):
        loss = float((a @ a)[0, 0])
        if reporting:
            runtime.report(step=i, loss=loss)
    return time.perf_counter() - start
plain, reported = [], []
for _ in range(5):
    plain.append(loop(1000, False))
    reported.append(loop(1000, True))
print(best["bare"], best["report"], min(plain), min(reported))
"""


def main() -> int:
    with sandbox() as code:
        metrics_file = code / "m.jsonl"
        env = {**child_env(), "FERRY_METRICS_FILE": str(metrics_file)}
        out = subprocess.run(
            [sys.executable, "-c", TIMING, str(CALLS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        bare_us, report_us, loop_plain, loop_reported = (float(x) for x in out.split())
        slowdown = loop_reported / loop_plain - 1
        written = len(metrics_file.read_text().splitlines())
        log(
            f"bare call {bare_us:.2f} µs, report() {report_us:.2f} µs; {written} lines written; "
            f"a 1000-step loop: {loop_plain * 1000:.0f} ms, reporting every step {slowdown:+.1%}"
        )

        # a job with a million points: ingested as the supervisor does, then summarised
        from ferry.runtime.ingest import MetricsReader
        from ferry.store import open_store

        store = open_store()
        job = store.create_job(
            job_id="big-0001",
            name="big",
            backend="local",
            spec={"command": ["x"]},
            job_dir=str(code),
            outputs=str(code / "out"),
        )
        big = code / "big.jsonl"
        with open(big, "w") as file:
            for i in range(POINTS // 4):
                file.write(
                    json.dumps(
                        {
                            "t": 1e9 + i,
                            "rank": 0,
                            "step": i,
                            "m": {"loss": 1 / (i + 1), "acc": i / POINTS, "lr": 1e-3, "gn": 0.5},
                        }
                    )
                    + "\n"
                )
        start = time.perf_counter()
        stored = MetricsReader(store, job.id, 1, big).read()
        ingest_s = time.perf_counter() - start
        timings = []
        for _ in range(3):
            start = time.perf_counter()
            result = subprocess.run(
                [FERRY_EXE, "metrics", job.id, "--json"],
                env=child_env(),
                capture_output=True,
                text=True,
                check=True,
            )
            timings.append(time.perf_counter() - start)
        summary = {m["name"]: m for m in json.loads(result.stdout)}
        assert summary["loss"]["points"] == POINTS // 4, summary
        summary_s = min(timings)
        log(
            f"{stored} points stored in {ingest_s:.2f}s ({stored / ingest_s:,.0f}/s); "
            f"ferry metrics on them: {summary_s:.2f}s"
        )
    emit(
        {
            "bench": "metrics",
            "metric": "report_us",
            "value": round(report_us, 3),
            "unit": "µs per call",
            "budget": BUDGET_CALL_US,
            "rule": "<=",
            "ok": report_us <= BUDGET_CALL_US
            and summary_s <= BUDGET_SUMMARY_S
            and stored == POINTS
            and slowdown <= BUDGET_SLOWDOWN,
            "loop_slowdown": round(slowdown, 4),
            "loop_slowdown_budget": BUDGET_SLOWDOWN,
            "bare_call_us": round(bare_us, 3),
            "lines_written": written,
            "points": stored,
            "ingest_s": round(ingest_s, 2),
            "ferry_metrics_s": round(summary_s, 3),
            "ferry_metrics_budget_s": BUDGET_SUMMARY_S,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
