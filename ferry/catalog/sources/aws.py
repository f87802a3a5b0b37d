"""AWS prices: on-demand from the Price List Bulk API's per-region EC2 offer files, spot from
the feed that aws.amazon.com/ec2/spot/pricing reads.

Offer files (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-ppslong.html):
``region_index.json`` names each region's ``index.json``, a JSON document of ``products``
(SKU -> attributes) and ``terms.OnDemand`` (SKU -> price dimensions), several hundred MB per
region. It is read as a stream, one member at a time, and left as soon as the on-demand terms
are read (the reserved terms after them are most of the bytes).

Spot prices are not in the offer files, and AWS documents no key-free API for them (the
EC2 ``DescribeSpotPriceHistory`` call needs credentials). The spot pricing page reads
``spot.json``, one current Linux and Windows price per region and instance type; it is
undocumented, so when it cannot be read the shipped spot prices are kept and the result
says so.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from ferry.catalog.offerings import Offering
from ferry.catalog.sources import (
    Priced,
    PriceSource,
    SourceError,
    get_json,
    host_of,
    listed,
    open_url,
)

_REGION_INDEX = "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
# Bytes read from an offer file at a time: large enough that the per-read cost vanishes,
# small enough to keep memory flat.
READ_SIZE = 1024 * 1024
# Progress is reported after each this many bytes of an offer file.
_REPORT_EVERY = 100 * 1024 * 1024
# A single product or term larger than this (characters) means the file is not an offer
# file; stop instead of buffering the rest of it.
_MAX_MEMBER = 64 * 1024 * 1024
# Older spot feeds name some regions as the first EC2 pricing pages did.
_SPOT_REGION_NAMES = {
    "us-east": "us-east-1",
    "us-west": "us-west-1",
    "eu-ireland": "eu-west-1",
    "apac-sin": "ap-southeast-1",
    "apac-syd": "ap-southeast-2",
    "apac-tokyo": "ap-northeast-1",
}
# Attributes of the product a Ferry machine is: plain Linux, shared tenancy, no licensed
# software, the instance itself (not an unused capacity reservation or a Capacity Block).
# An attribute missing from an older file is taken to have this value.
_PLAIN_LINUX = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "licenseModel": "No License required",
    "marketoption": "OnDemand",
    "operation": "RunInstances",
    "locationType": "AWS Region",
}


class AwsPrices(PriceSource):
    """On-demand prices from the EC2 offer files and spot prices from ``spot.json``.

    Endpoints: ``aws`` is the price list host (``region_index.json`` and the offer files
    below it), ``aws-spot`` the spot feed's URL.

    Args:
        regions: the regions to price; by default those of the offerings given (the shipped
            catalog's), since each region's offer file is a download of several hundred MB.
        read_size: bytes read from an offer file at a time.
    """

    provider = "aws"
    endpoints: ClassVar[dict[str, str]] = {
        "aws": "https://pricing.us-east-1.amazonaws.com",
        "aws-spot": "https://website.spot.ec2.aws.a2z.com/spot.json",
    }

    def __init__(
        self,
        endpoints: Mapping[str, str] | None = None,
        *,
        api_key: str | None = None,
        progress: Callable[[str], None] | None = None,
        regions: Sequence[str] | None = None,
        read_size: int = READ_SIZE,
    ) -> None:
        super().__init__(endpoints, api_key=api_key, progress=progress)
        self.regions = list(regions) if regions else None
        self.read_size = read_size

    def _fetch(self, known: list[Offering]) -> Priced:
        types: dict[str, Offering] = {}
        for o in known:
            types.setdefault(o.instance_type, o)
        regions = self.regions or sorted({o.region for o in known})
        base = self.urls["aws"]
        index = get_json(base + _REGION_INDEX, what="the AWS price list's region index")
        offer_files = index["regions"]
        notes: list[str] = []
        on_demand: dict[str, dict[str, float]] = {}
        for region in regions:
            entry = offer_files.get(region)
            if not isinstance(entry, Mapping) or not entry.get("currentVersionUrl"):
                notes.append(f"the AWS price list has no offer file for {region}")
                continue
            path = str(entry["currentVersionUrl"])
            url = path if "://" in path else base + "/" + path.lstrip("/")
            on_demand[region] = self._on_demand(url, region, set(types))

        spot, spot_note = self._spot(set(on_demand), known)
        notes.append(spot_note)
        offerings: list[Offering] = []
        for region, prices in on_demand.items():
            missing = sorted(set(types) - set(prices))
            if missing:
                notes.append(f"not in the {region} price list, left out: {listed(missing)}")
            for instance_type, price in sorted(prices.items()):
                offerings.append(
                    replace(
                        types[instance_type],
                        region=region,
                        zone="",
                        price=price,
                        spot_price=spot.get((region, instance_type)),
                    )
                )
        notes.insert(0, f"{len(offerings)} offerings in {', '.join(on_demand) or 'no region'}")
        return Priced(offerings, [], notes)

    def _on_demand(self, url: str, region: str, wanted: set[str]) -> dict[str, float]:
        """instance type -> on-demand Linux USD per hour, from one region's offer file."""
        what = f"the AWS price list of {region}"
        self._say(f"reading {what} (a download of several hundred MB)")
        products: dict[str, str] = {}  # SKU -> instance type, for the products wanted
        hourly: dict[str, float] = {}  # SKU -> USD per hour
        read_products = read_on_demand = False
        with open_url(url, what=what) as body:
            counted = _Counting(body.read, lambda n: self._say(f"{region}: {n >> 20} MB read"))
            document = _JsonStream(counted.read, self.read_size)
            for key in document.members():
                if key == "products":
                    for sku in document.members():
                        product = document.value()
                        instance_type = _plain_linux(product, region)
                        if instance_type in wanted:
                            products[sku] = instance_type
                    read_products = True
                elif key == "terms":
                    for term_type in document.members():
                        if term_type != "OnDemand":
                            document.skip()
                            continue
                        for sku in document.members():
                            offers = document.value()
                            # Terms usually follow products; if not, keep every price.
                            if sku in products or not read_products:
                                price = _hourly(offers)
                                if price is not None:
                                    hourly[sku] = price
                        read_on_demand = True
                        if read_products:
                            break  # the rest is reserved terms: not needed
                else:
                    document.skip()
                if read_products and read_on_demand:
                    break
        if not read_products:
            raise SourceError(f"{what} at {host_of(url)} has no 'products'")
        prices: dict[str, float] = {}
        for sku, instance_type in products.items():
            if sku in hourly:
                # Two plain-Linux SKUs of one type would be a listing quirk: take the lower.
                prices[instance_type] = min(hourly[sku], prices.get(instance_type, hourly[sku]))
        return prices

    def _spot(
        self, regions: set[str], known: list[Offering]
    ) -> tuple[dict[tuple[str, str], float], str]:
        """(region, instance type) -> spot USD per hour, and a note saying where from."""
        url = self.urls["aws-spot"]
        try:
            with open_url(url, what="the EC2 spot price feed") as body:
                text = body.read().decode("utf-8", "replace")
            spot = _spot_prices(text, regions)
        except (SourceError, KeyError, TypeError, ValueError, AttributeError) as exc:
            shipped = {
                (o.region, o.instance_type): o.spot_price
                for o in known
                if o.spot_price is not None and o.region in regions
            }
            return (
                shipped,
                f"spot prices are the shipped ones: the EC2 spot price feed could not be"
                f" read ({exc})",
            )
        return (
            spot,
            f"spot prices from {host_of(url)} (the feed of aws.amazon.com/ec2/spot/pricing;"
            " undocumented; one price per region)",
        )


def _plain_linux(product: Any, region: str) -> str | None:
    """The instance type of a plain Linux on-demand instance product, else None."""
    if not str(product.get("productFamily", "")).startswith("Compute Instance"):
        return None  # "Compute Instance" and "Compute Instance (bare metal)"
    attributes = product.get("attributes", {})
    if attributes.get("regionCode", region) != region:
        return None
    for name, value in _PLAIN_LINUX.items():
        if attributes.get(name, value) != value:
            return None
    instance_type = attributes.get("instanceType")
    return instance_type if isinstance(instance_type, str) else None


def _hourly(offers: Any) -> float | None:
    """The USD per hour of an on-demand term ({term: {"priceDimensions": ...}})."""
    prices: list[float] = []
    for term in offers.values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = dimension.get("pricePerUnit", {}).get("USD")
            hourly = dimension.get("unit") == "Hrs" and str(dimension.get("beginRange", "0")) == "0"
            if hourly and usd is not None:
                prices.append(float(usd))
    return min(prices) if prices else None


def _spot_prices(text: str, regions: set[str]) -> dict[tuple[str, str], float]:
    """(region, instance type) -> Linux spot USD per hour from the spot feed's text
    (``spot.json``, or ``spot.js`` whose JSON is wrapped in ``callback(...)``)."""
    text = text.strip()
    if not text.startswith("{"):
        text = text[text.index("(") + 1 : text.rindex(")")]
    document = json.loads(text)
    prices: dict[tuple[str, str], float] = {}
    for entry in document["config"]["regions"]:
        region = _SPOT_REGION_NAMES.get(entry["region"], entry["region"])
        if region not in regions:
            continue
        for family in entry.get("instanceTypes", []):
            for size in family.get("sizes", []):
                for column in size.get("valueColumns", []):
                    if column.get("name") != "linux":
                        continue
                    try:
                        price = float(column["prices"]["USD"])
                    except (KeyError, ValueError):
                        continue  # "N/A*": not sold as spot there
                    if price > 0:
                        prices[(region, size["size"])] = price
    if not prices:
        raise ValueError(f"no Linux spot price for {', '.join(sorted(regions))}")
    return prices


class _Counting:
    """A ``read`` that reports every :data:`_REPORT_EVERY` bytes it has read."""

    def __init__(self, read: Callable[[int], bytes], report: Callable[[int], None]) -> None:
        self._read = read
        self._report = report
        self._total = 0

    def read(self, size: int) -> bytes:
        data = self._read(size)
        before = self._total
        self._total += len(data)
        if self._total // _REPORT_EVERY > before // _REPORT_EVERY:
            self._report(self._total)
        return data


_SPACE = re.compile(r"[ \t\n\r]*")


class _JsonStream:
    """One JSON document read from a byte stream without holding it whole.

    The caller walks it: :meth:`members` yields the keys of the object that comes next, and
    after each key the caller reads that member with :meth:`value` (decoded at C speed by
    :mod:`json`), walks into it with :meth:`members`, or passes it with :meth:`skip`.
    Malformed or truncated input raises ValueError.
    """

    def __init__(self, read: Callable[[int], bytes], read_size: int) -> None:
        self._read = read
        self._read_size = read_size
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._decoder = json.JSONDecoder()
        self._buffer = ""
        self._pos = 0
        self._ended = False

    def members(self) -> Iterator[str]:
        """The keys of the object that starts here; read each member before the next key."""
        self._take("{")
        if self._peek() == "}":
            self._pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise ValueError(f"an object key is {key!r}, not a string")
            self._take(":")
            yield key
            if self._take(",}") == "}":
                return

    def value(self) -> Any:
        """The value that starts here, decoded."""
        self._peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buffer, self._pos)
            except json.JSONDecodeError as exc:
                if self._more():
                    continue  # the value goes on in the next piece
                raise ValueError(f"the document is cut short or malformed ({exc.msg})") from None
            if end == len(self._buffer) and self._more():
                continue  # a number might go on in the next piece
            self._pos = end
            return value

    def skip(self) -> None:
        """Pass over the value that starts here; an object is decoded one member at a time,
        so a large one (the reserved terms) never sits in memory whole."""
        if self._peek() == "{":
            for _ in self.members():
                self.value()
        else:
            self.value()

    def _more(self) -> bool:
        """Read the next piece; False when the stream has ended."""
        if self._ended:
            return False
        if len(self._buffer) - self._pos > _MAX_MEMBER:
            raise ValueError(f"one value is larger than {_MAX_MEMBER >> 20} MiB")
        data = self._read(self._read_size)
        self._ended = not data
        text = self._text.decode(data, final=self._ended)
        self._buffer = self._buffer[self._pos :] + text
        self._pos = 0
        return bool(text) or not self._ended

    def _peek(self) -> str:
        """The next character that is not white space (the position moves onto it)."""
        while True:
            match = _SPACE.match(self._buffer, self._pos)
            self._pos = match.end() if match else self._pos
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._more():
                raise ValueError("the document is cut short")

    def _take(self, expected: str) -> str:
        char = self._peek()
        if char not in expected:
            raise ValueError(f"expected one of {expected!r}, found {char!r}")
        self._pos += 1
        return char
