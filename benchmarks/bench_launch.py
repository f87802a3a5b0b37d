"""Local launch latency: what ``ferry run -- python -c pass`` adds over ``python -c pass``.

Budget (docs: Performance budgets): ≤ 0.25 s added, median, from an empty folder and from a
200-file code folder (the snapshot must not grow with the folder). The commands are run
interleaved (rotating which goes first) so machine noise hits all alike; each figure is the
median of the differences between a ``ferry run`` and the ``python -c pass`` of its round.
The result's value is the worse of the two cases. The first ``ferry`` command starts the
launcher (in the warm-up rounds); a command with the launcher turned off (``cold``, what
the first command costs) is measured alongside, and reported, not judged.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

from _common import (
    CODE_FILES,
    COLD,
    FERRY_EXE,
    code_folder,
    emit,
    log,
    sandbox,
    summary,
    timed_run,
)

BUDGET_S = 0.25
WARMUPS = 3
RUNS = 25

PYTHON = ["python", "-c", "pass"]
FERRY = [FERRY_EXE, "run", "--", "python", "-c", "pass"]


def main() -> int:
    with sandbox() as empty, code_folder() as project:
        cases: dict[str, Callable[[], float]] = {
            "python": lambda: timed_run(PYTHON)[0],
            "empty": lambda: timed_run(FERRY, cwd=empty)[0],
            "files": lambda: timed_run(FERRY, cwd=project)[0],
            "cold": lambda: timed_run(FERRY, cwd=empty, env=COLD)[0],
        }
        for _ in range(WARMUPS):
            for run in cases.values():
                run()
        samples: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for i in range(RUNS):
            for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate who is first
                samples[name].append(cases[name]())
        log(", ".join(f"{n} {statistics.median(v):.4f}s" for n, v in samples.items()))
    plain = samples["python"]
    added = {
        case: [f - p for f, p in zip(samples[case], plain, strict=True)]
        for case in ("empty", "files", "cold")
    }
    worst = max(statistics.median(added[case]) for case in ("empty", "files"))
    emit(
        {
            "bench": "launch",
            "metric": "added_s",
            "value": round(worst, 4),
            "unit": "s",
            "budget": BUDGET_S,
            "rule": "<=",
            "ok": worst <= BUDGET_S,
            "added": summary(added["empty"]),
            f"added_{CODE_FILES}_files": summary(added["files"]),
            "ferry_run": summary(samples["empty"]),
            f"ferry_run_{CODE_FILES}_files": summary(samples["files"]),
            "added_cold": summary(added["cold"]),
            "baseline_python": summary(plain),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
