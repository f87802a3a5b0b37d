"""``ferry check JOB.yaml --backend vertex|sagemaker``: the cloud setup a job needs,
checked before it is sent (credentials, project or region, bucket, role or service
account, the machine in the region, quota)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferry.cli._common import add_command
from ferry.cli.spec_flags import add_spec_flags, overrides_from

EXAMPLE = """\
  ferry check job.yaml --backend sagemaker
  ferry check job.yaml --backend vertex --accelerator T4:1 --spot
  ferry check job.yaml --backend vertex --json
  ferry check job.yaml --backend sagemaker --outputs s3://my-bucket/runs/{job_id}
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "check",
        help="check a cloud's setup for a job before sending it",
        description="Check what a job needs of a cloud before it is sent: credentials, "
        "the project or region, the bucket (written and removed), the role or service "
        "account, the machine in the region, and its quota where the provider tells it. "
        "Each failure says how to fix it. ferry run does the same before every cloud job "
        "(a check that passed is trusted for 10 minutes).",
        example=EXAMPLE,
    )
    p.add_argument("spec", help="job spec file (YAML)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_spec_flags(p, "vertex, sagemaker or auto (default: the spec's, else the setting)")
    p.set_defaults(handler=check)


def check(args: argparse.Namespace) -> int:
    from ferry import config
    from ferry.backends.preflight import as_json
    from ferry.backends.registry import get_backend
    from ferry.errors import UsageError
    from ferry.spec import load_spec

    spec = load_spec(args.spec, overrides_from(args, None))
    name = spec.backend or str(config.get("backend"))
    if name == "auto":  # the backend ferry run would choose
        from ferry.controller.jobs import choose_backend

        name = choose_backend(spec)
        spec = spec.model_copy(update={"backend": name})
    backend = get_backend(name)
    backend.check(spec)
    checks = backend.preflight(spec, trust=False)
    if checks is None:
        raise UsageError(
            f"the {name} backend has nothing to check before a job",
            "choose a cloud: --backend vertex or --backend sagemaker",
        )
    failed = [c for c in checks if c.ok is False]
    if args.json:
        print(json.dumps({"backend": name, "ok": not failed, "checks": as_json(checks)}, indent=2))
    else:
        for c in checks:
            mark = {True: "ok  ", False: "FAIL", None: "--  "}[c.ok]
            print(f"{mark} {c.what}: {c.said}")
            if c.ok is False and c.fix:
                print(f"     fix: {c.fix}")
        print(f"{name}: {'ready' if not failed else f'{len(failed)} to fix'}")
    return 1 if failed else 0
