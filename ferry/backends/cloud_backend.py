"""What the cloud backends (Vertex AI, SageMaker) share as backends: the offering and its
price, the request sent or refused for quota, the attempt found again from its handle,
cancelled from any process, and the outputs its runner listed.

A cloud backend says where its jobs run (:meth:`CloudBackend.placed`), how to follow one
from its handle (:meth:`CloudBackend.follow`) and how to end the provider's job
(:meth:`CloudBackend.end_provider_job`); a handle ends with ``@RUN_FOLDER``.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ferry import config
from ferry.backends.base import Backend, RunningAttempt
from ferry.backends.cloud import choose, forget_secrets
from ferry.backends.cloud_run import CloudRun, Refused
from ferry.errors import DoesNotFit, FerryError

if TYPE_CHECKING:
    from ferry.backends.preflight import Check
    from ferry.catalog.optimizer import Option
    from ferry.packaging.bundle import Bundle
    from ferry.spec import JobSpec
    from ferry.store.plan import Plan
    from ferry.store.records import Job

Made = TypeVar("Made")


class ProviderError(FerryError):
    """A provider refused a call; ``quota`` when it was for want of quota (the offering
    is then passed over and the next one tried)."""

    quota: bool = False


@dataclass(frozen=True)
class Chosen:
    """Where an attempt runs (a backend's request target), and what to say of its image."""

    target: Any
    note: str = ""


@dataclass
class Placeholders:
    """What a dry run cannot know yet: each placeholder, the setting or moment that fills
    it, and a value of the right form that stands in for it when the request is checked."""

    listed: list[dict[str, str]] = field(default_factory=list)
    stand_ins: dict[str, str] = field(default_factory=dict)

    def mark(self, name: str, filled_by: str, stand_in: str = "x") -> str:
        self.listed.append({"placeholder": name, "filled_by": filled_by})
        self.stand_ins[name] = stand_in
        return name

    def outputs(self, outputs: str, protocol: str) -> tuple[str, str]:
        """The job's outputs with the bucket and the job's id marked where not known, and
        the job's id (its placeholder)."""
        if not outputs.startswith(f"{protocol}://"):
            bucket = self.mark(
                "<BUCKET>",
                f"outputs: {protocol}://BUCKET/runs/{{job_id}} in the spec, or: ferry config "
                f"set outputs_root {protocol}://BUCKET/runs",
                "bucket",
            )
            outputs = f"{protocol}://{bucket}/runs/{{job_id}}"
        job_id = self.mark("<JOB_ID>", "the job's id, given when it is submitted", "job")
        return outputs.replace("{job_id}", job_id), job_id


def shown_request(
    url: str, body: dict[str, Any], command: tuple[str, str], note: str, marks: Placeholders
) -> dict[str, Any]:
    """What ``--dry-run`` prints of a request: the method and URL, the body, the CLI
    ``command`` (its name, its line) that sends the same, a note, the placeholders."""
    shown: dict[str, Any] = {"method": "POST", "url": url, "body": body, command[0]: command[1]}
    if note:
        shown["note"] = note
    shown["placeholders"] = marks.listed
    return shown


def bundle_said(bundle: Bundle) -> str:
    """What the job's events say of the upload."""
    if bundle.sent:
        return f"code and Ferry's wheel: {bundle.sent} bytes sent"
    return "code and Ferry's wheel unchanged: 0 bytes sent"


class CloudBackend(Backend):
    """A backend whose attempts are a provider's jobs following a run folder in a bucket."""

    runs_here = False
    spot_notice: ClassVar[float] = 30.0  # s the provider gives a spot machine before its end
    provider: ClassVar[str] = ""  # the service, in words ("Vertex AI")
    protocol: ClassVar[str] = ""  # its bucket's ("gs")
    machine: ClassVar[str] = "machine"  # what it calls a machine ("training instance")
    catalog_provider: ClassVar[str] = ""  # its offerings' provider in the catalog ("gcp")
    copy_command: ClassVar[str] = ""  # a folder to its bucket: "... {uri} {protocol}://..."

    def check_place(self, spec: JobSpec, outputs: str | None) -> str:
        """What every cloud refuses at submit: outputs outside its bucket, an input on
        this machine, an accelerator it has no machine for. Returns the outputs."""
        from ferry.accelerator_names import backend_name
        from ferry.backends.cloud import bucket_root
        from ferry.errors import SpecError, Unsupported

        outputs = outputs or spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
        bucket_root(outputs, self.protocol, self.name)
        for name, item in spec.inputs.items():
            if "://" not in item.uri or item.uri.startswith("file://"):
                raise SpecError(
                    f"input {name!r} is a file of this machine ({item.uri}), which a "
                    f"{self.provider} machine cannot read",
                    f"put it in a bucket ({self.copy_command.format(uri=item.uri)}) and "
                    "give that URI",
                )
        acc = spec.resources.accelerator_request
        if acc is not None and backend_name(acc, self.name) is None:
            raise Unsupported(
                f"{self.provider} has no {self.machine} for {acc}",
                f"see the {self.machine}s it has: ferry catalog ls --provider "
                f"{self.catalog_provider}",
            )
        return outputs

    @abc.abstractmethod
    def placed(self, plan: Plan, outputs: str | None, offline: bool = False) -> Plan:
        """``plan`` kept to where this backend runs a job whose outputs are ``outputs``
        (``offline``: from the settings alone, as a dry run must)."""

    @abc.abstractmethod
    def follow(
        self,
        job: Job,
        handle: str,
        log_path: str,
        metrics_path: str,
        grace: float,
        option: Option | None,
    ) -> CloudRun | None:
        """The attempt launched with ``handle``, followed from here (None: not a handle
        of this backend)."""

    @abc.abstractmethod
    def end_provider_job(self, handle: str) -> None:
        """Ask the provider to end the job of ``handle``. Raises FerryError."""

    @abc.abstractmethod
    def _preflight(self, plan: Plan, outputs: str) -> list[Check]:
        """The provider's checks for a job of ``plan`` whose outputs are ``outputs``."""

    def preflight(self, spec: JobSpec, trust: bool = True) -> list[Check]:
        from ferry.backends import preflight
        from ferry.store.plan import Plan

        plan = Plan.of(spec.to_json())
        outputs = spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
        outputs = outputs.replace("{job_id}", "check")
        bucket = outputs.split("/")[2] if "://" in outputs else outputs
        key = preflight.key_of(self.name, bucket, plan.resources)
        if trust and preflight.trusted(key):
            return []
        checks = self._preflight(plan, outputs)
        preflight.remember(key, checks)
        return checks

    # -- shared --------------------------------------------------------------------------

    def stop_grace_of(self, plan: Plan) -> float:
        given = plan.limits.stop_grace
        return given if given is not None else self.spot_notice

    def default_grace(self) -> float:
        return self.spot_notice

    def price(self, job: Job) -> float:
        try:
            return choose(self.placed(job.plan, job.outputs), self.name).price
        except (DoesNotFit, FerryError):
            return 0.0

    def offering(self, job: Job) -> str:
        try:
            return choose(self.placed(job.plan, job.outputs), self.name).describe()
        except (DoesNotFit, FerryError):
            return self.name

    def send(
        self,
        create: Callable[[], Made],
        folder: str,
        option: Option,
        said: list[str],
        nodes: int = 1,
    ) -> Made | Refused:
        """Send the request (``create``). Refused for quota: the offering is passed over
        and the attempt ends at its first poll as no capacity. Any other failure: the run
        folder is told to stop (a job made after all ends at once) and the error raised.
        The job's secrets leave the run folder (its ``nodes``' folders) unless the job was
        made."""
        from ferry.runner.record import STOPPED, _Place

        try:
            return create()
        except ProviderError as exc:
            forget_secrets(folder, nodes)
            if not exc.quota:
                raise
            from ferry.catalog.optimizer import block

            block(option, exc.message)
            said.append(f"{option.describe()} passed over for now: {exc.message}")
            return Refused(f"{option.describe()}: {exc.message}", said)
        except BaseException:
            with contextlib.suppress(FerryError):
                _Place(folder).put(STOPPED, b"")
            forget_secrets(folder, nodes)
            raise

    def reattach(
        self, job: Job, attempt: int, handle: str | None, log_path: str, metrics_path: str
    ) -> RunningAttempt | None:
        if not handle or not folder_of(handle):
            return None
        option = None
        with contextlib.suppress(DoesNotFit, FerryError):  # (passed over on no capacity)
            option = choose(self.placed(job.plan, job.outputs), self.name)
        run = self.follow(job, handle, log_path, metrics_path, self.stop_grace(job), option)
        if run is not None:
            run.go_on()
        return run

    def cancel(self, job: Job, attempt: int, handle: str | None) -> None:
        """End the attempt from any process: the notice in its run folder, and the
        provider's own end for its job."""
        from ferry.runner.record import STOPPED, _Place

        if not folder_of(handle):  # made, perhaps, but never recorded (its launcher was lost)
            with contextlib.suppress(FerryError):
                for made in self.unrecorded(job, attempt):
                    self.cancel(job, attempt, made)
            return
        folder = folder_of(handle)
        with contextlib.suppress(FerryError):
            _Place(folder).put(STOPPED, b"")
        with contextlib.suppress(FerryError):
            self.end_provider_job(str(handle))
        forget_secrets(folder, job.plan.resources.nodes)

    def unrecorded(self, job: Job, attempt: int) -> list[str]:
        """The handles of the provider's jobs still running for attempt ``attempt`` of
        ``job`` (found by their names or labels), for an attempt whose handle was never
        recorded: the process that launched it was lost between the create and the record.
        Raises FerryError when the provider cannot be asked."""
        return []

    def outputs_sent(self, job: Job, attempt: int, handle: str | None) -> list[Any] | None:
        from ferry.runner.machine import OUTPUTS
        from ferry.runner.nodes import outputs_listed

        folder = folder_of(handle)
        if not folder:
            return None
        return outputs_listed(folder, job.plan.resources.nodes, OUTPUTS)


def folder_of(handle: str | None) -> str:
    """The run folder a cloud attempt's handle names (after its ``@``)."""
    return (handle or "").partition("@")[2]
