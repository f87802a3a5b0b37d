"""``ferry sweep`` with real Optuna and real jobs on the local backend: trials converge,
bad ones are pruned with the stop notice, crashes and exhausted grids end as they should,
``--parallel`` holds, and a driver killed with SIGKILL is followed by one that goes on
without running any trial twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FERRY, assert_one_line_error, ferry, ferry_json, wait_for

pytestmark = [pytest.mark.slow]

# `trial.py`: reports loss = (x - 2)^2 + n^2 (n: 0 unless given) over `steps` steps
# (`pause` s apart, 0.05 unless given; four times that from x = `slow` on, as a diverging model
# that would run long unless cut), falling a little each step; exits 3 when crash is x.
TRIAL = textwrap.dedent(
    """
    import sys, time
    from ferry import runtime
    hp = runtime.hparams()
    x, n = float(hp["x"]), float(hp.get("n", 0))
    if str(hp.get("crash")) == str(hp["x"]):
        print("crashing on purpose", flush=True)
        sys.exit(3)
    steps = int(hp.get("steps", 3))
    pause = float(hp.get("pause", 0.05)) * (4 if x >= float(hp.get("slow", "inf")) else 1)
    for step in range(steps):
        runtime.report(loss=(x - 2) ** 2 + n ** 2 + (steps - step) * 0.001, step=step)
        time.sleep(pause)
    print("done", flush=True)
    """
)


@pytest.fixture
def sweep_project(home: Path, project: Path) -> Path:
    (project / "trial.py").write_text(TRIAL)
    (project / "job.yaml").write_text("name: quad\ncommand: python trial.py\n")
    return project


def _sweep(project: Path, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return ferry("sweep", "job.yaml", *args, cwd=project, timeout=timeout)


def _status(sweep_id: str) -> dict[str, Any]:
    data: dict[str, Any] = ferry_json("sweep", "status", sweep_id)
    return data


def _only_sweep() -> str:
    listed = ferry_json("sweep", "ls")
    assert len(listed) == 1, listed
    return str(listed[0]["sweep"])


def test_a_quadratic_converges_under_tpe_and_the_best_spec_reproduces_it(
    sweep_project: Path,
) -> None:
    done = _sweep(
        sweep_project,
        "--param", "x=uniform:-10:10",
        "--trials", "16",
        "--objective", "loss:min",
        "--pruner", "none",
        "--seed", "5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "hyperparameters:" in done.stdout and "x: " in done.stdout  # the best spec
    sweep_id = _only_sweep()
    status = _status(sweep_id)
    trials = status["trials"]
    assert len(trials) == 16 and all(t["state"] == "COMPLETE" for t in trials), trials
    best = trials[0]
    assert best["objective"] < 1.0, best  # (x within 1 of 2)
    assert [t["objective"] for t in trials] == sorted(t["objective"] for t in trials)
    # each trial is an ordinary job with its values as hyperparameters
    job = ferry_json("status", best["job"])
    assert job["status"] == "SUCCEEDED"
    assert float(job["spec"]["hyperparameters"]["x"]) == best["params"]["x"]
    again = ferry_json("sweep", "best", sweep_id)
    assert again["value"] == best["objective"]
    assert again["spec"]["hyperparameters"] == {"x": best["params"]["x"]}
    assert again["spec"]["command"] == ["python", "trial.py"] and "name" not in again["spec"]


def test_the_pruner_cuts_the_clearly_bad_trials_with_the_stop_notice(sweep_project: Path) -> None:
    done = _sweep(
        sweep_project,
        "--param", "x=choice:2,2.5,3,1.5,2.2,1.8,2.4,40,60,80",
        "--param", "steps=choice:24",
        "--param", "pause=choice:0.1",
        "--param", "slow=choice:40",  # (the bad ones last 10 s uncut: time for the pruner)
        "--sampler", "grid",
        "--seed", "1",
        "--trials", "10",
        "--objective", "loss:min",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trials = _status(_only_sweep())["trials"]
    pruned = [t for t in trials if t["state"] == "PRUNED"]
    assert pruned, trials
    # the first five run whole (the pruner's baseline); every clearly bad one after them
    # is cut (the median pruner also cuts one a little worse than the median), the best never
    late = [t for t in trials if t["trial"] >= 5 and t["params"]["x"] >= 40]
    assert late and all(t["state"] == "PRUNED" for t in late), trials
    assert trials[0]["params"]["x"] == 2 and trials[0]["state"] == "COMPLETE", trials
    for trial in pruned:  # stopped by the notice, well before its 24 steps
        job = ferry_json("status", trial["job"])
        assert job["status"] == "CANCELLED", job
    assert "pruned at step" in done.stderr


def test_a_crashing_trial_fails_and_the_sweep_goes_on(sweep_project: Path) -> None:
    done = _sweep(
        sweep_project,
        "--param", "x=choice:1,2,3,4",
        "--param", "crash=choice:3",
        "--sampler", "grid",
        "--objective", "loss:min",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trials = _status(_only_sweep())["trials"]
    states = {t["params"]["x"]: t["state"] for t in trials}
    assert states == {1: "COMPLETE", 2: "COMPLETE", 3: "FAIL", 4: "COMPLETE"}, states
    assert "trial" in done.stderr and "failed: exit code 3" in done.stderr


def test_a_sweep_whose_trials_keep_failing_stops(sweep_project: Path) -> None:
    (sweep_project / "job.yaml").write_text("name: broken\ncommand: python -c 'exit(4)'\n")
    done = _sweep(
        sweep_project, "--param", "x=int:0:100", "--trials", "20", "--objective", "loss:min"
    )
    assert done.returncode == 1
    assert "more than 50%: the sweep stops" in done.stderr
    assert "has no finished trial yet" in done.stderr
    assert len(_status(_only_sweep())["trials"]) < 20


def test_an_exhausted_grid_ends_the_sweep(sweep_project: Path) -> None:
    done = _sweep(
        sweep_project,
        "--param", "x=choice:1,2,3",
        "--sampler", "grid",
        "--trials", "10",
        "--objective", "loss:min",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trials = _status(_only_sweep())["trials"]
    assert sorted(t["params"]["x"] for t in trials) == [1, 2, 3]


def test_trials_at_once_never_exceed_parallel(sweep_project: Path) -> None:
    done = _sweep(
        sweep_project,
        "--param", "x=uniform:0:4",
        "--param", "pause=choice:0.2",
        "--trials", "6",
        "--parallel", "2",
        "--objective", "loss:min",
        "--pruner", "none",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    spans = []
    for trial in _status(_only_sweep())["trials"]:
        job = ferry_json("status", trial["job"])
        spans.append((job["created_at"], job["ended_at"]))
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2, spans  # (two at once, never three)


def test_a_killed_driver_is_resumed_without_running_a_trial_twice(sweep_project: Path) -> None:
    driver = subprocess.Popen(
        [FERRY, "sweep", "job.yaml", "--param", "x=uniform:0:4", "--param", "pause=choice:0.3",
         "--trials", "6", "--parallel", "2", "--objective", "loss:min", "--pruner", "none"],
        cwd=sweep_project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ,
    )  # fmt: skip
    wait_for(lambda: _started_trials() >= 2, 60, "two trials to start")
    sweep_id = _only_sweep()
    held = ferry("sweep", "resume", sweep_id, cwd=sweep_project)  # (one driver at a time)
    assert "is being driven by another ferry process" in assert_one_line_error(held, 2)
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    # the jobs the killed driver submitted (one may not be recorded in its trial yet:
    # resume finds it by its name, <sweep>-<trial>)
    listed = [j for j in ferry_json("jobs") if j["name"].startswith(f"{sweep_id}-")]
    before = {int(j["name"].rsplit("-", 1)[1]): j["id"] for j in listed}
    assert len(before) >= 2, listed
    resumed = ferry("sweep", "resume", sweep_id, cwd=sweep_project, timeout=150)
    assert resumed.returncode == 0, resumed.stderr
    trials = _status(sweep_id)["trials"]
    assert len(trials) == 6 and all(t["state"] == "COMPLETE" for t in trials), trials
    for trial in trials:  # the trials the killed driver started kept their jobs
        if trial["trial"] in before:
            assert trial["job"] == before[trial["trial"]]
    jobs = [j for j in ferry_json("jobs") if j["name"].startswith(sweep_id)]
    assert len(jobs) == 6, [j["name"] for j in jobs]  # one job per trial, none twice


def _started_trials() -> int:
    listed = ferry_json("jobs")
    return sum(1 for j in listed if j["name"].startswith("quad-sw"))


def test_bad_sweep_input_is_one_sentence(sweep_project: Path) -> None:
    for args, says in (
        (["--param", "lr", "--objective", "loss:min"], "is not NAME=KIND:ARGS"),
        (["--param", "x=uniform:0:1"], "a sweep needs --objective"),
        (["--param", "x=uniform:0:1", "--objective", "loss"], "does not say which way"),
        (["--param", "x=uniform:0:1", "--objective", "l:min", "--sampler", "x"], "--sampler"),
    ):
        said = assert_one_line_error(_sweep(sweep_project, *args), 2)
        assert says in said, said
    said = assert_one_line_error(ferry("sweep", "status", "nosuch"), 2)
    assert "no sweep 'nosuch'" in said
    assert json.loads(ferry("sweep", "ls", "--json").stdout) == []
