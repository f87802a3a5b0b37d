"""A sweep as Ferry keeps it: its settings and its Optuna study in Ferry's home
(``sweeps.db``), found by its id; a new one made, an old one loaded (a seed that moves on
when it is resumed); and which process drives it (a lock beside its log).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.errors import FerryError, UsageError
from ferry.sweeps.params import parse_params
from ferry.sweeps.study import SEEDS, Search, open_study, parse_objective

if TYPE_CHECKING:
    from ferry.spec import JobSpec

SETTINGS = "ferry"  # the study's user attribute that holds the sweep's settings
JOB = "job"  # a trial's user attribute: its job's id
PRUNED_AT = "pruned_at"  # a trial's user attribute: the step the pruner cut it at
STOPPED = "stopped"  # a trial's user attribute: why it was stopped (not a failure)
AGAIN = "again"  # a trial's user attribute: the sweep stopped it, so its values run again ...
AGAIN_OF = "again_of"  # ... in the trial that has this user attribute (its number)
CANCELLED = "cancelled"  # the study's user attribute: when ferry cancel SWEEP cancelled it


@dataclass(frozen=True)
class Sweep:
    """A sweep as it was asked for."""

    id: str
    spec: dict[str, Any]  # the base spec (JSON)
    search: Search
    trials: int
    parallel: int
    max_failed: float = 0.5  # the share of ended trials that may fail before it stops
    max_cost: float | None = None  # USD, all its trials together (the spec's limits.max_cost)
    created: float = 0.0  # when (time.time()): its trials' spending is counted from then

    def settings(self) -> dict[str, Any]:
        s = self.search
        return {
            "spec": self.spec,
            "params": [p.describe() for p in s.params],
            "objective": s.objective.describe(),
            "sampler": s.sampler,
            "pruner": s.pruner,
            "seed": s.seed,
            "trials": self.trials,
            "parallel": self.parallel,
            "max_failed": self.max_failed,
            "max_cost": self.max_cost,
            "created": self.created,
        }

    @classmethod
    def of(cls, sweep_id: str, settings: dict[str, Any]) -> Sweep:
        search = Search(
            tuple(parse_params(list(settings["params"]))),
            parse_objective(str(settings["objective"])),
            str(settings["sampler"]),
            str(settings["pruner"]),
            settings.get("seed"),
        )
        return cls(
            sweep_id,
            dict(settings["spec"]),
            search,
            int(settings["trials"]),
            int(settings["parallel"]),
            float(settings.get("max_failed", 0.5)),
            settings.get("max_cost"),
            float(settings.get("created") or 0.0),
        )

    @property
    def total(self) -> int:
        """How many trials it runs: ``trials``, or a grid's size when that is smaller."""
        size = self.search.grid_size()
        return self.trials if size is None else min(self.trials, size)


def new_id(name: str) -> str:
    """A sweep's id: its spec's name (cut so that its trials' job names stay within the
    63 characters a name has) and four hex digits."""
    return f"{(name or 'sweep')[:40].rstrip('-')}-sw{os.urandom(2).hex()}"


def is_sweep_id(ref: str, home: Path) -> bool:
    """Whether ``ref`` names a sweep (its shape, and sweeps exist) rather than a job."""
    import re

    from ferry.sweeps.study import STUDIES

    return bool(re.fullmatch(r".+-sw[0-9a-f]{4}", ref)) and (home / STUDIES).exists()


def create(
    spec: JobSpec, search: Search, trials: int, parallel: int, home: Path
) -> tuple[Sweep, Any]:
    """A new sweep of ``spec``, its settings kept in its study; and the study."""
    if trials < 1 or parallel < 1:
        raise UsageError("--trials and --parallel are at least 1", "e.g. --trials 40 --parallel 4")
    import optuna

    base = spec.to_json()
    base.pop("sweep", None)  # (a trial's is its objective alone: see Driver._ask)
    cap = spec.limits.max_cost
    for _ in range(5):  # (an id another sweep has: another one)
        sweep = Sweep(
            new_id(spec.name or ""), base, search, trials, parallel, max_cost=cap,
            created=time.time(),
        )  # fmt: skip
        try:
            study = open_study(sweep.id, search, home, new=True)
        except optuna.exceptions.DuplicatedStudyError:
            continue
        study.set_user_attr(SETTINGS, sweep.settings())
        return sweep, study
    raise FerryError("no free sweep id was found", "try again")


def load(sweep_id: str, home: Path) -> tuple[Sweep, Any]:
    """The sweep ``sweep_id`` and its study. Raises UsageError when there is none."""
    import optuna

    from ferry.sweeps.study import STUDIES, storage

    if not (home / STUDIES).exists():
        raise UsageError(f"no sweep {sweep_id!r}", "list sweeps with: ferry sweep ls")
    try:
        bare = optuna.load_study(study_name=sweep_id, storage=storage(home))
    except KeyError:
        raise UsageError(f"no sweep {sweep_id!r}", "list sweeps with: ferry sweep ls") from None
    settings = bare.user_attrs.get(SETTINGS)
    if not isinstance(settings, dict):
        raise UsageError(
            f"sweep {sweep_id!r} was never set up (its settings are missing)",
            "start a new one: ferry sweep SPEC --param … --objective METRIC:min",
        )
    sweep = Sweep.of(sweep_id, settings)
    search = sweep.search
    done = len(bare.trials)
    if done and search.seed is not None and search.sampler != "grid":
        # (a seeded sampler started again would draw the first trials' values again; a
        # grid's order must stay, since its points are told by trial number)
        search = replace(search, seed=(search.seed + done) % SEEDS)
    return sweep, open_study(sweep_id, search, home)


def uncancel(study: Any) -> bool:
    """Let a cancelled sweep go on (``ferry sweep resume``); whether it was cancelled."""
    if not study.user_attrs.get(CANCELLED):
        return False
    study.set_user_attr(CANCELLED, None)
    return True


def driven(sweep_id: str, home: Path) -> bool:
    """Whether a process drives the sweep now (holds it: see ``driving``)."""
    import fcntl

    path = home / "sweeps" / f"{sweep_id}.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (and with it, the lock it may have taken)
    return False


def log_path(sweep_id: str, home: Path) -> Path:
    """Where a driver started with ``--detach`` writes what it says."""
    return home / "sweeps" / f"{sweep_id}.log"


@contextlib.contextmanager
def driving(sweep_id: str, home: Path) -> Iterator[None]:
    """Hold the sweep for this process's driver. Raises UsageError when another process
    drives it."""
    import fcntl

    folder = home / "sweeps"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / f"{sweep_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    for tries in range(20):  # (``driven`` holds it a moment, as it looks)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if tries == 19:
                os.close(fd)
                raise UsageError(
                    f"sweep {sweep_id} is being driven by another ferry process",
                    "let it go on, or stop it (Ctrl-C) first",
                ) from None
            time.sleep(0.05)
    try:
        yield
    finally:
        os.close(fd)
