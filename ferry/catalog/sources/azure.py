"""Azure prices from the Retail Prices API (no key): for each VM size Ferry knows, the Linux
pay-as-you-go and Spot prices in every region that sells it.

Format: https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices
(``Items`` of meters, ``NextPageLink`` to the next page of at most 100).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import Any, ClassVar

from ferry.catalog.offerings import Flagged, Offering
from ferry.catalog.sources import (
    MAX_PAGES,
    Priced,
    PriceSource,
    SourceError,
    get_json,
    listed,
    with_query,
)

_WHAT = "the Azure Retail Prices API"
# Queries in flight at once: one per VM size, each a few pages; eight keeps a refresh to
# seconds without hammering a free, unauthenticated service.
_WORKERS = 8


class AzurePrices(PriceSource):
    """Linux on-demand and Spot prices per region from ``prices.azure.com``.

    Skipped meters: Windows (``productName`` ends in "Windows"), Low Priority (retired in
    favour of Spot), anything not per hour or not in USD, and dev/test or reservation prices
    (the query asks for ``priceType eq 'Consumption'``; the ``type`` field is checked too).
    """

    provider = "azure"
    endpoints: ClassVar[dict[str, str]] = {"azure": "https://prices.azure.com/api/retail/prices"}

    def _fetch(self, known: list[Offering]) -> Priced:
        sizes: dict[str, Offering] = {}
        for o in known:
            sizes.setdefault(o.instance_type, o)
        self._say(f"asking {_WHAT} about {len(sizes)} VM sizes")
        meters: dict[str, list[dict[str, Any]]] = {}
        pool = ThreadPoolExecutor(max_workers=_WORKERS)
        try:
            pending: dict[Future[list[dict[str, Any]]], str] = {
                pool.submit(self._meters, size): size for size in sizes
            }
            for future in as_completed(pending):
                meters[pending[future]] = future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

        offerings: list[Offering] = []
        flagged: list[Flagged] = []
        missing: list[str] = []
        for size, template in sorted(sizes.items()):
            prices = _prices_by_region(size, meters[size])
            if not prices:
                missing.append(size)
                continue
            for region, (price, spot) in sorted(prices.items()):
                row = replace(template, region=region, zone="", price=price, spot_price=spot)
                if spot is not None and price is not None and spot == price:
                    # Azure quotes the on-demand figure as "Spot" for sizes it sells no
                    # Spot capacity of; a spot price equal to on-demand is not a real one.
                    flagged.append(
                        Flagged(row, f"spot price {spot:g} equals on-demand (no real spot price)")
                    )
                    row = replace(row, spot_price=None)
                offerings.append(row)
        notes = [
            f"{len(offerings)} offerings of {len(sizes) - len(missing)} VM sizes in"
            f" {len({o.region for o in offerings})} regions"
        ]
        if missing:
            notes.append(f"not in the price list, left out: {listed(missing)}")
        return Priced(offerings, flagged, notes)

    def _meters(self, size: str) -> list[dict[str, Any]]:
        """Every pay-as-you-go VM meter of one size, all pages."""
        query = (
            "serviceName eq 'Virtual Machines' and priceType eq 'Consumption'"
            f" and armSkuName eq '{size}'"
        )
        url: str | None = with_query(self.urls["azure"], safe="$'", **{"$filter": query})
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        while url:
            if url in seen or len(seen) >= MAX_PAGES:
                raise SourceError(f"{_WHAT} keeps answering with more pages for {size}")
            seen.add(url)
            page = get_json(url, what=_WHAT)
            if not isinstance(page, Mapping) or not isinstance(page.get("Items"), list):
                raise SourceError(f"{_WHAT} answered without a list of 'Items' for {size}")
            items.extend(item for item in page["Items"] if isinstance(item, dict))
            link = page.get("NextPageLink")
            url = link if isinstance(link, str) and link else None
        return items


def _prices_by_region(
    size: str, items: list[dict[str, Any]]
) -> dict[str, tuple[float | None, float | None]]:
    """region -> (on-demand, spot) USD per hour for ``size`` from its meters."""
    chosen: dict[tuple[str, bool], tuple[tuple[bool, str, float], float]] = {}
    for item in items:
        if str(item.get("armSkuName", "")).lower() != size.lower():
            continue
        if item.get("type", "Consumption") != "Consumption":
            continue
        if item.get("currencyCode", "USD") != "USD" or item.get("unitOfMeasure") != "1 Hour":
            continue
        names = f"{item.get('skuName', '')} {item.get('meterName', '')}"
        if "windows" in str(item.get("productName", "")).lower() or "Low Priority" in names:
            continue
        region = item.get("armRegionName")
        price = item.get("retailPrice")
        if not isinstance(region, str) or not region or not isinstance(price, (int, float)):
            continue
        spot = "Spot" in names
        # Several meters for one region and kind: the primary meter region first, then the
        # newest effective date, then the lowest price.
        rank = (
            item.get("isPrimaryMeterRegion") is not False,
            str(item.get("effectiveStartDate", "")),
            -float(price),
        )
        key = (region, spot)
        if key not in chosen or rank > chosen[key][0]:
            chosen[key] = (rank, float(price))
    prices: dict[str, tuple[float | None, float | None]] = {}
    for region in sorted({region for region, _ in chosen}):
        on_demand = chosen.get((region, False))
        spot_meter = chosen.get((region, True))
        prices[region] = (
            on_demand[1] if on_demand else None,
            spot_meter[1] if spot_meter else None,
        )
    return prices
