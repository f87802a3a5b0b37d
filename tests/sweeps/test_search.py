"""A sweep's search space and study: ``--param`` and ``--objective`` read, with one
sentence for each mistake, and the study drawn from with real Optuna (ask and tell, as
the driver does), kept in Ferry's home."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.errors import UsageError
from ferry.sweeps.params import Param, parse_param, parse_params
from ferry.sweeps.study import Search, open_study, parse_objective


def test_each_kind_of_param_reads_back_as_written() -> None:
    for text in (
        "lr=loguniform:0.0001:0.1",
        "dropout=uniform:0:0.5",
        "dropout=uniform:0:0.5:0.1",
        "layers=int:2:6",
        "units=int:32:256:32",
        "width=logint:16:1024",
        "batch=choice:32,64,128",
        "opt=choice:adam,sgd",
        "bn=choice:true,false",
        "svc_c=loguniform:1e-10:10000000000 if classifier=SVC",  # (only for SVC)
        "svc_c=loguniform:0.001:1000 if classifier=SVC,LinearSVC",
        "kernel=choice:rbf,linear if classifier=SVC",
        "units=int:32:256:32 if layers=2,3",
        "bn=choice:true,false if layers=true",
    ):
        assert parse_param(text).describe() == text
    batch = parse_param("batch=choice:32,64.5,adam,true")
    assert batch.choices == (32, 64.5, "adam", True)  # (as the script gets them)
    assert parse_param("lr=loguniform:1e-4:1e-1") == Param("lr", "loguniform", 1e-4, 0.1)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("lr", "is not NAME=KIND:ARGS"),
        ("=uniform:0:1", "is not NAME=KIND:ARGS"),
        ("2lr=uniform:0:1", "is not a hyperparameter name"),
        ("lr=normal:0:1", "'normal' is not a kind of parameter"),
        ("lr=loguniform:1e-4", "loguniform takes loguniform:LOW:HIGH"),
        ("lr=uniform:a:1", "takes numbers"),
        ("lr=uniform:1:0", "LOW (1) must be below HIGH (0)"),
        ("lr=loguniform:0:1", "a log scale needs LOW above 0"),
        ("n=int:1.5:4", "int takes whole numbers"),
        ("n=int:1:4:0", "STEP must be above 0"),
        (
            "d=uniform:0:1:0.3",
            "(e.g. --param d=uniform:0:0.9:0.3)",
        ),
        ("n=int:0:10:3", "STEP (3) does not divide HIGH - LOW, so HIGH would never be reached"),
        ("x=uniform:0:inf", "must be finite"),
        ("b=choice:", "choice takes values separated by commas"),
        ("b=choice:1,,2", "choice takes values separated by commas"),
        ("b=choice:1,1", "a value is given twice"),
    ],
)
def test_a_bad_param_is_one_sentence(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)) as caught:
        parse_param(text)
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


def test_params_are_given_once_and_at_least_one() -> None:
    with pytest.raises(UsageError, match="--param lr is given twice"):
        parse_params(["lr=uniform:0:1", "lr=int:1:2"])
    with pytest.raises(UsageError, match="at least one --param"):
        parse_params([])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("val_loss", "does not say which way is better"),
        ("val_loss:lowest", "'lowest' is neither min nor max"),
        ("val loss:min", "is not a metric name"),
    ],
)
def test_a_bad_objective_is_one_sentence(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_objective(text)


def test_objectives_read_both_ways() -> None:
    assert parse_objective("val_loss:min").direction == "minimize"
    assert parse_objective("eval/accuracy:MAX").describe() == "eval/accuracy:max"


def test_a_grid_covers_choices_and_stepped_ranges_only() -> None:
    objective = parse_objective("loss:min")
    params = tuple(parse_params(["b=choice:32,64", "n=int:1:3", "d=uniform:0:0.2:0.1"]))
    search = Search(params, objective, sampler="grid")
    assert search.space() == {"b": [32, 64], "n": [1, 2, 3], "d": [0.0, 0.1, 0.2]}
    assert search.grid_size() == 18
    with pytest.raises(UsageError, match="continuous range, which a grid cannot cover"):
        Search((parse_param("lr=loguniform:1e-4:1e-1"),), objective, sampler="grid")
    with pytest.raises(UsageError, match="more than a grid of 10000 takes"):
        Search((parse_param("n=int:0:100000"),), objective, sampler="grid")
    with pytest.raises(UsageError, match="--sampler 'bayes' is not one Ferry has"):
        Search(params, objective, sampler="bayes")
    with pytest.raises(UsageError, match="--pruner 'asha' is not one Ferry has"):
        Search(params, objective, pruner="asha")
    for seed in (-1, 2**32):
        with pytest.raises(UsageError, match=f"--seed {seed} is not a seed the samplers take"):
            Search(params, objective, seed=seed)


def test_a_quadratic_converges_under_tpe_and_the_study_is_kept(tmp_path: Path) -> None:
    params = tuple(parse_params(["x=uniform:-10:10", "n=int:-5:5"]))
    search = Search(params, parse_objective("loss:min"), sampler="tpe", seed=7)
    study = open_study("quad", search, tmp_path)
    for _ in range(40):
        trial = study.ask()
        values = search.values(trial)
        study.tell(trial, (values["x"] - 2) ** 2 + (values["n"] + 1) ** 2)
    assert study.best_value < 0.5, study.best_params
    assert study.best_params["n"] == -1
    # the study is in Ferry's home: another process (a driver started again) goes on
    again = open_study("quad", search, tmp_path)
    assert len(again.trials) == 40 and again.best_value == study.best_value


@pytest.mark.parametrize("sampler", ["random", "grid", "cmaes", "qmc"])
def test_every_sampler_draws_within_the_space(tmp_path: Path, sampler: str) -> None:
    texts = ["x=uniform:-1:1:0.5", "n=int:1:3"] + ([] if sampler == "cmaes" else ["b=choice:a,b"])
    search = Search(tuple(parse_params(texts)), parse_objective("y:max"), sampler=sampler, seed=1)
    study = open_study(sampler, search, tmp_path)
    seen = set()
    for _ in range(search.grid_size() or 12):
        trial = study.ask()
        values = search.values(trial)
        assert -1 <= values["x"] <= 1 and values["n"] in (1, 2, 3)
        seen.add(tuple(sorted(values.items())))
        study.tell(trial, values["x"] + values["n"])
    if sampler == "grid":
        assert len(seen) == 5 * 3 * 2  # every point once


def test_the_median_pruner_cuts_a_clearly_bad_trial(tmp_path: Path) -> None:
    search = Search((parse_param("x=uniform:0:1"),), parse_objective("loss:min"), seed=3)
    study = open_study("prune", search, tmp_path)
    for _ in range(6):  # good trials: the loss falls with each step
        trial = study.ask()
        search.values(trial)
        for step in range(5):
            trial.report(1.0 / (step + 1), step)
        study.tell(trial, 0.2)
    bad = study.ask()
    search.values(bad)
    bad.report(50.0, 0)
    bad.report(40.0, 1)
    assert bad.should_prune()


def test_parsing_a_search_space_does_not_import_optuna() -> None:
    code = (
        "import sys; from ferry.sweeps.params import parse_params; "
        "parse_params(['lr=loguniform:1e-4:1e-1']); print('optuna' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
