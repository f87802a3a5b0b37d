"""The job's code on a cloud machine: its snapshot brought from the bucket (or a channel
SageMaker filled) and unpacked into a fresh folder, or the attempt ended as not started,
with why."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ferry.errors import FerryError


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


def code_or_end(folder: str, code: str, attempt: int) -> Path | None:
    """The job's code brought to this machine (in a fresh folder); None when it could not
    be: the attempt whose run folder is ``folder`` then ends as not started, with why."""
    from ferry.runner import run
    from ferry.runner.record import RunFolderWriter, _Place

    work = Path(tempfile.mkdtemp(prefix="ferry-attempt-"))
    try:
        return bring_code(code, work)
    except (FerryError, OSError) as exc:
        why = f"the job's code could not be brought to the machine: {exc}"
        print(f"ferry: {why}", file=sys.stderr, flush=True)
        try:
            _Place(folder).remove(run.SECRETS)
            RunFolderWriter(folder, attempt, announce=False).end(None, run.NOT_STARTED, why)
        except FerryError as again:
            print(f"ferry: and its run folder could not be written: {again}", file=sys.stderr)
        return None
