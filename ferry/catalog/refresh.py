"""``ferry catalog refresh``: current prices from the providers' public price lists, screened
and stored in ``$FERRY_HOME/catalog`` (``<provider>.csv`` and ``meta.json``), where
:func:`ferry.catalog.load_catalog` uses them instead of the shipped rows.

A provider that fails keeps the prices it had (shipped, or an earlier refresh); the result
says why in one sentence, and the other providers still refresh.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from ferry.backends.registry import PROVIDERS
from ferry.catalog.offerings import (
    SHIPPED_DATE,
    Flagged,
    Offering,
    read_csv,
    read_meta,
    refreshed_dir,
    replaced,
    screen,
    write_csv,
)
from ferry.errors import UsageError

SHIPPED = Path(__file__).parent / "data" / "offerings.csv"
# Refreshed when no providers are named; GCP only with an API key (it says so otherwise).
DEFAULT_PROVIDERS = ("azure", "aws", "gcp")
_NO_PRICE_LIST = "Ferry reads no public price list for {provider}"
_GCP_KEY = (
    "the GCP Cloud Billing Catalog API needs an API key (set FERRY_GCP_API_KEY, or"
    " gcp_api_key= from Python, to a key of a project with the Cloud Billing API enabled:"
    " https://console.cloud.google.com/apis/credentials)"
)


class ProviderStatus(str, Enum):
    """What a refresh did for one provider."""

    REFRESHED = "refreshed"  # new prices stored; in use from now on
    FAILED = "failed"  # nothing stored; the provider's previous prices stay in use
    SKIPPED = "skipped"  # not tried (no API key, or no public price list to read)


@dataclass(frozen=True)
class ProviderResult:
    """The refresh of one provider."""

    provider: str
    status: ProviderStatus
    prices_of: datetime.date  # the date of this provider's prices in use after the refresh
    rows: int = 0  # offerings stored
    flagged: tuple[Flagged, ...] = ()  # prices refused, with why (not stored)
    notes: tuple[str, ...] = ()  # what the price list left out or what was carried over
    error: str | None = None  # FAILED: why, one sentence with the fix where there is one
    skipped: str | None = None  # SKIPPED: why
    file: str | None = None  # REFRESHED: the CSV written
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.status is ProviderStatus.REFRESHED:
            n = len(self.flagged)
            flagged = f", {n} price{'s' * (n != 1)} flagged and not used" if n else ""
            return f"{self.rows} offerings refreshed{flagged} ({self.seconds:.0f} s)"
        kept = f"prices of {self.prices_of.isoformat()} stay in use"
        if self.status is ProviderStatus.FAILED:
            return f"not refreshed: {self.error}; the {kept}"
        return f"skipped: {self.skipped}; the {kept}"


@dataclass(frozen=True)
class RefreshResult:
    """What ``refresh()`` did, per provider in the order asked."""

    date: datetime.date
    providers: dict[str, ProviderResult] = field(default_factory=dict)

    def __getitem__(self, provider: str) -> ProviderResult:
        return self.providers[provider]

    @property
    def failed(self) -> list[str]:
        """The providers whose refresh failed."""
        return [p for p, r in self.providers.items() if r.status is ProviderStatus.FAILED]

    def __str__(self) -> str:
        return "\n".join(f"{p}: {r}" for p, r in self.providers.items())


def refresh(
    providers: Sequence[str] | None = None,
    *,
    gcp_api_key: str | None = None,
    endpoints: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    today: datetime.date | None = None,
) -> RefreshResult:
    """Fetch current prices and store them where :func:`load_catalog` uses them.

    The machine types priced are those of the shipped catalog for each provider (their
    accelerators, vCPUs and memory come from it); the prices and, for Azure, the regions come
    from the provider's price list. Prices :func:`~ferry.catalog.offerings.screen` does not
    trust are flagged and not stored.

    Args:
        providers: names from ``aws``, ``azure``, ``gcp`` (``lambda`` is reported as
            skipped: it has no public price list); default azure, aws, and gcp (reported as
            skipped without ``gcp_api_key``).
        gcp_api_key: a Google Cloud API key; the Cloud Billing Catalog API needs one.
        endpoints: URLs to use instead of the public ones, by name: ``azure`` (the Retail
            Prices API), ``aws`` (the price list host), ``aws-spot`` (the spot price feed),
            ``gcp`` (the Cloud Billing API host). Tests point them at a local server.
        progress: called with one line at a time on what is being fetched.
        today: the date the prices are stored under (default: today).

    Raises:
        UsageError: a provider name Ferry does not know.
    """
    names = list(dict.fromkeys(providers or DEFAULT_PROVIDERS))
    unknown = [p for p in names if p not in PROVIDERS]
    if unknown:
        raise UsageError(
            f"unknown provider {unknown[0]!r}", f"choose from {', '.join(sorted(PROVIDERS))}"
        )
    day = today or datetime.date.today()
    known = read_csv(SHIPPED)
    folder = refreshed_dir()
    results = {
        name: _refresh_one(
            name,
            known,
            folder,
            day,
            api_key=gcp_api_key if name == "gcp" else None,
            endpoints=endpoints,
            progress=progress,
        )
        for name in names
    }
    return RefreshResult(day, results)


def _refresh_one(
    provider: str,
    known: list[Offering],
    folder: Path,
    day: datetime.date,
    *,
    api_key: str | None,
    endpoints: Mapping[str, str] | None,
    progress: Callable[[str], None] | None,
) -> ProviderResult:
    from ferry.catalog.sources import SOURCES, SourceError, source_class

    started = time.monotonic()
    previous = _prices_date(folder, provider)
    if provider not in SOURCES:
        reason = _NO_PRICE_LIST.format(provider=provider)
        return ProviderResult(provider, ProviderStatus.SKIPPED, previous, skipped=reason)
    cls = source_class(provider)
    if cls.needs_api_key and not api_key:
        return ProviderResult(provider, ProviderStatus.SKIPPED, previous, skipped=_GCP_KEY)

    def failed(error: str) -> ProviderResult:  # the summary says why; not the progress too
        return ProviderResult(
            provider,
            ProviderStatus.FAILED,
            previous,
            error=error,
            seconds=time.monotonic() - started,
        )

    source = cls(endpoints, api_key=api_key, progress=progress)
    try:
        priced = source.prices(known)
    except SourceError as exc:
        return failed(str(exc))
    except Exception as exc:  # one provider's surprise must not stop the others
        return failed(f"the {provider} refresh failed unexpectedly ({type(exc).__name__}: {exc})")
    kept, refused = screen(priced.offerings)
    if not kept:
        return failed(f"every {provider} price was flagged as untrustworthy")
    kept.sort(key=lambda o: (o.region, o.zone, o.instance_type, o.accelerator, o.count))
    path = folder / f"{provider}.csv"
    flagged = (*priced.flagged, *refused)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_csv(kept, path)
        _record(folder, provider, path.name, day, len(kept), len(flagged))
    except OSError as exc:
        return failed(f"could not store the prices in {folder}: {exc.strerror or exc}")
    return ProviderResult(
        provider,
        ProviderStatus.REFRESHED,
        day,
        rows=len(kept),
        flagged=flagged,
        notes=tuple(priced.notes),
        file=str(path),
        seconds=time.monotonic() - started,
    )


def _prices_date(folder: Path, provider: str) -> datetime.date:
    """The date of the provider's prices in use now: its last refresh, else the shipped."""
    info = read_meta(folder / "meta.json")["providers"].get(provider)
    try:
        return datetime.date.fromisoformat(str(info["date"]))
    except (TypeError, KeyError, ValueError):
        return SHIPPED_DATE


def _record(
    folder: Path, provider: str, file: str, day: datetime.date, rows: int, flagged: int
) -> None:
    """Enter one provider's refresh in ``meta.json``, keeping the others' entries; the file
    is replaced atomically, under a lock so that two refreshes do not lose each other's."""
    path = folder / "meta.json"
    with _locked(folder / ".meta.lock"):
        meta = read_meta(path)
        meta["providers"][provider] = {
            "file": file,
            "date": day.isoformat(),
            "rows": rows,
            "flagged": flagged,
        }
        with replaced(path) as out:
            json.dump(meta, out, indent=1, sort_keys=True)
            out.write("\n")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
