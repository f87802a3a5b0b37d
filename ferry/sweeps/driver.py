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
3. the sweep ends once every trial has ended; or early, its running trials stopped
   (their jobs cancelled, their trials told apart from failures), when more than
   ``max_failed`` of the trials that ended failed, when ``ferry cancel SWEEP`` cancelled it,
   or when its trials' cost together would pass the spec's ``limits.max_cost`` before the
   next look (each trial is also submitted with what is left of it as its own cap, which
   bounds that trial even while no driver runs). A trial the sweep stopped is no result:
   its values run again in a new trial when the sweep goes on.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferry.errors import FerryError
from ferry.sweeps.records import (
    AGAIN,
    AGAIN_OF,
    CANCELLED,
    JOB,
    PRUNED_AT,
    STOPPED,
    Sweep,
)

if TYPE_CHECKING:
    from ferry.store import Store

POLL_MIN = 0.02  # s between the driver's passes after one that changed something ...
POLL_MAX = 0.5  # ... doubling while nothing does, up to this
CAP_SPENT = "the sweep's max_cost was spent"  # why its trials were stopped at the cap
PAGE = 10_000  # metric points read at a time
COST_EVERY = 1.0  # s between the driver's sums of what the trials have spent (with a cap)


@dataclass
class Outcome:
    """How a driver's run of the sweep ended."""

    finished: int = 0
    failed: int = 0
    pruned: int = 0
    stopped: str = ""  # why it stopped early, if it did
    cancelled: bool = False  # by ferry cancel SWEEP


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
        self.seen: dict[int, _Seen] = {}  # trial number -> what its job reported so far
        self.spent = 0.0  # USD its trials had spent at the last sum (with a cap) ...
        self.burn = 0.0  # ... and USD per hour its running trials cost then
        self.summed = -COST_EVERY
        self.capped = False  # a trial was stopped by its share of the cap: none is left
        self.graces: dict[str, float] = {}  # a running trial's job -> its stop grace (s)
        self.grace = 0.0  # the longest of the running trials' graces, at the last sum
        # the trials that had ended before this driver: not counted in the failures' share
        # (a sweep stopped by its failures, its script mended, goes on when resumed)
        self.before = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}

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
            ended = [
                t
                for t in trials
                if t.state.is_finished()
                and STOPPED not in t.user_attrs
                and t.number not in self.before
            ]
            failed = sum(1 for t in ended if t.state.name == "FAIL")
            running = [t for t in trials if t.state.name == "RUNNING"]
            asked = 0
            if not outcome.stopped:
                outcome.stopped, because = self._stop(failed, len(ended), outcome)
                if outcome.stopped:
                    self.say(outcome.stopped)
                    for trial in running:
                        self._cancel(trial, because)
            counted = counted_trials(trials)
            if outcome.stopped:
                if not running:
                    return outcome
            elif len(counted) < self.sweep.total:
                room = self.sweep.parallel - len(running)
                if room > 0 and self.study.user_attrs.get(CANCELLED):
                    continue  # (cancelled since this pass began: the next one stops)
                for _ in range(min(room, self.sweep.total - len(counted))):
                    if not self._ask():
                        break
                    asked += 1
            elif not running:
                return outcome
            changed = asked or before != (outcome.finished, outcome.failed, outcome.pruned)
            wait = POLL_MIN if changed else min(wait * 2, POLL_MAX)
            time.sleep(wait)

    def _stop(self, failed: int, ended: int, outcome: Outcome) -> tuple[str, str]:
        """Why the sweep stops now, as said and as its stopped trials record it (empty
        while it goes on): cancelled, too many failures, or its cost cap."""
        if self.study.user_attrs.get(CANCELLED):
            outcome.cancelled = True
            return f"sweep {self.sweep.id} was cancelled", "the sweep was cancelled"
        if failed >= 2 and failed > self.sweep.max_failed * ended:
            return (
                f"{failed} of {ended} trials failed, more than "
                f"{self.sweep.max_failed:.0%}: the sweep stops",
                "too many trials failed",
            )
        cap = self.sweep.max_cost
        if cap is None:
            return "", ""
        self._sum_spending()
        ahead = self.spent + self.burn * (COST_EVERY + POLL_MAX + self.grace) / 3600
        if self.capped or self.spent >= cap or (self.burn > 0 and ahead > cap):
            return (
                f"the trials have spent {self.spent:.2f} USD of the sweep's max_cost "
                f"{cap:.2f} USD: the sweep stops",
                CAP_SPENT,
            )
        return "", ""

    def _sum_spending(self, now: bool = False) -> None:
        """What the sweep's trials have spent, and what the running ones cost per hour
        (summed at most every COST_EVERY seconds, unless ``now``)."""
        if not now and time.monotonic() - self.summed < COST_EVERY:
            return
        self.summed = time.monotonic()
        spends = spending(self.sweep, self.store)
        self.spent = sum(s.cost for s in spends)
        running = [s for s in spends if s.ended_at is None]
        self.burn = sum(s.price for s in running)
        self.grace = max((self._grace(s.job_id) for s in running), default=0.0)

    def _grace(self, job_id: str) -> float:
        """The stop grace of a trial's job (its spec's, else its backend's own): how long
        it may still run, and cost, once stopped."""
        if job_id not in self.graces:
            from ferry import defaults
            from ferry.backends.registry import get_backend

            try:
                job = self.store.get_job(job_id)
                self.graces[job_id] = float(get_backend(job.backend).stop_grace(job))
            except FerryError:  # (gone, or a backend this install lacks)
                self.graces[job_id] = float(defaults.STOP_GRACE)
        return self.graces[job_id]

    def _ask(self) -> bool:
        """Start a new trial: the values of one the sweep stopped, if there is one, else
        the sampler's. Whether one was asked (none once the cost cap is spent)."""
        from ferry.controller import submit
        from ferry.spec import merge, spec_from_dict

        left = None
        if self.sweep.max_cost is not None:  # (its own cap: what is left of the sweep's)
            self._sum_spending(now=True)
            left = self.sweep.max_cost - self.spent
            if left <= 0:
                self.capped = True
                return False
        again = _to_run_again(self.study.get_trials(deepcopy=False))
        if again is not None:  # (the study's queue comes first when it asks)
            self.study.enqueue_trial(dict(again.params), user_attrs={AGAIN_OF: again.number})
        trial = self.study.ask()
        try:
            values = self.sweep.search.values(trial)
            base = self.sweep.spec
            hyper = self.sweep.search.hyperparameters(base, values)
            override: dict[str, Any] = {
                "name": f"{self.sweep.id}-{trial.number}",
                # (the objective: watched for NaN by the job's alerts even when only printed)
                "sweep": {"objective": self.sweep.search.objective.describe()},
            }
            if left is not None:
                override["limits"] = {"max_cost": round(left, 6)}
            spec = spec_from_dict(merge({**base, "hyperparameters": hyper}, override))
            job = submit(spec, start=self.start, store=self.store)
        except Exception as exc:  # (the trial is told, not left running for ever)
            self.study.tell(trial, state=_state("FAIL"), skip_if_finished=True)
            self.say(f"trial {trial.number}: could not be submitted: {exc}")
            return True
        trial.set_user_attr(JOB, job.id)
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        again_of = f", again: trial {again.number} was stopped" if again is not None else ""
        self.say(f"trial {trial.number}: job {job.id} ({shown}{again_of})")
        return True

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
        judged = PRUNED_AT not in trial.user_attrs and STOPPED not in trial.user_attrs
        if running and judged and self._reports(trial, job_id):
            self._prune(trial, job)
        elif running and PRUNED_AT in trial.user_attrs and job.status.name != "CANCELLING":
            self._prune(trial, job)  # (a driver killed between the two: the cancel again)
        if running:
            return
        if judged:  # (its last points, stored as its job ended: its whole curve is kept)
            self._reports(trial, job_id, prune=False)
        stopped = job.status.name != "SUCCEEDED" and (
            trial.user_attrs.get(STOPPED) or self._stopped(job)
        )
        if stopped and PRUNED_AT not in trial.user_attrs:  # (not a failure of its values)
            if STOPPED not in trial.user_attrs:  # (the cap: run again; by hand: not)
                self._mark(trial, stopped, again=stopped == CAP_SPENT)
            self.study.tell(trial.number, state=_state("FAIL"), skip_if_finished=True)
            self.say(f"trial {trial.number}: stopped ({stopped})")
            return
        if PRUNED_AT in trial.user_attrs:
            self.study.tell(trial.number, state=_state("PRUNED"), skip_if_finished=True)
            outcome.pruned += 1
            self.say(f"trial {trial.number}: pruned at step {trial.user_attrs[PRUNED_AT]}")
            return
        value = self._objective(trial, job_id)
        if job.status.name != "SUCCEEDED" or value is None or math.isnan(value):
            why = job.reason or job.status.name
            if value is None and job.status.name == "SUCCEEDED":
                why = f"it reported no {self.metric}"
            elif value is not None and math.isnan(value) and job.status.name == "SUCCEEDED":
                why = f"its {self.metric} was NaN"
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
        name = f"{self.sweep.id}-{trial.number}"  # (a job's id is its name made a slug)
        found = [job for job in self.store.list_jobs() if job.name == name]
        if not found:
            return None
        self._set(trial, JOB, found[0].id)
        return found[0].id

    def _reports(self, trial: Any, job_id: str, prune: bool = True) -> bool:
        """Report the trial's new points of the objective's metric (read from where the
        last pass stopped); whether the pruner would cut it now (with ``prune``).

        Rank 0's points count (every rank of a gang may report the same). A step already
        reported keeps its first value (an attempt resumed from a checkpoint reports some
        steps again); NaN goes to the pruner as NaN; a negative step is left out. Metrics
        reported per fold (``NAME/foldK``) reach the pruner as the mean over the folds
        that ended (a fold has ended once the next one reports), at step ``folds - 1``."""
        seen = self.seen.get(trial.number)
        if seen is None:
            seen = self.seen[trial.number] = _Seen(steps=set(trial.intermediate_values))
        fresh: list[tuple[int, float]] = []
        while True:
            points = self.store.metrics_after(job_id, seen.cursor, PAGE)
            if not points:
                break
            seen.cursor = points[-1][0]
            for _, _, rank, step, _, name, stored in points:
                if rank != 0:
                    continue
                value = math.nan if stored is None else float(stored)  # (NaN: as NULL)
                if name == self.metric:
                    seen.last = value
                    number = int(step) if step is not None else seen.unnumbered
                    seen.unnumbered += 1
                    if number >= 0:  # (Optuna takes no negative step)
                        fresh.append((number, value))
                elif (fold := _fold(name, self.metric)) is not None:
                    if seen.folds and fold > max(seen.folds):  # (the folds before it ended)
                        ended = [seen.folds[k] for k in sorted(seen.folds)]
                        fresh.append((len(ended) - 1, sum(ended) / len(ended)))
                    seen.folds[fold] = value
            if len(points) < PAGE:
                break
        fresh = [(step, value) for step, value in fresh if step not in seen.steps]
        if not fresh:
            return False
        from optuna.trial import Trial

        live = Trial(self.study, trial._trial_id)
        for step, value in fresh:
            if step not in seen.steps:  # (a step twice in one read: its first value)
                seen.steps.add(step)
                live.report(value, step)
        return prune and bool(live.should_prune())

    def _prune(self, trial: Any, job: Any) -> None:
        from ferry.controller.jobs import cancel

        if PRUNED_AT not in trial.user_attrs:
            now = self.study._storage.get_trial(trial._trial_id).intermediate_values
            steps = sorted(now) or [0]
            self._set(trial, PRUNED_AT, steps[-1])
        if not job.status.is_terminal():
            cancel(self.store, job, start=self.start)

    def _cancel(self, trial: Any, why: str) -> str | None:
        """Stop a running trial for the sweep (``why``): its values run again later. The
        id of its job, if that was still running (one that already ended stands as it
        ended)."""
        from ferry.controller.jobs import cancel
        from ferry.errors import JobNotFound

        job_id = trial.user_attrs.get(JOB) or self._submitted(trial)
        job = None
        if job_id is not None:
            with contextlib.suppress(JobNotFound):
                job = self.store.get_job(job_id)
        if job is not None and job.status.is_terminal():
            return None
        if STOPPED not in trial.user_attrs and PRUNED_AT not in trial.user_attrs:
            self._mark(trial, why, again=True)
        if job is None:
            return None
        cancel(self.store, job, start=self.start)
        return job.id

    def cancel(self) -> list[str]:
        """Cancel the sweep (``ferry cancel SWEEP``): its driver, wherever it runs, asks
        for no more trials, and its running trials' jobs get the stop notice. Returns the
        ids of those jobs."""
        self.study.set_user_attr(CANCELLED, time.time())
        running = self.study.get_trials(deepcopy=False, states=_running())
        stopped = [self._cancel(trial, "the sweep was cancelled") for trial in running]
        return [job_id for job_id in stopped if job_id is not None]

    def _mark(self, trial: Any, why: str, again: bool = False) -> None:
        """Record why a trial was stopped; ``again``: its values run again in a new one."""
        if again:
            self._set(trial, AGAIN, True)
        self._set(trial, STOPPED, why)

    def _set(self, trial: Any, key: str, value: Any) -> None:
        """A user attribute of a trial (nothing once it has been told: another process,
        a driver or ferry cancel, may have told it meanwhile)."""
        import optuna

        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            optuna.trial.Trial(self.study, trial._trial_id).set_user_attr(key, value)

    def _stopped(self, job: Any) -> str:
        """Why a trial's job was stopped from outside its values ("" when it was not):
        cancelled by hand, or its share of the sweep's cost cap spent."""
        if job.status.name == "CANCELLED":
            return "its job was cancelled"
        reason = job.reason or ""
        if self.sweep.max_cost is not None and reason.startswith("budget reached"):
            self.capped = True  # (its cap was what was left of the sweep's)
            return CAP_SPENT
        return ""

    def _objective(self, trial: Any, job_id: str) -> float | None:
        """The metric's last value; else, reported per fold, the mean over the folds of
        each one's last value: rank 0's (read by ``_reports``), else any rank's."""
        seen = self.seen.get(trial.number)
        if seen is not None and seen.last is not None:
            return seen.last
        if seen is not None and seen.folds:
            return sum(seen.folds.values()) / len(seen.folds)
        folds = []
        for summary in self.store.metric_summaries(job_id):
            last = math.nan if summary.last is None else float(summary.last)  # (NaN: NULL)
            if summary.name == self.metric:
                return last
            if _fold(summary.name, self.metric) is not None:
                folds.append(last)  # (one NaN fold makes the mean NaN: the trial fails)
        return sum(folds) / len(folds) if folds else None


@dataclass
class _Seen:
    """What the driver has read of a trial's metrics."""

    steps: set[int]  # reported to the trial
    cursor: int = 0  # the store's last metric point read
    unnumbered: int = 0  # points of the metric without a step (numbered in order)
    folds: dict[int, float] = field(default_factory=dict)  # fold -> its latest value
    last: float | None = None  # the metric's latest value


def _fold(name: str, metric: str) -> int | None:
    """K, when ``name`` is ``metric`` reported for fold K (``val_loss/fold2``)."""
    head, slash, tail = name.rpartition("/")
    if slash and head == metric and tail.startswith("fold") and tail[4:].isdigit():
        return int(tail[4:])
    return None


def counted_trials(trials: list[Any]) -> list[Any]:
    """The trials that count towards a sweep's total: not one the sweep stopped and
    ended (its values run again in a new trial; one still stopping holds its place until
    then), nor one queued for that and not yet started."""
    return [
        t
        for t in trials
        if t.state.name != "WAITING" and not (t.user_attrs.get(AGAIN) and t.state.name == "FAIL")
    ]


def _to_run_again(trials: list[Any]) -> Any | None:
    """A trial the sweep stopped whose values no trial has taken up again yet, if any."""
    taken = {t.user_attrs.get(AGAIN_OF) for t in trials}
    for trial in trials:
        if trial.state.name == "FAIL" and trial.user_attrs.get(AGAIN) and trial.number not in taken:
            return trial
    return None


def spending(sweep: Sweep, store: Store) -> list[Any]:
    """What each attempt of the sweep's trials has spent (``Spend`` records)."""
    mine = f"{sweep.id}-"
    return [
        s
        for s in store.spending(sweep.created)
        if s.job_name.startswith(mine) and s.job_name[len(mine) :].isdigit()
    ]


def _running() -> tuple[Any, ...]:
    from optuna.trial import TrialState

    return (TrialState.RUNNING,)


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def table(sweep: Sweep, study: Any) -> list[dict[str, Any]]:
    """The sweep's trials, best first (then running, pruned, failed)."""
    better = -1.0 if sweep.search.objective.direction == "maximize" else 1.0
    order = {"COMPLETE": 0, "RUNNING": 1, "PRUNED": 2, "FAIL": 3, "CANCELLED": 4}
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "WAITING":  # (queued to run a stopped trial's values again)
            continue
        stopped = t.user_attrs.get(STOPPED) if t.state.name in ("RUNNING", "FAIL") else None
        rows.append(
            {
                "trial": t.number,
                "job": t.user_attrs.get(JOB),
                "state": "CANCELLED" if stopped else t.state.name,
                "params": dict(t.params),
                "objective": t.value,
                "stopped": stopped,  # why the sweep stopped it, when it did
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
