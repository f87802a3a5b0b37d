"""One registry of storage protocols: each maps to the filesystem Ferry builds for it and the
extra that installs it.

Filesystems are created on first use and kept per process, with timeouts and retries that
report an unreachable store within about 15 s (``ferry.storage.gcs``, ``s3``, ``azure``).
Credentials always come from the provider's own chain (environment, config files, metadata
server); Ferry never stores them. Other endpoints (MinIO, R2, emulators) need only
``ferry config set storage.s3.endpoint_url`` or ``storage.gcs.endpoint_url``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from ferry.errors import BackendNotInstalled, install_hint
from ferry.storage.logs import storage_in_use


@dataclass(frozen=True)
class Protocol:
    """How to reach one kind of storage."""

    module: str  # the package that implements it
    target: str  # "module:callable" returning the filesystem, given the options
    extra: str | None  # pip extra of ferry that installs it


PROTOCOLS: dict[str, Protocol] = {
    "file": Protocol("fsspec", "fsspec.implementations.local:LocalFileSystem", None),
    "memory": Protocol("fsspec", "fsspec.implementations.memory:MemoryFileSystem", None),
    "gs": Protocol("gcsfs", "ferry.storage.gcs:connect", "gcs"),
    "s3": Protocol("s3fs", "ferry.storage.s3:S3", "s3"),
    "az": Protocol("adlfs", "ferry.storage.azure:AzureBlob", "azure"),
}

_cache: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}


def _options(protocol: str) -> dict[str, Any]:
    """Constructor options from the config (and the emulators' usual variables)."""
    from ferry import config

    options: dict[str, Any] = {}
    if protocol in ("s3", "gs", "az"):
        options["skip_instance_cache"] = True  # kept here instead, by these options
    if protocol == "s3":
        endpoint = config.get("storage.s3.endpoint_url")
        if endpoint:
            options["endpoint_url"] = endpoint
    elif protocol == "gs":
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            options["token"] = "anon"  # the emulator takes no credentials
        endpoint = config.get("storage.gcs.endpoint_url")
        if endpoint:
            options["endpoint_url"] = endpoint
        project = config.get("storage.gcs.project")
        if project:
            options["project"] = project
    elif protocol == "az":
        account = config.get("storage.azure.account_name")
        if account:
            options["account_name"] = account
    elif protocol == "file":
        options["auto_mkdir"] = True
    return options


def forget_filesystems() -> None:
    """Drop the filesystems made so far: each holds the credentials it found when it was
    made (a job's secrets, which the process that follows jobs has just forgotten)."""
    _cache.clear()


def filesystem(protocol: str) -> Any:
    """The fsspec filesystem for ``protocol`` (created once per process and settings)."""
    spec = PROTOCOLS[protocol]
    options = _options(protocol)
    key = (protocol, tuple(sorted((k, str(v)) for k, v in options.items())))
    if key in _cache:
        return _cache[key]
    if protocol == "gs" and (os.environ.get("STORAGE_EMULATOR_HOST") or "endpoint_url" in options):
        # gcsfs probes hierarchical-namespace buckets over gRPC, which emulators lack (jobs
        # that use gcsfs themselves inherit this)
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    if importlib.util.find_spec(spec.module) is None:
        raise BackendNotInstalled(
            f"{protocol}:// storage needs the {spec.module} package, which is not installed",
            install_hint(spec.extra) if spec.extra else "pip install fsspec",
        )
    storage_in_use()  # the libraries' log records go where this process wants them
    module_name, _, name = spec.target.partition(":")
    fs = getattr(importlib.import_module(module_name), name)(**options)
    _cache[key] = fs
    return fs
