"""Ferry's own wheel, made from the package this process runs: what a machine that is not
this one installs to run Ferry's runner (a cloud's prebuilt container, before the job).

The wheel is ``ferry-<version>-py3-none-any.whl``, pure Python, with Ferry's metadata
(its ``Requires-Dist``, so pip installs what Ferry needs, and its entry points) and every
file of the package but bytecode. The metadata is the installed distribution's (the first
``ferry`` found that lists its requirements), else ``pyproject.toml`` beside a source
checkout; with neither, no wheel is made. Its bytes depend only on those: entries in name
order, one fixed time, modes 644 or 755. So the same Ferry makes the same wheel, and its
hash names it in a bucket. It is made once per set of package files (their paths, sizes
and modification times) and metadata, and kept in ``FERRY_HOME/wheels/<id>/``.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import sys
import zipfile
from pathlib import Path

from ferry.errors import FerryError

FOLDER = "wheels"  # under FERRY_HOME
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_WHEEL = "Wheel-Version: 1.0\nGenerator: ferry\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def ferry_wheel() -> Path:
    """The wheel of the Ferry this process runs, made now if it was not made before."""
    import ferry
    from ferry.config import ferry_home

    package = Path(ferry.__file__).resolve().parent
    files = _package_files(package)
    metadata, entry_points = _metadata(package, ferry.__version__)
    ident = hashlib.sha256(f"{ferry.__version__}\n{metadata}\n{entry_points}\n".encode())
    for path in files:
        info = path.stat()
        ident.update(f"{path.relative_to(package)} {info.st_size} {info.st_mtime_ns}\n".encode())
    folder = ferry_home() / FOLDER / ident.hexdigest()[:16]
    wheel = folder / f"ferry-{ferry.__version__}-py3-none-any.whl"
    if wheel.is_file():
        return wheel
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = folder / f".{wheel.name}.{os.urandom(6).hex()}.tmp"
    try:
        _write(tmp, package, files, ferry.__version__, metadata, entry_points)
        os.replace(tmp, wheel)  # whole, or not there
    finally:
        tmp.unlink(missing_ok=True)
    return wheel


def _package_files(package: Path) -> list[Path]:
    return sorted(
        path
        for path in package.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.relative_to(package).parts
        and path.suffix not in (".pyc", ".pyo")
    )


def _write(
    target: Path,
    package: Path,
    files: list[Path],
    version: str,
    metadata: str,
    entry_points: str,
) -> None:
    dist = f"ferry-{version}.dist-info"
    entries: list[tuple[str, bytes, int]] = []
    for path in files:
        name = f"ferry/{path.relative_to(package).as_posix()}"
        mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
        entries.append((name, path.read_bytes(), mode))
    entries.append((f"{dist}/METADATA", metadata.encode(), 0o644))
    if entry_points:
        entries.append((f"{dist}/entry_points.txt", entry_points.encode(), 0o644))
    entries.append((f"{dist}/WHEEL", _WHEEL.encode(), 0o644))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data, _ in entries:
        writer.writerow([name, f"sha256={_digest(data)}", len(data)])
    writer.writerow([f"{dist}/RECORD", "", ""])
    entries.append((f"{dist}/RECORD", record.getvalue().encode(), 0o644))
    with zipfile.ZipFile(target, "w") as archive:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.create_system = 3  # (unix: the mode below is read)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | mode) << 16
            archive.writestr(info, data)


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(package: Path, version: str) -> tuple[str, str]:
    """Ferry's METADATA (this version's) and entry points. Raises :class:`FerryError` when
    nothing says what Ferry requires: a wheel without it would install Ferry without its
    dependencies."""
    from importlib import metadata

    for dist in metadata.distributions(name="ferry"):
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        if "\nRequires-Dist:" in text:  # (an egg-info in a source folder may lack them)
            entry_points = dist.read_text("entry_points.txt") or ""
            return _with_version(text, version), entry_points
    pyproject = package.parent / "pyproject.toml"
    if pyproject.is_file():
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # (Python 3.10)
            import tomli as tomllib

        project = tomllib.loads(pyproject.read_text()).get("project") or {}
        if project.get("name") == "ferry":
            lines = ["Metadata-Version: 2.1", "Name: ferry", f"Version: {version}"]
            if project.get("requires-python"):
                lines.append(f"Requires-Python: {project['requires-python']}")
            lines += [f"Requires-Dist: {req}" for req in project.get("dependencies") or []]
            scripts = project.get("scripts") or {}
            entry_points = "".join(f"{k} = {v}\n" for k, v in scripts.items())
            return "\n".join(lines) + "\n", (
                "[console_scripts]\n" + entry_points if scripts else ""
            )
    raise FerryError(
        "cannot make Ferry's wheel: no installed Ferry says what it requires",
        "install Ferry with pip (pip install ferry), then try again",
    )


def _with_version(text: str, version: str) -> str:
    """``text`` (a METADATA file) saying ``version``, its other fields as they are."""
    head, sep, body = text.partition("\n\n")
    lines = [
        f"Version: {version}" if line.startswith("Version:") else line for line in head.splitlines()
    ]
    return "\n".join(lines) + (sep + body if sep else "\n")
