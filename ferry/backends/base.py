"""The backend contract: where one attempt runs.

The controller calls a backend; a backend never decides retries or job status. It

- ``check``s a spec at submit time and refuses what it cannot honour (nothing is silently
  ignored) or what could never fit;
- ``admit``s queued jobs when it has room (the store calls this under its write lock);
- ``launch``es one attempt and hands back a :class:`RunningAttempt`, which the controller
  polls (an :class:`Exit` once it has ended), stops and kills.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ferry.errors import Unsupported
from ferry.store.records import Allocation, Job

if TYPE_CHECKING:
    from pathlib import Path

    from ferry.backends.preflight import Check
    from ferry.runner.record import RunFolderReader, RunState
    from ferry.spec import JobSpec


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to start one attempt."""

    job: Job
    attempt: int
    argv: list[str]
    cwd: str
    env: dict[str, str]
    log_path: str
    run_folder: str  # where the attempt's runner records it (a folder, or a bucket prefix)
    grace: float  # seconds between the stop notice and SIGKILL
    procs_per_node: int = 1  # processes per node (a gang when the attempt has several)
    # for a backend whose attempts run on other machines: the job as their runner needs
    # it (ferry.runner.machine.Machine's fields), and the file of this machine that gets
    # the metrics the runner records (the log goes to ``log_path``)
    machine: dict[str, Any] | None = None
    metrics_path: str = ""


@dataclass(frozen=True)
class Exit:
    """How an attempt ended, as its backend saw it."""

    EXITED: ClassVar[str] = "exited"  # its processes ran and ended with ``code``
    PREEMPTED: ClassVar[str] = "preempted"  # the provider took its machine back
    LOST: ClassVar[str] = "lost"  # it vanished without a recorded end
    PROVIDER_FAILED: ClassVar[str] = "provider_failed"  # the provider failed it (reason)
    NOT_STARTED: ClassVar[str] = "not_started"  # its command could not be started (reason)
    # the provider refused it for capacity or quota before it ran (that offering is passed
    # over now: the next attempt tries the next)
    NO_CAPACITY: ClassVar[str] = "no_capacity"

    outcome: str
    code: int | None  # the exit code (-N: killed by signal N), when it exited
    reason: str = ""  # in words: a failure with its last log lines, the provider's reason
    cpu_seconds: float | None = None  # what its processes used, when the backend knows
    peak_rss: float | None = None
    said: str | None = None  # what the script wrote of its failure, on another machine
    billed: float | None = None  # USD the provider bills for it, when it says


class RunningAttempt(abc.ABC):
    """One launched attempt, as the controller follows it. ``handle`` is stored with the
    attempt (local: its runner's pid); ``pid`` is the local process whose descendants are
    the attempt's processes, when there is one (sampled for telemetry)."""

    handle: str
    pid: int | None = None

    @property
    def waiting(self) -> bool:
        """Whether it still waits for its machine (a cloud job the provider has not
        started): its runtime and cost do not count yet. Known after the first poll."""
        return False

    @property
    def machine_started(self) -> float | None:
        """When its machine started (time.time()), for one that waited, once known."""
        return None

    @property
    def ended_at(self) -> float | None:
        """When it ended (time.time()), once it has and where the backend knows better than
        the moment :meth:`poll` said so (a provider's own end time); None: then."""
        return None

    @abc.abstractmethod
    def poll(self) -> Exit | None:
        """How the attempt ended, or None while it runs. Never blocks for long."""

    def fileno(self) -> int | None:
        """A descriptor that becomes readable when the attempt may have ended (local: the
        pipe its runner answers on), for waiting on it; None: poll it now and then."""
        return None

    def events(self) -> list[str]:
        """What its runner recorded doing since the last call (the notice sent, a failed
        rank stopping the others), to add to the job's events."""
        return []

    @abc.abstractmethod
    def stop(self) -> None:
        """Deliver the stop notice (SIGTERM to every process, SIGKILL after the grace)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """End the attempt now, with everything it started."""

    def stop_latency(self) -> float:
        """Seconds, beyond the grace, from :meth:`stop` to :meth:`poll` seeing the end, at
        most as far as this process can tell: the notice's way to the job, what the runner
        records and sends last, the end's way back. A cost cap gives the notice this much
        (and the grace) before the cap."""
        return STOP_LATENCY_HERE

    def cut_latency(self) -> float:
        """Seconds from :meth:`cut` to :meth:`poll` seeing the end, at most."""
        return STOP_LATENCY_HERE

    def cut(self) -> None:
        """End it now, after a notice, without waiting for the runner's last upload (a cost
        cap about to be passed)."""
        self.kill()


# s a stop takes beyond the grace for a runner on this machine: the notice is a line on its
# pipe, its end comes back on it, and what it records last is written here
STOP_LATENCY_HERE = 0.5


class Backend(abc.ABC):
    """A place where attempts run. Subclasses set ``name`` and ``features``."""

    name: str = ""
    # whether attempts run on this machine, which the controller makes ready itself (else
    # the runner does it where the attempt runs, from the request's ``machine``)
    runs_here: bool = True
    # What the backend honours, by feature key (see :func:`features_used`).
    features: frozenset[str] = frozenset()
    # Container paths its machines have of their own (Vertex AI's /gcs/, through Cloud
    # Storage FUSE; SageMaker's /opt/ml/): a script that mentions only these runs as it is,
    # with nothing emulated. (Emulating them is the feature "paths.container".)
    provider_paths: frozenset[str] = frozenset()

    def check(self, spec: JobSpec) -> None:
        """Refuse a spec that uses something this backend does not support, or can't fit."""
        self.check_features(spec)
        self._check(spec)

    def check_features(self, spec: JobSpec) -> None:
        """Refuse a spec that uses a feature this backend does not honour."""
        for feature, why in features_used(spec).items():
            if feature not in self.features:
                if feature == "paths.container" and self.provider_paths:
                    from ferry.contract.container_paths import MARKER_WORDS

                    words = " and ".join(MARKER_WORDS[m] for m in sorted(self.provider_paths))
                    raise Unsupported(
                        f"the {self.name} backend makes no {why}: its machines have {words} "
                        "of their own",
                        "leave paths at auto",
                    )
                raise Unsupported(
                    f"the {self.name} backend does not support {why} yet",
                    "remove it from the spec, or choose another backend",
                )

    def resolve_paths(self, spec: JobSpec, code: Path) -> JobSpec:
        """``spec`` with ``paths: auto`` decided on its snapshot ``code``: ``container``
        where the code mentions container paths this backend's machines lack and it can
        make them; ``host`` where they have all it mentions. Refuses a script that needs
        paths the backend can neither find nor make, saying which."""
        from ferry.contract.container_paths import MARKER_WORDS, mentioned

        if spec.paths != "auto":
            return spec
        needed = sorted(mentioned(code) - self.provider_paths)
        if needed and "paths.container" not in self.features:
            words = " and ".join(MARKER_WORDS[m] for m in needed)
            raise Unsupported(
                f"the code mentions {words}, which the {self.name} backend's machines do not have",
                "read the contract's variables instead (FERRY_MODEL_DIR, SM_MODEL_DIR, "
                "FERRY_INPUT_<NAME> ...), or set paths: host (--paths host) if the script "
                "does not use those paths",
            )
        return spec.model_copy(update={"paths": "container" if needed else "host"})

    def dry_run(self, spec: JobSpec) -> dict[str, Any] | None:
        """What ``--dry-run`` shows of the provider's request for ``spec`` (None: there is
        none to show), made without credentials, network or settings. Refuses what
        :meth:`check` refuses, but for values a placeholder stands for."""
        self.check(spec)
        return None

    def preflight(self, spec: JobSpec, trust: bool = True) -> list[Check] | None:
        """What the provider's setup says of a job of ``spec`` before it is sent
        (credentials, bucket, role, quota ...: :mod:`ferry.backends.preflight`); None for
        a backend with nothing to check. ``trust``: a preflight that passed lately is not
        made again (an empty list)."""
        return None

    def _check(self, spec: JobSpec) -> None:  # noqa: B027 - optional hook
        """Backend-specific checks (capacity, types). Raise FerryError subclasses."""

    def admit(self, queued: Sequence[Job], active: Sequence[Job]) -> list[tuple[str, Allocation]]:
        """Pick queued jobs (oldest first) to start now. The default starts all of them."""
        return [(job.id, Allocation()) for job in queued]

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> RunningAttempt:
        """Start one attempt; raise FerryError when it cannot start."""

    def cancel(self, job: Job, attempt: int, handle: str | None) -> None:  # noqa: B027
        """End attempt ``attempt`` of ``job`` (launched with ``handle``) from any process:
        the one that launched it may be gone. Does nothing to an attempt that has ended."""

    def reattach(
        self, job: Job, attempt: int, handle: str | None, log_path: str, metrics_path: str
    ) -> RunningAttempt | None:
        """Follow again attempt ``attempt`` of ``job`` (launched with ``handle``), which
        runs on after the process that followed it was lost; None when it cannot be (an
        attempt on this machine dies with its supervisor). The attempt's log and metrics
        go on into ``log_path`` and ``metrics_path``, after what they hold."""
        return None

    def outputs_sent(self, job: Job, attempt: int, handle: str | None) -> list[Any] | None:
        """What the runner of an attempt elsewhere sent to the outputs (its run folder's
        listing: path, size, sha256 of each file); None when it listed nothing."""
        return None

    def provider_log(self, job: Job, handle: str | None, lines: int) -> list[str]:
        """The last ``lines`` of the log the provider keeps of an attempt (SageMaker's
        CloudWatch streams), a second source beside the log Ferry copies. Raises
        FerryError where there is none to read."""
        raise Unsupported(  # (the fix is in the sentence)
            f"the {self.name} backend keeps no log of its own: ferry logs {job.id} shows all "
            "the attempt wrote"
        )

    # What an attempt of a job costs and gets here, asked at each launch (the controller
    # records them with the attempt, and bills and stops it by them).

    def price(self, job: Job) -> float:
        """USD per hour an attempt of ``job`` costs here now (0: nothing)."""
        return 0.0

    def offering(self, job: Job) -> str:
        """What an attempt of ``job`` runs on, in words (a report groups costs by it)."""
        return self.name

    def stop_grace(self, job: Job) -> float:
        """Seconds between the stop notice and the end of an attempt of ``job``: the spec's
        ``limits.stop_grace`` when given, else the backend's own."""
        given = job.plan.limits.stop_grace
        return given if given is not None else self.default_grace()

    def default_grace(self) -> float:
        """The notice's length where the spec names none (GCP spot VMs give 30 s)."""
        from ferry import defaults

        return float(defaults.STOP_GRACE)


def event_messages(reader: RunFolderReader) -> list[str]:
    """The messages of the run folder's new events."""
    import contextlib
    import json

    from ferry.errors import FerryError

    try:
        data = reader.read("events")
    except FerryError:  # (a bucket that did not answer: read again next time)
        return []
    messages = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            messages.append(str(json.loads(line)["message"]))
    return messages


def exit_of(state: RunState) -> Exit:
    """The end a run folder records, as an :class:`Exit`."""
    from ferry.runner.run import NOT_STARTED

    if state.outcome == NOT_STARTED:
        return Exit(Exit.NOT_STARTED, None, state.reason or "the command could not be started")
    if state.outcome in (Exit.PREEMPTED, Exit.PROVIDER_FAILED):  # (a gang over nodes)
        return Exit(state.outcome, state.exit_code, state.reason or state.outcome)
    return Exit(
        Exit.EXITED,
        state.exit_code,
        state.reason or "",
        cpu_seconds=state.cpu_seconds,
        peak_rss=state.peak_rss,
        said=state.said,
    )


def features_used(spec: JobSpec) -> dict[str, str]:
    """The optional features a spec relies on, with words for an error message."""
    used: dict[str, str] = {}
    if spec.environment.requirements:
        used["environment.requirements"] = (
            "environment.requirements (a virtual environment built from it)"
        )
    if spec.environment.image:
        used["environment.image"] = f"environment.image ({spec.environment.image})"
    for name, item in spec.inputs.items():
        if "://" in item.uri and not item.uri.startswith("file://"):
            used["inputs.remote"] = f"inputs from buckets (input {name!r}: {item.uri})"
        if item.mode != "copy":
            used[f"inputs.{item.mode}"] = f"input mode {item.mode!r} (input {name!r})"
    if spec.outputs and "://" in spec.outputs and not spec.outputs.startswith("file://"):
        used["outputs.remote"] = f"outputs to buckets ({spec.outputs})"
    if spec.resources.flex_start:
        used["resources.flex"] = "flex-start capacity (resources.spot: flex)"
    elif spec.resources.spot:
        used["resources.spot"] = "spot capacity (resources.spot)"
    if spec.resources.nodes > 1:
        used["resources.nodes"] = f"multi-node jobs (resources.nodes: {spec.resources.nodes})"
    if spec.paths == "container":
        used["paths.container"] = "container paths (paths: container)"
    acc = spec.resources.accelerator_request
    if acc and acc.is_tpu:
        used["resources.tpu"] = f"TPUs (resources.accelerator: {acc})"
    return used
