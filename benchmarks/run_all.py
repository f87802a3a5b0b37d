"""Run every ``bench_*.py`` with this interpreter, echo each result line, and sum up.

Each script prints one JSON line on stdout; this echoes it, writes all of them to
``benchmarks/results/latest.jsonl``, and prints a table to stderr. A missed budget is shown
as MISSED but does not fail the run: benchmarks are measurements, not tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import SCRATCH_ENV, TRASH_ENV, scratch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.jsonl"
# The budgets' order in the design; any other bench_*.py runs after these.
ORDER = [
    "bench_launch",
    "bench_submit",
    "bench_throughput",
    "bench_supervisor_rss",
    "bench_staging",
    "bench_metrics",
]
TIMEOUT_S = 240


def scripts() -> list[Path]:
    found = {p.stem: p for p in HERE.glob("bench_*.py")}
    names = [n for n in ORDER if n in found] + sorted(set(found) - set(ORDER))
    return [found[n] for n in names]


def run(script: Path) -> dict[str, Any]:
    """The script's result line, or a failed result saying why there is none."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _failed(script, f"no result within {TIMEOUT_S}s")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        return _failed(script, f"exited {proc.returncode} without a result line")
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except ValueError:
        return _failed(script, f"last stdout line is not JSON: {lines[-1][:80]!r}")
    if len(lines) > 1:
        print(f"run_all: {script.name} printed {len(lines)} stdout lines", file=sys.stderr)
    result.setdefault("elapsed_s", round(time.monotonic() - start, 1))
    return result


def _failed(script: Path, error: str) -> dict[str, Any]:
    print(f"run_all: {script.name}: {error}", file=sys.stderr)
    name = script.stem.removeprefix("bench_")
    return {
        "bench": name,
        "metric": None,
        "value": None,
        "unit": "",
        "budget": None,
        "rule": "",
        "ok": False,
        "error": error,
    }


def table(results: list[dict[str, Any]]) -> str:
    rows = [("benchmark", "figure", "value", "budget", "result")]
    for r in results:
        value = "-" if r.get("value") is None else f"{r['value']:g} {r.get('unit', '')}".strip()
        budget = "-" if r.get("budget") is None else f"{r.get('rule', '')} {r['budget']:g}"
        verdict = "ok" if r.get("ok") else ("ERROR" if r.get("error") else "MISSED")
        rows.append((r["bench"], str(r.get("metric") or "-"), value, budget, verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def main() -> int:
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    # The scripts make their scratch folders in one folder for this run, and the ones they
    # are done with go to its trash: all removed at the end, not between scripts (see
    # _common.discard), along with what a script killed on its timeout left.
    run_root = Path(scratch("run"))
    trash = run_root / "trash"
    trash.mkdir()
    os.environ[SCRATCH_ENV] = str(run_root)
    os.environ[TRASH_ENV] = str(trash)
    try:
        for script in scripts():
            print(f"run_all: {script.name} ...", file=sys.stderr, flush=True)
            result = run(script)
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        shutil.rmtree(run_root, ignore_errors=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("".join(json.dumps(r) + "\n" for r in results))
    print(f"\n{table(results)}", file=sys.stderr)
    missed = [r["bench"] for r in results if not r.get("ok")]
    took = time.monotonic() - started
    if missed:
        print(
            f"\nMISSED: {', '.join(missed)} (took {took:.0f}s; results in {RESULTS})",
            file=sys.stderr,
        )
    else:
        print(f"\nall budgets met (took {took:.0f}s; results in {RESULTS})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
