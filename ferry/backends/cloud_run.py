"""One attempt on a cloud, as the controller's side follows it (:class:`CloudRun`): the
provider's job looked at and the run folder copied here as they change, the stop notice
through the run folder, the provider's cancel after the grace and the upload allowance (at
once for a kill, or a cost cap's cut), and the end as the run folder or the provider says.
"""

from __future__ import annotations

import abc
import contextlib
import signal
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ferry import defaults
from ferry.backends.base import Exit, RunningAttempt, exit_of
from ferry.backends.cloud import STOPPED_NAME, forget_secrets, max_pending
from ferry.errors import FerryError
from ferry.units import format_duration

if TYPE_CHECKING:
    from ferry.catalog.optimizer import Option
    from ferry.store.records import Job

POLL_EVERY = 2.0  # s between looks at the provider's job and the run folder
UPLOAD_ALLOWANCE = defaults.CLOUD_UPLOAD_ALLOWANCE  # s after the grace, then the cancel
_UNREACHABLE_LOST = 600.0  # s without an answer from the provider before it counts as lost
CANCEL_AGAIN = 30.0  # s between cancels of a job that has not ended
_LAST_COPY_WITHIN = 120.0  # s an ended job's last lines are waited for (the bucket failing)
# a gang's job still running this long after its recorded end is cancelled (a machine
# left running by a node 0 that gave up on it; long enough for SageMaker's own upload
# after training), looked at this often
_ENDED_BUT_RUNNING = 600.0
_LOOK_FOR_END_EVERY = 30.0
# a process following many attempts asks about each less often: ~1/_POLL_SHARE looks a second
_POLL_SHARE = 0.05
# what a stop takes, as the cost cap counts it: the round trips to the bucket the runner's
# last records and upload make (its notice read, log, metrics, events, outputs listing,
# manifest, state, with room to spare), each as long as the longest look at the provider
# lately, which keeps this share of its length at each look
_WRAP_UP_TRIPS = 10
_ROUND_TRIP_DECAY = 0.9
_following: weakref.WeakSet[CloudRun] = weakref.WeakSet()


@dataclass(frozen=True)
class Seen:
    """The provider's job, as one look saw it."""

    PENDING: ClassVar[str] = "pending"  # accepted, waiting for its machine
    RUNNING: ClassVar[str] = "running"
    ENDED: ClassVar[str] = "ended"

    phase: str
    state: str  # the provider's own word (JOB_STATE_RUNNING, InProgress/Downloading)
    message: str = ""  # the provider's reason, verbatim, when it gives one
    succeeded: bool = False
    preempted: bool = False  # its capacity was taken back (spot)
    no_capacity: bool = False  # refused for capacity or quota
    cancelled: bool = False  # stopped by a cancel (Ferry's or anyone's)
    # when the provider says its machine started and when the job ended (time.time()), which
    # it bills between: a look sees each up to a look late
    started: float | None = None
    ended: float | None = None


class CloudRun(RunningAttempt):
    """One attempt as a provider job, followed through the provider's API and the run
    folder. A backend implements :meth:`_look` and :meth:`_cancel`.

    Stopping: :meth:`stop` writes ``stopped`` in the run folder (the runner's notice, with
    ``grace`` seconds before its SIGKILL); the provider's job is cancelled only once the
    runner has had the grace and the upload allowance, or at once when the attempt was
    killed without a notice, or :meth:`cut` short for a cost cap. A cancel that fails is
    asked again, every ``CANCEL_AGAIN`` seconds, until the provider says the job has
    ended."""

    # s the provider gives a machine between its SIGTERM and its SIGKILL when it cancels
    cancel_grace: float = 30.0

    def __init__(
        self,
        job: Job,
        handle: str,
        folder: str,
        log_path: str,
        metrics_path: str,
        grace: float,
        option: Option | None = None,
    ) -> None:
        from ferry.backends.mirror import RunMirror
        from ferry.runner.record import _Place

        self.handle = handle
        self.pid = None
        self.folder = folder
        self.option = option
        self.grace = grace
        self._place = _Place(folder)
        self._nodes = job.plan.resources.nodes
        self._mirror = RunMirror(folder, self._nodes, log_path, metrics_path)
        self._exit: Exit | None = None
        self._launched = time.monotonic()
        self._next_look = 0.0
        self._answered = time.monotonic()  # the provider's last answer
        self._read = time.monotonic()  # the run folder's last good read
        self._stopped: float | None = None  # when the controller stopped it
        self._cancel_at: float | None = None  # when the provider's job is to be cancelled
        self._cancelled: float | None = None  # when a cancel was last asked for
        self._ending: tuple[Seen, float] | None = None  # ended, its last lines still to copy
        self._max_pending = max_pending(job.plan)
        self._recorded_end: float | None = None  # when the gang's end was seen recorded
        self._end_stands = False  # cancelled for running on after it: the end as recorded
        self._looked_for_end = 0.0
        self._state = ""  # the provider's last state, said in the events when it changes
        self._phase = Seen.PENDING  # the provider's last phase
        self._running_since: float | None = None  # when it was first seen running
        self._answered_phase: str | None = None  # the phase of the provider's last answer
        self._asked_runner = False  # (its record read for when it started)
        self._said: list[str] = []
        self._round_trip = 0.0  # s: the longest look at the provider lately (decaying)
        self._provider_ended: float | None = None  # when the provider says the job ended
        _following.add(self)

    # -- what a backend provides --------------------------------------------------------

    @abc.abstractmethod
    def _look(self) -> Seen:
        """The provider's job now. Raises FerryError when the provider does not answer."""

    @abc.abstractmethod
    def _cancel(self) -> None:
        """Ask the provider to end its job (nothing when it has ended). Raises FerryError."""

    def _where(self) -> str:
        """Where to see the job on the provider (a console link), for messages."""
        return ""

    # -- following ---------------------------------------------------------------------

    def go_on(self) -> None:
        """Following the attempt again: nothing is copied twice."""
        self._mirror.go_on()

    def events(self) -> list[str]:
        taken, self._said = self._said, []
        return taken + self._mirror.events()

    @property
    def waiting(self) -> bool:
        if self._exit is not None or self._running_since is not None:
            return False
        # the provider said it waits, or it has ended (its last lines still to copy)
        # without having been seen running: undecided until its runner's record is read
        return self._answered_phase == Seen.PENDING or self._ending is not None

    @property
    def machine_started(self) -> float | None:
        """When the provider was first seen running it; for one that ended between two
        looks, when its runner started (its record says), or None: it never ran."""
        if self._running_since is None and self._exit is not None and not self._asked_runner:
            self._asked_runner = True
            with contextlib.suppress(FerryError):
                state = self._mirror.reader.state()
                self._running_since = state.started_at if state is not None else None
        return self._running_since

    def poll(self) -> Exit | None:
        if self._exit is not None:
            return self._exit
        now = time.monotonic()
        if now < self._next_look:
            return None
        # a process following many attempts (a watcher) asks each provider less often
        self._next_look = now + self._look_every()
        if self._ending is not None:  # ended: its last lines, then the end
            seen, since = self._ending
            if self._copy(now) or now - since > _LAST_COPY_WITHIN:
                return self._end(self._ended(seen))
            return None
        try:
            seen = self._look()  # (before the copy: what the runner wrote before the end
            # the provider says is in the copy that follows)
            took = time.monotonic() - now
            self._round_trip = max(took, self._round_trip * _ROUND_TRIP_DECAY)
        except FerryError as exc:
            self._copy(now)
            if now - self._answered > _UNREACHABLE_LOST:
                self._give_up()
                return self._end(
                    Exit(
                        Exit.LOST,
                        None,
                        f"the provider did not answer for "
                        f"{format_duration(now - self._answered)} ({exc.message})",
                    )
                )
            return None
        self._answered = now
        copied = self._copy(now)
        self._phase = self._answered_phase = seen.phase
        if seen.phase == Seen.RUNNING and self._running_since is None:
            self._running_since = min(seen.started or time.time(), time.time())
        if seen.state != self._state:
            self._state = seen.state
            words = f" ({seen.message})" if seen.message else ""
            self._said.append(f"provider: {seen.state}{words}")
        if seen.phase == Seen.ENDED:
            self._provider_ended = seen.ended
            if copied:
                return self._end(self._ended(seen))
            self._ending = (seen, now)  # (the bucket did not answer: its last lines later)
            return None
        if self._stopped is not None and seen.phase == Seen.PENDING:
            self._cancel_at = min(self._cancel_at or now, now)  # no runner to give a grace
        if seen.phase == Seen.RUNNING and self._nodes > 1 and self._cancel_at is None:
            self._left_running(now)
        if self._cancel_at is not None and now >= self._cancel_at:
            again = self._cancelled is not None and now - self._cancelled < CANCEL_AGAIN
            if not again:
                if self._cancelled is None and self._stopped is not None:
                    self._said.append("the runner did not end after the notice: cancelling")
                self._cancel_now()
        elif (
            seen.phase == Seen.PENDING
            and self._stopped is None
            and now - self._launched > self._max_pending
        ):
            self._give_up()
            reason = (
                f"still {seen.state} after limits.max_pending "
                f"({format_duration(self._max_pending)})"
                + (f": {seen.message}" if seen.message else "")
            )
            self._pass_over(reason)
            return self._end(Exit(Exit.NO_CAPACITY, None, reason))
        return None

    def _left_running(self, now: float) -> None:
        """A gang whose end is recorded while the provider's job runs on (node 0 gave up
        on a machine that would not stop): cancelled once that has lasted a while. The end
        stands as recorded."""
        if now - self._looked_for_end < _LOOK_FOR_END_EVERY:
            return
        self._looked_for_end = now
        state = None
        with contextlib.suppress(FerryError):
            state = self._mirror.reader.state()
        if state is None or not state.ended:
            return
        if self._recorded_end is None:
            self._recorded_end = now
        elif now - self._recorded_end > _ENDED_BUT_RUNNING:
            self._said.append("the gang's end is recorded, yet its job still runs: cancelling")
            self._end_stands = True
            self._cancel_at = now
            self._cancel_now()

    def _copy(self, now: float) -> bool:
        """Copy the run folder's news here; whether it could be read."""
        try:
            self._mirror.copy()
        except FerryError:
            return False
        self._read = now
        return True

    def _end(self, ended: Exit) -> Exit:
        self._exit = ended
        _following.discard(self)
        forget_secrets(self.folder, self._nodes)  # (read once by a runner; never left behind)
        return ended

    def _give_up(self) -> None:
        """Following it no more: a runner still to start ends at once, and the provider's
        job is cancelled (a failed cancel is said)."""
        with contextlib.suppress(FerryError):
            self._place.put(STOPPED_NAME, b"")
        try:
            self._cancel()
        except FerryError as exc:
            self._said.append(f"the provider's job could not be cancelled: {exc.message}")

    def _ended(self, seen: Seen) -> Exit:
        """The end of a provider job that has ended: as the run folder records it, else in
        the provider's words."""
        state = None
        with contextlib.suppress(FerryError):
            state = self._mirror.reader.state()
        where = self._where()
        said = f"{seen.state}" + (f": {seen.message}" if seen.message else "")
        said += f" (see {where})" if where and not seen.succeeded else ""
        outside = seen.cancelled and self._stopped is None
        if state is not None and state.ended:
            ended = exit_of(state)
            if self._end_stands:
                return ended
            # (a gang's node that ended before its runner started records no exit code)
            recorded = (Exit.EXITED, Exit.PROVIDER_FAILED)
            if ended.outcome in recorded and self._stopped is None:
                if seen.preempted:
                    return Exit(Exit.PREEMPTED, ended.code, f"spot capacity taken back ({said})")
                if outside:
                    why = f"cancelled outside Ferry; {said}"
                    return Exit(Exit.PROVIDER_FAILED, ended.code, why)
            return ended
        if seen.preempted:
            return Exit(Exit.PREEMPTED, None, f"spot capacity taken back ({said})")
        if seen.no_capacity:
            self._pass_over(said)
            return Exit(Exit.NO_CAPACITY, None, said)
        if self._stopped is not None:
            how = "ended by the provider's cancel before its runner recorded the end"
            return Exit(Exit.EXITED, -signal.SIGKILL, f"{how}; {said}")
        if outside:
            return Exit(Exit.PROVIDER_FAILED, None, f"cancelled outside Ferry; {said}")
        if state is None:  # the runner never started: the provider's words are all there is
            return Exit(Exit.PROVIDER_FAILED, None, said)
        # the provider ended it under its runner (its own time limit, the machine's
        # memory): its words, not a loss resumed again and again
        return Exit(
            Exit.PROVIDER_FAILED, None, f"its runner ended without recording the end; {said}"
        )

    def _pass_over(self, reason: str) -> None:
        """No capacity or quota for this offering: the next attempt tries the next one."""
        if self.option is None:
            return
        from ferry.catalog.optimizer import block

        with contextlib.suppress(OSError):
            block(self.option, reason)
        self._said.append(f"{self.option.describe()} passed over for now: {reason}")

    def _look_every(self) -> float:
        """Seconds between looks: a process following many attempts (the watcher) asks
        about each less often."""
        return max(POLL_EVERY, len(_following) * _POLL_SHARE)

    @property
    def ended_at(self) -> float | None:
        if self._provider_ended is None:
            return None
        return min(self._provider_ended, time.time())

    def stop_latency(self) -> float:
        # the runner looks for the notice at each beat, then records and sends its last
        # (a few round trips to the bucket, each as long as the longest look lately); the
        # end counts from when the provider says it came, not from when a look saw it
        return defaults.HEARTBEAT_INTERVAL + _WRAP_UP_TRIPS * self._round_trip

    def cut_latency(self) -> float:
        # the provider's own stop of the machine: SIGTERM, SIGKILL after its grace
        return self.cancel_grace + 2 * self._round_trip

    def cut(self) -> None:
        if self._exit is not None:
            return
        now = time.monotonic()
        if self._stopped is None:
            self._stopped = now
            with contextlib.suppress(FerryError):
                self._place.put(STOPPED_NAME, b"")
        self._said.append("the cost cap comes before the runner's end: cancelling")
        self._cancel_at = self._next_look = now
        self._cancel_now()

    def stop(self) -> None:
        """The notice: ``stopped`` in the run folder, which the runner takes as SIGTERM;
        the provider's job is cancelled if the runner has not ended after the grace and
        the upload allowance (at once when the notice cannot be written)."""
        if self._exit is not None or self._stopped is not None:
            return
        now = time.monotonic()
        self._stopped = now
        self._next_look = 0.0
        try:
            self._place.put(STOPPED_NAME, b"")
        except FerryError:  # the bucket did not answer: the provider's cancel it is
            self._cancel_at = now
            self._cancel_now()
            return
        # a job still waiting for its machine has no runner to give a grace to
        waiting = self._phase == Seen.PENDING and not self._runner_started()
        self._cancel_at = now if waiting else now + self.grace + UPLOAD_ALLOWANCE
        if waiting:
            self._cancel_now()

    def _runner_started(self) -> bool:
        """Whether the attempt's runner has written its state yet."""
        with contextlib.suppress(FerryError):
            return self._mirror.reader.state() is not None
        return False

    def kill(self) -> None:
        """The end, when the notice was not enough: after a notice, the provider's job is
        cancelled once the runner has had its grace and upload allowance (it ends by
        itself before then); without one, at once."""
        if self._exit is not None:
            return
        if self._stopped is None:
            self._stopped = time.monotonic()
            with contextlib.suppress(FerryError):
                self._place.put(STOPPED_NAME, b"")
            self._cancel_at = self._stopped
            self._cancel_now()

    def _cancel_now(self) -> None:
        self._cancelled = time.monotonic()
        try:
            self._cancel()
        except FerryError as exc:  # asked again at a later poll
            self._said.append(f"cancelling the provider's job failed (asked again): {exc.message}")


class Refused(RunningAttempt):
    """An attempt the provider refused at once for capacity or quota: it ends at its
    first poll as :attr:`Exit.NO_CAPACITY`, so that the next attempt tries the next
    offering (passed over already)."""

    def __init__(self, reason: str, said: list[str]) -> None:
        self.handle = ""
        self.pid = None
        self._exit = Exit(Exit.NO_CAPACITY, None, reason)
        self._said = said

    def poll(self) -> Exit:
        return self._exit

    def events(self) -> list[str]:
        taken, self._said = self._said, []
        return taken

    def stop(self) -> None:
        return None

    def kill(self) -> None:
        return None
