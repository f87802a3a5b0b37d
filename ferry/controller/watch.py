"""Following one attempt as it runs (for its supervisor, or the watcher): heartbeat,
cancel, ``limits.max_runtime``, the cost cap, a hard monthly budget, preemption (asked or
simulated), alerts, checkpoints sent as they are written, and the stop: the notice, then
the kill once the grace is over."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferry import config, defaults
from ferry.backends.base import RunningAttempt
from ferry.controller.budget import CostCap
from ferry.controller.jobs import _S, take_preempt_request
from ferry.controller.observe import Observer
from ferry.controller.policy import Ended, Outcome
from ferry.procs import hostname
from ferry.runner.machine import LiveSync, checkpoints_mtime
from ferry.status import describe_exit
from ferry.store import Job, Store
from ferry.units import format_duration

if TYPE_CHECKING:
    from ferry.backends.base import Exit


@dataclass
class Control:
    """Flags set by the supervisor's signal handlers (a watcher's, for each job it
    follows), and how this job's supervision paces itself."""

    wake_read: int  # becomes readable when a signal arrives (signal.set_wakeup_fd)
    woken: bool = False  # SIGUSR1 arrived: look at the store now (cancel)
    terminated: int = 0  # the signal that asked the supervisor itself to stop
    beat: bool = True  # write the job's heartbeat (False: a watcher beats for all its jobs)
    # between looks at the store for what SIGUSR1 does not announce (a job declared lost)
    control_poll: float = defaults.CONTROL_POLL


def watch(
    store: Store,
    job: Job,
    number: int,
    running: RunningAttempt,
    control: Control,
    grace: float,
    max_runtime: float | None,
    live: LiveSync | None,
    observer: Observer,
    preempt_every: float | None,
    cap: CostCap,
) -> tuple[str, Exit]:
    """Wait for the attempt, heartbeating, and stop it on cancel, timeout, preemption (asked
    with `ferry preempt`, or simulated), an alert (with ``on_alert: stop``), its cost cap
    (``limits.max_cost``), a spent monthly budget with ``budget.hard``, or SIGTERM (an
    attempt elsewhere, ``live`` None, is left running then: "detached"). The
    notice goes to the attempt (its runner kills it after the grace); an attempt still
    there well after that is killed from here. While the attempt waits for its machine (a
    cloud job its provider has not started) neither its runtime nor its cost count: the
    attempt's start, and the job's, move on by the time waited once the machine starts."""
    import random
    import selectors
    from dataclasses import replace

    deadline = (job.started_at or time.time()) + max_runtime if max_runtime else None
    preempt_at = (
        time.monotonic() + preempt_every * random.uniform(0.5, 1.5) if preempt_every else None
    )
    sync = live.sync if live is not None else None  # (a runner elsewhere sends its own)
    last_beat = last_control = last_sync = last_sample = time.monotonic()
    sync_every = float(config.get("outputs.sync_interval"))
    last_saved = checkpoints_mtime(sync.local / "checkpoints") if sync else 0
    sample_every = float(config.get("telemetry.interval"))
    stopping: str | None = None
    stop_sent = 0.0
    cut = False  # (cut short for the cost cap)
    last_budget = time.monotonic()
    looks = _LookGap(min(defaults.HEARTBEAT_INTERVAL, control.control_poll))
    kill_after = grace + _KILL_MARGIN  # the runner's own SIGKILL comes after ``grace``
    # as it starts: a job shorter than the interval has samples (looked for again a few
    # times while its runner starts the processes)
    sampled = observer.sample(running.pid) or running.pid is None
    first_until = time.monotonic() + _FIRST_SAMPLE_WITHIN
    waiting = selectors.DefaultSelector()
    waiting.register(control.wake_read, selectors.EVENT_READ)
    ends = running.fileno()
    if ends is not None:
        waiting.register(ends, selectors.EVENT_READ)
    clock = _WaitClock(store, job.id, number, job.started_at or time.time())
    try:
        while True:
            ended = running.poll()
            moved = clock.look(running, ended, observer)
            if moved is not None:  # (the time waited, taken off)
                cap = replace(cap, started=clock.attempt_started)
                if deadline is not None:
                    deadline += moved
                if preempt_at is not None:
                    preempt_at += moved
            if ended is not None:
                observer.sample(running.pid, last=True, ended=ended)  # what they used
                for message in running.events():
                    store.add_event(job.id, message)
                return (stopping or "exited"), ended
            now_wall = time.time()
            waits = [defaults.HEARTBEAT_INTERVAL, control.control_poll]
            if ends is None:
                waits.append(_POLL_REMOTE)
            if deadline and not stopping and not clock.waiting:
                waits.append(max(0.0, deadline - now_wall))
            if not sampled:
                waits.append(_FIRST_SAMPLE_EVERY)
            if stopping:
                waits.append(max(0.0, stop_sent + kill_after - time.monotonic()))
            for key, _ in waiting.select(min(waits)):
                if key.fd == control.wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(key.fd, 4096)
            if running.poll() is not None:
                continue
            mono = time.monotonic()
            looks.saw(mono)
            if mono - last_sample >= sample_every:
                last_sample = mono
                observer.sample(running.pid)
            elif not sampled:
                sampled = observer.sample(running.pid, processes_only=True) or mono >= first_until
            saved = checkpoints_mtime(sync.local / "checkpoints") if sync and sync.remote else 0
            if (
                live is not None
                and live.sync.remote
                and not live.busy()
                and (mono - last_sync >= sync_every or saved != last_saved)
            ):
                last_sync, last_saved = mono, saved  # a new checkpoint goes up at once
                live.start()  # checkpoints reach the bucket while the job runs
            for failure in live.failures() if live is not None else []:
                store.add_event(job.id, failure)
            if mono - last_beat >= defaults.HEARTBEAT_INTERVAL:
                if control.beat:
                    store.update_job(job.id, heartbeat_at=time.time())
                last_beat = mono
                for message in running.events():
                    store.add_event(job.id, message)
                # metrics reach the store every heartbeat while the job runs; printed ones too,
                # under the names the script does not report through runtime.report
                observer.read()
                alerted = observer.check()
            else:
                alerted = None
            if stopping is None:
                if alerted:
                    stopping = "alert"
                elif control.terminated and live is None:  # it runs on without us
                    from ferry.backends.base import Exit

                    return "detached", Exit(Exit.LOST, None, "its supervisor was stopped")
                elif control.terminated:
                    stopping = "stopped"
                elif deadline and time.time() >= deadline and not clock.waiting:
                    stopping = "timeout"
                elif not clock.waiting and cap.reached(
                    time.time(), looks.gap + grace + running.stop_latency()
                ):  # (it holds even if the script takes the whole grace to end)
                    stopping = "budget"
                elif cap.price > 0 and mono - last_budget >= defaults.BUDGET_POLL:
                    last_budget = mono  # a budget set while the job runs counts too
                    if _hard_budget_spent(store):
                        stopping = "monthly"
                elif preempt_at is not None and mono >= preempt_at and not clock.waiting:
                    stopping, observer.preempted_by = "preempted", "simulate.preempt_every"
                elif mono - last_control >= control.control_poll or _woken(control):
                    last_control = mono
                    now_job = store.get_job(job.id)
                    status = now_job.status
                    if status is _S.CANCELLING:
                        stopping = "cancelled"
                    elif status.is_terminal() or (
                        now_job.supervisor_pid,
                        now_job.supervisor_host,
                    ) != (
                        os.getpid(),
                        hostname(),
                    ):  # declared lost meanwhile (and perhaps resumed elsewhere): not ours any more
                        from ferry.backends.base import Exit

                        return "abandoned", Exit(Exit.LOST, -signal.SIGKILL, "declared lost")
                    elif asked := take_preempt_request(job):  # (taken only by its owner)
                        stopping, observer.preempted_by = "preempted", asked
                if stopping:
                    what = {
                        "preempted": f"preemption notice ({observer.preempted_by})",
                        "budget": f"{cap.reason()}, stopping the attempt",
                    }.get(stopping, f"stopping the attempt ({stopping})")
                    store.add_event(job.id, f"{what}: SIGTERM, then SIGKILL after {grace:g}s")
                    running.stop()
                    stop_sent = mono
            elif (
                stopping == "budget"
                and not cut
                and cap.reached(time.time(), looks.gap + running.cut_latency())
            ):  # the runner's last upload outlasts what the cap could give it
                cut = True
                store.add_event(job.id, f"{cap.reason()}: the attempt is cut short")
                running.cut()
            elif mono - stop_sent >= kill_after:
                running.kill()
                # again only after a while: a provider's cancel is a request, not a signal
                stop_sent = mono + _KILL_AGAIN - kill_after

    finally:  # the attempt's last sync comes after this one
        waiting.close()
        if live is not None:
            live.finish()
        for failure in live.failures() if live is not None else []:
            store.add_event(job.id, failure)


_KILL_MARGIN = 10.0  # s after the grace before an attempt that did not end is killed
_FIRST_SAMPLE_EVERY = 0.1  # s between looks for the processes of an attempt starting ...
_FIRST_SAMPLE_WITHIN = 5.0  # ... for at most this long
_POLL_REMOTE = 0.25  # s between polls of an attempt that gives nothing to wait on
_KILL_AGAIN = 30.0  # s between kills of an attempt that has not ended after the first


class _LookGap:
    """The longest time lately between two looks of :func:`_watch` at its attempt (a busy
    machine makes them late); it loses a share of its length at each look."""

    def __init__(self, planned: float) -> None:
        self.gap = planned  # (the longest wait the loop plans, until looks say otherwise)
        self._last = time.monotonic()

    def saw(self, now: float) -> None:
        self.gap = max(now - self._last, self.gap * _GAP_DECAY)
        self._last = now


_GAP_DECAY = 0.95


class _WaitClock:
    """An attempt's clocks while it waits for its machine (a cloud job its provider has not
    started): they stand still. The time waited is taken off as it passes, every
    BUDGET_POLL seconds and when the wait ends, from the attempt's start and the job's in
    the store, so the store always holds them without it and a follower that takes over
    goes on from there; :meth:`look` says how far the caller's own clocks (the deadline,
    the simulated preemption) move on."""

    def __init__(self, store: Store, job_id: str, number: int, job_started: float) -> None:
        self.store, self.job_id, self.number = store, job_id, number
        self.job_started = job_started
        self.since: float | None = None  # when this follower first saw it waiting
        self.attempt_started = 0.0  # its start, without the time waited

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def look(self, running: RunningAttempt, ended: object, observer: Observer) -> float | None:
        """Seconds the clocks move on by now; None while nothing changed."""
        still = running.waiting
        if not still and self.since is None:
            return None
        now = time.time()
        moved: float | None = None
        if self.since is None:  # (from here: what came before it was launching)
            self.since = self.attempt_started = now
            self.store.update_attempt(self.job_id, self.number, started_at=now)
            moved = 0.0
        machine = None if still else running.machine_started
        upto = now if still else min(machine or now, now)
        step = upto - self.attempt_started
        if step > 0 and (not still or step >= defaults.BUDGET_POLL):
            self.attempt_started = upto
            self.job_started += step
            self.store.update_attempt(self.job_id, self.number, started_at=upto)
            self.store.update_job(self.job_id, started_at=self.job_started)
            moved = step
        if still:
            observer.monitor.saw_output(now)  # (no progress is expected yet)
            return moved
        waited = format_duration(self.attempt_started - self.since)
        self.store.add_event(
            self.job_id,
            f"attempt {self.number} ended after {waited} of waiting, before its machine started"
            if machine is None and ended is not None
            else f"attempt {self.number}'s machine started after {waited} of waiting",
        )
        self.since = None
        return moved


def _hard_budget_spent(store: Store) -> bool:
    """Whether a hard monthly budget is set and spent (running jobs stop then)."""
    from ferry.controller.budget import monthly

    if config.get("budget.monthly") is None or not config.get("budget.hard"):
        return False
    return monthly(store).exhausted


def _woken(control: Control) -> bool:
    woken, control.woken = control.woken, False
    return woken


def ended_of(
    outcome: str,
    ended_as: Exit,
    contract: str,
    failure_file: Path,
    max_runtime: float | None,
    observer: Observer,
    cap: CostCap,
) -> Ended:
    """How the attempt ended, in the policy's terms, with the words that go with it:
    :func:`watch`'s ``outcome`` (why it stopped the attempt, or ``exited``) and the end."""
    from ferry.contract import sagemaker

    code = ended_as.code
    if outcome == "exited":  # (when the controller stopped it, its reason comes first)
        if ended_as.outcome == ended_as.LOST:
            return Ended(Outcome.LOST, code, ended_as.reason)
        if ended_as.outcome == ended_as.PREEMPTED:
            return Ended(Outcome.PREEMPTED, code, ended_as.reason)
        if ended_as.outcome == ended_as.PROVIDER_FAILED:
            return Ended(Outcome.PROVIDER_FAILED, code, ended_as.reason)
        if ended_as.outcome == ended_as.NO_CAPACITY:
            return Ended(Outcome.NO_CAPACITY, code, ended_as.reason)
        marker = ended_as.said or sagemaker.failure_text(failure_file)
        if marker:  # the script said why it failed, as on SageMaker
            where = "/opt/ml/output/failure" if contract == "sagemaker" else "FERRY_FAILURE_FILE"
            return Ended(Outcome.EXITED, code, said=(marker, where))
        return Ended(Outcome.EXITED, code, ended_as.reason if code else "")
    if outcome == "preempted":
        return Ended(Outcome.PREEMPTED, code, observer.preempted_by or "")
    if outcome == "cancelled":
        return Ended(Outcome.CANCELLED, code)
    if outcome == "timeout":
        return Ended(
            Outcome.TIMED_OUT, code, f"max_runtime {format_duration(max_runtime or 0)} reached"
        )
    if outcome == "budget":
        return Ended(Outcome.BUDGET, code, cap.reason())
    if outcome == "monthly":
        reason = f"monthly budget reached: {config.get('budget.monthly') or 0:.2f} USD"
        return Ended(Outcome.MONTHLY_BUDGET, code, reason)
    if outcome == "alert" and observer.stopped_by:
        return Ended(Outcome.ALERT, code, f"stopped on alert: {observer.stopped_by.message}")
    # stopped on an alert whose message is gone: what the log says
    return Ended(Outcome.ALERT, code, ended_as.reason or describe_exit(code or 0))
