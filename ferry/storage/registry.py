"""One registry of storage protocols: each maps to an fsspec filesystem class, the extra
that installs it, and the settings it takes from Ferry's config.

Filesystems are created on first use and kept per process. Credentials always come from
the provider's own chain (environment, config files, metadata server); Ferry never stores
them. S3-compatible stores (MinIO, R2) need only ``ferry config set storage.s3.endpoint_url``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from ferry.errors import BackendNotInstalled


@dataclass(frozen=True)
class Protocol:
    """How to reach one kind of storage."""

    module: str  # the package that implements it
    target: str  # "module:Class"
    extra: str | None  # pip extra of ferry that installs it


PROTOCOLS: dict[str, Protocol] = {
    "file": Protocol("fsspec", "fsspec.implementations.local:LocalFileSystem", None),
    "memory": Protocol("fsspec", "fsspec.implementations.memory:MemoryFileSystem", None),
    "gs": Protocol("gcsfs", "gcsfs:GCSFileSystem", "gcs"),
    "s3": Protocol("s3fs", "s3fs:S3FileSystem", "s3"),
    "az": Protocol("adlfs", "adlfs:AzureBlobFileSystem", "azure"),
}

_cache: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}


def _options(protocol: str) -> dict[str, Any]:
    """Constructor options from the config (and the emulators' usual variables)."""
    from ferry import config

    options: dict[str, Any] = {}
    if protocol == "s3":
        endpoint = config.get("storage.s3.endpoint_url")
        if endpoint:
            options["endpoint_url"] = endpoint
    elif protocol == "gs":
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            options["token"] = "anon"  # the emulator takes no credentials
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


def filesystem(protocol: str) -> Any:
    """The fsspec filesystem for ``protocol`` (created once per process and settings)."""
    spec = PROTOCOLS[protocol]
    options = _options(protocol)
    key = (protocol, tuple(sorted((k, str(v)) for k, v in options.items())))
    if key in _cache:
        return _cache[key]
    if protocol == "gs" and os.environ.get("STORAGE_EMULATOR_HOST"):
        # gcsfs probes hierarchical-namespace buckets over gRPC, which emulators lack
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    module_name, _, class_name = spec.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise BackendNotInstalled(
            f"{protocol}:// storage needs the {spec.module} package, which is not installed",
            f"pip install 'ferry[{spec.extra}]'" if spec.extra else "pip install fsspec",
        ) from None
    fs = getattr(module, class_name)(**options)
    _cache[key] = fs
    return fs
