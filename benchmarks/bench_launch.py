"""Local launch latency: what ``ferry run -- python -c pass`` adds over ``python -c pass``.

Budget (docs: Performance budgets): ≤ 0.25 s added, median. The two commands are run
interleaved (alternating which goes first) so machine noise hits both alike; the figure is
the median of the paired differences.
"""

from __future__ import annotations

import statistics
import sys

from _common import FERRY_EXE, emit, log, sandbox, summary, timed_run

BUDGET_S = 0.25
WARMUPS = 3
RUNS = 25

PYTHON = ["python", "-c", "pass"]
FERRY = [FERRY_EXE, "run", "--", "python", "-c", "pass"]


def main() -> int:
    with sandbox():
        for _ in range(WARMUPS):
            timed_run(PYTHON)
            timed_run(FERRY)
        plain: list[float] = []
        ferry: list[float] = []
        for i in range(RUNS):
            if i % 2:
                ferry.append(timed_run(FERRY)[0])
                plain.append(timed_run(PYTHON)[0])
            else:
                plain.append(timed_run(PYTHON)[0])
                ferry.append(timed_run(FERRY)[0])
        log(f"python {statistics.median(plain):.4f}s, ferry run {statistics.median(ferry):.4f}s")
    added = [f - p for f, p in zip(ferry, plain, strict=True)]
    added_s = statistics.median(added)
    emit(
        {
            "bench": "launch",
            "metric": "added_s",
            "value": round(added_s, 4),
            "unit": "s",
            "budget": BUDGET_S,
            "rule": "<=",
            "ok": added_s <= BUDGET_S,
            "added": summary(added),
            "ferry_run": summary(ferry),
            "baseline_python": summary(plain),
            "median_of_medians_diff_s": round(
                statistics.median(ferry) - statistics.median(plain), 4
            ),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
