"""Where current prices come from: one :class:`PriceSource` per provider, found by name in
:data:`SOURCES` and imported on first use, plus the HTTP reading they share (standard
library only, with timeouts, gzip, and one sentence for every way a request can fail).
"""

from __future__ import annotations

import abc
import gzip
import importlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ferry import __version__
from ferry.catalog.offerings import Flagged, Offering
from ferry.errors import FerryError

# Seconds a request may wait to connect or between two reads; the price lists answer small
# requests within a few seconds, so a minute of silence means the server is not coming back.
TIMEOUT = 60.0
# Pages followed at most per query: far above any real list (Azure's largest GPU size has a
# few pages, GCP's Compute Engine catalog about ten), low enough to stop a server that keeps
# answering with the same next page.
MAX_PAGES = 500
# The largest error body read back to explain an HTTP error.
_ERROR_BODY = 64 * 1024
_USER_AGENT = f"ferry/{__version__} (catalog refresh)"

# provider -> "module:Class"; imported on first use so `import ferry.catalog` stays light.
SOURCES: dict[str, str] = {
    "aws": "ferry.catalog.sources.aws:AwsPrices",
    "azure": "ferry.catalog.sources.azure:AzurePrices",
    "gcp": "ferry.catalog.sources.gcp:GcpPrices",
}


class Body(Protocol):
    """A response body being read."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all that is left when negative); b"" at the end."""
        ...


class SourceError(FerryError):
    """A price list could not be read; the message says what happened in one sentence."""


@dataclass(frozen=True)
class Priced:
    """What one source found: the offerings it priced, the prices it refused itself (with
    why), and notes on what it left out or carried over, one sentence each."""

    offerings: list[Offering]
    flagged: list[Flagged] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class PriceSource(abc.ABC):
    """The current prices of one provider's offerings, read from its public price list.

    ``refresh()`` makes one per provider and calls :meth:`prices` once with the offerings
    Ferry already knows for that provider (the shipped rows): they say which machine types to
    price and carry the accelerators, vCPUs and memory that price lists do not all state.
    Implementations write only :meth:`_fetch`: download, parse, return :class:`Priced`. They
    raise :class:`SourceError` for anything a person should read, never write files, and
    call :meth:`_say` for progress. Screening prices and storing them is the caller's job.
    """

    provider: ClassVar[str]
    # endpoint name -> default URL; ``endpoints`` given to the constructor override these
    endpoints: ClassVar[dict[str, str]]
    needs_api_key: ClassVar[bool] = False

    def __init__(
        self,
        endpoints: Mapping[str, str] | None = None,
        *,
        api_key: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        given = dict(endpoints or {})
        self.urls = {name: given.get(name, url).rstrip("/") for name, url in self.endpoints.items()}
        self.api_key = api_key
        self._progress = progress

    def prices(self, known: Sequence[Offering]) -> Priced:
        """Current prices for ``known`` (this provider's rows are used, others ignored).

        Raises:
            SourceError: the price list could not be read, or priced none of the offerings.
        """
        mine = [o for o in known if o.provider == self.provider]
        if not mine:
            raise SourceError(f"Ferry knows no {self.provider} offerings to price")
        try:
            priced = self._fetch(mine)
        except SourceError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # A shape the documentation does not describe: one sentence, no traceback.
            raise SourceError(
                f"the {self.provider} price list does not have the documented shape"
                f" ({type(exc).__name__}: {exc})",
                "the service may have changed its format since this Ferry was released",
            ) from None
        stray = {o.provider for o in priced.offerings} - {self.provider}
        if stray:
            raise SourceError(f"the {self.provider} source returned rows of {sorted(stray)}")
        if not any(o.price is not None or o.spot_price is not None for o in priced.offerings):
            raise SourceError(
                f"the {self.provider} price list priced none of the"
                f" {len({o.instance_type for o in mine})} machine types Ferry knows"
            )
        return priced

    @abc.abstractmethod
    def _fetch(self, known: list[Offering]) -> Priced:
        """Read the price list and price ``known`` (all of this provider)."""

    def _say(self, line: str) -> None:
        if self._progress is not None:
            self._progress(f"{self.provider}: {line}")


def source_class(provider: str) -> type[PriceSource]:
    """The :class:`PriceSource` of ``provider``, imported now.

    Raises:
        KeyError: no source is registered under that name.
    """
    module_name, _, class_name = SOURCES[provider].partition(":")
    cls: type[PriceSource] = getattr(importlib.import_module(module_name), class_name)
    return cls


def listed(names: Sequence[str], most: int = 10) -> str:
    """``"a, b, c"``, or ``"a, b, ... and 12 more"`` past ``most`` names, for notes."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most} more"


def with_query(url: str, *, safe: str = "", **params: str) -> str:
    """``url`` with ``params`` added to its query string, percent-encoded except for the
    characters in ``safe`` (OData's ``$filter`` keeps its ``$`` and quotes)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.urlencode(params, safe=safe, quote_via=urllib.parse.quote)
    joined = f"{parts.query}&{query}" if parts.query and query else parts.query or query
    return urllib.parse.urlunsplit(parts._replace(query=joined))


def host_of(url: str) -> str:
    """The host named in ``url``: what messages say instead of the URL, whose query may
    hold an API key."""
    return urllib.parse.urlsplit(url).hostname or url


def _usable(url: str) -> str:
    """``url`` with characters that servers leave unencoded in next-page links (spaces,
    quotes) percent-encoded, and what is encoded already left alone."""
    return urllib.parse.quote(url, safe="%/:=&?~#+!$,;'@()*[]")


@contextmanager
def open_url(url: str, *, what: str, timeout: float = TIMEOUT) -> Iterator[Body]:
    """The body of ``url`` as a stream (gzip undone when the server used it).

    Args:
        url: what to GET.
        what: the price list in words, for messages ("the Azure Retail Prices API").
        timeout: seconds to wait to connect and between two reads.

    Raises:
        SourceError: the server could not be reached, answered an HTTP error, or was silent
            for ``timeout`` seconds.
    """
    request = urllib.request.Request(
        _usable(url),
        headers={
            "User-Agent": _USER_AGENT,
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
        },
    )
    host = host_of(url)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise _http_error(exc, what, host) from None
    except (urllib.error.URLError, OSError) as exc:
        raise _network_error(exc, what, host, timeout) from None
    with response:
        body: Body = response
        if response.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.GzipFile(fileobj=response, mode="rb")
        try:
            yield body
        except (OSError, EOFError) as exc:
            raise _network_error(exc, what, host, timeout) from None


def get_json(url: str, *, what: str, timeout: float = TIMEOUT) -> Any:
    """The JSON document at ``url``.

    Raises:
        SourceError: as :func:`open_url`, or the answer is not JSON.
    """
    with open_url(url, what=what, timeout=timeout) as body:
        data = body.read()
    try:
        return json.loads(data)
    except ValueError:
        start = data[:40].decode("utf-8", "replace").strip()
        raise SourceError(
            f"{what} at {host_of(url)} answered with something that is not JSON"
            f" (it starts {start!r})",
            "the service may be down or in maintenance; try again later",
        ) from None


def _http_error(exc: urllib.error.HTTPError, what: str, host: str) -> SourceError:
    detail = exc.reason if isinstance(exc.reason, str) else ""
    try:
        body = json.loads(exc.read(_ERROR_BODY) or b"null")
    except (OSError, ValueError):
        body = None
    # Google APIs explain refusals in {"error": {"message": ...}}; Azure in {"Message": ...}.
    if isinstance(body, dict):
        inner = body.get("error")
        message = inner.get("message") if isinstance(inner, dict) else body.get("Message")
        if isinstance(message, str) and message.strip():
            detail = message.strip().splitlines()[0]
    hint = (
        "try again later"
        if exc.code >= 500 or exc.code == 429
        else "check the API key"
        if exc.code in (400, 401, 403)
        else None
    )
    said = f" ({detail})" if detail else ""
    return SourceError(f"{what} at {host} answered HTTP {exc.code}{said}", hint)


def _network_error(exc: BaseException, what: str, host: str, timeout: float) -> SourceError:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return SourceError(
            f"{what} at {host} did not answer within {timeout:g} s", "try again later"
        )
    return SourceError(
        f"could not read {what} at {host}: {reason}",
        "check the network connection and any proxy settings",
    )
