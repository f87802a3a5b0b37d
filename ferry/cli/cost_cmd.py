"""``ferry cost estimate SPEC``: what a job would cost, on which offering; ``ferry cost
report``: what jobs spent, grouped, as a table, JSON, CSV or a PNG chart per day."""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
import time
from typing import Any

from ferry.cli._common import add_command, eprint, whole_number
from ferry.cli.spec_flags import add_spec_flags, overrides_from
from ferry.errors import UsageError
from ferry.units import format_usd

ESTIMATE_EXAMPLE = """\
  ferry cost estimate job.yaml
  ferry cost estimate job.yaml --hours 12 --accelerator H100:8 --spot
  ferry cost estimate job.yaml --backend auto --json
"""
REPORT_EXAMPLE = """\
  ferry cost report                      # the last 30 days, by job
  ferry cost report --since 7d --by accelerator
  ferry cost report --by day --csv > spend.csv
  ferry cost report --by day -o spend.png
"""
GROUPS = ("job", "backend", "accelerator", "day")


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "cost",
        help="estimate a job's cost; report what jobs spent",
        description="Estimate what a job would cost before launching it, or report what "
        "jobs have spent (every attempt's price, recorded at launch, over the time it ran).",
        example=ESTIMATE_EXAMPLE + REPORT_EXAMPLE,
    )
    sub = p.add_subparsers(dest="cost_action", metavar="ACTION", required=True)
    e = add_command(
        sub,
        "estimate",
        help="what a job would cost, and on which offering",
        description="Price a job spec: the offerings that fit its resources, cheapest first, "
        "with USD per hour and the total for its runtime (--hours, est_runtime in the "
        "spec, or the median of earlier runs of the same name).",
        example=ESTIMATE_EXAMPLE,
    )
    e.add_argument("spec", nargs="?", help="job spec file (YAML)")
    e.add_argument("--hours", type=float, help="runtime to price (hours)")
    e.add_argument("--top", type=whole_number, default=5, help="options to list (default 5)")
    e.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_spec_flags(e, "local, ray, vertex, sagemaker, or auto (default: the spec's, else auto)")
    e.set_defaults(handler=estimate)
    r = add_command(
        sub,
        "report",
        help="what jobs spent, grouped",
        description="Sum what jobs spent in a period, by job, backend, accelerator or day.",
        example=REPORT_EXAMPLE,
    )
    r.add_argument("--since", default="30d", help="period to cover, e.g. 7d, 24h (default 30d)")
    r.add_argument("--by", choices=GROUPS, default="job", help="how to group (default: job)")
    out = r.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON for scripts")
    out.add_argument("--csv", action="store_true", help="print CSV")
    out.add_argument("-o", "--output", metavar="FILE.png", help="a PNG chart of spend per day")
    r.set_defaults(handler=report)


# -- estimate ------------------------------------------------------------------------------


def estimate(args: argparse.Namespace) -> int:
    from ferry.catalog.estimate import quote
    from ferry.spec import load_spec
    from ferry.store import open_store

    overrides = overrides_from(args, None)
    if args.spec is None and not overrides.get("resources"):
        raise UsageError(
            "give a job spec or the resources to price",
            "e.g. ferry cost estimate job.yaml, or --accelerator A100:1",
        )
    spec = load_spec(args.spec, overrides)
    backend = args.backend or spec.backend or "auto"
    if args.hours is not None and not 0 < args.hours < float("inf"):
        raise UsageError(f"--hours must be a number of hours above 0, not {args.hours:g}")
    found = quote(spec, backend=backend, store=open_store(), hours=args.hours)
    options = _distinct(found.plan.options)[: args.top]
    skipped = _distinct(found.plan.skipped)[: args.top]
    if args.json:
        print(
            json.dumps(
                {
                    "request": found.plan.request.describe(),
                    "hours": found.hours,
                    "hours_from": found.hours_from or None,
                    "choice": _option_json(found.option) if found.option else None,
                    "options": [_option_json(o) for o in options],
                    "skipped": [_option_json(o) for o in skipped],
                },
                indent=1,
            )
        )
        return 0 if options or skipped else 1
    from ferry.catalog.offerings import load_catalog

    eprint(f"ferry: {load_catalog().describe_age()}")
    print(f"{found.plan.request.describe()}: {found.line()}")
    if options or skipped:
        _options_table(options + skipped, found.hours)
    return 0 if options or skipped else 1  # priced, even where it cannot run yet


def _distinct(options: list[Any]) -> list[Any]:
    """The cheapest region of each machine type (the list is cheapest first)."""
    seen: set[tuple[str, str, bool]] = set()
    out = []
    for o in options:
        key = (o.offering.provider, o.offering.instance_type, o.spot)
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out


def _option_json(option: Any) -> dict[str, Any]:
    o = option.offering
    return {
        "provider": o.provider,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "accelerators": o.accelerators,
        "backend": option.backend,
        "spot": option.spot,
        "capacity": option.capacity or "on-demand",
        "usd_per_hour": round(option.price, 4),
        "total_usd": None if option.total is None else round(option.total, 2),
        "skipped": option.skipped,
    }


def _options_table(options: list[Any], hours: float | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("OFFERING", "BACKEND", "USD/H", "TOTAL", "NOTE"):
        table.add_column(column, justify="right" if column in ("USD/H", "TOTAL") else "left")
    for o in options:
        total = "" if o.total is None else format_usd(o.total)
        table.add_row(
            o.describe(),
            o.backend or "-",
            f"{o.price:,.2f}",
            total,
            o.skipped or "",
            style="dim" if o.skipped else "",
        )
    Console().print(table)


# -- report --------------------------------------------------------------------------------


def report(args: argparse.Namespace) -> int:
    from ferry.store import open_store
    from ferry.units import parse_duration

    try:
        period = parse_duration(args.since)
    except ValueError as exc:
        raise UsageError(f"--since: {exc}", "e.g. --since 7d") from None
    now = time.time()
    rows = open_store().spending(now - period, now)
    groups = group_spending(rows, args.by, now - period, now)
    total = sum(groups.values())
    if args.output:
        _chart(group_spending(rows, "day", now - period, now), args.output, args.since)
        eprint(f"ferry: wrote {args.output} ({format_usd(total)} USD over {args.since})")
        return 0
    if args.json:
        data = [{args.by: k, "usd": round(v, 4)} for k, v in groups.items()]
        print(json.dumps({"since": args.since, "total_usd": round(total, 4), "by": data}))
        return 0
    if args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow([args.by, "usd"])
        for key, value in groups.items():
            writer.writerow([key, f"{value:.4f}"])
        return 0
    if not rows:
        eprint(f"ferry: no job ran in the last {args.since}")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", show_footer=True)
    table.add_column(args.by.upper(), footer="total")
    table.add_column("USD", justify="right", footer=format_usd(total))
    for key, value in groups.items():
        table.add_row(key, format_usd(value))
    Console().print(table)
    return 0


def group_spending(rows: list[Any], by: str, since: float, until: float) -> dict[str, float]:
    """USD per group, largest first; by day, in date order, each attempt's cost shared among
    the days it ran on (within ``since``..``until``)."""
    out: dict[str, float] = {}
    for s in rows:
        if by == "day":
            for day, share in _days(s, since, until):
                out[day] = out.get(day, 0.0) + share
            continue
        if by == "job":
            key = s.job_id
        elif by == "backend":
            key = s.backend
        else:
            key = s.accelerator or "CPU only"
        out[key] = out.get(key, 0.0) + s.cost
    if by == "day":
        return dict(sorted(out.items()))
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _days(spend: Any, since: float, until: float) -> list[tuple[str, float]]:
    """(local date, USD) for each day an attempt ran on within the window."""
    start = max(spend.started_at, since)
    end = min(spend.ended_at if spend.ended_at is not None else until, until)
    if end <= start:
        return [(datetime.date.fromtimestamp(start).isoformat(), spend.cost)]
    parts = []
    t = start
    while t < end:
        day = datetime.date.fromtimestamp(t)
        midnight = datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time())
        step_end = min(end, midnight.timestamp())
        parts.append((day.isoformat(), spend.cost * (step_end - t) / (end - start)))
        t = step_end
    return parts


def _chart(per_day: dict[str, float], path: str, since: str) -> None:
    from ferry.cli.plot_cmd import new_figure

    figure = new_figure(8, 3.5)
    axes = figure.add_subplot()
    days = list(per_day)
    axes.bar(range(len(days)), list(per_day.values()), color="#3b7dd8")
    axes.set_xticks(range(len(days)), days, rotation=45, ha="right", fontsize=8)
    axes.set_ylabel("USD")
    axes.set_title(f"Spend per day (last {since}; total {format_usd(sum(per_day.values()))} USD)")
    figure.savefig(path, dpi=100)
