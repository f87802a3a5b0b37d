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

from tests.conftest import (
    FERRY,
    assert_one_line_error,
    ferry,
    ferry_json,
    job_status,
    wait_for,
)
from tests.sweeps.conftest import status_rows

pytestmark = [pytest.mark.slow]

# `trial.py`: reports loss = (x - 2)^2 + n^2 (n: 0 unless given) over `steps` steps
# (`pause` s apart, 0.05 unless given; four times that from x = `slow` on, as a diverging model
# that would run long unless cut), falling a little each step; exits 3 when crash is x;
# then waits while the file `hold` (when given) exists, from x = `hold_from` on (any x
# unless given); with `deaf`, it ignores SIGTERM.
TRIAL = textwrap.dedent(
    """
    import os, signal, sys, time
    from ferry import runtime
    hp = runtime.hparams()
    if hp.get("deaf"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    x, n = float(hp["x"]), float(hp.get("n", 0))
    if str(hp.get("crash")) == str(hp["x"]):
        print("crashing on purpose", flush=True)
        sys.exit(3)
    steps = int(hp.get("steps", 3))
    pause = float(hp.get("pause", 0.05)) * (4 if x >= float(hp.get("slow", "inf")) else 1)
    for step in range(steps):
        runtime.report(loss=(x - 2) ** 2 + n ** 2 + (steps - step) * 0.001, step=step)
        time.sleep(pause)
    held = x >= float(hp.get("hold_from", "-inf"))
    while held and hp.get("hold") and os.path.exists(hp["hold"]):
        time.sleep(0.05)
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
    assert "sweep" not in again["spec"]


def test_sweep_status_stands_each_value_under_its_header(sweep_project: Path) -> None:
    done = _sweep(
        sweep_project,
        "--param", "x=choice:0.001,1234567.5",  # (values wider and narrower than
        "--param", "steps=choice:2",  # their headers)
        "--param", "pause=choice:0.01",
        "--sampler", "grid",
        "--objective", "loss:min",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sweep_id = _only_sweep()
    rows = status_rows(ferry("sweep", "status", sweep_id).stdout)
    assert [r["x"] for r in rows] == ["0.001", "1.23457e+06"]
    assert [(r["steps"], r["pause"]) for r in rows] == [("2", "0.01")] * 2
    assert rows[1]["OBJECTIVE"] == "1.52415e+12" and rows[0]["STATE"] == "COMPLETE"
    assert all(r["JOB"].startswith(f"{sweep_id}-") for r in rows)


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


def test_a_sweep_whose_trials_keep_failing_stops_and_goes_on_once_mended(
    sweep_project: Path,
) -> None:
    trial = (sweep_project / "trial.py").read_text()
    (sweep_project / "trial.py").write_text("exit(4)\n")
    done = _sweep(
        sweep_project, "--param", "x=int:0:4", "--trials", "8", "--objective", "loss:min",
        "--pruner", "none",  # (all its trials complete once mended: none is cut)
    )  # fmt: skip
    assert done.returncode == 1
    assert "more than 50%: the sweep stops" in done.stderr
    assert "has no finished trial yet" in done.stderr
    sweep_id = _only_sweep()
    failed = len(_status(sweep_id)["trials"])
    assert failed < 8
    # the script mended, resume judges failures afresh: the rest run
    (sweep_project / "trial.py").write_text(trial)
    resumed = ferry("sweep", "resume", sweep_id, cwd=sweep_project, timeout=150)
    assert resumed.returncode == 0, resumed.stderr
    states = [t["state"] for t in _status(sweep_id)["trials"]]
    assert states.count("COMPLETE") == 8 - failed and states.count("FAIL") == failed, states


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
    jobs = ferry_json("jobs", "--sweep", sweep_id)  # (its trials' jobs)
    assert len(jobs) == 6, [j["name"] for j in jobs]  # one job per trial, none twice
    assert [j["id"] for j in ferry_json("jobs", "--sweep", sweep_id, "-n", "2")] == [
        j["id"] for j in jobs[:2]
    ]
    assert ferry_json("jobs", "--sweep", sweep_id[:-1]) == []


def test_ferry_cancel_sweep_stops_its_trials_and_resume_goes_on(
    sweep_project: Path, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"  # (the trials run until it goes)
    hold.touch()
    driver = subprocess.Popen(
        [FERRY, "sweep", "job.yaml", "--param", "x=uniform:0:4", "--param", f"hold=choice:{hold}",
         "--trials", "5", "--parallel", "2", "--objective", "loss:min", "--pruner", "none"],
        cwd=sweep_project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=os.environ,
    )  # fmt: skip
    wait_for(lambda: _started_trials() >= 2, 60, "two trials to start")
    sweep_id = _only_sweep()
    cancelled = ferry("cancel", sweep_id, "--wait", cwd=sweep_project, timeout=90)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"sweep {sweep_id} cancelled: 2 running trials stopping" in cancelled.stderr
    _, said = driver.communicate(timeout=60)
    assert driver.returncode == 130, said  # (as ferry wait says of a cancelled job)
    assert f"sweep {sweep_id} was cancelled" in said and "stopped (the sweep was" in said
    status = _status(sweep_id)
    assert status["cancelled"] is True
    trials = status["trials"]
    assert len(trials) == 2 and all(t["state"] == "CANCELLED" for t in trials), trials
    for trial in trials:  # stopped, not run to the end
        assert ferry_json("status", trial["job"])["status"] == "CANCELLED"
    shown = ferry("sweep", "status", sweep_id).stdout
    assert "cancelled" in shown.splitlines()[0] and "CANCELLED" in shown
    # resume goes on: the cancelled trials' values first, then three new ones; the
    # cancelled trials are neither failures nor counted among the five
    hold.unlink()
    resumed = ferry("sweep", "resume", sweep_id, cwd=sweep_project, timeout=150)
    assert resumed.returncode == 0, resumed.stderr
    assert "was cancelled: it goes on" in resumed.stderr
    assert resumed.stderr.count("again: trial") == 2, resumed.stderr
    after = _status(sweep_id)
    assert after["cancelled"] is False
    states = sorted(t["state"] for t in after["trials"])
    assert states == ["CANCELLED"] * 2 + ["COMPLETE"] * 5, states
    done_values = {t["params"]["x"] for t in after["trials"] if t["state"] == "COMPLETE"}
    assert {t["params"]["x"] for t in trials} <= done_values  # (run again, whole)


def test_a_grid_resumed_while_its_cancelled_trials_stop_runs_each_point_once(
    sweep_project: Path, tmp_path: Path
) -> None:
    (sweep_project / "job.yaml").write_text(
        "name: quad\ncommand: python trial.py\nlimits: {stop_grace: 12s}\n"
        "resources: {cpus: 0.5}\n"  # (three at once on two cores)
    )
    hold = tmp_path / "hold"
    hold.touch()
    # x = 3 and 4 run until the hold goes; 1 and 2 end at once: two of three lanes stay busy
    args = ["--param", "x=choice:1,2,3,4", "--param", f"hold=choice:{hold}",
            "--param", "hold_from=choice:3", "--param", "deaf=choice:1", "--sampler", "grid",
            "--parallel", "3", "--pruner", "none", "--objective", "loss:min"]  # fmt: skip
    driver = subprocess.Popen(
        [FERRY, "sweep", "job.yaml", *args], cwd=sweep_project, env=os.environ,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for(lambda: _started_trials() >= 4, 60, "every trial to start")
    sweep_id = _only_sweep()
    complete = lambda: [t for t in _status(sweep_id)["trials"] if t["state"] == "COMPLETE"]  # noqa: E731
    wait_for(lambda: len(complete()) == 2, 60, "x = 1 and 2 to end")
    assert ferry("cancel", sweep_id, cwd=sweep_project).returncode == 0
    driver.kill()  # (its trials deaf to the notice: they stop only at the grace's end)
    driver.wait(10)
    assert all(t["state"] == "CANCELLED" for t in _status(sweep_id)["trials"][2:])
    stopping = [t["job"] for t in _status(sweep_id)["trials"] if t["state"] != "COMPLETE"]
    assert len(stopping) == 2  # (a lane is free: the resumed driver must wait for them)
    resumed = subprocess.Popen(
        [FERRY, "sweep", "resume", sweep_id], cwd=sweep_project, env=os.environ,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ended = ("CANCELLED", "FAILED", "SUCCEEDED")
    wait_for(lambda: all(job_status(j)["status"] in ended for j in stopping), 60, "the stop")
    hold.unlink()
    _, said = resumed.communicate(timeout=150)
    assert resumed.returncode == 0, said
    trials = _status(sweep_id)["trials"]
    done = sorted(t["params"]["x"] for t in trials if t["state"] == "COMPLETE")
    # every point once: no trial was asked while the two stopped, then theirs ran again
    assert done == [1, 2, 3, 4], (trials, said)
    assert said.count("again: trial") == 2, said
    assert sorted(t["state"] for t in trials).count("CANCELLED") == 2, trials


def test_the_specs_max_cost_caps_all_the_trials_together(sweep_project: Path) -> None:
    ferry("config", "set", "local.price_hour", "36")  # (0.01 USD a second)
    (sweep_project / "job.yaml").write_text(
        textwrap.dedent(
            """
            name: quad
            command: python trial.py
            limits: {max_cost: 0.12, stop_grace: 1s}
            sweep:
              params: {x: "uniform:0:4", steps: [40], pause: [0.1]}
              objective: loss:min
              trials: 12
              parallel: 2
              pruner: none
            """
        )
    )
    done = _sweep(sweep_project)
    assert done.returncode == 1, done.stderr
    assert "of the sweep's max_cost 0.12 USD: the sweep stops" in done.stderr
    status = _status(_only_sweep())
    assert status["max_cost"] == 0.12 and status["spent"] <= 0.12, status
    trials = status["trials"]
    assert 2 <= len(trials) < 12, trials  # (each runs 4 s: 0.04 USD)
    assert any(t["state"] == "CANCELLED" for t in trials), trials
    spent = 0.0
    for trial in trials:
        job = ferry_json("status", trial["job"])
        spent += job["cost"]
        assert job["spec"]["limits"]["max_cost"] <= 0.12  # (what was left of the cap)
        assert job["spec"]["sweep"]["objective"] == "loss:min"  # (for its NaN alert)
        assert job["spec"]["sweep"]["params"] == {}  # (a plain job: the search is not in it)
    assert spent <= 0.12 and abs(spent - status["spent"]) < 0.01, (spent, status)


def test_the_specs_sweep_section_is_the_search_and_flags_win(sweep_project: Path) -> None:
    (sweep_project / "job.yaml").write_text(
        textwrap.dedent(
            """
            name: quad
            command: python trial.py
            hyperparameters: {x: 2}
            sweep:
              params: {x: [1, 2, 3, 4], n: "choice:0"}
              objective: loss:min
              sampler: grid
            """
        )
    )
    done = _sweep(sweep_project, "--param", "x=choice:3,5")
    assert done.returncode == 0, done.stderr
    status = _status(_only_sweep())
    assert status["sampler"] == "grid" and status["objective"] == "loss:min"
    assert sorted(t["params"]["x"] for t in status["trials"]) == [3, 5]
    assert all(t["params"]["n"] == 0 for t in status["trials"])
    once = ferry("run", "job.yaml", cwd=sweep_project, timeout=60)  # (the job once, as given)
    assert once.returncode == 0, once.stderr
    bad = sweep_project / "bad.yaml"
    bad.write_text("command: python trial.py\nsweep: {params: {x: 'int:5:1'}}\n")
    said = assert_one_line_error(ferry("sweep", str(bad), cwd=sweep_project), 2)
    assert "sweep.params" in said and "x=int:5:1" in said, said


CV_TRIAL = textwrap.dedent(
    """
    import time
    from ferry import runtime
    x = float(runtime.hparams()["x"])
    for fold in range(3):  # the fold's score: (x - 2)^2 + fold, over two epochs
        for epoch in range(2):
            runtime.report(step=epoch, fold=fold, loss=(x - 2) ** 2 + fold + (1 - epoch))
            time.sleep(0.3)
    """
)


def test_cross_validation_the_objective_is_the_mean_over_folds(
    sweep_project: Path, tmp_path: Path
) -> None:
    (sweep_project / "cv.py").write_text(CV_TRIAL)
    (sweep_project / "job.yaml").write_text("name: cv\ncommand: python cv.py\n")
    done = _sweep(
        sweep_project, "--param", "x=choice:1,4", "--sampler", "grid", "--objective", "loss:min"
    )
    assert done.returncode == 0, done.stderr
    sweep_id = _only_sweep()
    trials = {t["params"]["x"]: t for t in _status(sweep_id)["trials"]}
    assert trials[1]["objective"] == pytest.approx(1 + 1)  # (1 + (0 + 1 + 2) / 3)
    assert trials[4]["objective"] == pytest.approx(4 + 1)
    import optuna

    study = optuna.load_study(
        study_name=sweep_id, storage=f"sqlite:///{os.environ['FERRY_HOME']}/sweeps.db"
    )
    # the pruner saw the mean over the folds that had ended, fold by fold
    for trial in study.trials:
        base = (trial.params["x"] - 2) ** 2
        assert trial.intermediate_values == pytest.approx({0: base, 1: base + 0.5})
    # the chart: history, and parallel coordinates (a PNG); and in the terminal
    chart = tmp_path / "sweep.png"
    drawn = ferry("sweep", "plot", sweep_id, "-o", str(chart))
    assert drawn.returncode == 0, drawn.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    shown = ferry("sweep", "plot", sweep_id)
    assert "best loss:min by trial" in shown.stdout and "2 finished, 0 pruned" in shown.stdout


def test_the_readme_example_sweeps_with_cross_validation(home: Path, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "sweep" / "job.yaml"
    done = ferry("sweep", str(example), "--trials", "3", cwd=tmp_path, timeout=150)
    assert done.returncode == 0, done.stderr
    assert "# best of sweep digits-cv-sw" in done.stdout and "penalty:" in done.stdout
    sweep_id = _only_sweep()
    best = ferry_json("sweep", "best", sweep_id)
    folds = {
        m["name"]: m["last"]
        for m in ferry_json("metrics", best["job"])
        if m["name"].startswith("val_loss/fold")
    }
    assert sorted(folds) == ["val_loss/fold0", "val_loss/fold1", "val_loss/fold2"], folds
    assert best["value"] == pytest.approx(sum(folds.values()) / 3)


def test_a_detached_sweep_is_driven_in_the_background(sweep_project: Path) -> None:
    done = _sweep(
        sweep_project, "--param", "x=choice:1,2,3", "--sampler", "grid",
        "--objective", "loss:min", "--detach",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sweep_id = done.stdout.strip()
    assert sweep_id == _only_sweep() and "is driven in the background" in done.stderr
    log = Path(os.environ["FERRY_HOME"]) / "sweeps" / f"{sweep_id}.log"
    # (its last words: the best trial's spec, written as it exits)
    wait_for(lambda: f"# best of sweep {sweep_id}" in log.read_text(), 120, "the driver's end")
    assert "trial 2: job" in log.read_text()
    wait_for(lambda: not _status(sweep_id)["driven"], 30, "the detached driver to let go")
    states = sorted(t["state"] for t in _status(sweep_id)["trials"])
    assert states == ["COMPLETE"] * 3, states
    # resumed in the background once it has ended: nothing is left to run, and that is fine
    again = ferry("sweep", "resume", sweep_id, "--detach", cwd=sweep_project)
    assert again.returncode == 0 and again.stdout.strip() == sweep_id, again.stderr
    wait_for(lambda: not _status(sweep_id)["driven"], 30, "the second driver to end")
    assert len(_status(sweep_id)["trials"]) == 3


def test_a_script_running_its_own_optuna_study_is_a_plain_job(sweep_project: Path) -> None:
    (sweep_project / "own.py").write_text(
        textwrap.dedent(
            """
            import optuna
            from ferry import runtime
            def objective(trial):
                x = trial.suggest_float("x", -10, 10)
                return (x - 2) ** 2
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
            study.optimize(objective, n_trials=30)
            runtime.report(best_value=study.best_value)
            print(f"best x={study.best_params['x']:.4f}", flush=True)
            """
        )
    )
    done = ferry("run", "--", "python", "own.py", cwd=sweep_project, timeout=120)
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    metrics = {m["name"]: m for m in ferry_json("metrics", job_id)}
    assert metrics["best_value"]["last"] < 1.0 and abs(metrics["x"]["last"] - 2) < 1.0
    # Optuna's own lines ("[I …] Trial 3 finished with value: …") are no metrics of the job
    assert {n for n in metrics if not n.startswith(("sys/", "host/", "gpu"))} == {
        "best_value",
        "x",
    }, metrics
    assert ferry_json("sweep", "ls") == []  # (and it is no sweep of Ferry's)


def _started_trials() -> int:
    listed = ferry_json("jobs")
    return sum(1 for j in listed if j["name"].startswith("quad-sw"))


def test_bad_sweep_input_is_one_sentence(sweep_project: Path) -> None:
    for args, says in (
        (["--param", "lr", "--objective", "loss:min"], "is not NAME=KIND:ARGS"),
        (["--param", "x=uniform:0:1"], "a sweep needs an objective"),
        (["--param", "x=uniform:0:1", "--objective", "loss"], "does not say which way"),
        (["--param", "x=uniform:0:1", "--objective", "l:min", "--sampler", "x"], "--sampler"),
    ):
        said = assert_one_line_error(_sweep(sweep_project, *args), 2)
        assert says in said, said
    said = assert_one_line_error(ferry("sweep", "status", "nosuch"), 2)
    assert "no sweep 'nosuch'" in said
    assert json.loads(ferry("sweep", "ls", "--json").stdout) == []
