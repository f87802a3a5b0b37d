"""``ferry cache ls|prune``: the input cache that makes re-runs start at once."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ferry.cli._common import add_command, age, eprint

EXAMPLE = """\
  ferry cache ls
  ferry cache prune --older-than 30d
  ferry cache prune --max-size 20GB          # drop the least recently used beyond 20 GB
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "cache",
        help="show or trim the cache of inputs from buckets",
        description="Inputs copied from buckets are kept by content identity (URI, size, "
        "version) so unchanged data is never copied twice. List the cache or trim it.",
        example=EXAMPLE,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    ls = add_command(
        sub,
        "ls",
        help="cached objects, most recently used first",
        description="Cached objects, most recently used first.",
        example="  ferry cache ls --json\n",
    )
    ls.add_argument("--json", action="store_true", help="print JSON for scripts")
    prune = add_command(
        sub,
        "prune",
        help="remove old entries, or keep the cache under a size",
        description="Remove entries unused for a while, and/or the least "
        "recently used ones until the cache fits a size.",
        example="  ferry cache prune --older-than 7d --max-size 50GB\n",
    )
    prune.add_argument("--older-than", metavar="DURATION", help="unused for longer than this")
    prune.add_argument("--max-size", metavar="SIZE", help="keep at most this much")
    prune.add_argument("--all", action="store_true", help="empty the cache")
    p.set_defaults(handler=cache_cmd)


def cache_cmd(args: argparse.Namespace) -> int:
    from ferry.config import ferry_home
    from ferry.errors import UsageError
    from ferry.storage.cache import InputCache
    from ferry.units import format_size, parse_duration, parse_size

    cache = InputCache(ferry_home() / "cache")
    if args.action == "ls":
        entries = sorted(cache.entries(), key=lambda e: -e.last_used)
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "uri": e.uri,
                            "size": e.size,
                            "version": e.version,
                            "added": e.added,
                            "last_used": e.last_used,
                            "key": e.key,
                        }
                        for e in entries
                    ],
                    indent=2,
                )
            )
            return 0
        now = time.time()
        for e in entries:
            print(f"{format_size(e.size):>10}  {age(e.last_used, now):>10}  {e.uri}")
        total = sum(e.size for e in entries)
        eprint(f"ferry: {len(entries)} objects, {format_size(total)} in {cache.root}")
        return 0
    try:
        older = parse_duration(args.older_than) if args.older_than else None
        size = parse_size(args.max_size) if args.max_size else None
    except ValueError as exc:
        raise UsageError(f"cache prune: {exc}") from None
    if args.all:
        older, size = None, 0
    if older is None and size is None:
        raise UsageError("say what to remove", "use --older-than, --max-size or --all")
    removed, freed = cache.prune(older_than=older, max_bytes=size)
    eprint(f"ferry: removed {removed} objects, {format_size(freed)}")
    return 0
