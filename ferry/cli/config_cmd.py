"""``ferry config get|set|unset|list``: the user's defaults in FERRY_HOME/config.toml."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferry.cli._common import add_command

EXAMPLE = """\
  ferry config list
  ferry config set local.gpus 2        # declare GPUs to test scheduling without any
  ferry config get backend
  ferry config unset local.gpus
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "config",
        help="show or change defaults (backend, local inventory, ...)",
        description="Show or change Ferry's settings. Keys are checked when set.",
        example=EXAMPLE,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    g = add_command(
        sub,
        "get",
        help="print one setting",
        description="Print one setting.",
        example="  ferry config get local.gpus\n",
    )
    g.add_argument("key")
    s = add_command(
        sub,
        "set",
        help="change one setting",
        description="Change one setting.",
        example="  ferry config set local.stop_grace 30s\n",
    )
    s.add_argument("key")
    s.add_argument("value")
    u = add_command(
        sub,
        "unset",
        help="reset one setting to its default",
        description="Reset one setting to its default.",
        example="  ferry config unset local.gpus\n",
    )
    u.add_argument("key")
    lst = add_command(
        sub,
        "list",
        help="every setting with its value and meaning",
        description="Every setting, its value, and what it means.",
        example="  ferry config list --json\n",
    )
    lst.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=config_cmd)


def config_cmd(args: argparse.Namespace) -> int:
    from ferry import config

    if args.action == "get":
        value = config.get(args.key)
        print("" if value is None else value)
    elif args.action in ("set", "unset"):
        config.set_value(args.key, args.value if args.action == "set" else None)
        if args.key.startswith("local."):  # more room may let queued jobs start now
            from ferry.cli._common import store_now

            store_now()
        if args.key == "launcher.idle" and not config.get("launcher.idle"):
            from ferry import launcher

            launcher.stop_all(str(config.ferry_home()))  # each ends after its commands
    else:
        raw = config.load_raw()
        rows = [
            {"key": key, "value": raw.get(key), "default": setting.default, "help": setting.help}
            for key, setting in config.SETTINGS.items()
        ]
        if args.json:
            print(json.dumps(rows, indent=2, default=str))
            return 0
        from rich.console import Console
        from rich.table import Table

        t = Table(box=None, header_style="bold")
        for col in ("KEY", "VALUE", "MEANING"):
            t.add_column(col)
        for row in rows:
            value = (
                row["value"] if row["value"] is not None else f"[dim]{row['default']} (default)[/]"
            )
            t.add_row(row["key"], str(value), row["help"])
        Console().print(t)
        print(f"(file: {config.config_path()})")
    return 0
