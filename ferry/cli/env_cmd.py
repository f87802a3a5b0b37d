"""``ferry env ls|prune``: the environments built from ``environment.requirements``."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ferry.cli._common import add_command, age, eprint

EXAMPLE = """\
  ferry env ls
  ferry env prune --older-than 30d
  ferry env prune --all --dry-run          # what would go
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "env",
        help="show or remove the environments built from requirements",
        description="A job with environment.requirements runs in a virtual environment "
        "built once per requirements (their hash, with the wheels and folders they name) "
        "and reused by every job that asks for the same. List them, or remove old ones.",
        example=EXAMPLE,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    ls = add_command(
        sub,
        "ls",
        help="the environments, most recently used first",
        description="The environments, most recently used first: size, last use, packages.",
        example="  ferry env ls --json\n",
    )
    ls.add_argument("--json", action="store_true", help="print JSON for scripts")
    prune = add_command(
        sub,
        "prune",
        help="remove environments unused for a while",
        description="Remove the environments last used longer ago than --older-than (and "
        "any a build left unfinished). One a running job uses is always kept.",
        example="  ferry env prune --older-than 7d\n",
    )
    prune.add_argument("--older-than", metavar="DURATION", help="unused for longer than this")
    prune.add_argument("--all", action="store_true", help="every environment no job uses")
    prune.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    prune.add_argument("--json", action="store_true", help="print what went as JSON")
    p.set_defaults(handler=env_cmd)


def env_cmd(args: argparse.Namespace) -> int:
    from ferry.errors import UsageError
    from ferry.packaging.environments import environments, envs_root, prune
    from ferry.units import format_size, parse_duration

    if args.action == "ls":
        envs = environments()
        if args.json:
            print(json.dumps([env.to_json() for env in envs], indent=2))
            return 0
        now = time.time()
        for env in envs:
            state = "in use" if env.in_use else ("ready" if env.ready else "unfinished")
            used = age(env.last_used, now) if env.last_used else "-"
            shown = ", ".join(env.packages[:4]) + (" …" if len(env.packages) > 4 else "")
            print(
                f"{env.key[:12]}  {format_size(env.size):>10}  {used:>10}  {state:<10}  "
                f"{len(env.packages):>3} packages  {shown}"
            )
        total = sum(env.size for env in envs)
        eprint(f"ferry: {len(envs)} environments, {format_size(total)} in {envs_root()}")
        return 0
    if args.all:
        older = 0.0
    elif args.older_than:
        try:
            older = parse_duration(args.older_than)
        except ValueError as exc:
            raise UsageError(f"env prune: {exc}", "e.g. --older-than 30d") from None
    else:
        raise UsageError("say what to remove", "use --older-than DURATION or --all")
    removed = prune(older, dry_run=args.dry_run)
    if args.json:
        print(json.dumps([env.to_json() for env in removed], indent=2))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for env in removed:
        eprint(f"ferry: {verb} {env.key[:12]} ({format_size(env.size)})")
    freed = sum(env.size for env in removed)
    eprint(f"ferry: {verb} {len(removed)} environments, {format_size(freed)}")
    return 0
