"""Checks of a cloud backend's setup before a job is sent to it (``ferry check``, and every
submit): credentials, project or region, the bucket, the role or service account, the
machine in the region, and quota where the provider's API says it.

Each check is a :class:`Check`: passed, failed (one sentence, and the command or console
page that fixes it), or not checked (the provider would not say, and why). A submit is
refused at the first failure; what could not be checked does not stop it. Checks that
passed are trusted for ``TRUSTED_FOR`` seconds (in ``FERRY_HOME/preflight.json``, by the
settings and the environment they come from, the bucket and the resources asked for),
so submitting again is not slower; a preflight with a failure is never kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ferry.errors import FerryError

TRUSTED_FOR = 600.0  # s a passed preflight is trusted for the same settings and machine
TIMEOUT = 10.0  # s one call of a check may take (a check must not hold a submit up long)


@dataclass(frozen=True)
class Check:
    """One check's result."""

    what: str  # "credentials", "bucket", "quota" ...
    ok: bool | None  # None: not checked (``said`` says why)
    said: str  # what was found, in one sentence
    fix: str = ""  # the command or console page that fixes a failure


class PreflightFailed(FerryError):
    """A cloud backend's setup would make the job fail: the first failed check."""

    exit_code = 2


def bucket_writable(outputs: str) -> Check:
    """Whether the job's bucket takes a small object (written, then removed)."""
    from ferry.storage.failures import bucket_errors
    from ferry.storage.locations import parse_uri
    from ferry.storage.registry import filesystem

    place = parse_uri(outputs)
    root = f"{place.protocol}://{place.bucket}"
    probe = f"{place.bucket}/.ferry/check/{os.urandom(6).hex()}"
    try:
        with bucket_errors(place, context="the job's bucket"):
            fs = filesystem(place.protocol)
            fs.pipe_file(probe, b"ferry check\n")
    except FileNotFoundError:
        make = (
            f"gcloud storage buckets create {root}"
            if place.protocol == "gs"
            else (f"aws s3 mb {root}")
        )
        return Check("bucket", False, f"{root} does not exist", f"create it: {make}")
    except FerryError as exc:
        return Check("bucket", False, f"{root} cannot be written: {exc.message}", exc.hint or "")
    except Exception as exc:  # (a store's own error the mapping did not know)
        fix = "check that your credentials may write to the bucket"
        return Check("bucket", False, f"{root} cannot be written: {exc}", fix)
    try:
        fs.rm_file(probe)
    except Exception:  # (written is what a job needs; the probe stays, a few bytes)
        return Check(
            "bucket", True, f"{root} can be written (the probe {probe} could not be removed)"
        )
    return Check("bucket", True, f"{root} can be written")


def refuse_failed(checks: list[Check]) -> None:
    """Raise :class:`PreflightFailed` for the first failed check."""
    for check in checks:
        if check.ok is False:
            raise PreflightFailed(f"{check.what}: {check.said}", check.fix or None)


# -- trust for a while ----------------------------------------------------------------------


# what decides the checks' answers besides the settings: who asks, and where
_ENVIRONMENT = (
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "STORAGE_EMULATOR_HOST",
)


def key_of(backend: str, *parts: object) -> str:
    """The key a preflight is kept under: ``parts`` (the bucket, the resources), the
    backend's settings and the storage settings, and the environment they come from (a
    hash: no value is kept)."""
    from ferry import config

    settings = {
        key: config.get(key)
        for key in config.SETTINGS
        if key.startswith((f"{backend}.", "storage.", "outputs_root", "cloud."))
    }
    environment = {name: os.environ.get(name) for name in _ENVIRONMENT}
    text = json.dumps([backend, settings, environment, *map(str, parts)], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def trusted(key: str, now: float | None = None) -> bool:
    """Whether a preflight with ``key`` passed within ``TRUSTED_FOR`` seconds."""
    now = time.time() if now is None else now
    passed = _read().get(key)
    return isinstance(passed, (int, float)) and 0 <= now - passed < TRUSTED_FOR


def remember(key: str, checks: list[Check]) -> None:
    """Keep that the preflight ``key`` passed (nothing failed), now."""
    if any(c.ok is False for c in checks):
        return
    now = time.time()
    kept = {k: v for k, v in _read().items() if now - v < TRUSTED_FOR}
    kept[key] = now
    with contextlib.suppress(OSError):
        path = _path()
        tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}")
        tmp.write_text(json.dumps(kept))
        os.replace(tmp, path)


def _read() -> dict[str, float]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(_path().read_text())
        if isinstance(data, dict):
            return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}
    return {}


def _path() -> Path:
    from ferry import config

    return config.ferry_home() / "preflight.json"


def as_json(checks: list[Check]) -> list[dict[str, object]]:
    return [asdict(c) for c in checks]
