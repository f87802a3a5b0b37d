"""The job spec's sections: where its software comes from and what it runs on, alerts
and where they go, tracking, simulated preemption, and a sweep's search
(:mod:`ferry.spec` is the spec itself, and imports these while pydantic's plugins are off).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ferry.accelerators import Accelerator, parse_accelerator
from ferry.checks import check_tracking_uri, check_webhook
from ferry.errors import SpecError
from ferry.units import parse_duration, parse_size

# every model of the spec: unknown fields refused, values frozen, text stripped
SPEC_CONFIG = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class _Model(BaseModel):
    model_config = SPEC_CONFIG


class Environment(_Model):
    """Where the command's software comes from; exactly one of the three."""

    python: Literal["current"] | None = None  # the interpreter and packages Ferry runs in
    requirements: str | None = None  # a requirements.txt inside `code`
    image: str | None = None  # a container image
    # on a cloud: the provider's prebuilt image of this framework ("pytorch==2.4"); the
    # job's requirements are installed into it
    framework: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Environment:
        chosen = [k for k in ("python", "requirements", "image") if getattr(self, k)]
        if len(chosen) > 1:
            raise ValueError(
                f"choose one of python, requirements, image, not {' and '.join(chosen)}"
            )
        if self.framework is not None:
            if self.image:
                raise ValueError("framework picks a prebuilt image: give it or image, not both")
            from ferry.packaging.images import parse_framework

            try:
                parse_framework(self.framework)
            except SpecError as exc:
                why = exc.message.split(": ", 1)[-1]  # (the field is said by the caller)
                raise ValueError(f"framework {why}; {exc.hint}") from None
        return self

    @property
    def kind(self) -> str:
        """``"python"``, ``"requirements"`` or ``"image"``."""
        for key in ("requirements", "image"):
            if getattr(self, key):
                return key
        return "python"


class Resources(_Model):
    """What one node of the job needs."""

    accelerator: str | None = None  # canonical "A100:1" / "tpu-v5e-8"
    cpus: float | None = Field(default=None, gt=0, le=100_000, allow_inf_nan=False)
    memory: int | None = None  # bytes
    # true: spot capacity; "flex": flex-start capacity (waits for the machines, then runs
    # without preemption; Vertex AI's Dynamic Workload Scheduler)
    spot: bool | Literal["flex"] = False
    nodes: int = Field(default=1, ge=1, le=10_000)
    # processes per node (a gang with nodes); None: one per GPU of the node, or 1
    procs_per_node: int | None = Field(default=None, ge=1, le=1024)
    # where a cloud offering may come from (empty: anywhere); used by --backend auto
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()

    @field_validator("providers", "regions", mode="before")
    @classmethod
    def _places(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("spot", mode="before")
    @classmethod
    def _spot(cls, value: object) -> object:
        words = {"flex": "flex", "true": True, "yes": True, "on": True, "1": True}
        words.update({"false": False, "no": False, "off": False, "0": False})
        if isinstance(value, str) and value.strip().lower() in words:
            return words[value.strip().lower()]
        if isinstance(value, bool) or value is None or value in (0, 1):
            return bool(value)
        raise ValueError(f"expected true, false or flex, not {value!r}")

    @property
    def flex_start(self) -> bool:
        """Whether the job asks for flex-start capacity (``spot: flex``)."""
        return self.spot == "flex"

    @field_validator("providers")
    @classmethod
    def _providers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from ferry.backends.registry import PROVIDERS

        for name in value:
            if name not in PROVIDERS:
                raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
        return value

    @field_validator("accelerator", mode="before")
    @classmethod
    def _accelerator(cls, value: object) -> str | None:
        if value is None:
            return None
        from ferry.machines import parse_request

        return str(parse_request(value))

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: object) -> int | None:
        if value is None:
            return None
        size = parse_size(value)
        if size <= 0:
            raise ValueError(f"expected a size above 0, not {value!r}")
        return size

    @property
    def accelerator_request(self) -> Accelerator | None:
        """The parsed accelerator, or ``None`` for a CPU-only job."""
        return parse_accelerator(self.accelerator) if self.accelerator else None

    @property
    def gpu_count(self) -> int:
        """GPUs per node (0 for CPU-only and TPU jobs)."""
        acc = self.accelerator_request
        return acc.count if acc and not acc.is_tpu else 0

    @model_validator(mode="after")
    def _shares(self) -> Resources:
        gpus, procs = self.gpu_count, self.procs_per_node
        if gpus and procs and gpus % procs:
            raise ValueError(
                f"{gpus} GPUs per node cannot be shared evenly by procs_per_node {procs};"
                " ask for a multiple of procs_per_node GPUs"
            )
        return self


def _optional_duration(value: object) -> float | None:
    """A duration, or None for ``off``/``false``/``0`` (the rule is switched off)."""
    if (
        value is None
        or value is False
        or value == 0
        or (isinstance(value, str) and value.strip().lower() in ("off", "none", "0"))
    ):
        return None
    return parse_duration(value)


def _percent(value: object) -> float | None:
    """A percentage from ``90``, ``"90%"``; None for ``off``/``false``."""
    if (
        value is None
        or value is False
        or (isinstance(value, str) and value.strip().lower() in ("off", "none"))
    ):
        return None
    text = value.strip().removesuffix("%") if isinstance(value, str) else value
    try:
        number = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"expected a percentage such as 90 or '90%', not {value!r}") from None
    if not 0 < number <= 100:
        raise ValueError(f"expected a percentage above 0 and at most 100, not {value!r}")
    return number


class Notify(_Model):
    """Where alerts go: one of a webhook URL, e-mail addresses or a shell command.

    ``${NAME}`` in any of them is replaced from the submitter's environment when the alert
    is sent, so a webhook's secret URL need not be written in the spec (nor stored)."""

    webhook: str | None = None  # Slack, Discord or any endpoint taking a JSON POST
    email: str | None = None  # one address, or several separated by commas
    command: str | None = None  # run with /bin/sh; FERRY_ALERT_* variables describe the alert

    @model_validator(mode="after")
    def _one(self) -> Notify:
        given = [k for k in ("webhook", "email", "command") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("each notify entry names one of webhook, email or command")
        if self.webhook:
            check_webhook(self.webhook)
        if self.email and not all("@" in a for a in self.email.split(",")):
            raise ValueError(f"email {self.email!r} is not an address such as me@example.com")
        return self

    @property
    def kind(self) -> str:
        return "webhook" if self.webhook else "email" if self.email else "command"

    @property
    def target(self) -> str:
        return self.webhook or self.email or self.command or ""


class Alerts(_Model):
    """Rules the supervisor checks while the job runs, and who hears about them."""

    nan: bool = True  # a reported metric became NaN or infinite
    no_progress: float | None = 1800.0  # no report and no log line for this long
    gpu_util_below: float | None = 10.0  # mean utilisation of the job's GPUs (percent) ...
    gpu_util_for: float = 600.0  # ... for this long
    memory_above: float | None = 90.0  # percent of the job's memory
    # percent of a GPU's memory; off by default: TensorFlow and JAX reserve nearly all of it
    gpu_memory_above: float | None = None
    on_end: tuple[Literal["succeeded", "failed", "cancelled"], ...] = ("succeeded", "failed")
    notify: tuple[Notify, ...] | None = None  # default: the alerts.* settings of ferry config
    on_alert: Literal["notify", "stop"] = "notify"  # stop: end the job at its first alert

    @field_validator("no_progress", mode="before")
    @classmethod
    def _no_progress(cls, value: object) -> float | None:
        return _optional_duration(value)

    @field_validator("gpu_util_for", mode="before")
    @classmethod
    def _for(cls, value: object) -> float:
        return parse_duration(value)

    @field_validator("gpu_util_below", "memory_above", "gpu_memory_above", mode="before")
    @classmethod
    def _percentages(cls, value: object) -> float | None:
        return _percent(value)


class Simulate(_Model):
    """Rehearse spot capacity here: preempt the job as a provider would."""

    preempt_every: float | None = None  # about this often (uniformly 0.5x to 1.5x), seconds

    @field_validator("preempt_every", mode="before")
    @classmethod
    def _every(cls, value: object) -> float | None:
        return None if value is None else parse_duration(value)


class Tracking(_Model):
    """Where the job's metrics are sent besides Ferry's store."""

    tensorboard: bool = True  # event files in FERRY_TENSORBOARD_DIR/ferry
    mlflow: str | None = None  # tracking URI: sqlite:///mlflow.db, http://host:5000, ...
    experiment: str | None = None  # MLflow experiment (default: the job's name)

    @field_validator("mlflow")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        if value:
            check_tracking_uri(value)
        return value


class SweepSection(_Model):
    """A hyperparameter search of the job, run with ``ferry sweep SPEC`` (whose flags win);
    ``ferry run`` runs the job once, with its own hyperparameters."""

    # name -> "loguniform:1e-4:1e-1", "int:2:6", "choice:32,64,128" (or a list of choices),
    # each perhaps drawn on a condition: "loguniform:1e-10:1e10 if classifier=SVC"
    params: dict[str, str] = {}
    objective: str | None = None  # "val_loss:min"
    trials: int | None = Field(default=None, ge=1, le=1_000_000)  # (a grid: all its points)
    parallel: int = Field(default=1, ge=1, le=10_000)
    sampler: Literal["tpe", "random", "grid", "cmaes", "qmc"] = "tpe"
    pruner: Literal["median", "hyperband", "none"] = "median"
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)

    @field_validator("params", mode="before")
    @classmethod
    def _params(cls, value: object) -> object:
        from ferry.errors import UsageError
        from ferry.sweeps.params import parse_params

        if not isinstance(value, dict):
            return value  # (pydantic says what it expects)
        out = {}
        for name, given in value.items():
            text = f"choice:{','.join(str(v) for v in given)}" if isinstance(given, list) else given
            if not isinstance(text, str):
                raise ValueError(
                    f"{name}: {given!r} is not KIND:ARGS (e.g. loguniform:1e-4:1e-1, "
                    "int:2:6, choice:32,64,128)"
                )
            out[str(name)] = text
        try:  # (each, and their conditions: one names a choice of the section)
            if out:
                parse_params([f"{name}={text}" for name, text in out.items()])
        except UsageError as exc:
            raise ValueError(str(exc).removeprefix("--param ")) from None
        return out

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: str | None) -> str | None:
        from ferry.errors import UsageError
        from ferry.sweeps.study import parse_objective

        if value is not None:
            try:
                parse_objective(value)
            except UsageError as exc:
                said = exc.message.removeprefix("--objective ")
                raise ValueError(f"{said}: {exc.hint}") from None
        return value
