"""``ferry outputs JOB``: what a job delivered, and fetching it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ferry.cli._common import add_command, eprint, find_job, store_now

EXAMPLE = """\
  ferry outputs digits-cnn-3f9a
  ferry outputs dig --download ./results      # copy everything here
  ferry outputs dig --json | jq '.files[].path'
"""


def register(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "outputs",
        help="list a job's outputs, or download them",
        description="List what a job wrote to its outputs location (model, checkpoints, "
        "tensorboard, output, logs), from the manifest written when it finished; or "
        "download them.",
        example=EXAMPLE,
    )
    p.add_argument("job", help="job id or unique prefix")
    p.add_argument("--download", "-d", metavar="DIR", help="copy the outputs into DIR")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(handler=outputs)


def outputs(args: argparse.Namespace) -> int:
    from ferry.storage.locations import parse_uri
    from ferry.storage.outputs import MANIFEST, read_manifest
    from ferry.storage.registry import filesystem
    from ferry.units import format_size

    store = store_now()
    job = find_job(store, args.job)
    manifest = read_manifest(job.outputs)
    target = parse_uri(job.outputs)
    fs = filesystem(target.protocol)
    if manifest is None:  # still running, or failed before finishing: list what is there
        try:
            found = fs.find(target.path, detail=True)
        except FileNotFoundError:
            found = {}
        files = [
            {"path": key[len(target.path) :].lstrip("/"), "size": info.get("size", 0)}
            for key, info in sorted(found.items())
        ]
        complete = False
    else:
        files, complete = manifest["files"], True
    if args.download:
        dest = Path(args.download)
        dest.mkdir(parents=True, exist_ok=True)
        paths = [f["path"] for f in files] + ([MANIFEST] if complete else [])
        fs.get([target.child(p).path for p in paths], [str(dest / p) for p in paths])
        eprint(f"ferry: {len(paths)} files of {job.id} copied to {dest}")
        return 0
    if args.json:
        print(
            json.dumps(
                {"job": job.id, "outputs": job.outputs, "complete": complete, "files": files},
                indent=2,
            )
        )
        return 0
    print(f"{job.outputs}  ({'complete' if complete else 'incomplete: no manifest yet'})")
    for f in files:
        print(f"  {format_size(f['size']):>10}  {f['path']}")
    return 0
