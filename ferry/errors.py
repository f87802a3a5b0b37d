"""The FerryError family: every failure a person sees is one sentence with the fix.

The CLI prints ``ferry: <message>`` and exits with ``exit_code``; tracebacks appear only
with ``--debug``. Code raises the most specific class so callers of the Python API can
catch what they care about.
"""

from __future__ import annotations


class FerryError(Exception):
    """A failure with a message a person understands and, where one exists, the fix."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class UsageError(FerryError):
    """The request itself is wrong: a bad flag, field or value (exit code 2)."""

    exit_code = 2


class SpecError(UsageError):
    """A job spec field is invalid; the message names the field and what would be valid."""


class JobNotFound(FerryError):
    """No job matches the id or prefix."""


class AmbiguousJob(UsageError):
    """A job id prefix matches more than one job."""


class StoreError(FerryError):
    """The job store cannot be used as it is (newer schema, unreadable file, ...)."""


class TransitionError(FerryError):
    """A guarded status change found the job in another state than expected."""


class Unsupported(FerryError):
    """The chosen backend does not support something the job asks for."""


class DoesNotFit(FerryError):
    """The job asks for more than the backend could ever give it."""


class BackendNotInstalled(FerryError):
    """A backend's optional dependencies are missing; the hint says what to install."""


def install_hint(extra: str) -> str:
    """The command that installs Ferry's ``extra`` into this Python, as Ferry was installed:
    from a folder (a clone, editable or not) the extra comes from that folder, since
    ``pip install 'ferry[extra]'`` would fetch another Ferry from the package index."""
    folder, editable = _installed_from()
    if folder:
        return f"pip install {'-e ' if editable else ''}'{folder}[{extra}]'"
    return f"pip install 'ferry[{extra}]'"


def _installed_from() -> tuple[str | None, bool]:
    """The folder Ferry was installed from (None: from the package index), and whether the
    install is editable."""
    import json
    from importlib import metadata
    from pathlib import Path

    try:
        said = json.loads(metadata.distribution("ferry").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        said = {}
    url = str(said.get("url", "")) if isinstance(said, dict) else ""
    if url.startswith("file://") and "dir_info" in said:  # (a folder, not a wheel file)
        return url[len("file://") :], bool(said["dir_info"].get("editable", False))
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").is_file():  # imported from a source tree as it is
        return str(here), True
    return None, False
