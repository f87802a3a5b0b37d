"""``ferry catalog``: accelerator offerings and their prices, cheapest first; ``ferry catalog
refresh`` fetches current prices from the providers' public price lists."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ferry.cli._common import add_command, eprint, whole_number
from ferry.errors import UsageError

if TYPE_CHECKING:
    from ferry.catalog.offerings import Offering
    from ferry.catalog.refresh import RefreshResult

EXAMPLE = """\
  ferry catalog --accelerator H100
  ferry catalog --accelerator A100:8 --spot --provider gcp --provider aws
  ferry catalog --min-gpu-memory 40GB --region us-central1 --json
  ferry catalog refresh --provider azure
"""
REFRESH_EXAMPLE = """\
  ferry catalog refresh                     # Azure and AWS (no key needed)
  FERRY_GCP_API_KEY=... ferry catalog refresh --provider gcp
"""
SHOWN = 25  # rows shown on a terminal unless --limit says otherwise


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "catalog",
        help="accelerator offerings and prices, cheapest first",
        description="List the offerings Ferry can choose from (provider, region, instance "
        "type, accelerators, on-demand and spot USD per hour), cheapest first. The prices "
        "are a snapshot shipped with Ferry unless refreshed; their date is shown.",
        example=EXAMPLE,
    )
    p.add_argument("--accelerator", "-a", help="e.g. H100, A100:8 (at least 8), tpu-v5e-8")
    p.add_argument("--provider", action="append", default=[], help="aws, azure, gcp, lambda")
    p.add_argument("--region", action="append", default=[], help="e.g. us-central1")
    p.add_argument("--spot", action="store_true", help="spot offerings, by spot price")
    p.add_argument("--min-gpu-memory", metavar="SIZE", help="memory per accelerator, e.g. 40GB")
    p.add_argument("--limit", type=whole_number, help=f"rows to show (default {SHOWN}; 0: all)")
    p.add_argument("--flagged", action="store_true", help="list prices flagged as anomalies")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=catalog)
    sub = p.add_subparsers(dest="catalog_action", metavar="ACTION")
    r = add_command(
        sub,
        "refresh",
        help="fetch current prices into FERRY_HOME",
        description="Fetch current prices from the providers' public price lists: the Azure "
        "Retail Prices API and AWS's price list files need no key; GCP's Cloud Billing "
        "Catalog needs an API key in $FERRY_GCP_API_KEY. A provider that fails keeps its "
        "previous prices.",
        example=REFRESH_EXAMPLE,
    )
    r.add_argument("--provider", dest="refresh_providers", action="append", default=[])
    r.add_argument("--json", dest="refresh_json", action="store_true", help="print JSON")
    r.set_defaults(handler=refresh)


def catalog(args: argparse.Namespace) -> int:
    from ferry.backends.registry import PROVIDERS
    from ferry.catalog.offerings import load_catalog, select

    for provider in args.provider:
        if provider not in PROVIDERS:
            raise UsageError(
                f"unknown provider {provider!r}", f"choose from {', '.join(PROVIDERS)}"
            )
    min_memory = None
    if args.min_gpu_memory:
        from ferry.units import parse_size

        try:
            min_memory = parse_size(args.min_gpu_memory) / 1024**3
        except ValueError as exc:
            raise UsageError(f"--min-gpu-memory: {exc}", "e.g. --min-gpu-memory 40GB") from None
    data = load_catalog()
    if args.flagged:
        return _flagged(data, args.json)

    def rows_for(accelerator: str | None) -> list[Offering]:
        return select(
            data.offerings,
            accelerator=accelerator,
            providers=args.provider,
            regions=args.region,
            spot=args.spot,
            min_accelerator_memory_gib=min_memory,
        )

    try:
        rows = rows_for(args.accelerator)
    except ValueError:
        # a machine type the catalog does not list, which a backend names (a2-highgpu-8g):
        # the accelerators it carries; or the error, naming the closest names and machines
        from ferry.machines import parse_request

        try:
            rows = rows_for(str(parse_request(args.accelerator)))
        except ValueError as exc:
            hint = "see: ferry catalog for the names"
            raise UsageError(f"--accelerator: {exc}", hint) from None
    if args.json:
        print(
            json.dumps(
                {
                    "prices_of": data.oldest.isoformat(),
                    "age_days": data.age_days(),
                    "offerings": [_as_json(o, data.doubt(o)) for o in rows],
                },
                indent=1,
            )
        )
        return 0
    eprint(f"ferry: {data.describe_age()}; {len(rows)} offerings match")
    if not rows:
        eprint("ferry: nothing matches; try fewer filters (ferry catalog --help)")
        return 0
    limit = args.limit if args.limit is not None else (SHOWN if sys.stdout.isatty() else 0)
    shown = rows[:limit] if limit else rows
    _table(shown, args.spot, data)
    if any(data.doubt(o) for o in shown):
        eprint("ferry: * a doubtful price, used all the same (see: ferry catalog --flagged)")
    if len(shown) < len(rows):
        eprint(f"ferry: {len(rows) - len(shown)} more (--limit 0 shows all)")
    return 0


def _as_json(o: Any, doubt: str | None = None) -> dict[str, Any]:
    return {
        "doubtful": doubt,
        "provider": o.provider,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "accelerator": o.accelerator,
        "count": o.count,
        "accelerator_memory_gib": o.accelerator_memory_gib,
        "vcpus": o.vcpus,
        "memory_gib": o.memory_gib,
        "price_hour": o.price,
        "spot_price_hour": o.spot_price,
    }


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _table(rows: list[Any], spot: bool, data: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("PROVIDER", "REGION", "INSTANCE", "ACCEL"):
        table.add_column(column, overflow="fold")
    for column in ("GMEM", "vCPU", "MEM"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("USD/H", justify="right", style="" if spot else "bold", no_wrap=True)
    table.add_column("SPOT", justify="right", style="bold" if spot else "", no_wrap=True)
    for o in rows:
        table.add_row(
            o.provider,
            o.region,
            o.instance_type,
            o.accelerators,
            "" if o.accelerator_memory_gib is None else f"{o.accelerator_memory_gib:g}G",
            "" if o.vcpus is None else f"{o.vcpus:g}",
            "" if o.memory_gib is None else f"{o.memory_gib:g}G",
            _money(o.price) + ("*" if data.doubt(o) else ""),
            _money(o.spot_price),
        )
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def _flagged(data: Any, as_json: bool) -> int:
    items = [(f, False) for f in data.flagged] + [(f, True) for f in data.doubtful]
    if as_json:
        print(
            json.dumps(
                [{**_as_json(f.offering), "reason": f.reason, "used": used} for f, used in items]
            )
        )
        return 0
    if not items:
        eprint(f"ferry: no prices flagged ({data.describe_age()})")
        return 0
    for f, used in items:
        o, note = f.offering, "" if used else " (not used)"
        print(f"{o.provider} {o.location} {o.instance_type}: {f.reason}{note}")
    return 0


def refresh(args: argparse.Namespace) -> int:
    from ferry.backends.registry import PROVIDERS
    from ferry.catalog.refresh import refresh as run_refresh

    for provider in args.refresh_providers:
        if provider not in PROVIDERS:
            raise UsageError(
                f"unknown provider {provider!r}", f"choose from {', '.join(PROVIDERS)}"
            )
    key = os.environ.get("FERRY_GCP_API_KEY") or None
    result = run_refresh(
        args.refresh_providers or None,
        gcp_api_key=key,
        progress=None if args.refresh_json else (lambda line: eprint(f"ferry: {line}")),
    )
    return _report_refresh(result, args.refresh_json)


def _report_refresh(result: RefreshResult, as_json: bool) -> int:
    """Print what each provider's refresh did; exit 1 when every provider tried failed."""
    from ferry.catalog.refresh import ProviderStatus

    if as_json:
        data = {
            provider: {
                "status": r.status.value,
                "prices_of": r.prices_of.isoformat(),
                "rows": r.rows,
                "flagged": [{**_as_json(f.offering), "reason": f.reason} for f in r.flagged],
                "notes": list(r.notes),
                "error": r.error,
                "skipped": r.skipped,
            }
            for provider, r in result.providers.items()
        }
        print(json.dumps(data, indent=1))
    else:
        print(result)
    tried = [r for r in result.providers.values() if r.status is not ProviderStatus.SKIPPED]
    return 1 if tried and len(result.failed) == len(tried) else 0
