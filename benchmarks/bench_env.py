"""A job with ``environment.requirements`` whose environment exists already, against making
that environment from scratch as one would by hand for each run.

Budget (issue: clouds and environments): reusing the environment adds at most 0.1 s to
``ferry run`` (median of the differences between ``ferry run --requirements
requirements.txt -- python -c pass`` and ``ferry run -- python -c pass`` in the same
round), which is what makes one environment per requirements worth having. The baseline,
reported beside it: ``python -m venv`` and ``pip install -r requirements.txt`` into it,
the same requirements. The requirements are 20 small wheels made here, from a folder
(``--no-index --find-links wheels``): no network, so the figure is the environment's, not
a download's. The first build through Ferry (uv when installed, else pip) is reported too.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path

from _common import FERRY_EXE, emit, interleaved, log, sandbox, timed_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.packaging.wheels import make_wheel  # (from the repository's root)

BUDGET_S = 0.1
WHEELS = 20
RUNS = 11
PLAIN = [FERRY_EXE, "run", "--", "python", "-c", "pass"]
WITH_ENV = [FERRY_EXE, "run", "--requirements", "requirements.txt", "--", "python", "-c", "pass"]


def scratch(code: Path) -> float:
    """Seconds to make a venv and install the requirements into it, as by hand."""
    venv = code.parent / "by-hand"
    shutil.rmtree(venv, ignore_errors=True)
    started = time.perf_counter()
    timed_run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    timed_run([*pip, "--disable-pip-version-check", "-r", "requirements.txt"], cwd=code)
    took = time.perf_counter() - started
    shutil.rmtree(venv, ignore_errors=True)
    return took


def main() -> int:
    with sandbox() as code:
        names = [f"bench_pkg_{i}" for i in range(WHEELS)]
        for name in names:
            make_wheel(code / "wheels", "1.0", name)
        lines = [
            "--no-index",
            "--find-links wheels",
            *(f"{n.replace('_', '-')}==1.0" for n in names),
        ]
        (code / "requirements.txt").write_text("\n".join(lines) + "\n")
        first, _ = timed_run(WITH_ENV, cwd=code)  # builds it
        log(f"first run, building the environment: {first:.2f}s")
        for _ in range(2):  # warm-up: the launcher, caches
            timed_run(PLAIN, cwd=code)
            timed_run(WITH_ENV, cwd=code)
        cases = {
            "plain": lambda: timed_run(PLAIN, cwd=code)[0],
            "reused": lambda: timed_run(WITH_ENV, cwd=code)[0],
        }
        samples = interleaved(list(cases), RUNS, lambda name: cases[name]())
        by_hand = [scratch(code) for _ in range(3)]
    added = [r - p for r, p in zip(samples["reused"], samples["plain"], strict=True)]
    median_added = statistics.median(added)
    log(
        f"ferry run {statistics.median(samples['plain']):.3f}s, with the environment reused "
        f"{statistics.median(samples['reused']):.3f}s; by hand {statistics.median(by_hand):.2f}s"
    )
    emit(
        {
            "bench": "env",
            "metric": "reuse_added_s",
            "value": round(median_added, 4),
            "unit": "s",
            "budget": BUDGET_S,
            "rule": "<=",
            "ok": median_added <= BUDGET_S,
            "baseline_by_hand_s": round(statistics.median(by_hand), 3),
            "reuse_vs_by_hand": round(median_added / statistics.median(by_hand), 4),
            "first_run_with_build_s": round(first, 3),
            "ferry_run_plain_s": round(statistics.median(samples["plain"]), 4),
            "ferry_run_reused_s": round(statistics.median(samples["reused"]), 4),
            "wheels": WHEELS,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
