"""FERRY_HOME and the user's defaults (``ferry config get|set|list``).

Settings live in ``$FERRY_HOME/config.toml`` as ``section.key`` entries. Only known keys are
accepted, each validated by the same parsers as the job spec, so a typo is caught at ``set``
time rather than when a job starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry import defaults
from ferry.errors import FerryError, UsageError
from ferry.units import expand_home, parse_duration, parse_size

_homes: dict[str, Path] = {}


def ferry_home() -> Path:
    """The folder holding the store, job folders and config; created private (0700)."""
    key = os.environ.get("FERRY_HOME", "")
    known = _homes.get(key)
    if known is not None:
        return known
    home = Path(key or Path.home() / defaults.HOME_DIRNAME)
    home = expand_home(home).absolute()
    if not home.is_dir():
        try:
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise FerryError(
                f"cannot create FERRY_HOME {home}: {exc.strerror}",
                "set FERRY_HOME to a writable folder",
            ) from None
    _homes[key] = home
    return home


def _nonneg_int(value: str) -> int:
    if not value.strip().isdigit():
        raise ValueError(f"expected a whole number, not {value!r}")
    return int(value)


def _duration_or_off(value: str) -> float:
    """A duration, or 0 (also written 0s or off) for none."""
    if value.strip().lower() in ("0", "0s", "off"):
        return 0.0
    return parse_duration(value)


def _finite(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number, not {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"expected a finite number, not {value!r}")
    return number


def _positive_float(value: str) -> float:
    number = _finite(value)
    if not number > 0:
        raise ValueError(f"expected a number above 0, not {value!r}")
    return number


def _backend_name(value: str) -> str:
    from ferry.backends.registry import known_backends

    if value not in known_backends():
        raise ValueError(f"unknown backend {value!r}; known: {', '.join(known_backends())}")
    return value


def _text(value: str) -> str:
    return value


def _nonneg_float(value: str) -> float:
    number = _finite(value)
    if not number >= 0:
        raise ValueError(f"expected a number of 0 or more, not {value!r}")
    return number


def _flag(value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, not {value!r}")


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, not {value!r}")
        return value

    return parse


def _url(value: str) -> str:
    from ferry.checks import check_webhook

    check_webhook(value)
    return value


def _endpoint(value: str) -> str:
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("http", "https") or not rest.split("/", 1)[0]:
        raise ValueError(
            f"expected an http:// or https:// URL, such as http://127.0.0.1:9000, not {value!r}"
        )
    return value.rstrip("/")


def _addresses(value: str) -> str:
    if not all("@" in a for a in value.split(",")):
        raise ValueError(f"expected e-mail addresses such as me@example.com, not {value!r}")
    return value


def _tracking_uri(value: str) -> str:
    from ferry.checks import check_tracking_uri

    check_tracking_uri(value)
    return value


def _server(value: str) -> str:
    host, _, port = value.rpartition(":") if ":" in value else (value, "", "25")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST or HOST:PORT, not {value!r}")
    return value


@dataclass(frozen=True)
class Setting:
    """One known config key: its parser, default and meaning."""

    parse: Callable[[str], Any]
    default: Any
    help: str


SETTINGS: dict[str, Setting] = {
    "backend": Setting(_backend_name, "local", "backend used when a job names none"),
    "outputs_root": Setting(
        _text, None, "folder or bucket URI under which each job's outputs go (default: bucket/runs)"
    ),
    "local.cpus": Setting(_positive_float, None, "CPU cores local jobs may use (default: all)"),
    "local.memory": Setting(parse_size, None, "memory local jobs may use (default: all)"),
    "local.gpus": Setting(
        _nonneg_int, None, "GPUs local jobs may use; declare them to test scheduling"
    ),
    "local.gpu_type": Setting(_text, None, "accelerator name of the declared local GPUs"),
    "local.stop_grace": Setting(
        parse_duration, defaults.STOP_GRACE, "seconds between SIGTERM and SIGKILL on stop"
    ),
    "local.linger": Setting(
        _duration_or_off,
        defaults.SUPERVISOR_LINGER,
        "how long a supervisor whose job ended waits for the next job (0: none)",
    ),
    "ray.address": Setting(
        _text,
        None,
        "Ray cluster for the ray backend: its dashboard, http://HEAD:8265 (default: "
        "$RAY_ADDRESS, else a head Ferry starts here)",
    ),
    "ray.python": Setting(
        _text,
        None,
        "interpreter that runs Ferry on the Ray cluster's nodes (default: this one for a "
        "cluster on this machine, else python3)",
    ),
    "ray.idle": Setting(
        _duration_or_off,
        1800.0,
        "how long the Ray head Ferry started here waits with no job before it stops (0: never)",
    ),
    "launcher.idle": Setting(
        _duration_or_off, 600.0, "how long the warm launcher waits for commands (0: none)"
    ),
    "storage.s3.endpoint_url": Setting(
        _endpoint, None, "S3 endpoint for S3-compatible stores (MinIO, R2, a test server)"
    ),
    "storage.gcs.endpoint_url": Setting(
        _endpoint,
        None,
        "GCS endpoint for gs:// (an emulator; else STORAGE_EMULATOR_HOST or Google)",
    ),
    "storage.gcs.project": Setting(_text, None, "Google Cloud project for gs:// access"),
    "storage.azure.account_name": Setting(_text, None, "Azure storage account for az:// URIs"),
    "outputs.sync_interval": Setting(
        parse_duration, 30.0, "how often checkpoints and TensorBoard logs are sent while a job runs"
    ),
    "telemetry.interval": Setting(
        parse_duration, 5.0, "how often the supervisor samples a job's CPU, memory and GPUs"
    ),
    "alerts.webhook": Setting(
        _url, None, "webhook (Slack, Discord, any JSON endpoint) told of alerts; ${VAR} expands"
    ),
    "alerts.email": Setting(_addresses, None, "addresses e-mailed alerts, comma separated"),
    "alerts.command": Setting(_text, None, "shell command run on alerts (sees FERRY_ALERT_*)"),
    "alerts.smtp_server": Setting(_server, "localhost:25", "SMTP server for alert e-mail"),
    "alerts.smtp_from": Setting(_addresses, None, "sender of alert e-mail (default: ferry@HOST)"),
    "alerts.smtp_user": Setting(
        _text, None, "SMTP login; the password is read from $FERRY_SMTP_PASSWORD"
    ),
    "tracking.mlflow": Setting(
        _tracking_uri, None, "MLflow tracking URI every job reports to (paths: absolute)"
    ),
    "local.price_hour": Setting(
        _nonneg_float, 0.0, "USD per hour this machine costs, for estimates and budgets"
    ),
    "cost.confirm_above": Setting(
        _nonneg_float, 10.0, "ferry run asks before launching a job that costs more USD/hour"
    ),
    "cost.when_not_interactive": Setting(
        _choice("launch", "refuse"),
        "launch",
        "above cost.confirm_above with no terminal to ask on: launch or refuse (--yes launches)",
    ),
    "budget.monthly": Setting(
        _positive_float, None, "USD all jobs may spend per calendar month (ferry budget set)"
    ),
    "budget.hard": Setting(
        _flag, False, "when the monthly budget is spent, stop running jobs too (not only new ones)"
    ),
    "env.installer": Setting(
        _choice("auto", "uv", "pip"),
        "auto",
        "what installs environment.requirements: uv when installed (auto), uv, or pip",
    ),
    "cloud.max_runtime": Setting(
        parse_duration,
        24 * 3600.0,
        "the provider's own time limit for a cloud job without limits.max_runtime (never "
        "Vertex AI's silent 7 days)",
    ),
    "vertex.project": Setting(
        _text, None, "Google Cloud project of Vertex AI jobs (default: $GOOGLE_CLOUD_PROJECT)"
    ),
    "vertex.region": Setting(
        _text, None, "region of Vertex AI jobs (default: the cheapest that has the machine)"
    ),
    "vertex.service_account": Setting(
        _text, None, "service account Vertex AI jobs run as (default: Vertex AI's own agent)"
    ),
    "vertex.network": Setting(
        _text, None, "VPC network Vertex AI jobs join: projects/NUMBER/global/networks/NAME"
    ),
    "vertex.endpoint": Setting(
        _text,
        None,
        "Vertex AI API endpoint (default: REGION-aiplatform.googleapis.com; an http:// "
        "endpoint is a local test server for every Google API the backend calls, reached "
        "without credentials)",
    ),
    "sagemaker.role": Setting(
        _text,
        None,
        "IAM role SageMaker training jobs run as: arn:aws:iam::ACCOUNT:role/NAME (with access "
        "to the bucket)",
    ),
    "sagemaker.region": Setting(
        _text,
        None,
        "region of SageMaker jobs when the bucket's cannot be read (default: $AWS_REGION)",
    ),
    "sagemaker.subnets": Setting(
        _text, None, "VPC subnets SageMaker jobs join, comma separated (with security groups)"
    ),
    "sagemaker.security_groups": Setting(
        _text, None, "VPC security groups of SageMaker jobs, comma separated (with subnets)"
    ),
    "sagemaker.endpoint": Setting(
        _text,
        None,
        "SageMaker API endpoint (default: AWS's for the region; a test server here)",
    ),
    "snapshot.max_size": Setting(
        parse_size, defaults.MAX_SNAPSHOT_BYTES, "largest code snapshot accepted"
    ),
}


def config_path() -> Path:
    """Where the config file lives."""
    return ferry_home() / "config.toml"


def _check_key(key: str) -> Setting:
    if key not in SETTINGS:
        import difflib

        close = difflib.get_close_matches(key, list(SETTINGS), n=1)
        hint = f"did you mean {close[0]}?" if close else "run: ferry config list"
        raise UsageError(f"unknown config key {key!r}", hint)
    return SETTINGS[key]


# (path, mtime_ns, size) -> settings: supervisors and admission read the config often.
_cache: tuple[tuple[str, int, int], dict[str, str]] | None = None


def config_version() -> tuple[str, int, int]:
    """Changes whenever the config file does (for caches derived from settings)."""
    path = _config_paths.get(os.environ.get("FERRY_HOME", ""))  # (asked for at every get)
    if path is None:
        path = _config_paths[os.environ.get("FERRY_HOME", "")] = str(config_path())
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return (path, 0, -1)
    return (path, stat.st_mtime_ns, stat.st_size)


_config_paths: dict[str, str] = {}  # FERRY_HOME -> its config file


def load_raw() -> dict[str, str]:
    """The stored settings as ``{"section.key": "text"}``, without defaults."""
    global _cache
    version = config_version()
    if _cache is not None and _cache[0] == version:
        return dict(_cache[1])
    flat = _read_raw()
    _cache = (version, flat)
    return dict(flat)


def _read_raw() -> dict[str, str]:
    path = config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise FerryError(f"cannot read {path}: {exc.strerror}", "check its permissions") from None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # (Python 3.10)
        import tomli as tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FerryError(
            f"cannot read {path}: {exc}", "fix the file by hand or delete it to start over"
        ) from None
    flat: dict[str, str] = {}

    def walk(prefix: str, table: dict[str, object]) -> None:
        for key, value in table.items():
            if isinstance(value, dict):
                walk(f"{prefix}{key}.", value)
            else:
                flat[f"{prefix}{key}"] = str(value)

    walk("", data)
    return flat


def get(key: str) -> Any:
    """The parsed value of ``key``: the stored one or its default."""
    setting = _check_key(key)
    raw = load_raw().get(key)
    if raw is None:
        return setting.default
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise FerryError(
            f"config {key} in {config_path()}: {exc}", f"run: ferry config set {key} VALUE"
        ) from None


def set_value(key: str, value: str | None) -> None:
    """Validate and store ``key = value``; ``None`` removes the key (back to its default)."""
    setting = _check_key(key)
    if value is not None:
        try:
            setting.parse(value)
        except ValueError as exc:
            raise UsageError(f"config {key}: {exc}") from None
        if key == "outputs_root" and "://" not in value:
            value = str(expand_home(value).absolute())  # the same from every folder
    import fcntl

    with open(config_path().with_name(".config.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two `ferry config set` at once keep both changes
        raw = _read_raw()
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
        _write(raw)


def _write(flat: dict[str, str]) -> None:
    top: list[str] = []
    sections: dict[str, list[str]] = {}
    for key in sorted(flat):
        section, _, sub = key.rpartition(".")
        line = f"{sub or key} = {_toml_string(flat[key])}"
        if section:
            sections.setdefault(section, []).append(line)
        else:
            top.append(line)
    text = "\n".join(top) + ("\n" if top else "")
    for section, lines in sections.items():
        text += f"\n[{section}]\n" + "\n".join(lines) + "\n"
    path = config_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent `set`s never clash
    tmp.write_text(text)
    os.replace(tmp, path)


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def default_outputs_root() -> str:
    """Where outputs go when neither the spec nor the config says: a local bucket folder."""
    root = get("outputs_root")
    return str(root) if root else str(ferry_home() / "bucket" / "runs")
