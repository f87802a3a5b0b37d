"""Conditional parameters (``NAME=KIND:ARGS if PARAM=VALUE``): read with one sentence for
each mistake, drawn by real Optuna only where their condition holds (every sampler, the
grid on its meaningful points only), kept for resume, and judged by the importances only
over the trials that drew them."""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path
from typing import Any

import optuna
import pytest

from ferry.errors import UsageError
from ferry.sweeps.params import grid_points, parse_param, parse_params
from ferry.sweeps.study import SAMPLERS, Search, open_study, parse_objective
from tests.conftest import assert_one_line_error, ferry, ferry_json
from tests.sweeps.conftest import status_rows

# the issue's search: SVC or a random forest, each with a parameter of its own; a kernel
# for SVC, and a gamma only for its rbf kernel (a condition on a conditional parameter)
SPACE = [
    "classifier=choice:SVC,RandomForest,LinearSVC",
    "svc_c=loguniform:1e-10:1e10 if classifier=SVC,LinearSVC",
    "rf_max_depth=int:2:32 if classifier=RandomForest",
    "gamma=loguniform:1e-4:1 if kernel=rbf",  # (given before the one it names)
    "kernel=choice:rbf,linear if classifier=SVC",
]


def expected(values: dict[str, Any]) -> set[str]:
    """The parameters a trial with ``values`` must have: each whose condition holds."""
    names = {"classifier"}
    if values["classifier"] in ("SVC", "LinearSVC"):
        names.add("svc_c")
    if values["classifier"] == "RandomForest":
        names.add("rf_max_depth")
    if values["classifier"] == "SVC":
        names.add("kernel")
        if values["kernel"] == "rbf":
            names.add("gamma")
    return names


def test_a_condition_holds_for_the_values_it_names() -> None:
    param = parse_param("svc_c=uniform:0:1  if  classifier=SVC,  LinearSVC")
    assert param.condition is not None
    assert (param.condition.parent, param.condition.values) == ("classifier", ("SVC", "LinearSVC"))
    assert param.condition.holds({"classifier": "LinearSVC"})
    assert not param.condition.holds({"classifier": "RandomForest"})
    assert not param.condition.holds({})  # (its parent was not drawn: neither is it)
    numbers = parse_param("units=int:1:4 if layers=2").condition
    assert numbers is not None and numbers.holds({"layers": 2})
    assert not numbers.holds({"layers": True}) and not numbers.holds({"layers": "2"})


def test_parents_are_drawn_before_the_parameters_that_name_them() -> None:
    names = [p.name for p in parse_params(SPACE)]
    assert names == ["classifier", "svc_c", "rf_max_depth", "kernel", "gamma"]


@pytest.mark.parametrize(
    ("texts", "says"),
    [
        (["x=uniform:0:1 if"], "its condition '(nothing)' is not PARAM=VALUE"),
        (["x=uniform:0:1 if model"], "its condition 'model' is not PARAM=VALUE"),
        (["x=uniform:0:1 if model="], "its condition 'model=' is not PARAM=VALUE"),
        (["x=uniform:0:1 if model=a,,b"], "is not PARAM=VALUE or PARAM=VALUE,VALUE"),
        (["x=uniform:0:1 if 2m=a"], "its condition '2m=a' is not PARAM=VALUE"),
        (["x=uniform:0:1 if x=1"], "a parameter cannot be drawn on a condition of its own"),
        (["x=uniform:0:1 if m=a,a", "m=choice:a"], "its condition gives a value twice"),
        (
            ["svc_c=uniform:0:1 if clf=SVC", "classifier=choice:SVC,RF"],
            "--param svc_c is drawn only if clf=SVC, but the sweep has no parameter clf "
            "(add it as a choice, e.g. clf=choice:SVC, or fix the name)",
        ),
        (
            ["svc_c=uniform:0:1 if classifier=SVM", "classifier=choice:SVC,RF"],
            "but SVM is not one of classifier's choices (name one of SVC, RF)",
        ),
        (
            ["x=uniform:0:1 if n=2", "n=int:1:3"],
            "but n=int:1:3 is not a choice (a condition names a choice: give n as choice:…)",
        ),
        (
            ["a=choice:1,2 if b=1", "b=choice:1,2 if a=2", "c=uniform:0:1"],
            "the conditions of --param a=choice:1,2 if b=1, b=choice:1,2 if a=2 go round "
            "in a circle",
        ),
        (["x=uniform:0:1 if m=1", "m=choice:true,false"], "1 is not one of m's choices"),
    ],
)
def test_a_bad_condition_is_one_sentence(texts: list[str], says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_params(texts)
    said = str(caught.value)
    assert says in said and "\n" not in said and caught.value.exit_code == 2, said


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_draws_a_parameter_exactly_when_its_condition_holds(
    tmp_path: Path, sampler: str
) -> None:
    texts = SPACE
    if sampler == "grid":  # (a grid takes choices and stepped ranges)
        texts = [
            "classifier=choice:SVC,RandomForest,LinearSVC",
            "svc_c=choice:0.1,10 if classifier=SVC,LinearSVC",
            "rf_max_depth=int:2:8:2 if classifier=RandomForest",
            "gamma=choice:0.01,0.1,1 if kernel=rbf",
            "kernel=choice:rbf,linear if classifier=SVC",
        ]
    search = Search(tuple(parse_params(texts)), parse_objective("loss:min"), sampler, seed=4)
    study = open_study(sampler, search, tmp_path)
    for _ in range(search.grid_size() or 30):  # (TPE's own model from its 11th trial)
        trial = study.ask()
        values = search.values(trial)
        assert set(values) == expected(values), values
        study.tell(trial, values.get("svc_c", 0.0) + values.get("rf_max_depth", 0))
    drawn = study.get_trials(deepcopy=False)
    for trial in drawn:  # what Optuna stored: only what was drawn
        assert set(trial.params) == expected(trial.params), trial.params
    kinds = {t.params["classifier"] for t in drawn}
    assert kinds == {"SVC", "RandomForest", "LinearSVC"}, kinds
    assert any("gamma" in t.params for t in drawn)
    assert any(t.params.get("kernel") == "linear" for t in drawn)


def test_a_grid_runs_each_meaningful_combination_once() -> None:
    params = parse_params(
        [
            "classifier=choice:SVC,RandomForest,Linear",
            "svc_c=choice:0.1,10,1000 if classifier=SVC",
            "rf_max_depth=int:2:4 if classifier=RandomForest",
            "kernel=choice:rbf,poly if classifier=SVC",
            "gamma=choice:0.1,1 if kernel=rbf",
        ]
    )
    points = grid_points(params)
    # SVC: 3 values of C times (rbf with 2 gammas, or poly); RandomForest: 3 depths;
    # Linear: nothing more. The grid of every value of each would have 108 points.
    assert len(points) == 3 * 3 + 3 + 1
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)
    assert {"classifier": "Linear"} in points
    assert {"classifier": "SVC", "svc_c": 10, "kernel": "poly"} in points
    search = Search(tuple(params), parse_objective("loss:min"), "grid")
    assert search.grid_size() == 13
    with pytest.raises(UsageError, match="make a grid of more than 10000 points"):
        Search(
            tuple(parse_params(["m=choice:a,b", "x=int:1:9000 if m=a", "y=int:1:2000 if m=b"])),
            parse_objective("loss:min"),
            "grid",
        )


def test_a_conditional_grid_is_run_whole_and_in_the_same_order_again(tmp_path: Path) -> None:
    params = tuple(
        parse_params(["m=choice:a,b,c", "x=choice:1,2,3 if m=a", "y=choice:true,false if m=b,c"])
    )
    search = Search(params, parse_objective("loss:min"), "grid", seed=2)
    study = open_study("grid", search, tmp_path)
    seen = []
    for _ in range(3):
        trial = study.ask()
        seen.append(search.values(trial))
        study.tell(trial, 1.0)
    # a driver started again (resume) goes on with the same grid: the rest, each once
    again = open_study("grid", search, tmp_path)
    for _ in range(4):
        trial = again.ask()
        seen.append(search.values(trial))
        again.tell(trial, 1.0)
    assert sorted(map(repr, seen)) == sorted(map(repr, grid_points(params)))


def test_the_trials_hyperparameters_leave_out_what_was_not_drawn() -> None:
    search = Search(tuple(parse_params(SPACE)), parse_objective("loss:min"))
    spec = {"command": ["x"], "hyperparameters": {"epochs": 3, "svc_c": 1.0, "gamma": 0.1}}
    forest = search.hyperparameters(spec, {"classifier": "RandomForest", "rf_max_depth": 4})
    # (the spec's svc_c and gamma are of the search: not passed where they were not drawn)
    assert forest == {"epochs": 3, "classifier": "RandomForest", "rf_max_depth": 4}
    svc = search.hyperparameters(spec, {"classifier": "LinearSVC", "svc_c": 5.0})
    assert svc == {"epochs": 3, "classifier": "LinearSVC", "svc_c": 5.0}


def test_a_sweeps_conditions_are_kept_for_resume(home: Path, project: Path) -> None:
    from ferry.spec import spec_from_dict
    from ferry.sweeps.records import create, load

    search = Search(tuple(parse_params(SPACE)), parse_objective("loss:min"), "random", seed=1)
    spec = spec_from_dict({"name": "clf", "command": ["python", "clf.py"], "code": str(project)})
    made, _ = create(spec, search, 10, 1, home)
    loaded, study = load(made.id, home)
    assert loaded.search.params == search.params
    assert [p.describe() for p in loaded.search.params][-1] == (
        "gamma=loguniform:0.0001:1 if kernel=rbf"
    )
    for _ in range(10):  # (drawn by the resumed study: conditions and all)
        values = loaded.search.values(study.ask())
        assert set(values) == expected(values)


def test_importance_is_judged_over_the_trials_that_drew_a_parameter(tmp_path: Path) -> None:
    from ferry.cli.sweep_plot import importances

    texts = [
        "classifier=choice:SVC,RandomForest",
        "svc_c=loguniform:1e-10:1e10 if classifier=SVC",
        "rf_max_depth=int:2:32 if classifier=RandomForest",
    ]
    search = Search(tuple(parse_params(texts)), parse_objective("loss:min"), "random", seed=3)
    study = open_study("importance", search, tmp_path)
    for _ in range(60):  # SVC's loss rests on its C alone; a forest is worse, whatever its depth
        trial = study.ask()
        values = search.values(trial)
        svc = values["classifier"] == "SVC"
        study.tell(trial, abs(math.log10(values["svc_c"])) / 10 if svc else 2.0)
    found = importances(study)
    assert max(found, key=lambda name: found[name]) == "svc_c", found
    # the forests' depth never told a good trial from a bad one: the SVC trials, which
    # never drew it, are not counted for it
    assert found["rf_max_depth"] == 0.0, found


# `clf.py`: writes the hyperparameters it got to $SEEN/<its job id>.json, then reports
# loss: for SVC, how far log10(svc_c) is from 2; for a forest, 1 + its depth / 100
CLF = textwrap.dedent(
    """
    import json, math, os
    from ferry import runtime
    hp = runtime.hparams()
    seen = os.path.join(os.environ["SEEN"], os.environ["FERRY_JOB_ID"] + ".json")
    with open(seen, "w") as out:
        json.dump(hp, out)
    if hp["classifier"] == "SVC":
        loss = abs(math.log10(float(hp["svc_c"])) - 2) / 10
    else:
        loss = 1 + int(hp["rf_max_depth"]) / 100
    runtime.report(loss=loss)
    """
)
ISSUE = {  # the issue's search, as the spec's sweep: section writes it
    "classifier": "choice:SVC,RandomForest",
    "svc_c": "loguniform:1e-10:1e10 if classifier=SVC",
    "rf_max_depth": "int:2:32 if classifier=RandomForest",
}


def when(params: dict[str, Any]) -> set[str]:
    """The parameters of the issue's search that a trial with ``params`` must have."""
    return {"classifier", "svc_c" if params["classifier"] == "SVC" else "rf_max_depth"}


@pytest.fixture
def clf_project(home: Path, project: Path, tmp_path: Path) -> Path:
    (tmp_path / "seen").mkdir()
    (project / "clf.py").write_text(CLF)
    (project / "job.yaml").write_text(
        "name: clf\ncommand: python clf.py\n"
        f"env: {{SEEN: {tmp_path / 'seen'}}}\n"
        # (svc_c is of the search: a trial that does not draw it must not get this one)
        "hyperparameters: {epochs: 3, svc_c: 1.0}\n"
    )
    return project


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sampler", "trials", "given"), [("tpe", 14, "spec"), ("random", 10, "flags")]
)
def test_a_conditional_sweep_draws_and_passes_only_what_each_trial_drew(
    clf_project: Path, tmp_path: Path, sampler: str, trials: int, given: str
) -> None:
    args = ["--sampler", sampler, "--trials", str(trials), "--seed", "2", "--pruner", "none"]
    if given == "spec":  # the spec's section and the flags say the same
        section = "".join(f"    {name}: {text}\n" for name, text in ISSUE.items())
        with (clf_project / "job.yaml").open("a") as spec:
            spec.write(f"sweep:\n  objective: loss:min\n  params:\n{section}")
    else:
        args += ["--objective", "loss:min", "--param", f"classifier={ISSUE['classifier']}"]
        args += ["--param", f"svc_c={ISSUE['svc_c']}"]  # (quoted, one word)
        args += ["--param", *f"rf_max_depth={ISSUE['rf_max_depth']}".split()]  # (unquoted)
    done = ferry("sweep", "job.yaml", *args, cwd=clf_project, timeout=150)
    assert done.returncode == 0, done.stderr
    sweep_id = ferry_json("sweep", "ls")[0]["sweep"]
    study = optuna.load_study(
        study_name=sweep_id, storage=f"sqlite:///{os.environ['FERRY_HOME']}/sweeps.db"
    )
    assert len(study.trials) == trials
    for trial in study.trials:  # what Optuna stored, what the job was given, what it got
        assert set(trial.params) == when(trial.params), trial.params
        job = ferry_json("status", trial.user_attrs["job"])
        assert job["spec"]["hyperparameters"] == {"epochs": 3, **trial.params}, job["spec"]
        got = json.loads((tmp_path / "seen" / f"{job['id']}.json").read_text())
        assert {k: v for k, v in got.items() if k != "epochs"} == trial.params, got
    assert {t.params["classifier"] for t in study.trials} == {"SVC", "RandomForest"}
    best = ferry_json("sweep", "best", sweep_id)
    assert best["params"]["classifier"] == "SVC" and set(best["params"]) == when(best["params"])
    assert best["spec"]["hyperparameters"] == {"epochs": 3, **best["params"]}, best
    # ferry sweep status: the conditions kept, a parameter not drawn left blank
    status = ferry_json("sweep", "status", sweep_id)
    written = [parse_param(f"{name}={text}").describe() for name, text in ISSUE.items()]
    assert status["params"] == written
    for row in status_rows(ferry("sweep", "status", sweep_id).stdout):
        assert {n for n in ISSUE if row[n]} == when(row), row
    # the chart: a trial that did not draw a parameter crosses its axis at "not drawn"
    chart = tmp_path / f"{sampler}.png"
    drawn = ferry("sweep", "plot", sweep_id, "-o", str(chart))
    assert drawn.returncode == 0, drawn.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000


@pytest.mark.slow
def test_a_conditional_grid_runs_each_combination_a_trial_can_have_once(
    clf_project: Path,
) -> None:
    done = ferry(
        "sweep", "--sampler", "grid", "--objective", "loss:min",
        "--param", "classifier=choice:SVC,RandomForest",
        "--param", "svc_c=choice:0.1,100", "if", "classifier=SVC",
        "--param", "rf_max_depth=choice:2,4", "if", "classifier=RandomForest",
        "job.yaml",  # (after a --param's words: still the spec)
        cwd=clf_project, timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trials = ferry_json("sweep", "status", ferry_json("sweep", "ls")[0]["sweep"])["trials"]
    assert sorted(repr(sorted(t["params"].items())) for t in trials) == sorted(
        repr(sorted(p.items()))
        for p in (
            {"classifier": "SVC", "svc_c": 0.1},
            {"classifier": "SVC", "svc_c": 100},
            {"classifier": "RandomForest", "rf_max_depth": 2},
            {"classifier": "RandomForest", "rf_max_depth": 4},
        )
    )
    bad = ["--param", "classifier=choice:SVC,RandomForest"]
    bad += ["--param", "svc_c=loguniform:1e-10:1e10 if classifier=SVM"]
    refused = ferry("sweep", "job.yaml", "--objective", "loss:min", *bad, cwd=clf_project)
    said = assert_one_line_error(refused, 2)
    assert "SVM is not one of classifier's choices (name one of SVC, RandomForest)" in said
