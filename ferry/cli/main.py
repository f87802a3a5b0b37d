"""Entry point of the ``ferry`` command: parse, dispatch, and turn failures into one line.

Every failure a person can cause prints ``ferry: <what is wrong> (<how to fix it>)`` and
exits 2 for usage errors, 1 otherwise; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferry.cli._common import Parser

# (imports stay inside the functions: a command the launcher runs needs none of them here)

EXAMPLE = """\
examples:
  ferry run -- python train.py --epochs 1     # run here, follow the output
  ferry run job.yaml --detach                  # submit and return
  ferry jobs --watch                           # live table of jobs
  ferry logs -f JOB                            # follow a job's output
  ferry status JOB                             # attempts, reason, outputs
"""


# command name -> module that registers it (imported only when that command runs)
COMMANDS = {
    "run": "run",
    "jobs": "jobs",
    "status": "status",
    "logs": "logs",
    "cancel": "control",
    "wait": "control",
    "preempt": "control",
    "metrics": "metrics_cmd",
    "plot": "plot_cmd",
    "compare": "compare_cmd",
    "top": "top_cmd",
    "outputs": "outputs_cmd",
    "cache": "cache_cmd",
    "env": "env_cmd",
    "config": "config_cmd",
    "agent": "agent_cmd",
    "ray": "ray_cmd",
    "catalog": "catalog_cmd",
    "cost": "cost_cmd",
    "budget": "budget_cmd",
    "check": "check_cmd",
    "sweep": "sweep_cmd",
}


def build_parser(only: str | None = None) -> Parser:
    """The parser; with ``only``, just that command's (building all costs start-up time)."""
    import argparse
    import importlib

    from ferry import __version__
    from ferry.cli._common import Parser

    parser = Parser(
        prog="ferry",
        description="Train here first, then on whatever accelerator fits, from one job spec.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of failures")
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=Parser)
    names = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in names:
        importlib.import_module(f"ferry.cli.{name}").register(sub)
    return parser


# commands the launcher does not run: the agent is a service of its own
_NOT_RELAYED = {"agent"}


def main(argv: list[str] | None = None) -> int:
    """Run the ``ferry`` command; returns the exit code. Called with no arguments (the
    ``ferry`` program), it hands the command to the launcher (:mod:`ferry.launcher`) when
    one is running, and starts one after the command when none is."""
    if argv is not None:
        return _run_here(list(argv))
    args_list = sys.argv[1:]
    command = next((a for a in args_list if not a.startswith("-")), None)
    if command not in _NOT_RELAYED:
        from ferry import launcher

        code = launcher.relay(args_list)
        if code is not None:
            return code
    code = _run_here(args_list)
    _start_launcher()
    return code


def _start_launcher() -> None:
    from ferry import launcher

    if not launcher.enabled():
        return
    try:
        from ferry import config

        launcher.start(float(config.get("launcher.idle") or 0))
    except Exception:  # only a head start for the next command
        return


def _run_here(args_list: list[str]) -> int:
    """Run the command in this process; returns the exit code."""
    import errno

    from ferry.errors import FerryError

    debug = "--debug" in args_list
    from ferry.storage.logs import library_logs

    # each failure is reported here in one sentence: the storage libraries' own log lines
    # would only repeat it (with --debug they are all shown)
    library_logs("debug" if debug else "quiet")
    try:
        return _main(args_list)
    except FerryError as exc:
        if debug:
            raise
        print(f"ferry: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ferry: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if debug:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        hint = ""
        if exc.errno == errno.ENOSPC:
            hint = " (free some space, or point FERRY_HOME at another disk)"
        elif exc.errno in (errno.EACCES, errno.EPERM):
            hint = " (check the permissions of that path)"
        print(f"ferry: {exc.strerror or exc}{where}{hint}", file=sys.stderr)
        return 1
    except Exception as exc:
        if debug:
            raise
        print(
            f"ferry: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


def _main(argv: list[str]) -> int:
    from ferry.cli.run import split_command
    from ferry.errors import UsageError

    options, command = split_command(argv)
    first = next((a for a in options if not a.startswith("-")), None)
    parser = build_parser(first)
    args: Any = parser.parse_args(options)
    if args.command_name is None:
        parser.print_help()
        return 2
    if command is not None and args.command_name != "run":
        raise UsageError(
            f"'ferry {args.command_name}' takes no command after --",
            f"see: ferry {args.command_name} --help",
        )
    args.command = command
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
