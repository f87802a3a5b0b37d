"""Metrics: the cost of ``runtime.report()`` in a training loop (against a bare call and
against ``mlflow.log_metric`` on a local SQLite store, in the same run), and ``ferry metrics``
on a job with a million points (ingested as the supervisor does, with and without the
TensorBoard export).

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
# a training loop whose step is a small matrix product (under a millisecond, a small
# model's CPU step), with and without a report() per step, in alternating rounds; the
# medians are compared (BLAS runs on one thread: on two cores its own threads make one
# round differ from the next by several percent, far more than what is measured)
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
for _ in range(15):
    plain.append(loop(500, False))
    reported.append(loop(500, True))
plain.sort()
reported.sort()
print(best["bare"], best["report"], plain[7], reported[7])
"""


MLFLOW = """
import sys, time, mlflow
mlflow.set_tracking_uri("sqlite:///" + sys.argv[1])
n = int(sys.argv[2])
with mlflow.start_run():
    for i in range(20):  # warm up
        mlflow.log_metric("loss", 0.5, step=i)
    start = time.perf_counter()
    for i in range(n):
        mlflow.log_metric("loss", 0.5, step=i)
    sync_us = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for i in range(n):
        mlflow.log_metric("loss", 0.5, step=i, synchronous=False)
    async_us = (time.perf_counter() - start) / n * 1e6
print(sync_us, async_us)
"""
MLFLOW_CALLS = 300


def _mlflow_us(folder: object) -> tuple[float | None, float | None]:
    """mlflow.log_metric per call (synchronous, and queued with synchronous=False)."""
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        return None, None
    result = subprocess.run(
        [sys.executable, "-c", MLFLOW, f"{folder}/mlflow.db", str(MLFLOW_CALLS)],
        env=child_env(),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        log(f"mlflow comparison failed: {result.stderr.strip().splitlines()[-1:]}")
        return None, None
    sync_us, async_us = (float(x) for x in result.stdout.split())
    return sync_us, async_us


def main() -> int:
    with sandbox() as code:
        metrics_file = code / "m.jsonl"
        env = {
            **child_env(),
            "FERRY_METRICS_FILE": str(metrics_file),
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }
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
            f"a 500-step loop: {loop_plain * 1000:.0f} ms (median), "
            f"reporting every step {slowdown:+.1%}"
        )
        mlflow_us, mlflow_async_us = _mlflow_us(code)
        if mlflow_us is not None and mlflow_async_us is not None:
            log(
                f"mlflow.log_metric on SQLite: {mlflow_us:.0f} µs per call, "
                f"{mlflow_async_us:.1f} µs with synchronous=False "
                f"(report() is {mlflow_us / report_us:,.0f}x cheaper than the first)"
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
        # the same points again, as a supervisor also exporting to TensorBoard does
        from ferry.telemetry.tensorboard import EventWriter

        writer = EventWriter(code / "tb", "bench")
        start = time.perf_counter()
        MetricsReader(store, "big-tb", 1, big, writer.add).read()
        writer.flush()
        ingest_tb_s = time.perf_counter() - start
        log(f"ingest with the TensorBoard export: {ingest_tb_s:.2f}s (without: {ingest_s:.2f}s)")
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
            "ingest_with_tensorboard_s": round(ingest_tb_s, 2),
            "mlflow_log_metric_us": None if mlflow_us is None else round(mlflow_us, 1),
            "mlflow_log_metric_async_us": (
                None if mlflow_async_us is None else round(mlflow_async_us, 2)
            ),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
