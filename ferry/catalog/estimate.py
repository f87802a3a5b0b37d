"""What a job will cost before it runs: its runtime estimate and the price of the offering
it would run on (``ferry cost estimate``, and the line ``ferry run`` prints first)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.catalog.optimizer import Option, Plan, Request, local_offering, plan

if TYPE_CHECKING:
    from ferry.spec import JobSpec
    from ferry.store import Store

RUNS_LOOKED_AT = 20  # the median of at most this many earlier runs of the same name ...
JOBS_LOOKED_AT = 1000  # ... among this many most recent successful jobs


@dataclass
class Quote:
    """The plan for a job, the option it would take, and the runtime it is priced for."""

    plan: Plan
    option: Option | None
    hours: float | None
    hours_from: str  # "--hours", "est_runtime", "median of 5 earlier runs", or ""
    doubt: str | None = None  # why the chosen offering's price is doubtful, if it is

    @property
    def price(self) -> float:
        """USD per hour of the chosen option (0 when there is none)."""
        return self.option.price if self.option else 0.0

    @property
    def total(self) -> float | None:
        """USD for the runtime estimate, when one is known."""
        return self.price * self.hours if self.option and self.hours is not None else None

    def line(self) -> str:
        """``'gcp a2-highgpu-1g (A100:1) in us-central1 · 3.67 USD/h · ~11.02 USD for 3h
        (est_runtime)'``."""
        from ferry.units import format_duration, format_usd

        if self.option is None:
            return self.plan.why_none()
        text = f"{self.option.describe()} · {self.price:,.2f} USD/h"
        if self.doubt:
            text += f" ({self.doubt})"
        if self.total is not None and self.hours is not None:
            source = f" ({self.hours_from})" if self.hours_from else ""
            text += (
                f" · ~{format_usd(self.total)} USD for {format_duration(self.hours * 3600)}{source}"
            )
        return text


def runtime_estimate(
    spec: JobSpec, store: Store | None = None, hours: float | None = None
) -> tuple[float | None, str]:
    """Hours the job is expected to run, and where that comes from: ``hours`` as given,
    the spec's ``est_runtime``, or the median runtime of earlier successful jobs of the
    same name (None when there is none)."""
    if hours is not None:
        return hours, "--hours"
    if spec.est_runtime:
        return spec.est_runtime / 3600, "est_runtime"
    if store is None or not (spec.name or spec.command):
        return None, ""
    from ferry.status import JobStatus

    name = spec.job_name()
    runs = [
        job.ended_at - job.started_at
        for job in store.list_jobs([JobStatus.SUCCEEDED], limit=JOBS_LOOKED_AT)
        if job.name == name and job.started_at and job.ended_at
    ][:RUNS_LOOKED_AT]
    if not runs:
        return None, ""
    plural = "s" if len(runs) != 1 else ""
    return statistics.median(runs) / 3600, f"median of {len(runs)} earlier run{plural}"


def _placed(request: Request, spec: JobSpec, backend: str, offline: bool) -> Request:
    """``request`` kept to the regions where ``backend`` runs the job (SageMaker: its
    bucket's region, or with ``offline`` the setting's; Vertex AI: ``vertex.region``), as
    its launch will choose."""
    from dataclasses import replace

    from ferry import config
    from ferry.backends.cloud_backend import CloudBackend
    from ferry.backends.registry import get_backend
    from ferry.errors import FerryError
    from ferry.store.plan import Plan as JobPlan

    try:
        cloud = get_backend(backend)
        if not isinstance(cloud, CloudBackend):
            return request
        outputs = spec.outputs or f"{config.default_outputs_root()}/{{job_id}}"
        regions = cloud.placed(JobPlan.of(spec.to_json()), outputs, offline).resources.regions
    except FerryError:  # (the backend says why at submit)
        return request
    return replace(request, regions=tuple(regions)) if regions else request


def quote(
    spec: JobSpec,
    *,
    backend: str,
    store: Store | None = None,
    hours: float | None = None,
    offline: bool = False,
) -> Quote:
    """Price ``spec`` on ``backend`` (``auto``: the cheapest option that fits); ``offline``
    asks no provider where it would run (a dry run)."""
    estimate, source = runtime_estimate(spec, store, hours)
    request = Request.from_spec(spec, estimate)
    if backend == "auto":
        found = plan(request)
    elif backend not in ("local", "ray"):  # a cloud: its cheapest offering that fits
        placed = _placed(request, spec, backend, offline)
        found = plan(placed, backends=[backend], include_local=False)
    else:  # a named backend (only local exists yet): what it runs on, whether it fits or not
        local = local_offering()
        found = Plan(request, [Option(local, "local", False, (local.price or 0.0) * request.nodes)])
    doubt = None
    if found.best is not None and found.best.offering.provider != "local":
        from ferry.catalog.offerings import load_catalog

        doubt = load_catalog().doubt(found.best.offering)
    return Quote(found, found.best, estimate, source, doubt)
