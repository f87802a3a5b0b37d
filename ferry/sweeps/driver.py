"""The sweep's driver: trials asked of the Optuna study, run as ordinary Ferry jobs on the
spec's backend, their reports fed to the pruner, their objectives told back.

Everything the driver knows is in the study (Ferry's home, ``sweeps.db``): the sweep's
own settings as the study's user attributes (the base spec, the search, how many trials
and how many at once), and each trial's job id as that trial's. A driver that is killed
loses nothing: the next one (``ferry sweep resume``) reads the study, follows the trials
whose jobs still run, and asks for the rest.

Each pass (right after one that changed something, then less and less often, up to
every ``POLL_MAX`` seconds while the trials run):

1. each running trial's job: new points of the objective's metric go to the trial
   (``report``); one the pruner cuts gets the stop notice (its script can save) and ends
   PRUNED; an ended job is told: its last reported value when it succeeded, else FAIL;
2. new trials while fewer than ``parallel`` run and fewer than ``trials`` were asked
   (a grid stops at its size): each is a job of the base spec with the trial's values
   as hyperparameters, named ``<sweep>-<trial>``;
3. the sweep ends once every trial has ended, or when more than ``max_failed`` of the
   trials that ended failed (the running ones are stopped).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.errors import FerryError, UsageError
from ferry.sweeps.params import parse_params
from ferry.sweeps.study import Search, open_study, parse_objective

if TYPE_CHECKING:
    from ferry.spec import JobSpec
    from ferry.store import Store

POLL_MIN = 0.02  # s between the driver's passes after one that changed something ...
POLL_MAX = 0.5  # ... doubling while nothing does, up to this
SETTINGS = "ferry"  # the study's user attribute that holds the sweep's settings
JOB = "job"  # a trial's user attribute: its job's id
PRUNED_AT = "pruned_at"  # a trial's user attribute: the step the pruner cut it at


@dataclass(frozen=True)
class Sweep:
    """A sweep as it was asked for."""

    id: str
    spec: dict[str, Any]  # the base spec (JSON)
    search: Search
    trials: int
    parallel: int
    max_failed: float = 0.5  # the share of ended trials that may fail before it stops

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


def create(
    spec: JobSpec, search: Search, trials: int, parallel: int, home: Path
) -> tuple[Sweep, Any]:
    """A new sweep of ``spec``, its settings kept in its study; and the study."""
    if trials < 1 or parallel < 1:
        raise UsageError("--trials and --parallel are at least 1", "e.g. --trials 40 --parallel 4")
    import optuna

    for _ in range(5):  # (an id another sweep has: another one)
        sweep = Sweep(new_id(spec.name or ""), spec.to_json(), search, trials, parallel)
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
        search = replace(search, seed=search.seed + done)
    return sweep, open_study(sweep_id, search, home)


@contextlib.contextmanager
def driving(sweep_id: str, home: Path) -> Iterator[None]:
    """Hold the sweep for this process's driver. Raises UsageError when another process
    drives it."""
    import fcntl

    folder = home / "sweeps"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / f"{sweep_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"sweep {sweep_id} is being driven by another ferry process",
            "let it go on, or stop it (Ctrl-C) first",
        ) from None
    try:
        yield
    finally:
        os.close(fd)


@dataclass
class Outcome:
    """How a driver's run of the sweep ended."""

    finished: int = 0
    failed: int = 0
    pruned: int = 0
    stopped: str = ""  # why it stopped early, if it did


class Driver:
    """Runs one sweep to its end (see the module's docstring)."""

    def __init__(
        self,
        sweep: Sweep,
        study: Any,
        store: Store,
        start: Callable[..., Any],
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.sweep, self.study, self.store, self.start, self.say = sweep, study, store, start, say
        self.metric = sweep.search.objective.metric
        self.reported: dict[int, int] = {}  # trial number -> points of its metric reported

    def run(self) -> Outcome:
        from ferry import defaults
        from ferry.controller import reconcile

        outcome = Outcome()
        wait = POLL_MIN
        looked = time.monotonic()
        while True:
            if time.monotonic() - looked >= defaults.HEARTBEAT_INTERVAL:
                looked = time.monotonic()  # (a trial whose supervisor was lost resumes,
                reconcile(self.store, start=self.start)  # or ends: never waited for ever)
            before = (outcome.finished, outcome.failed, outcome.pruned)
            for trial in self.study.get_trials(deepcopy=False, states=_running()):
                self._follow(trial, outcome)
            trials = self.study.get_trials(deepcopy=False)
            ended = [t for t in trials if t.state.is_finished()]
            failed = sum(1 for t in ended if t.state.name == "FAIL")
            running = [t for t in trials if t.state.name == "RUNNING"]
            asked = 0
            if outcome.stopped or (failed >= 2 and failed > self.sweep.max_failed * len(ended)):
                if not outcome.stopped:
                    outcome.stopped = (
                        f"{failed} of {len(ended)} trials failed, more than "
                        f"{self.sweep.max_failed:.0%}: the sweep stops"
                    )
                    self.say(outcome.stopped)
                    for trial in running:
                        self._cancel(trial)
                if not running:
                    return outcome
            elif len(trials) < self.sweep.total:
                room = self.sweep.parallel - len(running)
                for _ in range(min(room, self.sweep.total - len(trials))):
                    self._ask()
                    asked += 1
            elif not running:
                return outcome
            changed = asked or before != (outcome.finished, outcome.failed, outcome.pruned)
            wait = POLL_MIN if changed else min(wait * 2, POLL_MAX)
            time.sleep(wait)

    def _ask(self) -> None:
        from ferry.controller import submit
        from ferry.spec import merge, spec_from_dict

        trial = self.study.ask()
        try:
            values = self.sweep.search.values(trial)
            base = self.sweep.spec
            name = f"{self.sweep.id}-{trial.number}"
            hyper = {**(base.get("hyperparameters") or {}), **values}
            spec = spec_from_dict(merge(base, {"name": name, "hyperparameters": hyper}))
            job = submit(spec, start=self.start, store=self.store)
        except Exception as exc:  # (the trial is told, not left running for ever)
            self.study.tell(trial, state=_state("FAIL"), skip_if_finished=True)
            self.say(f"trial {trial.number}: could not be submitted: {exc}")
            return
        trial.set_user_attr(JOB, job.id)
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        self.say(f"trial {trial.number}: job {job.id} ({shown})")

    def _follow(self, trial: Any, outcome: Outcome) -> None:
        job_id = trial.user_attrs.get(JOB) or self._submitted(trial)
        if job_id is None:  # asked, but its job was never submitted (a driver killed then)
            self.study.tell(trial.number, state=_state("FAIL"), skip_if_finished=True)
            return
        from ferry.errors import JobNotFound

        try:
            job = self.store.get_job(job_id)
        except JobNotFound:  # (removed from the store meanwhile)
            self.study.tell(trial.number, state=_state("FAIL"), skip_if_finished=True)
            self.say(f"trial {trial.number}: its job {job_id} is gone")
            return
        running = not job.status.is_terminal()
        if running and PRUNED_AT not in trial.user_attrs and self._reports(trial, job_id):
            self._prune(trial, job)
        elif running and PRUNED_AT in trial.user_attrs and job.status.name != "CANCELLING":
            self._prune(trial, job)  # (a driver killed between the two: the cancel again)
        if running:
            return
        if PRUNED_AT in trial.user_attrs:
            self.study.tell(trial.number, state=_state("PRUNED"), skip_if_finished=True)
            outcome.pruned += 1
            self.say(f"trial {trial.number}: pruned at step {trial.user_attrs[PRUNED_AT]}")
            return
        value = self._objective(job_id)
        if job.status.name != "SUCCEEDED" or value is None:
            why = job.reason or job.status.name
            if value is None and job.status.name == "SUCCEEDED":
                why = f"it reported no {self.metric}"
            self.study.tell(trial.number, state=_state("FAIL"), skip_if_finished=True)
            outcome.failed += 1
            self.say(f"trial {trial.number}: failed: {why}")
            return
        self.study.tell(trial.number, value, skip_if_finished=True)
        outcome.finished += 1
        self.say(f"trial {trial.number}: {self.metric} {value:g}")

    def _submitted(self, trial: Any) -> str | None:
        """The job of a trial whose id was never recorded (a driver killed between the
        submit and the record): found by its name, and recorded now."""
        from optuna.trial import Trial

        found = self.store.find_jobs(f"{self.sweep.id}-{trial.number}-")
        if not found:
            return None
        Trial(self.study, trial._trial_id).set_user_attr(JOB, found[0].id)
        return found[0].id

    def _reports(self, trial: Any, job_id: str) -> bool:
        """Report the trial's new points of the objective's metric; whether the pruner
        would cut it now."""
        from optuna.trial import Trial

        series = self.store.metric_series(job_id, self.metric, max_points=1_000_000)
        done = self.reported.get(trial.number, len(trial.intermediate_values))
        if len(series) <= done:
            return False
        live = Trial(self.study, trial._trial_id)
        for index, (_, step, value) in enumerate(series[done:], start=done):
            if value is not None:
                live.report(float(value), int(step) if step is not None else index)
        self.reported[trial.number] = len(series)
        return bool(live.should_prune())

    def _prune(self, trial: Any, job: Any) -> None:
        from optuna.trial import Trial

        from ferry.controller.jobs import cancel

        if PRUNED_AT not in trial.user_attrs:
            now = self.study._storage.get_trial(trial._trial_id).intermediate_values
            steps = sorted(now) or [0]
            Trial(self.study, trial._trial_id).set_user_attr(PRUNED_AT, steps[-1])
        if not job.status.is_terminal():
            cancel(self.store, job, start=self.start)

    def _cancel(self, trial: Any) -> None:
        from ferry.controller.jobs import cancel

        job_id = trial.user_attrs.get(JOB)
        if job_id is not None:
            job = self.store.get_job(job_id)
            if not job.status.is_terminal():
                cancel(self.store, job, start=self.start)

    def _objective(self, job_id: str) -> float | None:
        for summary in self.store.metric_summaries(job_id):
            if summary.name == self.metric and summary.last is not None:
                return float(summary.last)
        return None


def _running() -> tuple[Any, ...]:
    from optuna.trial import TrialState

    return (TrialState.RUNNING,)


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def table(sweep: Sweep, study: Any) -> list[dict[str, Any]]:
    """The sweep's trials, best first (then running, pruned, failed)."""
    better = -1.0 if sweep.search.objective.direction == "maximize" else 1.0
    order = {"COMPLETE": 0, "RUNNING": 1, "PRUNED": 2, "FAIL": 3, "WAITING": 4}
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append(
            {
                "trial": t.number,
                "job": t.user_attrs.get(JOB),
                "state": t.state.name,
                "params": dict(t.params),
                "objective": t.value,
            }
        )
    rows.sort(
        key=lambda r: (
            order.get(r["state"], 5),
            better * r["objective"] if r["objective"] is not None else 0.0,
            r["trial"],
        )
    )
    return rows
