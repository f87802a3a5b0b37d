"""`ferry catalog refresh` against a real HTTP server on 127.0.0.1 that answers with the
recorded price lists of tests/data/catalog (see its README): each provider refreshes into
FERRY_HOME and load_catalog() uses the new prices for it and the shipped ones for the rest;
pages are followed; Windows, Low Priority and other non-plain rows are skipped; anomalies are
flagged and not used; a broken service leaves the previous prices in place."""

from __future__ import annotations

import datetime
import gzip
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from ferry.catalog.offerings import SHIPPED_DATE, Offering, load_catalog, read_csv
from ferry.catalog.refresh import SHIPPED, ProviderStatus, refresh
from ferry.catalog.sources.aws import AwsPrices
from ferry.errors import UsageError

DATA = Path(__file__).parents[1] / "data" / "catalog"
GCP_KEY = "AIza-test-key-0123456789"
DAY = datetime.date(2026, 12, 3)
NEXT_DAY = datetime.date(2026, 12, 4)
A100 = "Standard_NC24ads_A100_v4"
T4 = "Standard_NC4as_T4_v3"
H100 = "Standard_NC40ads_H100_v5"
_AWS_OFFER = re.compile(r"^/aws/offers/v1\.0/aws/AmazonEC2/[0-9]+/([a-z0-9-]+)/index\.json$")


class PriceLists:
    """The three providers' price list services, answering from tests/data/catalog."""

    def __init__(self) -> None:
        self.url = ""
        self.broken: dict[str, str] = {}  # service -> "500", "garbage" or "truncated"
        self.requests: list[str] = []  # paths with queries, in order
        self.gzipped: list[str] = []  # paths answered gzip-compressed

    @property
    def endpoints(self) -> dict[str, str]:
        return {
            "azure": f"{self.url}/azure/api/retail/prices",
            "aws": f"{self.url}/aws",
            "aws-spot": f"{self.url}/aws-spot/spot.json",
            "gcp": f"{self.url}/gcp",
        }

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes]:
        service = path.split("/")[1]
        if self.broken.get(service) == "500":
            return 500, b'{"Message": "An error has occurred."}'
        if self.broken.get(service) == "garbage":
            return 200, b"<html><body>Service Unavailable</body></html>"
        if service == "azure":
            size = re.search(r"armSkuName eq '([^']+)'", query["$filter"][0])
            page = int(query.get("$skip", ["0"])[0]) // 100 + 1
            file = DATA / "azure" / f"{size[1] if size else ''}.{page}.json"
            if not file.exists():
                empty = {"BillingCurrency": "USD", "Items": [], "NextPageLink": None, "Count": 0}
                return 200, json.dumps(empty).encode()
            text = file.read_text().replace("https://prices.azure.com:443", f"{self.url}/azure")
            return 200, text.encode()
        if path == "/aws/offers/v1.0/aws/AmazonEC2/current/region_index.json":
            return 200, (DATA / "aws" / "region_index.json").read_bytes()
        if offer := _AWS_OFFER.match(path):
            body = (DATA / "aws" / f"{offer[1]}.index.json").read_bytes()
            if self.broken.get(service) == "truncated":
                body = body[: len(body) // 3]  # the connection dropped inside the products
            return 200, body
        if path == "/aws-spot/spot.json":
            return 200, (DATA / "aws" / "spot.json").read_bytes()
        if path == "/gcp/v1/services/6F81-5844-456A/skus":
            if query.get("key") != [GCP_KEY]:
                error = {
                    "error": {
                        "code": 400,
                        "message": "API key not valid. Please pass a valid API key.",
                        "status": "INVALID_ARGUMENT",
                    }
                }
                return 400, json.dumps(error).encode()
            token = query.get("pageToken", [""])[0]
            file = DATA / "gcp" / (f"skus.{token}.json" if token else "skus.json")
            return (200, file.read_bytes()) if file.exists() else (400, b"{}")
        return 404, b""


class _Server(ThreadingHTTPServer):
    # Azure is asked about several VM sizes at once; the default backlog of 5 would make
    # the kernel drop connections and the client retry them a second later.
    request_queue_size = 64


@pytest.fixture
def price_lists() -> Iterator[PriceLists]:
    lists = PriceLists()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            lists.requests.append(self.path)
            status, body = lists.answer(parts.path, parse_qs(parts.query))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if parts.path.startswith("/aws/") and "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body)
                self.send_header("Content-Encoding", "gzip")
                lists.gzipped.append(parts.path)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = _Server(("127.0.0.1", 0), Handler)
    lists.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield lists
    finally:
        server.shutdown()
        server.server_close()


def rows_of(provider: str) -> dict[tuple[str, str, str], Offering]:
    """The offerings with accelerators in use for one provider by (region, instance type,
    accelerators): what a refresh replaces (the CPU machines are shipped apart)."""
    return {
        (o.region, o.instance_type, o.accelerators): o
        for o in load_catalog().offerings
        if o.provider == provider and o.accelerator
    }


def shipped_rows(provider: str) -> dict[tuple[str, str, str], Offering]:
    return {
        (o.region, o.instance_type, o.accelerators): o
        for o in read_csv(SHIPPED)
        if o.provider == provider
    }


def test_azure_refresh_uses_linux_pay_as_you_go_and_spot_prices_from_every_page(
    home: Path, price_lists: PriceLists
) -> None:
    result = refresh(["azure"], endpoints=price_lists.endpoints, today=DAY)

    done = result["azure"]
    assert done.status is ProviderStatus.REFRESHED, done
    assert done.error is None and done.file == str(home / "catalog" / "azure.csv")
    azure = rows_of("azure")
    a100 = azure[("eastus", A100, "A100-80GB:1")]
    # Linux pay-as-you-go and Spot; not Windows (4.409, 0.6143) nor Low Priority (0.7346)
    assert (a100.price, a100.spot_price) == (3.673, 0.4407)
    # what the price list does not say comes from the shipped row
    assert (a100.vcpus, a100.memory_gib, a100.zone) == (24, 220, "")
    # pages 2 and 3 were followed, and their regions are new to the catalog
    assert azure[("japaneast", A100, "A100-80GB:1")].price == 4.7
    assert azure[("swedencentral", A100, "A100-80GB:1")].spot_price == 0.5214
    # a region with only a Windows meter, one with only a Low Priority meter: not offered
    assert not {"westus3", "centralindia"} & {region for region, _, _ in azure}
    pages = [r for r in price_lists.requests if A100 in r]
    assert len(pages) == 3 and "$skip=200" in pages[-1]
    # the anomaly: spot above on-demand is flagged and not used; on-demand stays
    odd = azure[("southcentralus", T4, "T4:1")]
    assert (odd.price, odd.spot_price) == (0.526, None)
    reasons = {(f.offering.region, f.offering.instance_type): f.reason for f in done.flagged}
    assert reasons[("southcentralus", T4)] == "spot price 0.61 above on-demand 0.526"
    assert "equals on-demand" in reasons[("eastus", H100)]
    assert azure[("eastus", H100, "H100:1")].spot_price is None
    # sizes the price list does not have are left out, and the result says which
    assert {o.instance_type for o in azure.values()} == {A100, T4, H100}
    assert "not in the price list, left out: Standard_NC12s_v3, " in "; ".join(done.notes)

    catalog = load_catalog()
    assert catalog.dates["azure"] == DAY and catalog.sources["azure"] == done.file
    assert catalog.dates["aws"] == SHIPPED_DATE and catalog.sources["aws"] == "shipped"
    assert rows_of("aws") == shipped_rows("aws")
    meta = json.loads((home / "catalog" / "meta.json").read_text())
    assert meta["providers"]["azure"] == {
        "file": "azure.csv",
        "date": "2026-12-03",
        "rows": done.rows,
        "flagged": 2,
    }


def test_aws_refresh_reads_plain_linux_on_demand_and_the_spot_feed(
    home: Path, price_lists: PriceLists
) -> None:
    result = refresh(["aws"], endpoints=price_lists.endpoints, today=DAY)

    done = result["aws"]
    assert done.status is ProviderStatus.REFRESHED, done
    aws = rows_of("aws")
    g5 = aws[("us-east-1", "g5.xlarge", "A10G:1")]
    # the Linux, shared, no-software product; not Windows, RHEL, SQL, Dedicated or unused
    assert (g5.price, g5.spot_price, g5.zone) == (1.006, 0.4012, "")
    p5 = aws[("us-east-1", "p5.48xlarge", "H100:8")]
    assert (p5.price, p5.spot_price) == (55.04, 20.9934)  # not the Capacity Block price
    metal = aws[("us-east-1", "g4dn.metal", "T4:8")]
    assert (metal.price, metal.spot_price) == (7.824, None)  # spot "N/A*": not sold
    # the spot feed's old name "eu-ireland" is eu-west-1
    assert aws[("eu-west-1", "g5.xlarge", "A10G:1")].spot_price == 0.5013
    # the anomaly: p4d spot above on-demand is flagged and not used
    p4d = aws[("us-east-1", "p4d.24xlarge", "A100:8")]
    assert (p4d.price, p4d.spot_price) == (21.957642, None)
    assert [f.reason for f in done.flagged] == ["spot price 25.0017 above on-demand 21.9576"]
    # only the shipped catalog's regions, their offer files sent gzip-compressed
    assert {region for region, _, _ in aws} == {"us-east-1", "us-west-2", "eu-west-1"}
    assert len(price_lists.gzipped) == 4  # the region index and three offer files
    assert "m5.large" not in {t for _, t, _ in aws}
    # us-west-2 sells g6.xlarge only as Dedicated, g4dn.xlarge only with Windows
    assert {t for r, t, _ in aws if r == "us-west-2"} == {"g5.xlarge", "p5.48xlarge"}
    assert any(n.startswith("spot prices from 127.0.0.1 (the feed of") for n in done.notes)
    assert any(n.startswith("not in the us-east-1 price list") for n in done.notes)
    assert load_catalog().dates == {
        "aws": DAY,
        "azure": SHIPPED_DATE,
        "gcp": SHIPPED_DATE,
        "lambda": SHIPPED_DATE,
    }


def test_an_offer_file_read_a_few_bytes_at_a_time_gives_the_same_prices(
    price_lists: PriceLists,
) -> None:
    known = read_csv(SHIPPED)
    whole = AwsPrices(price_lists.endpoints, regions=["us-east-1"]).prices(known)
    pieces = AwsPrices(price_lists.endpoints, regions=["us-east-1"], read_size=7).prices(known)
    assert pieces.offerings == whole.offerings
    assert len(whole.offerings) == 4


def test_aws_keeps_the_shipped_spot_prices_when_the_spot_feed_is_down(
    home: Path, price_lists: PriceLists
) -> None:
    price_lists.broken["aws-spot"] = "500"
    result = refresh(["aws"], endpoints=price_lists.endpoints, today=DAY)

    done = result["aws"]
    assert done.status is ProviderStatus.REFRESHED
    assert any("spot prices are the shipped ones" in n and "HTTP 500" in n for n in done.notes)
    g5 = rows_of("aws")[("us-east-1", "g5.xlarge", "A10G:1")]
    shipped = shipped_rows("aws")[("us-east-1", "g5.xlarge", "A10G:1")]
    assert (g5.price, g5.spot_price) == (1.006, shipped.spot_price)


def test_gcp_composes_machine_prices_from_core_ram_and_gpu_skus(
    home: Path, price_lists: PriceLists
) -> None:
    result = refresh(["gcp"], gcp_api_key=GCP_KEY, endpoints=price_lists.endpoints, today=DAY)

    done = result["gcp"]
    assert done.status is ProviderStatus.REFRESHED, done
    gcp = rows_of("gcp")
    a2 = gcp[("us-central1", "a2-highgpu-1g", "A100:1")]
    assert a2.price == pytest.approx(12 * 0.031611 + 85 * 0.004237 + 2.933908)
    assert a2.spot_price == pytest.approx(12 * 0.012644 + 85 * 0.001695 + 1.173563)
    # EMEA SKUs for europe-west4; no Spot SKU there in the recording
    a2_eu = gcp[("europe-west4", "a2-highgpu-1g", "A100:1")]
    assert (a2_eu.price, a2_eu.spot_price) == (
        pytest.approx(12 * 0.034772 + 85 * 0.004661 + 3.227299),
        None,
    )
    # page 2 (N1 + T4): the T4 price, not the T4 Virtual Workstation one (Iowa only)
    t4 = gcp[("us-central1", "n1-standard-8", "T4:1")]
    assert t4.price == pytest.approx(8 * 0.031611 + 30 * 0.004237 + 0.35)
    assert any("pageToken=" in r for r in price_lists.requests)
    l4 = gcp[("us-east4", "g2-standard-96", "L4:8")]
    assert l4.price == pytest.approx(96 * 0.024988 + 384 * 0.002927 + 8 * 0.56004)
    # TPUs keep their shipped prices, and the result says so
    shipped = shipped_rows("gcp")
    tpus = {k: o for k, o in shipped.items() if o.accelerator.startswith("tpu-")}
    assert {k: gcp[k] for k in tpus} == tpus
    assert any("TPU" in n and "shipped" in n for n in done.notes)
    # machines without SKUs in the answer (no APAC, no H100) are left out, and named
    assert ("asia-east1", "n1-standard-8", "T4:1") not in gcp
    assert any("a3-highgpu-1g (H100:1) in asia-east1/europe-west4/" in n for n in done.notes)
    assert load_catalog().dates["gcp"] == DAY


def test_gcp_without_a_key_is_skipped_with_the_hint_and_the_others_refresh(
    home: Path, price_lists: PriceLists
) -> None:
    result = refresh(endpoints=price_lists.endpoints, today=DAY)

    assert list(result.providers) == ["azure", "aws", "gcp"]
    gcp = result["gcp"]
    assert gcp.status is ProviderStatus.SKIPPED and gcp.error is None
    assert gcp.skipped is not None and "API key" in gcp.skipped
    assert "FERRY_GCP_API_KEY" in gcp.skipped
    assert str(gcp).startswith("skipped: ") and "prices of 2026-12-02 stay in use" in str(gcp)
    assert not any(r.startswith("/gcp") for r in price_lists.requests)
    assert result["azure"].status is result["aws"].status is ProviderStatus.REFRESHED
    assert result.failed == []
    assert load_catalog().dates["gcp"] == SHIPPED_DATE


def test_gcp_refusing_the_key_says_so_without_showing_it(
    home: Path, price_lists: PriceLists
) -> None:
    result = refresh(["gcp"], gcp_api_key="not-a-key", endpoints=price_lists.endpoints)

    gcp = result["gcp"]
    assert gcp.status is ProviderStatus.FAILED
    assert gcp.error is not None and "HTTP 400 (API key not valid" in gcp.error
    assert "not-a-key" not in str(gcp)
    assert load_catalog().sources["gcp"] == "shipped"


@pytest.mark.parametrize(
    ("answer", "said"), [("500", "answered HTTP 500"), ("garbage", "is not JSON")]
)
def test_a_broken_service_leaves_the_previous_prices_and_says_why_in_one_sentence(
    home: Path, price_lists: PriceLists, answer: str, said: str
) -> None:
    refresh(["azure"], endpoints=price_lists.endpoints, today=DAY)
    stored = (home / "catalog" / "azure.csv").read_bytes()
    price_lists.broken["azure"] = answer

    result = refresh(["azure", "aws"], endpoints=price_lists.endpoints, today=NEXT_DAY)

    azure = result["azure"]
    assert azure.status is ProviderStatus.FAILED and azure.rows == 0
    assert azure.error is not None and said in azure.error
    assert "\n" not in str(azure) and "Traceback" not in str(azure)
    assert str(azure).endswith("the prices of 2026-12-03 stay in use")
    assert result.failed == ["azure"]
    assert (home / "catalog" / "azure.csv").read_bytes() == stored
    catalog = load_catalog()
    assert catalog.dates["azure"] == DAY  # the earlier refresh, still in use
    assert rows_of("azure")[("eastus", A100, "A100-80GB:1")].spot_price == 0.4407
    assert catalog.dates["aws"] == NEXT_DAY  # the other provider refreshed all the same
    meta = json.loads((home / "catalog" / "meta.json").read_text())
    assert set(meta["providers"]) == {"azure", "aws"}


def test_an_offer_file_cut_short_fails_aws_with_a_sentence(
    home: Path, price_lists: PriceLists
) -> None:
    price_lists.broken["aws"] = "truncated"
    result = refresh(["aws"], endpoints=price_lists.endpoints)

    aws = result["aws"]
    assert aws.status is ProviderStatus.FAILED
    assert aws.error is not None and aws.error.startswith(
        "the aws price list does not have the documented shape (ValueError: the document is cut"
    )
    assert "\n" not in aws.error
    assert load_catalog().sources["aws"] == "shipped"


def test_an_unreachable_service_fails_with_a_sentence(home: Path) -> None:
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()
    result = refresh(["azure"], endpoints={"azure": f"http://127.0.0.1:{port}/api"})

    azure = result["azure"]
    assert azure.status is ProviderStatus.FAILED
    assert azure.error is not None and azure.error.startswith(
        "could not read the Azure Retail Prices API at 127.0.0.1"
    )
    assert not (home / "catalog" / "azure.csv").exists()
    assert load_catalog().sources["azure"] == "shipped"


def test_lambda_is_skipped_and_unknown_providers_are_refused(home: Path) -> None:
    result = refresh(["lambda"])
    assert result["lambda"].status is ProviderStatus.SKIPPED
    with pytest.raises(UsageError, match="unknown provider 'oracle'"):
        refresh(["oracle"])


def test_importing_the_catalog_does_not_import_the_refresh() -> None:
    code = (
        "import sys, ferry.catalog; "
        "assert not [m for m in sys.modules if m.startswith(('ferry.catalog.refresh', "
        "'ferry.catalog.sources'))]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
