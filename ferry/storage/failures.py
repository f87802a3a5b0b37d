"""What went wrong with a bucket, in one sentence with the fix.

gcsfs, s3fs and adlfs fail in their own ways (aiohttp, botocore and azure-core errors,
chained several deep). :func:`classify` reads such a failure into a :class:`Failure` (what
kind, which host), and :func:`bucket_errors` turns whatever a block of storage calls raised
into a :class:`StorageError` that names the URI, the cause and the fix. The libraries are
never imported here: exceptions are recognised by their class names.
"""

from __future__ import annotations

import contextlib
import enum
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from ferry.errors import FerryError, SpecError
from ferry.storage.locations import Location


class StorageError(FerryError):
    """A bucket could not be used: unreachable, no credentials, no permission, no bucket."""


class Kind(str, enum.Enum):
    """Why a storage call failed."""

    DNS = "dns"  # the endpoint's name does not resolve
    REFUSED = "refused"  # nothing listens at the endpoint
    TIMEOUT = "timeout"  # the endpoint did not answer in time
    CONNECTION = "connection"  # another network failure (TLS, reset, proxy)
    CREDENTIALS = "credentials"  # none found, or the store refused them
    PERMISSION = "permission"  # the credentials may not do this
    NO_BUCKET = "no_bucket"  # the bucket (container) does not exist
    NOT_FOUND = "not_found"  # the object or prefix does not exist
    NOT_CONFIGURED = "not_configured"  # Ferry does not know where the store is
    OTHER = "other"


@dataclass(frozen=True)
class Failure:
    """One storage failure, read from the exception a library raised."""

    kind: Kind
    detail: str  # the library's own words, one line
    host: str = ""  # host[:port] that was asked, when known


# Error codes the stores send back, by what they mean.
_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AuthFailure",
    "AuthenticationFailed",
    "InvalidAuthenticationInfo",
    "NoAuthenticationInformation",
}
_PERMISSION_CODES = {
    "AccessDenied",
    "AllAccessDisabled",
    "AuthorizationFailure",
    "AuthorizationPermissionMismatch",
    "AuthorizationResourceTypeMismatch",
    "InsufficientAccountPermissions",
}
_BUCKET_CODES = {"NoSuchBucket", "ContainerNotFound", "ContainerBeingDeleted"}
_CREDENTIAL_CLASSES = {
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
    "DefaultCredentialsError",
    "RefreshError",
    "ClientAuthenticationError",
    "CredentialUnavailableError",
}
_TIMEOUT_CLASSES = {
    "TimeoutError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ServerTimeoutError",
    "ServiceRequestTimeoutError",
    "ServiceResponseTimeoutError",
    "FSTimeoutError",
}
_CONNECTION_CLASSES = {
    "ClientConnectionError",  # aiohttp
    "EndpointConnectionError",  # botocore
    "ServiceRequestError",  # azure-core
    "ServiceResponseError",
    "ConnectionError",
    "SSLError",
}


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _code(exc: BaseException) -> str:
    """The store's error code: botocore's ``response``, azure-core's ``error_code``."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "")
    return str(getattr(exc, "error_code", None) or "")


def _status(exc: BaseException) -> int:
    for attribute in ("status_code", "status", "code"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int):
            return value
    return 0


def _host(chain: list[BaseException]) -> str:
    for exc in chain:
        host, port = getattr(exc, "host", None), getattr(exc, "port", None)
        if isinstance(host, str) and host:
            return f"{host}:{port}" if port else host
    for exc in chain:  # botocore keeps the URL it tried
        url = (getattr(exc, "kwargs", None) or {}).get("endpoint_url")
        if url:
            return str(url).split("://", 1)[-1].split("/", 1)[0]
    return ""


def classify(exc: BaseException) -> Failure:
    """What kind of failure ``exc`` (raised by a storage library) is."""
    chain = _chain(exc)
    host = _host(chain)
    if any(
        isinstance(item, socket.gaierror) or "ClientConnectorDNSError" in _names(item)
        for item in chain
    ):
        said = [item.strerror for item in chain if isinstance(item, socket.gaierror)]
        return Failure(Kind.DNS, str(said[0]) if said else _line(exc), host)
    if any(isinstance(item, ConnectionRefusedError) for item in chain):
        return Failure(Kind.REFUSED, _line(exc), host)
    for item in chain:
        names = _names(item)
        code, status = _code(item), _status(item)
        text = _line(item)
        if names & _CREDENTIAL_CLASSES or code in _CREDENTIAL_CODES:
            return Failure(Kind.CREDENTIALS, text, host)
        if (
            status == 401
            or "Anonymous caller" in text  # GCS, when no credentials were found
            or "failed to authenticate" in text  # Azure (Azurite), a wrong account key
        ):
            return Failure(Kind.CREDENTIALS, text, host)
        if code in _BUCKET_CODES or "bucket does not exist" in text or "No such container" in text:
            return Failure(Kind.NO_BUCKET, text, host)
        if (
            isinstance(item, PermissionError)
            or code in _PERMISSION_CODES
            or status == 403
            or text.startswith("Forbidden")  # gcsfs says 403 so
        ):
            return Failure(Kind.PERMISSION, text, host)
        if isinstance(item, FileNotFoundError) or "ResourceNotFoundError" in names:
            return Failure(Kind.NOT_FOUND, text, host)
        if "connection_string or account_name" in text:  # adlfs, with no account given
            return Failure(Kind.NOT_CONFIGURED, text, host)
    for item in chain:
        if _names(item) & _TIMEOUT_CLASSES:
            return Failure(Kind.TIMEOUT, _line(item), host)
    for item in chain:
        if _names(item) & _CONNECTION_CLASSES:
            return Failure(Kind.CONNECTION, _line(item), host)
    return Failure(Kind.OTHER, _line(exc), host)


# Where each store's endpoint is set, and where its credentials come from.
_ENDPOINT_HINT = {
    "s3": "ferry config set storage.s3.endpoint_url URL",
    "gs": "ferry config set storage.gcs.endpoint_url URL, or STORAGE_EMULATOR_HOST",
    "az": "the BlobEndpoint in AZURE_STORAGE_CONNECTION_STRING",
}
_CREDENTIALS_HINT = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE; "
    "check with: aws sts get-caller-identity",
    "gs": "run: gcloud auth application-default login, "
    "or point GOOGLE_APPLICATION_CREDENTIALS at a service account key",
    "az": "check the account key in AZURE_STORAGE_CONNECTION_STRING, "
    "or AZURE_STORAGE_SAS_TOKEN, or run: az login",
}


# What each kind of failure says (message, fix), filled in by :func:`describe`.
_SENTENCES: dict[Kind, tuple[str, str]] = {
    Kind.DNS: (
        "cannot reach {uri}: DNS lookup of {name} failed ({detail})",
        "check the network; for an emulator or another endpoint: {endpoint}",
    ),
    Kind.REFUSED: (
        "cannot reach {uri}: the connection was refused{where}",
        "is the storage server running? the endpoint is set by {endpoint}",
    ),
    Kind.TIMEOUT: (
        "cannot reach {uri}: no answer{where} in time ({detail})",
        "check the network and the endpoint ({endpoint}), then try again",
    ),
    Kind.CONNECTION: (
        "cannot reach {uri}: {detail}",
        "check the network and the endpoint ({endpoint})",
    ),
    Kind.CREDENTIALS: (
        "the credentials for {uri} are missing or were refused ({detail})",
        "{credentials}",
    ),
    Kind.PERMISSION: (
        "no permission to {doing} {uri} ({detail})",
        "grant these credentials access to the bucket, or use others",
    ),
    Kind.NO_BUCKET: (
        "the bucket {protocol}://{bucket} does not exist",
        "create it first, or check its name",
    ),
    Kind.NOT_FOUND: ("{uri} does not exist", "check the bucket and the path"),
    Kind.NOT_CONFIGURED: (
        "cannot reach {uri}: no Azure storage account is set",
        "set AZURE_STORAGE_CONNECTION_STRING, or run: "
        "ferry config set storage.azure.account_name NAME",
    ),
    Kind.OTHER: (
        "could not {doing} {uri}: {detail}",
        "rerun with --debug to see the storage library's log",
    ),
}


def describe(failure: Failure, loc: Location, doing: str) -> StorageError:
    """``failure`` as one sentence about ``loc`` with the fix; ``doing`` is a verb phrase
    (``"read"``, ``"write to"``)."""
    message, hint = _SENTENCES[failure.kind]
    fields = {
        "uri": loc.uri,
        "protocol": loc.protocol,
        "bucket": loc.bucket,
        "doing": doing,
        "detail": failure.detail,
        "where": f" at {failure.host}" if failure.host else "",
        "name": failure.host.rsplit(":", 1)[0] if failure.host else "the endpoint",
        "endpoint": _ENDPOINT_HINT.get(loc.protocol, "the endpoint"),
        "credentials": _CREDENTIALS_HINT.get(loc.protocol, "check the credentials"),
    }
    return StorageError(message.format(**fields), hint.format(**fields))


@contextlib.contextmanager
def bucket_errors(loc: Location, write: bool = False, context: str = "") -> Iterator[None]:
    """Run storage calls on ``loc`` (creating the filesystem included); whatever they raise
    leaves as one :class:`StorageError` (``context`` prefixes its message: ``"input
    'train'"``). FerryErrors pass through; so does a missing object when reading
    (FileNotFoundError, for the caller to word), while writing it means a missing bucket.
    Errors about local files (an OSError naming an absolute path) pass through too."""
    try:
        yield
    except FerryError:
        raise
    except OSError as exc:
        if isinstance(exc.filename, str) and os.path.isabs(exc.filename):
            raise  # a local file (one being sent, say): not the bucket's

        if not isinstance(exc, FileNotFoundError):
            raise _worded(classify(exc), loc, write, context) from exc
        if not write:
            raise
        raise _worded(Failure(Kind.NO_BUCKET, _line(exc)), loc, write, context) from exc
    except Exception as exc:
        raise _worded(classify(exc), loc, write, context) from exc


def _worded(failure: Failure, loc: Location, write: bool, context: str) -> StorageError:
    error = describe(failure, loc, "write to" if write else "read")
    if context:
        error = StorageError(f"{context}: {error.message}", error.hint)
    return error


def check_bucket(loc: Location, context: str, write: bool = False) -> None:
    """Ask the store about ``loc``'s bucket. Raises SpecError when it does not exist and
    StorageError when it cannot be asked (unreachable, no credentials); a bucket these
    credentials may not look at passes (they may still read or write objects in it)."""
    from ferry.storage.registry import filesystem

    try:
        filesystem(loc.protocol).info(loc.bucket)
    except FerryError:
        raise
    except Exception as exc:
        failure = classify(exc)
        if failure.kind in (Kind.NO_BUCKET, Kind.NOT_FOUND):
            raise SpecError(
                f"{context}: the bucket {loc.protocol}://{loc.bucket} does not exist",
                "create it first, or check its name",
            ) from None
        if failure.kind is not Kind.PERMISSION:
            raise _worded(failure, loc, write, context) from exc


def missing(loc: Location, context: str) -> SpecError:
    """The error for a FileNotFoundError reading ``loc``: its bucket, or the path itself."""
    check_bucket(loc, context)
    return SpecError(
        f"{context}: {loc.uri} does not exist",
        "check the bucket and the path, and that your credentials can read it",
    )
