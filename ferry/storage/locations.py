"""URIs and paths as Ferry understands them: ``gs://b/k``, ``s3://b/k``, ``az://c/k``,
``memory://k``, ``file:///p`` and plain paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ferry.units import expand_home

# Spellings people use -> the protocol name in the registry.
ALIASES = {
    "gs": "gs",
    "gcs": "gs",
    "s3": "s3",
    "s3a": "s3",
    "az": "az",
    "abfs": "az",
    "abfss": "az",
    "memory": "memory",
    "file": "file",
}


@dataclass(frozen=True)
class Location:
    """Where some data lives."""

    uri: str  # normalised: "gs://bucket/key", "/abs/path"
    protocol: str  # "gs", "s3", "az", "memory" or "file"
    path: str  # the filesystem's path: "bucket/key", or an absolute local path

    @property
    def is_local(self) -> bool:
        """Whether this is a path on this machine."""
        return self.protocol == "file"

    @property
    def bucket(self) -> str:
        """The bucket (or container) of a remote location; '' for local ones."""
        return "" if self.is_local else self.path.split("/", 1)[0]

    def child(self, relative: str) -> Location:
        """The location ``relative`` below this one."""
        relative = relative.strip("/")
        if self.is_local:
            return parse_uri(str(Path(self.path) / relative))
        joined = f"{self.path.rstrip('/')}/{relative}" if relative else self.path
        return Location(f"{self.protocol}://{joined}", self.protocol, joined)

    def __str__(self) -> str:
        return self.uri


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names a bucket rather than a local path."""
    scheme, sep, _ = uri.partition("://")
    return bool(sep) and ALIASES.get(scheme.lower(), scheme.lower()) != "file"


def parse_uri(uri: str, base: Path | None = None) -> Location:
    """Parse ``uri``; relative local paths are taken from ``base`` (default: cwd).

    Raises:
        ValueError: for an unknown scheme or a URI without a bucket.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        path = expand_home(uri)
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return Location(str(path.absolute()), "file", str(path.absolute()))
    protocol = ALIASES.get(scheme.lower())
    if protocol is None:
        known = ", ".join(sorted({f"{k}://" for k in ALIASES}))
        raise ValueError(f"unknown storage scheme {scheme}:// in {uri!r}; known: {known}")
    if protocol == "file":
        return parse_uri(rest if rest.startswith("/") else "/" + rest)
    rest = rest.strip("/")
    if protocol != "memory" and not rest.split("/", 1)[0]:
        raise ValueError(f"{uri!r} names no bucket; expected {protocol}://BUCKET/PATH")
    return Location(f"{protocol}://{rest}", protocol, rest)
