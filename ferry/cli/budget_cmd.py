"""``ferry budget``: the monthly budget of all jobs, and what this month has spent of it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferry.cli._common import add_command

EXAMPLE = """\
  ferry budget                          # this month's spending against the budget
  ferry budget set --monthly 500        # new jobs are refused once 500 USD are spent
  ferry budget set --monthly 500 --hard # ... and running jobs are stopped too
  ferry budget clear
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "budget",
        help="the monthly budget of all jobs",
        description="Show or set the monthly budget. Once this calendar month's spending "
        "reaches it, new submissions are refused; with --hard, running jobs that cost money "
        "are stopped too (through the preemption notice, so they can save).",
        example=EXAMPLE,
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=show)
    sub = p.add_subparsers(dest="budget_action", metavar="ACTION")
    s = add_command(
        sub,
        "set",
        help="set the monthly budget",
        description="Set the monthly budget in USD.",
        example=EXAMPLE,
    )
    s.add_argument("--monthly", required=True, metavar="USD", help="USD per calendar month")
    s.add_argument(
        "--hard",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also stop running jobs once it is spent",
    )
    s.set_defaults(handler=set_budget)
    c = add_command(
        sub,
        "clear",
        help="remove the monthly budget",
        description="No monthly budget.",
        example="  ferry budget clear\n",
    )
    c.set_defaults(handler=clear)


def show(args: argparse.Namespace) -> int:
    from ferry.controller.budget import monthly
    from ferry.store import open_store

    state = monthly(open_store())
    if args.json:
        print(
            json.dumps(
                {
                    "monthly_usd": state.limit,
                    "hard": state.hard,
                    "spent_usd": round(state.spent, 4),
                    "exhausted": state.exhausted,
                }
            )
        )
        return 0
    print(state.describe())
    return 0


def set_budget(args: argparse.Namespace) -> int:
    from ferry import config

    config.set_value("budget.monthly", args.monthly)
    config.set_value("budget.hard", "true" if args.hard else "false")
    args.json = False
    return show(args)


def clear(args: argparse.Namespace) -> int:
    from ferry import config

    config.set_value("budget.monthly", None)
    config.set_value("budget.hard", None)
    args.json = False
    return show(args)
