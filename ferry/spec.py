"""JobSpec: what the user asks for, from a YAML file and CLI flags (flags win).

Every field of the job spec (docs/spec.md) is here. Sizes, durations and accelerators are parsed
into plain values (bytes, seconds, ``"A100:1"``) so the stored spec is unambiguous. Invalid
input raises :class:`ferry.errors.SpecError` naming the field and what would be valid;
a backend that cannot honour a field refuses the job itself (nothing is silently ignored).
"""

from __future__ import annotations

import os
import re
import shlex
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from ferry.errors import SpecError
from ferry.units import expand_home, parse_duration

# Ferry's models use no pydantic plugins. Said so while they are defined (and put back at
# the end of this module), pydantic skips reading every installed package's entry points to
# find plugins: 15 ms of CPU at each start of `ferry`.
_PLUGINS_SETTING = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"

_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INPUT_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")


# (its sections, the environment and resources to a sweep, are in ferry/spec_sections.py)
from ferry.spec_sections import (  # noqa: E402 - imported while the plugins are off
    SPEC_CONFIG,
    Alerts,
    Environment,
    Resources,
    Simulate,
    SweepSection,
    Tracking,
)


class _Model(BaseModel):
    model_config = SPEC_CONFIG


class Input(_Model):
    """One input: a URI or path, and how the job gets it."""

    uri: str = Field(min_length=1)
    mode: Literal["copy", "mount", "stream"] = "copy"


class Limits(_Model):
    """When Ferry stops the job on its own."""

    max_runtime: float | None = None  # seconds
    max_cost: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # USD
    # between the stop notice (SIGTERM) and SIGKILL, for cancel, preemption and the limits;
    # default: the config's local.stop_grace (30 s, as a GCP spot VM gives)
    stop_grace: float | None = None
    # how long an attempt may wait for a machine (a Ray cluster holds a job whose
    # resources no node has for ever); default: the backend's own (10 minutes on Ray)
    max_pending: float | None = None

    @field_validator("max_runtime", "stop_grace", "max_pending", mode="before")
    @classmethod
    def _runtime(cls, value: object) -> float | None:
        return None if value is None else parse_duration(value)


class Retries(_Model):
    """How many times a failed attempt is started again."""

    on_preemption: int = Field(default=20, ge=0, le=10_000)  # also a lost supervisor
    on_error: int = Field(default=0, ge=0, le=10_000)
    on_exit_codes: tuple[int, ...] = ()  # always retried, not counted (with backoff)

    @field_validator("on_exit_codes", mode="before")
    @classmethod
    def _codes(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        if isinstance(value, list | tuple) and all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 255 for v in value
        ):
            return tuple(value)
        raise ValueError(f"expected exit codes from 1 to 255, such as [3, 134], not {value!r}")


def working_folder_patterns(value: object) -> tuple[str, ...]:
    """Globs of files in the job's working folder (``snapshot.pt``, ``ckpt/*.pt``): relative
    paths that stay inside it."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of file patterns such as [snapshot.pt], not {value!r}")
    for pattern in value:
        parts = pattern.replace("\\", "/").split("/")
        if not pattern.strip() or pattern.startswith(("/", "~")) or ".." in parts:
            raise ValueError(
                f"{pattern!r} is not a path inside the working folder: use a relative path "
                "such as snapshot.pt or ckpt/*.pt"
            )
    return tuple(value)


class Checkpoint(_Model):
    """A hint to the runtime: how often the script should save, how many to keep, and which
    files of the working folder are checkpoint state."""

    every: float | None = None  # seconds
    keep: int = Field(default=3, ge=1, le=10_000)  # runtime.checkpoint keeps the last K
    # files the script keeps in its working folder (snapshot.pt): saved with the
    # checkpoints and put back before the next attempt, on whatever machine it runs
    paths: tuple[str, ...] = ()

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, value: object) -> float | None:
        return None if value is None else parse_duration(value)

    @field_validator("paths", mode="before")
    @classmethod
    def _paths(cls, value: object) -> tuple[str, ...]:
        return working_folder_patterns(value)


def derive_name(command: tuple[str, ...] | list[str]) -> str:
    """A job name from its command: the script's stem (``train.py`` -> ``train``)."""
    for word in command:
        stem = Path(word).stem
        if word.endswith((".py", ".sh", ".ipynb")) and stem:
            return stem
    if len(command) >= 3 and command[1] == "-m":
        return command[2].rpartition(".")[2]
    return Path(command[0]).name


class JobSpec(_Model):
    """A job as asked for: the command, its code, resources, data and limits."""

    name: str | None = None
    code: str = "."
    command: tuple[str, ...] | None = None
    shell: bool = False
    environment: Environment = Environment()
    resources: Resources = Resources()
    inputs: dict[str, Input] = {}
    outputs: str | None = None
    # an outputs place that already holds files is refused unless this is set
    outputs_exist_ok: bool = False
    hyperparameters: dict[str, Any] = {}
    env: dict[str, str] = {}
    secrets: tuple[str, ...] = ()
    limits: Limits = Limits()
    retries: Retries = Retries()
    checkpoint: Checkpoint = Checkpoint()
    backend: str | None = None  # or "auto": the cheapest offering that fits
    # how long the job is expected to run: ranks offerings by total price and estimates it
    est_runtime: float | None = None  # seconds
    # metrics to read from what the script prints: name -> regex with one group (the value)
    metrics: dict[str, str] = {}
    # files the script writes in its working folder that belong in the outputs too
    collect: tuple[str, ...] = ()
    # how the script expects to be called: Ferry's variables (all aliases set), or as on
    # Vertex AI (--key=value arguments) or SageMaker (--key value, the /opt/ml files)
    contract: Literal["ferry", "vertex", "sagemaker"] = "ferry"
    # "container": /opt/ml and /gcs/<bucket> exist for the job (a private mount namespace);
    # "auto" (default): when the code mentions them; "host": never
    paths: Literal["auto", "container", "host"] = "auto"
    alerts: Alerts = Alerts()
    tracking: Tracking = Tracking()
    simulate: Simulate = Simulate()
    sweep: SweepSection | None = None  # ferry sweep SPEC's search (ferry run ignores it)

    def job_name(self) -> str:
        """The job's name: ``name``, else one derived from the command (see derive_name)."""
        return self.name or derive_name(self.command or ())

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_RE.match(value):
            raise ValueError(
                f"{value!r} is not a job name: use letters, digits, '.', '_' or '-' "
                "(at most 63, starting with a letter or digit)"
            )
        return value

    @field_validator("collect", mode="before")
    @classmethod
    def _collect(cls, value: object) -> tuple[str, ...]:
        return working_folder_patterns(value)

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: object) -> tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                parts = shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split {value!r} into words: {exc}") from None
        elif isinstance(value, list | tuple) and all(
            isinstance(v, str | int | float) and not isinstance(v, bool) for v in value
        ):
            parts = [str(v) for v in value]
        else:
            raise ValueError("expected a command line (text) or a list of words")
        if not parts or not parts[0].strip():
            raise ValueError("the command is empty")
        return tuple(parts)

    @model_validator(mode="before")
    @classmethod
    def _shell_line(cls, data: object) -> object:
        # With a shell, a command written as one line is that line: splitting it into
        # words would quote its operators (&&, |, $VAR) when they are joined again.
        if isinstance(data, dict) and data.get("shell") is True:
            command = data.get("command")
            if isinstance(command, str) and command.strip():
                return {**data, "command": [command]}
        return data

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out: dict[object, object] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _INPUT_NAME_RE.match(key):
                raise ValueError(
                    f"input name {key!r} must start with a letter and hold only letters, "
                    "digits, '_' or '-'"
                )
            out[key] = {"uri": item} if isinstance(item, str) else item
        return out

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
                raise ValueError(f"{key!r} is not an environment variable name")
            if isinstance(item, dict | list | tuple) or item is None:
                raise ValueError(f"{key}: expected text or a number, not {item!r}")
            out[key] = str(item).lower() if isinstance(item, bool) else str(item)
        return out

    @field_validator("secrets", mode="before")
    @classmethod
    def _secrets(cls, value: object) -> object:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple):
            for item in value:
                if not isinstance(item, str) or not _ENV_NAME_RE.match(item):
                    raise ValueError(f"{item!r} is not an environment variable name")
        return value

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _hparams(cls, value: object) -> object:
        if isinstance(value, dict):
            import json

            for key in value:
                if not isinstance(key, str) or not key:
                    raise ValueError(f"hyperparameter name {key!r} must be text")
            try:
                text = json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError(
                    "hyperparameter values must be numbers, text, booleans, lists or maps"
                ) from None
            # as the job sees them (JSON): a map's number keys are text there too
            return json.loads(text)
        return value

    @field_validator("metrics")
    @classmethod
    def _metric_patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            try:
                groups = re.compile(pattern).groups
            except re.error as exc:
                raise ValueError(
                    f"{name}: {pattern!r} is not a regular expression: {exc}"
                ) from None
            if groups < 1:
                raise ValueError(
                    f"{name}: {pattern!r} needs a group around the value, e.g. 'loss: ([0-9.e-]+)'"
                )
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str | None) -> str | None:
        if value is None or value == "auto":
            return value
        from ferry.backends.registry import known_backends

        if value not in known_backends():
            import difflib

            close = difflib.get_close_matches(value, known_backends(), n=1)
            hint = f"did you mean {close[0]}?" if close else ""
            known = ", ".join([*known_backends(), "auto"])
            raise ValueError(f"unknown backend {value!r}; known: {known}. {hint}".strip())
        return value

    @field_validator("est_runtime", mode="before")
    @classmethod
    def _est_runtime(cls, value: object) -> float | None:
        return None if value is None else parse_duration(value)

    def with_defaults(self, *, name: str, backend: str) -> JobSpec:
        """A copy with the name and backend filled in (as stored with the job)."""
        return self.model_copy(
            update={"name": self.name or name, "backend": self.backend or backend}
        )

    def with_absolute_paths(self, base: Path) -> JobSpec:
        """A copy whose code folder and local inputs are absolute (relative ones are taken
        from ``base``): the job may start later, in another process and folder."""

        def absolute(path: str) -> str:
            return str((base / expand_home(path)).absolute())

        inputs = {
            name: item if "://" in item.uri else item.model_copy(update={"uri": absolute(item.uri)})
            for name, item in self.inputs.items()
        }
        tracking = self.tracking
        uri = tracking.mlflow
        if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            uri = "sqlite:///" + absolute(uri[len("sqlite:///") :])
        elif uri and "://" not in uri and not uri.startswith("databricks"):
            uri = absolute(uri)  # a folder: MLflow's file store
        if uri != tracking.mlflow:
            tracking = tracking.model_copy(update={"mlflow": uri})
        return self.model_copy(
            update={"code": absolute(self.code), "inputs": inputs, "tracking": tracking}
        )

    def to_json(self) -> dict[str, Any]:
        """The spec as plain JSON data (what the store keeps)."""
        return self.model_dump(mode="json")


# ---------------------------------------------------------------------------------------
# Loading


def _fields_of(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """Known field names at ``path`` (for 'did you mean' on unknown fields)."""
    current: type[BaseModel] = model
    i = 0
    while i < len(path):
        field = current.model_fields.get(str(path[i]))
        if field is None:
            return []
        annotation = field.annotation
        candidates = typing.get_args(annotation) or (annotation,)
        if typing.get_origin(annotation) is dict:  # dict[str, Input]: skip the key
            candidates = candidates[1:]
            i += 1
        found = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not found:
            return []
        current = found[0]
        i += 1
    return list(current.model_fields)


def _describe(error: Any, source: str) -> str:
    loc = tuple(error["loc"])
    field = ".".join(str(p) for p in loc) or "spec"
    kind = error["type"]
    if kind == "extra_forbidden":
        import difflib

        known = _fields_of(JobSpec, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"known fields: {', '.join(known)}"
        return f"{source}: unknown field {field!r} ({hint})"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "expected a mapping of fields (key: value)"
    elif kind == "missing":
        message = "is required"
    value = error.get("input")
    shown = (
        ""
        if kind in ("value_error", "missing") or isinstance(value, dict)
        else f" (got {value!r:.60})"
    )
    return f"{source}: {field}: {message}{shown}"


def spec_from_dict(data: object, source: str = "spec") -> JobSpec:
    """Validate plain data (already merged with CLI flags) into a JobSpec."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping of fields (name:, command:, ...)")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        message = _describe(errors[0], source)
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        raise SpecError(message) from None
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:  # exotic YAML values
        raise SpecError(f"{source}: cannot read the spec: {exc}") from None


def _loader() -> Any:
    """PyYAML's SafeLoader, refusing a key given twice (the last one would silently win)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key; the mapping itself reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} appears twice", key_node.start_mark
                    )
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML spec file into plain data, with clear errors for missing or broken files."""
    import yaml

    file = Path(path)
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise SpecError(f"spec file {file} does not exist", "check the path") from None
    except IsADirectoryError:
        raise SpecError(f"{file} is a folder, not a spec file", "name the YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec file {file}: {exc}") from None
    try:
        data = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise SpecError(f"{file}: {problem}{where}", "fix the YAML syntax") from None
    except RecursionError:
        raise SpecError(f"{file}: nested too deeply") from None
    except ValueError as exc:  # what the parser lets through (an escape past U+10FFFF)
        raise SpecError(f"{file}: not valid YAML ({exc})", "fix the YAML syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{file}: expected a mapping of fields (name:, command:, ...)")
    return data


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``overrides`` (from CLI flags) into ``base`` (from the file)."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _relative_to(folder: Path, item: Any) -> Any:
    uri = item.get("uri") if isinstance(item, dict) else item
    if not isinstance(uri, str) or "://" in uri or expand_home(uri).is_absolute():
        return item
    resolved = str(folder / uri)
    return {**item, "uri": resolved} if isinstance(item, dict) else resolved


def load_spec(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> JobSpec:
    """Load a spec file (if any), apply CLI overrides, validate.

    Relative ``code`` in a file is taken relative to the file's folder, so
    ``ferry run path/to/job.yaml`` works from anywhere.
    """
    data: dict[str, Any] = {}
    source = "spec"
    if path is not None:
        data = read_spec_file(path)
        source = str(path)
        here = Path(path).absolute().parent
        code = data.get("code", ".")
        if isinstance(code, str) and not expand_home(code).is_absolute():
            data["code"] = str(here / code)
        inputs = data.get("inputs")
        if isinstance(inputs, dict):  # local input paths, like code, are relative to the file
            # (each as a mapping, which a flag's mode or URI merges into)
            data["inputs"] = {
                k: _relative_to(here, {"uri": v} if isinstance(v, str) else v)
                for k, v in inputs.items()
            }
    if overrides:
        data = merge(data, overrides)
    return spec_from_dict(data, source)


if _PLUGINS_SETTING is None:  # as it was before the models above were defined
    del os.environ["PYDANTIC_DISABLE_PLUGINS"]
else:
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = _PLUGINS_SETTING
