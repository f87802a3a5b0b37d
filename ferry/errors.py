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
