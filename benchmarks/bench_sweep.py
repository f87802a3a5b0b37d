"""A sweep's cost per trial: 40 trials of a trivial objective at ``--parallel 2`` through
``ferry sweep`` (each trial a Ferry job on the local backend), against the same objective
run as subprocesses by Optuna directly with two workers (``study.optimize(n_jobs=2)``,
the study in memory), in the same run.

Budget (issue: sweeps): the platform's overhead per trial at most 0.3 s, counted per
lane: (ferry's seconds - Optuna's seconds) x parallel / trials, the time each trial adds
to the lane it runs in.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from _common import FERRY_EXE, child_env, emit, log, sandbox, timed_run

BUDGET_S = 0.3
TRIALS = 40
PARALLEL = 2
OBJECTIVE = """\
import sys
x = float(sys.argv[1]) if len(sys.argv) > 1 else None
if x is None:
    from ferry import runtime
    x = float(runtime.hparams()["x"])
    runtime.report(loss=(x - 1) ** 2)
else:
    print(f"loss={(x - 1) ** 2}")
"""


def direct(code: Path) -> float:
    """Seconds for Optuna alone to run the trials as subprocesses, two at once."""
    import logging

    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    env = child_env()

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -5, 5)
        out = subprocess.run(
            [sys.executable, "objective.py", repr(x)],
            cwd=code,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return float(out.stdout.strip().split("=")[1])

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    started = time.perf_counter()
    study.optimize(objective, n_trials=TRIALS, n_jobs=PARALLEL)
    return time.perf_counter() - started


def finished(code: Path) -> int:
    """How many trials of the one sweep in this sandbox completed."""
    import json

    _, listed = timed_run([FERRY_EXE, "sweep", "ls", "--json"], capture=True, cwd=code)
    sweep_id = json.loads(listed)[0]["sweep"]
    _, shown = timed_run([FERRY_EXE, "sweep", "status", sweep_id, "--json"], capture=True, cwd=code)
    return sum(1 for t in json.loads(shown)["trials"] if t["state"] == "COMPLETE")


def main() -> int:
    with sandbox() as code:
        (code / "objective.py").write_text(OBJECTIVE)
        (code / "job.yaml").write_text("name: bench\ncommand: python objective.py\n")
        timed_run([FERRY_EXE, "run", "--", "python", "-c", "pass"], cwd=code)  # (warm-up)
        baseline = direct(code)
        log(f"Optuna alone, {TRIALS} subprocess trials, {PARALLEL} at once: {baseline:.2f}s")
        sweep = [
            FERRY_EXE, "sweep", "job.yaml", "--param", "x=uniform:-5:5",
            "--trials", str(TRIALS), "--parallel", str(PARALLEL),
            "--objective", "loss:min", "--pruner", "none", "--seed", "0",
        ]  # fmt: skip
        ferry_s, _ = timed_run(sweep, cwd=code)
        log(f"ferry sweep, {TRIALS} trials as jobs, {PARALLEL} at once: {ferry_s:.2f}s")
        completed = finished(code)
        if completed != TRIALS:  # (a sweep that stopped early would look cheap)
            raise SystemExit(f"bench_sweep: {completed} of {TRIALS} trials completed")
        per_trial = (ferry_s - baseline) * PARALLEL / TRIALS
        log(f"overhead per trial (per lane): {per_trial:.3f}s")
        emit(
            {
                "bench": "sweep",
                "metric": "overhead_per_trial_s",
                "value": round(per_trial, 4),
                "unit": "s",
                "budget": BUDGET_S,
                "rule": "<=",
                "ok": per_trial <= BUDGET_S,
                "trials": TRIALS,
                "parallel": PARALLEL,
                "ferry_sweep_s": round(ferry_s, 3),
                "baseline_optuna_direct_s": round(baseline, 3),
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
