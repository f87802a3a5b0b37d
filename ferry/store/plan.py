"""What the controller reads of a stored job spec, typed.

The store keeps a job's spec as the JSON of its validated :class:`ferry.spec.JobSpec`
(every field present, defaults filled in). Rebuilding that model in every supervisor and
watcher would import pydantic where nothing is validated any more, so the controller reads
this view instead: frozen dataclasses of the fields it acts on, with their types, made
once per job snapshot (:attr:`ferry.store.records.Job.plan`). Field names are the spec's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Resources:
    accelerator: str | None = None  # canonical, e.g. "A100:1"
    cpus: float | None = None
    memory: int | None = None  # bytes
    spot: bool = False  # spot capacity (resources.spot: true)
    flex_start: bool = False  # flex-start capacity (resources.spot: flex)
    nodes: int = 1
    procs_per_node: int | None = None
    providers: tuple[str, ...] = ()  # where a cloud offering may come from (empty: anywhere)
    regions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Limits:
    max_runtime: float | None = None  # seconds
    max_cost: float | None = None  # USD
    stop_grace: float | None = None  # seconds
    max_pending: float | None = None  # seconds


@dataclass(frozen=True)
class Checkpoint:
    every: float | None = None  # seconds
    keep: int = 3
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tracking:
    tensorboard: bool = True
    mlflow: str | None = None
    experiment: str | None = None


@dataclass(frozen=True)
class Plan:
    """The typed view of one stored spec."""

    code: str = "."
    command: tuple[str, ...] = ()
    shell: bool = False
    contract: str = "ferry"  # ferry, vertex or sagemaker
    paths: str = "auto"  # auto, container or host
    resources: Resources = field(default_factory=Resources)
    limits: Limits = field(default_factory=Limits)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    tracking: Tracking = field(default_factory=Tracking)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {uri, mode}
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    collect: tuple[str, ...] = ()
    metrics: dict[str, str] = field(default_factory=dict)  # name -> pattern
    retries: dict[str, Any] = field(default_factory=dict)  # ferry.controller.policy.Limits.of
    alerts: dict[str, Any] = field(default_factory=dict)  # ferry.telemetry's rules read it
    outputs_exist_ok: bool = False
    preempt_every: float | None = None  # simulate.preempt_every, seconds
    requirements: str | None = None  # environment.requirements: a file inside the code
    framework: str | None = None  # environment.framework: a provider's prebuilt image
    image: str | None = None  # environment.image: a container image built elsewhere

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Plan:
        """The view of ``spec`` (a stored spec; a missing section reads as its default)."""
        res = spec.get("resources") or {}
        caps = spec.get("limits") or {}
        ckpt = spec.get("checkpoint") or {}
        tracking = spec.get("tracking") or {}
        return cls(
            code=str(spec.get("code") or "."),
            command=tuple(str(word) for word in spec.get("command") or ()),
            shell=bool(spec.get("shell")),
            contract=str(spec.get("contract") or "ferry"),
            paths=str(spec.get("paths") or "auto"),
            resources=Resources(
                accelerator=res.get("accelerator"),
                cpus=_float(res.get("cpus")),
                memory=None if res.get("memory") is None else int(res["memory"]),
                spot=res.get("spot") is True,
                flex_start=res.get("spot") == "flex",
                nodes=int(res.get("nodes") or 1),
                procs_per_node=res.get("procs_per_node"),
                providers=tuple(res.get("providers") or ()),
                regions=tuple(res.get("regions") or ()),
            ),
            limits=Limits(
                max_runtime=_float(caps.get("max_runtime")),
                max_cost=_float(caps.get("max_cost")),
                stop_grace=_float(caps.get("stop_grace")),
                max_pending=_float(caps.get("max_pending")),
            ),
            checkpoint=Checkpoint(
                every=_float(ckpt.get("every")),
                keep=int(ckpt.get("keep", 3)),
                paths=tuple(ckpt.get("paths") or ()),
            ),
            tracking=Tracking(
                tensorboard=bool(tracking.get("tensorboard", True)),
                mlflow=tracking.get("mlflow"),
                experiment=tracking.get("experiment"),
            ),
            inputs={name: dict(item) for name, item in (spec.get("inputs") or {}).items()},
            hyperparameters=dict(spec.get("hyperparameters") or {}),
            env=dict(spec.get("env") or {}),
            secrets=tuple(spec.get("secrets") or ()),
            collect=tuple(spec.get("collect") or ()),
            metrics=dict(spec.get("metrics") or {}),
            retries=dict(spec.get("retries") or {}),
            alerts=dict(spec.get("alerts") or {}),
            outputs_exist_ok=bool(spec.get("outputs_exist_ok")),
            preempt_every=_float((spec.get("simulate") or {}).get("preempt_every")),
            requirements=(spec.get("environment") or {}).get("requirements"),
            framework=(spec.get("environment") or {}).get("framework"),
            image=(spec.get("environment") or {}).get("image"),
        )
