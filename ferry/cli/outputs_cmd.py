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


def delivered(outputs: str, folder: str) -> list[tuple[str, int]]:
    """(path inside ``folder``, size) of each file a job delivered to one of its output
    folders (``model``, ``checkpoints`` ...): read from its manifest, which lists only the
    job's own files; from the folder itself while local outputs have none yet."""
    if "://" not in outputs:  # (without the storage modules: `ferry run` shows this)
        import json

        try:
            manifest = json.loads((Path(outputs) / "manifest.json").read_text())
        except FileNotFoundError:
            root = Path(outputs) / folder
            found = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
            return [(str(p.relative_to(root)), p.stat().st_size) for p in found if p.exists()]
    else:
        from ferry.storage.outputs import read_manifest

        manifest = read_manifest(outputs) or {"files": []}
    prefix = folder + "/"
    return [
        (f["path"].removeprefix(prefix), int(f["size"]))
        for f in manifest["files"]
        if f["path"].startswith(prefix)
    ]


def files_text(files: list[tuple[str, int]], names: int = 3) -> str:
    """``'model.pt (1.2 MB)'``, or ``'3 files, 4.5 MB: a.pt, b.json, c.txt'`` (the first
    ``names`` of them, then how many more)."""
    from ferry.units import format_size

    total = format_size(sum(size for _, size in files))
    if len(files) == 1:
        return f"{files[0][0]} ({total})"
    shown = ", ".join(path for path, _ in files[:names])
    more = f" and {len(files) - names} more" if len(files) > names else ""
    return f"{len(files)} files, {total}: {shown}{more}"


def outputs(args: argparse.Namespace) -> int:
    from ferry.storage.failures import bucket_errors
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
            with bucket_errors(target):
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
        with bucket_errors(target):
            fs.get([target.child(p).path for p in paths], [str(dest / p) for p in paths])
        size = format_size(sum(f["size"] for f in files))
        plural = "s" if len(files) != 1 else ""
        with_manifest = f", and its {MANIFEST}" if complete else ""
        eprint(
            f"ferry: {len(files)} file{plural} of {job.id} ({size}) copied to {dest}{with_manifest}"
        )
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
