"""A sweep's Optuna study: what it optimizes (``--objective val_loss:min``), how it draws
trials (``--sampler``) and cuts them short (``--pruner``), kept in Ferry's home with
Optuna's RDB storage on SQLite (``FERRY_HOME/sweeps.db``), so that a sweep whose driver
was killed goes on with the same study and the same trials.

Optuna is imported here, so only what runs a sweep imports this module.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ferry.errors import UsageError, install_hint
from ferry.sweeps.params import Param, grid_points

SAMPLERS = ("tpe", "random", "grid", "cmaes", "qmc")
PRUNERS = ("median", "hyperband", "none")
STUDIES = "sweeps.db"  # in FERRY_HOME: every sweep's study
SEEDS = 2**32  # the samplers' seeds are below this (NumPy's)
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
Direction = Literal["minimize", "maximize"]
_DIRECTIONS: dict[str, Direction] = {
    "min": "minimize",
    "max": "maximize",
    "minimize": "minimize",
    "maximize": "maximize",
}


@dataclass(frozen=True)
class Objective:
    """The metric a sweep optimizes, and which way."""

    metric: str
    direction: Direction

    @property
    def short(self) -> str:
        return "min" if self.direction == "minimize" else "max"

    def describe(self) -> str:
        return f"{self.metric}:{self.short}"


def parse_objective(text: str) -> Objective:
    """``METRIC:min`` or ``METRIC:max``. Raises UsageError naming what is wrong."""
    metric, colon, way = text.strip().rpartition(":")
    if not colon:
        raise UsageError(
            f"--objective {text!r} does not say which way is better",
            f"add :min or :max, e.g. --objective {text.strip() or 'val_loss'}:min",
        )
    if not _METRIC.fullmatch(metric):
        raise UsageError(
            f"--objective {text!r}: {metric!r} is not a metric name",
            "name a metric the script reports, e.g. --objective val_loss:min",
        )
    direction = _DIRECTIONS.get(way.lower())
    if direction is None:
        raise UsageError(
            f"--objective {text!r}: {way!r} is neither min nor max",
            f"e.g. --objective {metric}:min",
        )
    return Objective(metric, direction)


@dataclass(frozen=True)
class Search:
    """What a sweep searches, and how."""

    params: tuple[Param, ...]
    objective: Objective
    sampler: str = "tpe"
    pruner: str = "median"
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise UsageError(
                f"--sampler {self.sampler!r} is not one Ferry has",
                f"choose one of {', '.join(SAMPLERS)}",
            )
        if self.pruner not in PRUNERS:
            raise UsageError(
                f"--pruner {self.pruner!r} is not one Ferry has",
                f"choose one of {', '.join(PRUNERS)}",
            )
        if self.seed is not None and not 0 <= self.seed < SEEDS:
            raise UsageError(
                f"--seed {self.seed} is not a seed the samplers take",
                f"give a whole number from 0 to {SEEDS - 1}",
            )
        if self.sampler == "grid":
            self.grid_size()  # (a range a grid cannot cover is refused now)

    @property
    def conditional(self) -> bool:
        """Whether a parameter is drawn only on a condition."""
        return any(p.condition is not None for p in self.params)

    def space(self) -> dict[str, list[Any]]:
        """The grid: every value of each parameter. Raises UsageError (see Param.grid)."""
        return {p.name: p.grid() for p in self.params}

    def grid_size(self) -> int | None:
        """How many trials the grid has (None: not a grid search): with conditions, the
        combinations a trial can have (see grid_points)."""
        if self.sampler != "grid":
            return None
        if self.conditional:
            return len(grid_points(self.params))
        size = 1
        for values in self.space().values():
            size *= len(values)
        return size

    def make_sampler(self) -> Any:
        import optuna

        samplers = optuna.samplers
        if self.sampler == "grid":
            return _grid(self)
        if self.sampler == "random":
            return samplers.RandomSampler(seed=self.seed)
        if self.sampler == "cmaes":  # (choices are drawn at random beside it)
            return samplers.CmaEsSampler(seed=self.seed, warn_independent_sampling=False)
        if self.sampler == "qmc":
            import warnings

            with warnings.catch_warnings():  # (Optuna calls it experimental)
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return samplers.QMCSampler(seed=self.seed, warn_independent_sampling=False)
        return samplers.TPESampler(seed=self.seed)

    def make_pruner(self) -> Any:
        import optuna

        if self.pruner == "median":  # (the first five trials run whole, as the baseline)
            return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1)
        if self.pruner == "hyperband":
            return optuna.pruners.HyperbandPruner()
        return optuna.pruners.NopPruner()

    def values(self, trial: Any) -> dict[str, Any]:
        """The hyperparameters of the Optuna trial ``trial``, drawn now: each parameter
        whose condition holds, parents first; the others are never suggested, so the
        trial has no value for them (Optuna's define-by-run)."""
        drawn: dict[str, Any] = {}
        for param in self.params:
            if param.condition is None or param.condition.holds(drawn):
                drawn[param.name] = param.suggest(trial)
        return drawn

    def hyperparameters(self, spec: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
        """The hyperparameters of a trial with ``values``, for the spec (JSON) ``spec``:
        its own, less the parameters of the search that the trial did not draw (their
        condition did not hold: they are not passed at all), plus the trial's values."""
        names = {p.name for p in self.params}
        given = spec.get("hyperparameters") or {}
        return {**{k: v for k, v in given.items() if k not in names}, **values}


POINT = "ferry:point"  # the grid sampler's one axis on a conditional grid: a point's index


def _grid(search: Search) -> Any:
    """Optuna's grid sampler, but for its stop of an optimize loop once the grid is done:
    a sweep asks and tells (there is no loop to stop, and Optuna raises), and ends at the
    grid's size itself.

    With conditions, Optuna's grid (every combination of every parameter's values) would
    run each point again for every value of a parameter that its trial does not draw.
    The grid is then one axis, the index of a point among the combinations a trial can
    have (``grid_points``): Optuna picks the point, as it picks one of a grid, and each
    parameter the trial draws takes that point's value."""
    import optuna

    points = grid_points(search.params) if search.conditional else []
    indices = list(range(len(points)))

    class Grid(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

        def sample_independent(self, study: Any, trial: Any, name: str, drawn: Any) -> Any:
            if not points:
                return super().sample_independent(study, trial, name, drawn)
            axis = optuna.distributions.CategoricalDistribution(indices)
            return points[super().sample_independent(study, trial, POINT, axis)][name]

    return Grid({POINT: indices} if points else search.space(), seed=search.seed)


def storage_url(home: Path) -> str:
    """Where the studies are: Optuna's RDB storage on SQLite in Ferry's home."""
    return f"sqlite:///{home / STUDIES}"


@functools.cache
def storage(home: Path) -> Any:
    """The studies' storage in Ferry's home, made once per process (making it reads and
    checks the file's schema: a quarter of a second)."""
    import logging

    import optuna

    optuna.logging.set_verbosity(logging.WARNING)  # (Ferry says what happens itself)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(home / STUDIES, timeout=30)) as db:
        db.execute("PRAGMA journal_mode=WAL")  # (kept by the file: readers never wait)
    return optuna.storages.RDBStorage(
        storage_url(home),
        engine_kwargs={"connect_args": {"timeout": 30}},  # (several drivers share the file)
    )


def open_study(name: str, search: Search, home: Path, new: bool = False) -> Any:
    """The study ``name`` in Ferry's home (a sweep started again goes on with its trials);
    ``new``: made now (Optuna's DuplicatedStudyError when one has that name)."""
    import optuna

    return optuna.create_study(
        storage=storage(home),
        study_name=name,
        sampler=search.make_sampler(),
        pruner=search.make_pruner(),
        direction=search.objective.direction,
        load_if_exists=not new,
    )


def require_optuna() -> None:
    """Raise BackendNotInstalled when Optuna is missing."""
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        from ferry.errors import BackendNotInstalled

        raise BackendNotInstalled(
            "sweeps need Optuna, which is not installed", install_hint("sweep")
        )
