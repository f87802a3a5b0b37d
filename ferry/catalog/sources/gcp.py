"""GCP prices from the Cloud Billing Catalog API (needs an API key): Compute Engine SKUs,
composed into the price of a GPU machine as the snapshot was (``data/SOURCES.md``).

Format: https://cloud.google.com/billing/v1/how-tos/catalog-api (``skus`` with a
``category.usageType`` of ``OnDemand`` or ``Preemptible``, ``serviceRegions``, and
``pricingInfo[].pricingExpression.tieredRates[].unitPrice`` as ``{units, nanos}``;
``nextPageToken`` to the next page).

A GPU machine costs its vCPUs times the family's core price, plus its memory in GiB times
the family's RAM price, plus its GPUs times the GPU price: all three on-demand, or all three
Spot for the spot price. The catalog prices each part for whole multi-regions, not where a
GPU can be rented, so only the regions (and zones) of the known offerings are priced.

TPUs keep their shipped prices: the catalog prices TPU chips and cores per hour under names
and units (per chip for v5e/v6e, per two cores for v5p, per eight cores for v2/v3) that do
not map one to one onto the slices Ferry lists, and a wrong mapping would be worse than a
known date.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ferry.catalog.offerings import Offering
from ferry.catalog.sources import (
    MAX_PAGES,
    Priced,
    PriceSource,
    SourceError,
    get_json,
    listed,
    with_query,
)

_WHAT = "the Cloud Billing Catalog API"
COMPUTE_ENGINE = "6F81-5844-456A"  # the Compute Engine service in the billing catalog
_PAGE_SIZE = "5000"  # the largest page the API gives
# Core and RAM SKUs of a machine family: "A2 Instance Core running in Americas",
# "Spot Preemptible A2 Instance Ram running in Americas".
_HOST = re.compile(r"^(?:spot )?(?:preemptible )?(?P<stem>.+?) (?P<part>core|ram) running in ")
# GPU SKUs: "Nvidia Tesla A100 GPU running in Americas", "Nvidia L4 GPU attached to Spot
# Preemptible VMs running in EMEA".
_GPU = re.compile(
    r"^(?:nvidia )?(?:tesla )?(?P<model>.+?) gpu (?:attached to (?:spot )?preemptible vms )?"
    r"running in "
)
# Words of SKUs that price something else yet could match the patterns above, e.g. with a
# qualifier after the place: commitments, reservations, sole-tenant nodes, custom or
# extended shapes, DWS (flex-start and calendar) capacity. (Other GPUs such as "T4 Virtual
# Workstation" and other stems such as "Custom Instance" never match a wanted name.)
_OTHER = ("commitment", "reserv", "sole tenan", "custom", "premium", "extended", "dws", "flex",
          "calendar")  # fmt: skip
# machine family (the machine type's first word) -> the SKU stem of its cores and RAM
_HOSTS = {
    "a2": "a2 instance",
    "a3": "a3 instance",
    "g2": "g2 instance",
    "n1": "n1 predefined instance",
}
# accelerator -> the GPU model as SKU descriptions name it
_GPUS = {
    "A100": ("a100",),
    "A100-80GB": ("a100 80gb",),
    "H100": ("h100 80gb",),
    "H200": ("h200 141gb",),
    "L4": ("l4",),
    "T4": ("t4",),
    "V100": ("v100",),
    "P100": ("p100",),
    "P4": ("p4",),
}
# a3-megagpu's H100s have their own SKUs, named differently by region
_MEGA_GPUS = ("h100 80gb mega", "h100 mega 80gb", "h100 80gb plus")
_UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h"}


@dataclass(frozen=True)
class _Rate:
    """One SKU's price per unit and the regions it applies to."""

    price: float
    regions: frozenset[str]


class GcpPrices(PriceSource):
    """GPU machine prices composed from Compute Engine SKUs; TPUs as shipped."""

    provider = "gcp"
    endpoints: ClassVar[dict[str, str]] = {"gcp": "https://cloudbilling.googleapis.com"}
    needs_api_key = True

    def _fetch(self, known: list[Offering]) -> Priced:
        if not self.api_key:
            raise SourceError(f"{_WHAT} needs an API key")
        rates = _rates(self._skus())
        gpus = [o for o in known if not o.accelerator.startswith("tpu-")]
        tpus = [o for o in known if o.accelerator.startswith("tpu-")]
        offerings: list[Offering] = []
        missing: dict[str, list[str]] = {}  # machine -> regions
        for o in gpus:
            price = _machine_price(o, rates, "OnDemand")
            spot = _machine_price(o, rates, "Preemptible")
            if price is None and spot is None:
                missing.setdefault(f"{o.instance_type} ({o.accelerators})", []).append(o.region)
                continue
            offerings.append(replace(o, price=price, spot_price=spot))
        notes = [
            f"{len(offerings)} GPU offerings priced from Compute Engine SKUs",
            f"{len(tpus)} TPU offerings keep their shipped prices (the catalog's TPU SKUs do"
            " not map one to one onto slices)",
        ]
        if missing:
            machines = [f"{m} in {'/'.join(sorted(r))}" for m, r in sorted(missing.items())]
            notes.append(f"no SKU prices for these machines, left out: {listed(machines)}")
        if not offerings:
            raise SourceError(f"{_WHAT} priced none of the {len(gpus)} GPU offerings Ferry knows")
        return Priced(offerings + tpus, [], notes)

    def _skus(self) -> list[dict[str, Any]]:
        """Every Compute Engine SKU, all pages."""
        base = f"{self.urls['gcp']}/v1/services/{COMPUTE_ENGINE}/skus"
        skus: list[dict[str, Any]] = []
        token = ""
        tokens: set[str] = set()
        for page in range(1, MAX_PAGES + 1):
            self._say(f"reading Compute Engine SKUs (page {page})")
            params = {"key": self.api_key or "", "currencyCode": "USD", "pageSize": _PAGE_SIZE}
            if token:
                params["pageToken"] = token
            answer = get_json(with_query(base, **params), what=_WHAT)
            if not isinstance(answer, Mapping) or not isinstance(answer.get("skus", []), list):
                raise SourceError(f"{_WHAT} answered without a list of 'skus'")
            skus.extend(s for s in answer.get("skus", []) if isinstance(s, dict))
            token = str(answer.get("nextPageToken") or "")
            if not token:
                return skus
            if token in tokens:
                break
            tokens.add(token)
        raise SourceError(f"{_WHAT} keeps answering with more pages")


def _rates(skus: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[_Rate]]:
    """(part, name, usage type) -> the rates of the SKUs of that part: part "core" or "ram"
    with a family stem ("a2 instance"), or "gpu" with a model ("a100 80gb")."""
    rates: dict[tuple[str, str, str], list[_Rate]] = {}
    for sku in skus:
        category = sku.get("category", {})
        usage = category.get("usageType")
        description = str(sku.get("description", "")).strip().lower()
        if category.get("resourceFamily") != "Compute" or usage not in ("OnDemand", "Preemptible"):
            continue
        if any(word in description for word in _OTHER):
            continue
        host, gpu = _HOST.match(description), _GPU.match(description)
        if host:
            part, name = host["part"], host["stem"]
        elif gpu:
            part, name = "gpu", gpu["model"]
        else:
            continue
        price = _unit_price(sku, _UNITS[part])
        regions = frozenset(str(r) for r in sku.get("serviceRegions", []))
        if price is not None and regions:
            rates.setdefault((part, name, usage), []).append(_Rate(price, regions))
    return rates


def _unit_price(sku: Mapping[str, Any], unit: str) -> float | None:
    """USD per ``unit`` of the SKU's current pricing (its first tier), else None."""
    infos = sku.get("pricingInfo") or [{}]
    expression = infos[0].get("pricingExpression", {})
    tiers = expression.get("tieredRates") or []
    if expression.get("usageUnit", unit) != unit or not tiers:
        return None
    first = min(tiers, key=lambda tier: float(tier.get("startUsageAmount", 0)))
    money = first.get("unitPrice", {})
    if money.get("currencyCode", "USD") != "USD":
        return None
    return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9


def _rate(
    rates: dict[tuple[str, str, str], list[_Rate]], keys: list[tuple[str, str, str]], region: str
) -> float | None:
    """The price of the most specific SKU among ``keys`` that covers ``region``."""
    covering = [r for key in keys for r in rates.get(key, []) if region in r.regions]
    if not covering:
        return None
    return min(covering, key=lambda r: (len(r.regions), r.price)).price


def _machine_price(
    o: Offering, rates: dict[tuple[str, str, str], list[_Rate]], usage: str
) -> float | None:
    """Cores + memory + GPUs of ``o`` at ``usage`` ("OnDemand" or "Preemptible") prices."""
    stem = _HOSTS.get(o.instance_type.split("-")[0])
    models = _MEGA_GPUS if o.instance_type.startswith("a3-megagpu") else _GPUS.get(o.accelerator)
    if stem is None or models is None or o.vcpus is None or o.memory_gib is None:
        return None
    core = _rate(rates, [("core", stem, usage)], o.region)
    ram = _rate(rates, [("ram", stem, usage)], o.region)
    gpu = _rate(rates, [("gpu", m, usage) for m in models], o.region)
    if core is None or ram is None or gpu is None:
        return None
    return round(o.vcpus * core + o.memory_gib * ram + o.count * gpu, 6)
