"""Google Cloud Storage as Ferry drives it: gcsfs, with a bounded time to fail.

gcsfs retries a failed request six times with waits of 1, 2, 4, 8 and 16 s, a count fixed
when its class is defined, and it looks for credentials on the metadata server five times
before it goes anonymous, so an unreachable bucket took over a minute to report. Here each
request gets connect and read timeouts and is retried only within
``defaults.STORAGE_RETRY_WINDOW``; a name that does not resolve is not retried at all; and
credentials come from Google's own chain (``google.auth.default``), anonymous when it has
none (public buckets, emulators).
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import gcsfs
import gcsfs.core
from gcsfs.retry import is_retriable

from ferry import defaults


def _worth_retrying(exc: BaseException) -> bool:
    """A failure that may pass by itself: not a missing object, not a name that does not
    exist (a temporary resolver failure, EAI_AGAIN, is retried)."""
    if isinstance(exc, aiohttp.ClientResponseError) and exc.status == 404:
        return False
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        cause = exc.__cause__ or exc.os_error
        return isinstance(cause, socket.gaierror) and cause.errno == socket.EAI_AGAIN
    return isinstance(exc, asyncio.TimeoutError) or bool(is_retriable(exc))


async def within_window(
    call: Callable[[], Awaitable[Any]], window: float, holder: Any = None
) -> Any:
    """Await ``call()``, again after transient failures with growing waits, as long as
    the next try would start within ``window`` seconds of the first. Once a call on
    ``holder`` (the filesystem) has given up, its calls within the next ``window`` seconds
    are tried once: gcsfs makes several requests for one operation (``info`` of a bucket
    asks twice), and the operation must still fail within one window."""
    now = time.monotonic()
    deadline = now + window
    if holder is not None and now - getattr(holder, "_ferry_gave_up", -window) < window:
        deadline = now
    wait = 0.25
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not _worth_retrying(exc):
                raise
            if time.monotonic() + wait > deadline:
                if holder is not None:
                    holder._ferry_gave_up = time.monotonic()
                raise
        else:
            if holder is not None:
                holder._ferry_gave_up = -window
            return result
        await asyncio.sleep(wait * random.uniform(0.5, 1.0))  # jitter: many files fail at once
        wait *= 2


def _one_try(name: str) -> Any:
    """A bounded-retry replacement for gcsfs's method ``name``: its undecorated body (the
    ``__wrapped__`` that gcsfs's ``@retry_request`` keeps) run by :func:`within_window`."""
    single = getattr(gcsfs.core.GCSFileSystem, name).__wrapped__

    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await within_window(
            lambda: single(self, *args, **kwargs), defaults.STORAGE_RETRY_WINDOW, self
        )

    method.__name__ = name
    return method


class _BoundedRetries:
    """Mixed into gcsfs's classes in place of its three retried request methods."""

    _request = _one_try("_request")
    _get_file_request = _one_try("_get_file_request")
    _get_file_concurrent = _one_try("_get_file_concurrent")


class GoogleStorage(_BoundedRetries, gcsfs.GCSFileSystem):  # type: ignore[misc]
    """storage.googleapis.com, through gcsfs's default class (which also handles
    hierarchical-namespace and zonal buckets)."""


class OtherEndpoint(_BoundedRetries, gcsfs.core.GCSFileSystem):  # type: ignore[misc]
    """An emulator or another GCS-compatible endpoint: only the JSON API, no gRPC."""


def _credentials(access: str) -> tuple[Any, str | None]:
    """Google's default credentials and their project; ``("anon", None)`` when there are
    none. A broken GOOGLE_APPLICATION_CREDENTIALS is an error, never anonymity."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    scope = f"https://www.googleapis.com/auth/devstorage.{access}"
    try:
        credentials, project = google.auth.default(scopes=[scope])
    except DefaultCredentialsError:
        if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            raise
        return "anon", None
    return credentials, project


def connect(**options: Any) -> Any:
    """A GCS filesystem for Ferry's ``options`` (endpoint_url, project, token)."""
    other = bool(options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST"))
    cls = OtherEndpoint if other else GoogleStorage
    options.setdefault(
        "requests_timeout",
        aiohttp.ClientTimeout(
            sock_connect=defaults.STORAGE_CONNECT_TIMEOUT, sock_read=defaults.STORAGE_READ_TIMEOUT
        ),
    )
    if cls is GoogleStorage and gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
        # gcsfs's extended class first asks the gRPC storage-control API for the bucket's
        # layout, retrying for a minute; when that fails it uses the JSON API anyway
        options.setdefault("retry_timeout", 2.0)
        options.setdefault("retry_initial", 0.25)
        options.setdefault("retry_maximum", 1.0)
    if options.get("token") is None:
        token, project = _credentials(str(options.get("access", "full_control")))
        options["token"] = token
        if project and not options.get("project"):
            options["project"] = project
    return cls(**options)
