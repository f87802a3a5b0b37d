"""The backend contract: where one attempt runs.

The controller calls a backend; a backend never decides retries or job status. It

- ``check``s a spec at submit time and refuses what it cannot honour (nothing is silently
  ignored) or what could never fit;
- ``admit``s queued jobs when it has room (the store calls this under its write lock);
- ``launch``es one attempt and hands back a :class:`RunningAttempt` that the supervisor
  waits on, stops and kills.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.errors import Unsupported
from ferry.store.records import Allocation, Job

if TYPE_CHECKING:
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


class RunningAttempt(abc.ABC):
    """One launched attempt, as seen by the supervisor that waits on it."""

    handle: str  # stored with the attempt (local: the process group id)

    @abc.abstractmethod
    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; return the exit code once the attempt has ended.

        A negative code means the command was killed by that signal.
        """

    @abc.abstractmethod
    def stop(self) -> None:
        """Ask the attempt to end (SIGTERM or the provider's equivalent)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """End the attempt now, with everything it started."""

    def tail(self, lines: int) -> list[str]:
        """The last log lines, for a failure reason."""
        return []


class Backend(abc.ABC):
    """A place where attempts run. Subclasses set ``name`` and ``features``."""

    name: str = ""
    # What the backend honours, by feature key (see :func:`features_used`).
    features: frozenset[str] = frozenset()

    def check(self, spec: JobSpec) -> None:
        """Refuse a spec that uses something this backend does not support, or can't fit."""
        for feature, why in features_used(spec).items():
            if feature not in self.features:
                raise Unsupported(
                    f"the {self.name} backend does not support {why} yet",
                    "remove it from the spec, or choose another backend",
                )
        self._check(spec)

    def _check(self, spec: JobSpec) -> None:  # noqa: B027 - optional hook
        """Backend-specific checks (capacity, types). Raise FerryError subclasses."""

    def admit(self, queued: Sequence[Job], active: Sequence[Job]) -> list[tuple[str, Allocation]]:
        """Pick queued jobs (oldest first) to start now. The default starts all of them."""
        return [(job.id, Allocation()) for job in queued]

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> RunningAttempt:
        """Start one attempt; raise FerryError when it cannot start."""

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
        given = (job.spec.get("limits") or {}).get("stop_grace")
        return float(given) if given is not None else self.default_grace()

    def default_grace(self) -> float:
        """The notice's length where the spec names none (GCP spot VMs give 30 s)."""
        from ferry import defaults

        return float(defaults.STOP_GRACE)


def features_used(spec: JobSpec) -> dict[str, str]:
    """The optional features a spec relies on, with words for an error message."""
    used: dict[str, str] = {}
    env = spec.environment.kind
    if env != "python":
        used[f"environment.{env}"] = f"environment.{env} (packaging arrives in a later release)"
    for name, item in spec.inputs.items():
        if "://" in item.uri and not item.uri.startswith("file://"):
            used["inputs.remote"] = f"inputs from buckets (input {name!r}: {item.uri})"
        if item.mode != "copy":
            used[f"inputs.{item.mode}"] = f"input mode {item.mode!r} (input {name!r})"
    if spec.outputs and "://" in spec.outputs and not spec.outputs.startswith("file://"):
        used["outputs.remote"] = f"outputs to buckets ({spec.outputs})"
    if spec.resources.spot:
        used["resources.spot"] = "spot capacity (resources.spot)"
    if spec.resources.nodes > 1:
        used["resources.nodes"] = f"multi-node jobs (resources.nodes: {spec.resources.nodes})"
    if spec.paths == "container":
        used["paths.container"] = "container paths (paths: container)"
    acc = spec.resources.accelerator_request
    if acc and acc.is_tpu:
        used["resources.tpu"] = f"TPUs (resources.accelerator: {acc})"
    return used
