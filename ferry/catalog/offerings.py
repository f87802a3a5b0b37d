"""The offerings Ferry can choose from: provider, region, instance type, accelerator, and the
on-demand and spot prices in USD per hour.

A snapshot ships inside the package (``data/offerings.csv``; its sources, date and rules are in
``data/SOURCES.md``). ``ferry catalog refresh`` writes current prices into
``$FERRY_HOME/catalog/``; a refreshed provider's rows replace the shipped ones for it.
Prices that cannot be right are flagged rather than used: a spot price above the on-demand
one, a price of zero or less, and placeholder prices (one figure repeated across different
sizes, as sources do for offerings they cannot price).
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

SHIPPED_DATE = datetime.date(2026, 12, 2)  # data/SOURCES.md
COLUMNS = (
    "provider",
    "region",
    "zone",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "accelerator_memory_gib",
    "vcpus",
    "memory_gib",
    "price_hour",
    "spot_price_hour",
)
_DATA = Path(__file__).parent / "data"
_PLACEHOLDER_FACTOR = 4.0  # a price per accelerator this many times its kind's median
_MEDIAN_OF = 3  # rows needed for a median to judge by
_DOUBT_FACTOR = 0.5  # a price under this share of its type's median elsewhere is doubtful
_PLACEHOLDER_SIZES = 3  # ... and the same figure quoted for this many different sizes


@dataclass(frozen=True, slots=True)
class Offering:
    """One machine type in one region (or zone), with its accelerators and prices."""

    provider: str
    region: str
    zone: str  # "" when every zone of the region has this price
    instance_type: str
    accelerator: str  # canonical name ("A100", "tpu-v5e"); "" for CPU-only machines
    count: int  # accelerators per machine; for TPUs the slice size (tpu-v5e-8: 8)
    accelerator_memory_gib: float | None
    vcpus: float | None
    memory_gib: float | None
    price: float | None  # on-demand USD per hour
    spot_price: float | None  # spot/preemptible USD per hour; None when not offered

    def price_for(self, spot: bool) -> float | None:
        """USD per hour on spot or on-demand capacity; None when not offered that way."""
        return self.spot_price if spot else self.price

    @property
    def location(self) -> str:
        """``us-central1`` or ``us-central1-a``-style text for tables."""
        return f"{self.region}/{self.zone}" if self.zone else self.region

    @property
    def accelerators(self) -> str:
        """``A100:8`` or ``tpu-v5e-8`` (or ``4 vCPU`` for a machine without them)."""
        if not self.accelerator:
            return f"{self.vcpus:g} vCPU" if self.vcpus else "-"
        if self.accelerator.startswith("tpu-"):
            return f"{self.accelerator}-{self.count}"
        return f"{self.accelerator}:{self.count}"


@dataclass(frozen=True)
class Flagged:
    """A price the catalog does not use, and why."""

    offering: Offering
    reason: str


@dataclass
class Catalog:
    """The offerings in use, their date and where they came from."""

    offerings: list[Offering]
    dates: dict[str, datetime.date]  # provider -> date its prices were taken
    sources: dict[str, str]  # provider -> "shipped" or the refreshed file
    flagged: list[Flagged] = field(default_factory=list)  # not used
    doubtful: list[Flagged] = field(default_factory=list)  # used, but worth a second look

    def doubt(self, offering: Offering) -> str | None:
        """Why ``offering``'s price is doubtful, if it is."""
        for item in self.doubtful:
            if item.offering == offering:
                return item.reason
        return None

    @property
    def oldest(self) -> datetime.date:
        """The date of the oldest prices in use."""
        return min(self.dates.values())

    def age_days(self, today: datetime.date | None = None) -> int:
        """Days since the oldest prices were taken."""
        return ((today or datetime.date.today()) - self.oldest).days

    def describe_age(self, today: datetime.date | None = None) -> str:
        """``'prices of 2026-12-02 (3 days old, shipped with ferry)'`` for headers."""
        days = self.age_days(today)
        age = "today" if days <= 0 else f"{days} day{'s' if days != 1 else ''} old"
        origin = (
            "shipped with ferry"
            if all(s == "shipped" for s in self.sources.values())
            else "refreshed: " + ", ".join(p for p, s in self.sources.items() if s != "shipped")
        )
        return f"prices of {self.oldest.isoformat()} ({age}, {origin})"


def refreshed_dir() -> Path:
    """Where ``ferry catalog refresh`` keeps the current prices."""
    from ferry.config import ferry_home

    return ferry_home() / "catalog"


def _number(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _accelerator(name: str, count: int) -> tuple[str, int]:
    """The catalog's accelerator column in Ferry's vocabulary: TPU slices such as
    ``tpu-v5litepod-8`` (count 1) become ``tpu-v5e`` with 8 chips."""
    from ferry.accelerators import canonical_name, parse_accelerator

    if not name:
        return "", 0
    if name.lower().startswith("tpu-"):
        slice_ = parse_accelerator(name)
        return slice_.name, slice_.count
    return canonical_name(name), count


def parse_rows(rows: Iterable[dict[str, str]]) -> Iterator[Offering]:
    """Offerings from CSV rows with :data:`COLUMNS`; a row that does not parse raises
    ValueError naming it."""
    names: dict[tuple[str, int], tuple[str, int]] = {}
    for number, row in enumerate(rows, start=2):
        try:
            raw = (row["accelerator"].strip(), int(row["accelerator_count"] or 0))
            if raw not in names:
                names[raw] = _accelerator(*raw)
            accelerator, count = names[raw]
            yield Offering(
                provider=row["provider"].strip().lower(),
                region=row["region"].strip(),
                zone=row["zone"].strip(),
                instance_type=row["instance_type"].strip(),
                accelerator=accelerator,
                count=count,
                accelerator_memory_gib=_number(row["accelerator_memory_gib"]),
                vcpus=_number(row["vcpus"]),
                memory_gib=_number(row["memory_gib"]),
                price=_number(row["price_hour"]),
                spot_price=_number(row["spot_price_hour"]),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"row {number}: {exc}") from None


def _unit_medians(
    rows: list[Offering], suspect: set[tuple[str, float]]
) -> dict[tuple[str, str, bool], float]:
    """The median price per accelerator of each (provider, accelerator, spot), leaving out
    the ``suspect`` (provider, price) figures."""
    import statistics

    units: dict[tuple[str, str, bool], list[float]] = {}
    for o in rows:
        for spot, price in ((False, o.price), (True, o.spot_price)):
            if price is not None and price > 0 and o.count and (o.provider, price) not in suspect:
                units.setdefault((o.provider, o.accelerator, spot), []).append(price / o.count)
    return {k: statistics.median(v) for k, v in units.items() if len(v) >= _MEDIAN_OF}


def screen(offerings: Iterable[Offering]) -> tuple[list[Offering], list[Flagged]]:
    """Keep the prices that can be trusted; flag the others with their reason. Not used: a
    price of zero or less; a placeholder (a figure quoted for several sizes, and per
    accelerator over :data:`_PLACEHOLDER_FACTOR` times the median of its kind at that
    provider, as sources write for offerings they cannot price); a spot price above
    on-demand. A row left with no price is dropped."""
    rows = list(offerings)
    sizes: dict[tuple[str, float], set[tuple[str, int]]] = {}  # price -> sizes quoting it
    for o in rows:
        for price in (o.price, o.spot_price):
            if price is not None:
                sizes.setdefault((o.provider, price), set()).add((o.accelerator, o.count))
    repeated = {k for k, v in sizes.items() if len(v) >= _PLACEHOLDER_SIZES}
    medians = _unit_medians(rows, repeated)
    kept: list[Offering] = []
    flagged: list[Flagged] = []

    def bad(o: Offering, price: float | None, spot: bool) -> str | None:
        kind = "spot" if spot else "on-demand"
        if price is None:
            return None
        if price <= 0:
            return f"{kind} price {price:g} is not a price"
        if (o.provider, price) not in repeated or not o.count:
            return None
        median = medians.get((o.provider, o.accelerator, spot))
        if median is None:  # nothing trustworthy to compare with
            return f"placeholder {kind} price {price:g} (quoted for several sizes)"
        if price / o.count > _PLACEHOLDER_FACTOR * median:
            return (
                f"placeholder {kind} price {price:g} ({price / o.count:.2f}/h per accelerator"
                f" against a median of {median:.2f}/h)"
            )
        return None

    for o in rows:
        if why := bad(o, o.price, False):
            flagged.append(Flagged(o, why))
            o = replace(o, price=None)
        if why := bad(o, o.spot_price, True):
            flagged.append(Flagged(o, why))
            o = replace(o, spot_price=None)
        if o.spot_price is not None and o.price is not None and o.spot_price > o.price:
            flagged.append(Flagged(o, f"spot price {o.spot_price:g} above on-demand {o.price:g}"))
            o = replace(o, spot_price=None)
        if o.price is not None or o.spot_price is not None:
            kept.append(o)
    return kept, flagged


def doubts(offerings: Iterable[Offering]) -> list[Flagged]:
    """Prices used but doubtful: an on-demand price under half the median of the same
    machine type in the provider's other regions (a source's SKU mix-up, perhaps; the
    snapshot's SOURCES.md lists such cases)."""
    import statistics

    by_type: dict[tuple[str, str, str, int], list[Offering]] = {}
    for o in offerings:  # (an N1 machine alone and with GPUs attached are other machines)
        if o.price is not None:
            key = (o.provider, o.instance_type, o.accelerator, o.count)
            by_type.setdefault(key, []).append(o)
    out = []
    for rows in by_type.values():
        if len(rows) < _MEDIAN_OF:
            continue
        median = statistics.median(o.price or 0.0 for o in rows)
        for o in rows:
            if (o.price or 0.0) < _DOUBT_FACTOR * median:
                out.append(
                    Flagged(
                        o,
                        f"doubtful on-demand price {o.price:g}: under half the median "
                        f"{median:g} of {o.instance_type} in other regions",
                    )
                )
    return out


def read_csv(path: Path) -> list[Offering]:
    """The offerings of one CSV file with :data:`COLUMNS`."""
    with open(path, newline="") as file:
        return list(parse_rows(csv.DictReader(file)))


@contextmanager
def replaced(path: Path, newline: str | None = None) -> Iterator[TextIO]:
    """A text file that takes the place of ``path`` whole once the block ends (a temporary
    file, fsynced, then renamed), or not at all if the block fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", newline=newline) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_csv(offerings: Iterable[Offering], path: Path) -> None:
    """Write offerings as a CSV with :data:`COLUMNS`, atomically."""
    with replaced(path, newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS)
        for o in offerings:
            writer.writerow(
                [
                    o.provider,
                    o.region,
                    o.zone,
                    o.instance_type,
                    o.accelerators if o.accelerator.startswith("tpu-") else o.accelerator,
                    1 if o.accelerator.startswith("tpu-") else o.count,
                    *(
                        "" if v is None else f"{v:g}"
                        for v in (o.accelerator_memory_gib, o.vcpus, o.memory_gib)
                    ),
                    *("" if v is None else repr(v) for v in (o.price, o.spot_price)),
                ]
            )


def read_meta(path: Path) -> dict[str, Any]:
    """``meta.json`` (what ``ferry catalog refresh`` stored) as a dict with a ``providers``
    dict; empty when missing or damaged (the shipped prices stay in use)."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"providers": {}}
    if not isinstance(meta, dict) or not isinstance(meta.get("providers"), dict):
        return {"providers": {}}
    return meta


_cache: dict[tuple[str, float], Catalog] = {}


def load_catalog() -> Catalog:
    """The catalog in use: the shipped snapshot, with each refreshed provider's rows in
    place of its shipped ones. Cached until a refresh changes the files."""
    folder = refreshed_dir()
    meta_path = folder / "meta.json"
    try:
        stamp = meta_path.stat().st_mtime
    except OSError:
        stamp = 0.0
    key = (str(folder), stamp)
    if key in _cache:
        return _cache[key]
    shipped = read_csv(_DATA / "offerings.csv")
    dates = {p: SHIPPED_DATE for p in {o.provider for o in shipped}}
    sources = dict.fromkeys(dates, "shipped")
    rows = shipped
    for provider, info in sorted(read_meta(meta_path)["providers"].items() if stamp else ()):
        try:
            path = folder / str(info["file"])
            fresh = read_csv(path)
            date = datetime.date.fromisoformat(str(info["date"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged refresh: the shipped prices stay in use
        rows = [o for o in rows if o.provider != provider] + fresh
        dates[provider] = date
        sources[provider] = str(path)
    rows += read_csv(_DATA / "cpu_offerings.csv")  # (machines without accelerators)
    kept, flagged = screen(rows)
    catalog = Catalog(kept, dates, sources, flagged, doubts(kept))
    _cache[key] = catalog
    return catalog


def select(
    offerings: Iterable[Offering],
    *,
    accelerator: str | None = None,
    providers: Iterable[str] = (),
    regions: Iterable[str] = (),
    spot: bool = False,
    min_accelerator_memory_gib: float | None = None,
) -> list[Offering]:
    """The offerings that match, cheapest first (by spot price with ``spot``).

    ``accelerator`` is a name or a request (``A100``, ``A100:8``, ``tpu-v5e-8``): with a
    count, machines with at least that many; a TPU slice matches its size exactly. A machine
    type the offerings list (``p4d.24xlarge``, ``ml.p4d.24xlarge``) matches itself.
    """
    from ferry.accelerators import GPUS, parse_accelerator

    offerings = list(offerings)
    machine = (accelerator or "").strip().lower().removeprefix("ml.")
    types = {o.instance_type.lower() for o in offerings}
    if machine and machine not in types and f"standard_{machine}" in types:
        machine = f"standard_{machine}"  # Azure sizes are also written without it
    if machine not in types:
        machine = ""  # an accelerator, not a machine type
    wanted = parse_accelerator(accelerator) if accelerator and not machine else None
    exact_count = wanted is not None and (":" in (accelerator or "") or wanted.is_tpu)
    providers, regions = set(providers), set(regions)
    out = []
    for o in offerings:
        if machine and o.instance_type.lower() != machine:
            continue
        if wanted is not None:
            if o.accelerator != wanted.name:
                continue
            if exact_count and (
                o.count != wanted.count if wanted.is_tpu else o.count < wanted.count
            ):
                continue
        if providers and o.provider not in providers:
            continue
        if regions and o.region not in regions:
            continue
        if o.price_for(spot) is None:
            continue
        if min_accelerator_memory_gib:
            memory = o.accelerator_memory_gib or GPUS.get(o.accelerator)
            if memory is None or memory + 0.5 < min_accelerator_memory_gib:
                continue
        out.append(o)
    out.sort(key=lambda o: (o.price_for(spot) or 0.0, o.provider, o.region, o.instance_type))
    return out
