"""``python -m ferry.runner.cloud RUN_FOLDER CODE``: an attempt's first step on a cloud
machine, once Ferry is installed there (Vertex AI installs its wheel from the request's
``packageUris``; on SageMaker, :mod:`ferry.runner.bootstrap` does).

It brings the job's code snapshot (``CODE``: the archive's URI in the job's bucket, or
the file a SageMaker channel put on the machine), unpacks it into a fresh folder, and runs
the attempt's order from there with the runner (:mod:`ferry.runner.run`), whose record
in ``RUN_FOLDER`` is what the controller follows. Code that cannot be brought ends the
attempt as not started, with the reason, in the same record.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ferry.errors import FerryError

USAGE = "usage: python -m ferry.runner.cloud RUN_FOLDER CODE_ARCHIVE"


def bring_code(code: str, work: Path) -> Path:
    """The job's code, unpacked under ``work``; returns its folder. Raises FerryError."""
    from ferry.packaging.bundle import extract
    from ferry.storage.failures import bucket_errors
    from ferry.storage.locations import parse_uri
    from ferry.storage.registry import filesystem

    place = parse_uri(code)
    if place.is_local:
        archive = Path(place.path)
        if archive.is_dir():  # a channel's folder: the one archive in it
            found = sorted(archive.glob("*.tar.gz"))
            if len(found) != 1:
                raise FerryError(
                    f"{archive} holds {len(found)} code archives, not one",
                    "submit the job again",
                )
            archive = found[0]
        if not archive.is_file():
            raise FerryError(f"the job's code archive {archive} is not there", "submit again")
    else:
        archive = work / "code.tar.gz"
        with bucket_errors(place, context="the job's code"):
            filesystem(place.protocol).get_file(place.path, str(archive))
    target = work / "code"
    extract(archive, target)
    if not place.is_local:
        archive.unlink()
    return target


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
    from ferry.runner.order import RunOrder
    from ferry.runner.record import RunFolderWriter

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or any(a.startswith("-") for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    folder, code = args
    missing = ensure_storage(folder)
    if missing:
        print(f"ferry: {missing}", file=sys.stderr, flush=True)
        return 1
    work = Path(tempfile.mkdtemp(prefix="ferry-attempt-"))
    try:
        where = bring_code(code, work)
    except (FerryError, OSError) as exc:
        from ferry.runner.record import _Place

        why = f"the job's code could not be brought to the machine: {exc}"
        print(f"ferry: {why}", file=sys.stderr, flush=True)
        try:
            _Place(folder).remove(run.SECRETS)
            order = RunOrder.read(folder)
            record = RunFolderWriter(folder, order.attempt, announce=False)
            record.end(None, run.NOT_STARTED, why)
        except FerryError as again:
            print(f"ferry: and its run folder could not be written: {again}", file=sys.stderr)
        return 1
    os.chdir(where)  # the order's working folder is "." : the code
    print(f"ferry: code of the job in {where}; starting its runner", file=sys.stderr, flush=True)
    return run.main([folder])


if __name__ == "__main__":
    sys.exit(main())
