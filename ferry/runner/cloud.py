"""``python -m ferry.runner.cloud RUN_FOLDER CODE``: an attempt's first step on a cloud
machine, once Ferry is installed there (Vertex AI installs its wheel from the request's
``packageUris``; on SageMaker, :mod:`ferry.runner.bootstrap` does).

It brings the job's code snapshot (``CODE``: the archive's URI in the job's bucket, or
the file a SageMaker channel put on the machine), unpacks it into a fresh folder, and runs
the attempt's order from there with the runner (:mod:`ferry.runner.run`), whose record
in ``RUN_FOLDER`` is what the controller follows. Code that cannot be brought ends the
attempt as not started, with the reason, in the same record. One machine of several (an
order with several hosts) runs its share of the gang (:mod:`ferry.runner.cloud_gang`).
"""

from __future__ import annotations

import os
import sys

from ferry.errors import FerryError

USAGE = "usage: python -m ferry.runner.cloud RUN_FOLDER CODE_ARCHIVE"


def ensure_storage(folder: str) -> str:
    """Install the package the run folder's bucket needs (gcsfs, s3fs) when the image
    lacks it, as Ferry's own extra names it; returns what went wrong, or ``""``."""
    import importlib.util
    import subprocess

    from ferry.storage.locations import parse_uri
    from ferry.storage.registry import PROTOCOLS

    protocol = PROTOCOLS.get(parse_uri(folder).protocol)
    if protocol is None or importlib.util.find_spec(protocol.module) is not None:
        return ""
    from importlib.metadata import PackageNotFoundError, requires

    marker = f'extra == "{protocol.extra}"'
    try:
        listed = requires("ferry") or []
    except PackageNotFoundError:  # (Ferry without metadata: the bare name)
        listed = []
    wanted = [r.split(";")[0].strip() for r in listed if marker in r] or [protocol.module]
    print(f"ferry: installing {', '.join(wanted)} for {folder}", file=sys.stderr, flush=True)
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *wanted]
    if subprocess.run(pip).returncode != 0:
        return f"{', '.join(wanted)} could not be installed (pip's words above)"
    importlib.invalidate_caches()
    return ""


def main(argv: list[str] | None = None) -> int:
    from ferry.runner import run
    from ferry.runner.code import code_or_end
    from ferry.runner.order import RunOrder

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or any(a.startswith("-") for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    folder, code = args
    missing = ensure_storage(folder)
    if missing:
        print(f"ferry: {missing}", file=sys.stderr, flush=True)
        return 1
    try:
        order = RunOrder.read(folder)
    except FerryError as exc:
        print(f"ferry: {exc}", file=sys.stderr, flush=True)
        return 1
    if len(order.hosts) > 1:  # one machine of several: see ferry.runner.cloud_gang
        from ferry.runner import cloud_gang

        return cloud_gang.main(folder, code, order)
    where = code_or_end(folder, code, order.attempt)
    if where is None:
        return 1
    os.chdir(where)  # the order's working folder is "." : the code
    print(f"ferry: code of the job in {where}; starting its runner", file=sys.stderr, flush=True)
    return run.main([folder])


if __name__ == "__main__":
    sys.exit(main())
