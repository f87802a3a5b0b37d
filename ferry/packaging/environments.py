"""Environments from ``environment.requirements``: one virtual environment per requirements
hash, built once on this machine and shared by every job that asks for the same.

An environment lives in ``FERRY_HOME/envs/<key>/``. The key is a hash of what decides its
contents: the interpreter it is made from (path, version, platform), the Ferry it links,
the requirements as pip reads them (``-r`` and ``-c`` files inlined, comments dropped),
the bytes of the local wheels and ``--find-links`` folders they name, and the ``PIP_*`` and
``UV_*`` variables the job is submitted with (an index URL). A changed requirements file,
or a new wheel in a folder it names, is another environment; the same one is reused in a
few milliseconds. (Requirements that are not pinned keep what the first build resolved.)

- Built with uv when it is installed, else with this Python's pip (``pip --python``, into a
  venv made without pip: no ensurepip to wait for). Every line the installer prints goes
  to the job's ``environment.log``; the packages it installs are said in the job's events.
- Built in place, under an exclusive lock (``<key>.build``): a second job asking for the
  same environment waits for that build, not for the first job, and finds it whole. The
  marker ``ferry-env.json`` is written last: a folder without it (a build killed, a full
  disk) is removed and built again by the next job that wants it. The installer dies with
  the process that started it.
- A job holds a shared lock (``<key>.lock``) on its environment while its supervisor
  follows it: ``ferry env prune`` removes only environments no job holds and none is
  building, last used before its limit.
- Ferry's own package is made importable in it (for ``ferry.runtime``) through a ``.pth``
  file naming a folder that holds only a link to it, unless the requirements install Ferry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ferry.errors import FerryError, UsageError

FOLDER = "envs"  # under FERRY_HOME
READY = "ferry-env.json"  # in an environment: written last, when it is whole
BUILD_LOG = "environment.log"  # in the job folder: what the installer printed
_FERRY_LINK = "ferry-link"  # in an environment: a folder holding only a link to Ferry
_TAIL = 12  # the installer's last lines in a failure's reason
# pip's options for an install no one watches: no prompts, no bars, no upgrade nagging
_PIP_QUIET = ("--disable-pip-version-check", "--no-input", "--progress-bar", "off")


class BuildFailed(FerryError):
    """The installer could not install the requirements (its last lines say why)."""


@dataclass(frozen=True)
class Wanted:
    """An environment asked for: its key, and the requirements file pip reads."""

    key: str
    requirements: Path
    text: str  # the requirements as pip reads them, includes inlined

    @property
    def short(self) -> str:
        return self.key[:12]

    @property
    def folder(self) -> str:
        """Its folder's name under FERRY_HOME/envs (64 bits of the key: short paths)."""
        return self.key[:16]


def envs_root() -> Path:
    from ferry.config import ferry_home

    return ferry_home() / FOLDER


def wanted(requirements: Path, code: Path, environ: dict[str, str], name: str = "") -> Wanted:
    """The environment ``requirements`` (in the job's ``code`` folder, where the installer
    runs) asks for, with the job's environment ``environ``. Raises :class:`UsageError` for
    a file that cannot be read, or one that asks for what a shared environment cannot
    hold (editable installs, local source folders), or names a local file not there."""
    h = hashlib.sha256()
    h.update(_interpreter().encode())
    for key in sorted(environ):
        if key.startswith(("PIP_", "UV_")) and key not in _COSMETIC:
            h.update(f"{key}={environ[key]}\n".encode())
    text = _read(requirements, name or requirements.name, code, h, set())
    return Wanted(h.hexdigest(), requirements, text)


def requirements_file(code: Path, requirements: str) -> Path:
    """The requirements file ``environment.requirements`` names in a job's code snapshot.
    Raises :class:`UsageError` for one outside the code folder or not there."""
    path = (code / requirements).resolve()
    if os.path.isabs(requirements) or not path.is_relative_to(code.resolve()):
        raise UsageError(
            f"environment.requirements: {requirements} is not inside the job's code folder",
            "give its path relative to code, e.g. requirements.txt",
        )
    if not path.is_file():
        raise UsageError(
            f"environment.requirements: {requirements} is not in the job's code folder",
            "give its path relative to the code folder; a .gitignore or .ferryignore may "
            "leave it out",
        )
    return path


# installer settings that change nothing in what is installed
_COSMETIC = frozenset(
    {
        "PIP_NO_INPUT",
        "PIP_DISABLE_PIP_VERSION_CHECK",
        "PIP_PROGRESS_BAR",
        "PIP_CACHE_DIR",
        "PIP_NO_CACHE_DIR",
        "PIP_QUIET",
        "PIP_VERBOSE",
        "UV_CACHE_DIR",
        "UV_NO_CACHE",
        "UV_NO_PROGRESS",
        "UV_LINK_MODE",
        "UV_CONCURRENT_DOWNLOADS",
    }
)


def _interpreter() -> str:
    """What the environments made here are made from: the interpreter (its path, version,
    platform and C library, not the kernel's release) and the Ferry they link."""
    import sysconfig

    import ferry

    base = getattr(sys, "_base_executable", sys.executable)
    libc = " ".join(platform.libc_ver())
    return (
        f"{os.path.realpath(base)}\n{sys.version}\n{sysconfig.get_platform()} {libc}\n"
        f"{Path(ferry.__file__).resolve().parent} {ferry.__version__}\n"
    )


_INCLUDES = ("-r", "--requirement", "-c", "--constraint")
_LOCAL_OPTIONS = ("-f", "--find-links")
_EDITABLE = ("-e", "--editable")


def _read(path: Path, shown: str, code: Path, h: Any, seen: set[Path]) -> str:
    try:
        raw = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"environment.requirements: cannot read {shown} ({exc})",
            "give the path of a requirements file inside the job's code folder",
        ) from None
    seen.add(path.resolve())
    out: list[str] = []
    for number, line in enumerate(raw.splitlines(), 1):
        words = _words(line)
        if not words:
            continue
        where = f"{shown} line {number} ({' '.join(words)})"
        option, value = _option(words)
        if option in _EDITABLE:
            raise UsageError(
                f"environment.requirements: {where} is an editable install, which an "
                "environment shared by jobs cannot hold",
                "import the package from the job's code folder, or install it by name or wheel",
            )
        if option in _INCLUDES and value:
            included = (path.parent / value).resolve()
            if included in seen:
                continue
            out.append(f"{option} {value}")
            out.append(_read(included, value, code, h, seen))
            continue
        out.append(" ".join(words))
        if option in _LOCAL_OPTIONS and value and "://" not in value:
            # as pip finds it: beside the requirements file, else from the code folder
            places = [path.parent / value, code / value]
            if not any(_hash_local(place, h, folder_ok=True) for place in places):
                _missing(where, value)
            continue
        for word in words:
            if "://" in word and not word.startswith("file://"):
                continue  # (a URL: the installer fetches it)
            local = word.removeprefix("file://")
            if "/" in local or local.endswith((".whl", ".tar.gz", ".zip")):
                target = Path(local) if os.path.isabs(local) else code / local
                if not _hash_local(target, h, folder_ok=False) and local.endswith(".whl"):
                    _missing(where, local)
    text = "\n".join(out)
    h.update(text.encode())
    return text


def _missing(where: str, name: str) -> None:
    raise UsageError(
        f"environment.requirements: {where} names {name}, which is not in the job's code folder",
        "add it to the code folder (a .gitignore or .ferryignore may leave it out)",
    )


_COMMENT = re.compile(r"(^|\s)#.*$")


def _words(line: str) -> list[str]:
    """The words of a requirements line, without its comment (``#`` at the start or after
    a space, as pip reads it: a URL's ``#sha256=`` fragment stays)."""
    return _COMMENT.sub("", line).split()


def _option(words: list[str]) -> tuple[str, str]:
    first = words[0]
    if first.startswith("--") and "=" in first:
        name, _, value = first.partition("=")
        return name, value
    if first.startswith("-"):
        return first, words[1] if len(words) > 1 else ""
    return "", ""


def _hash_local(target: Path, h: Any, folder_ok: bool) -> bool:
    """Into ``h``: the bytes of the local file ``target`` (or, with ``folder_ok``, of the
    files in the folder: a ``--find-links`` folder). False when there is none. Raises
    :class:`UsageError` for a folder where only files may be (a local source folder would
    be built in the shared code snapshot, and change under the environment)."""
    try:
        if target.is_file():
            h.update(f"file {target.name}\n".encode())
            h.update(target.read_bytes())
            return True
        if target.is_dir():
            if not folder_ok:
                raise UsageError(
                    f"environment.requirements names the folder {target.name}, which an "
                    "environment shared by jobs cannot be built from",
                    f"build a wheel of it (pip wheel {target.name} -w wheels) and name that",
                )
            for item in sorted(p for p in target.rglob("*") if p.is_file()):
                h.update(f"file {item.relative_to(target)}\n".encode())
                h.update(item.read_bytes())
            return True
    except OSError:
        return False
    return False


# ---------------------------------------------------------------------------------------
# Building, and holding while a job runs


class Held:
    """An environment a job uses: a shared lock on it until :meth:`release`."""

    def __init__(self, path: Path, fd: int, built: bool, seconds: float) -> None:
        self.path = path
        self._fd = fd
        self.built = built  # built now (rather than reused)
        self.seconds = seconds  # the time it took to have it

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    def info(self) -> dict[str, Any]:
        return json.loads((self.path / READY).read_text())  # type: ignore[no-any-return]

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def ensure(
    want: Wanted,
    cwd: Path,
    log: IO[bytes],
    progress: Callable[[str], None] = lambda line: None,
    environ: dict[str, str] | None = None,
    log_name: str | None = None,
) -> Held:
    """The environment ``want`` asks for, built now if it is not here yet (the installer
    run in ``cwd`` with ``environ``, its lines to ``log``, which a failure names as
    ``log_name`` or its path, the notable ones to ``progress``), held with a shared lock
    until released. Raises :class:`BuildFailed`."""
    started = time.monotonic()
    root = envs_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / want.folder
    fd = _open_lock(root / f"{want.folder}.lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # in use: prune leaves it (it waits only on a prune)
        built = False
        if not (path / READY).exists():
            build = _open_lock(root / f"{want.folder}.build")
            try:
                fcntl.flock(build, fcntl.LOCK_EX)  # one build; others wait for it, only
                if not (path / READY).exists():
                    shown = log_name or str(getattr(log, "name", BUILD_LOG))
                    _build(want, path, cwd, log, progress, environ or dict(os.environ), shown)
                    built = True
            finally:
                os.close(build)
        with contextlib.suppress(OSError):
            os.utime(path / READY)  # its last use, for prune
    except BaseException:
        os.close(fd)
        raise
    return Held(path, fd, built, time.monotonic() - started)


def _open_lock(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _build(
    want: Wanted,
    path: Path,
    cwd: Path,
    log: IO[bytes],
    progress: Callable[[str], None],
    environ: dict[str, str],
    shown: str,
) -> None:
    shutil.rmtree(path, ignore_errors=True)  # half built by a process that died
    env = {**environ, "PIP_NO_INPUT": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_TARGET", "PIP_PREFIX"):
        env.pop(name, None)
    try:
        venv = [sys.executable, "-m", "venv", "--without-pip", str(path)]
        _run(venv, cwd, env, log, progress, "venv", shown)
        python = path / "bin" / "python"
        installer, argv = _installer(python, want.requirements)
        progress(f"installing {want.requirements.name} with {installer}")
        _run(argv, cwd, env, log, progress, installer, shown)
        site = _site_packages(path)
        if not (site / "ferry").exists():  # (the requirements may install Ferry itself)
            link = path / _FERRY_LINK
            link.mkdir()
            (link / "ferry").symlink_to(Path(__file__).resolve().parents[1])
            (site / "ferry-link.pth").write_text(f"{link}\n")
        info = {
            "key": want.key,
            "requirements": want.text,
            "python": _interpreter().splitlines()[0],
            "installer": installer,
            "created": time.time(),
            "packages": _packages(site),
        }
        tmp = path / f".{READY}.tmp"
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, path / READY)  # last: the environment is whole
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def install_here(
    requirements: Path,
    cwd: Path,
    log: IO[bytes],
    progress: Callable[[str], None] = lambda line: None,
    environ: dict[str, str] | None = None,
    log_name: str | None = None,
) -> list[str]:
    """Install ``requirements`` into this very interpreter, with its pip (a provider's
    framework container: its torch stays, and the job's packages join it). Returns the
    packages pip said it installed. Raises :class:`BuildFailed` with pip's last lines."""
    env = {**(environ or os.environ), "PIP_NO_INPUT": "1", "PYTHONUNBUFFERED": "1"}
    env["NO_COLOR"] = "1"
    argv = [sys.executable, "-m", "pip", "install", *_PIP_QUIET, "-r", str(requirements)]
    installed: list[str] = []

    def notable(line: str) -> None:
        if line.startswith("Successfully installed"):
            installed.extend(line.split()[2:])
        progress(line)

    shown = log_name or str(getattr(log, "name", BUILD_LOG))
    _run(argv, cwd, env, log, notable, "pip", shown)
    return installed


def installer() -> tuple[str, str]:
    """The installer the ``env.installer`` setting picks here (``uv`` or ``pip``), and the
    program to run. Raises :class:`UsageError` when it is not installed."""
    import importlib.util

    from ferry import config

    chosen = str(config.get("env.installer"))
    if chosen != "pip":
        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
        if uv:
            return "uv", uv
        if chosen == "uv":
            raise UsageError(
                "env.installer is uv, but uv is not installed here",
                "pip install uv, or: ferry config set env.installer auto",
            )
    if importlib.util.find_spec("pip") is None:
        raise UsageError(
            "environment.requirements needs uv or pip, and this Python has neither",
            f"{sys.executable} -m ensurepip, or install uv",
        )
    return "pip", sys.executable


def _installer(python: Path, requirements: Path) -> tuple[str, list[str]]:
    """The installer, and its command to install ``requirements`` for ``python``."""
    try:
        name, program = installer()
    except UsageError as exc:
        raise BuildFailed(exc.message, exc.hint) from None
    if name == "uv":
        return "uv", [program, "pip", "install", "--python", str(python), "-r", str(requirements)]
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", *_PIP_QUIET]
    return "pip", [*pip, "-r", str(requirements)]


_NOTABLE = ("Collecting", "Downloading", "Processing", "Installing", "Successfully", "Resolved")


def _run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log: IO[bytes],
    progress: Callable[[str], None],
    who: str,
    shown: str,
) -> None:
    from ferry.runner.spawn import spawn

    log.write(f"$ {shlex.join(argv)}\n".encode())
    log.flush()
    tail: list[str] = []
    options = {
        "cwd": cwd,
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
    }
    with spawn(argv, options) as proc:  # (it dies with this process: no build goes on alone)
        assert proc.stdout is not None
        for raw in proc.stdout:
            log.write(raw)
            line = raw.decode(errors="replace").rstrip()
            if line.strip() and not line.startswith("Using Python"):  # (uv's first words)
                tail = [*tail[-(_TAIL - 1) :], line.strip()]
            if line.lstrip().startswith(_NOTABLE):
                progress(line.strip())
        code = proc.wait()
    log.flush()
    if code != 0:
        raise BuildFailed(
            f"environment.requirements could not be installed ({who} exit code {code}): "
            + " | ".join(tail[-4:])
            + f"; the installer's whole output is in {shown}"
        )


def _site_packages(path: Path) -> Path:
    found = sorted((path / "lib").glob("python*/site-packages"))
    if not found:
        raise BuildFailed(f"{path} has no site-packages folder", "remove it and try again")
    return found[0]


def _packages(site: Path) -> list[str]:
    """``name version`` of each distribution installed in ``site``."""
    out = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        fields = {}
        for line in meta.read_text(errors="replace").splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "name" in fields:
            out.append(f"{fields['name']} {fields.get('version', '?')}")
    return out


# ---------------------------------------------------------------------------------------
# Listing and pruning (ferry env ls, ferry env prune)


@dataclass(frozen=True)
class Environment:
    """One environment under FERRY_HOME/envs, as ``ferry env ls`` shows it."""

    key: str
    path: Path
    ready: bool  # whole (False: a build in progress, or one that died)
    in_use: bool  # held by a running job, or being built
    size: int
    created: float | None
    last_used: float | None
    packages: tuple[str, ...]
    installer: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": str(self.path),
            "ready": self.ready,
            "in_use": self.in_use,
            "size": self.size,
            "created": self.created,
            "last_used": self.last_used,
            "packages": list(self.packages),
            "installer": self.installer,
        }


def environments() -> list[Environment]:
    """Every environment here, the most recently used first."""
    root = envs_root()
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        if not path.is_dir() or path.name.startswith("."):
            continue
        found.append(_look(path))
    return sorted(found, key=lambda e: -(e.last_used or 0.0))


def _look(path: Path, locked: bool = False) -> Environment:
    info: dict[str, Any] = {}
    last_used = None
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((path / READY).read_text())
        last_used = (path / READY).stat().st_mtime
    in_use = False
    if not locked:
        for lock in (f"{path.name}.lock", f"{path.name}.build"):
            with _try_lock(path.parent / lock) as free:
                in_use = in_use or not free
    return Environment(
        key=path.name,
        path=path,
        ready=bool(info),
        in_use=in_use,
        size=_size(path),
        created=info.get("created"),
        last_used=last_used,
        packages=tuple(info.get("packages") or ()),
        installer=info.get("installer"),
    )


@contextlib.contextmanager
def _try_lock(lock: Path) -> Iterator[bool]:
    """An exclusive lock on ``lock`` if no one holds it (True), else nothing (False)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def prune(older_than: float, dry_run: bool = False) -> list[Environment]:
    """Remove the environments no job holds that were last used more than ``older_than``
    seconds ago (and any left half built); returns them."""
    removed = []
    for listed in environments():
        root = listed.path.parent
        with (
            _try_lock(root / f"{listed.key}.lock") as unused,
            _try_lock(root / f"{listed.key}.build") as unbuilt,
        ):
            if not (unused and unbuilt):  # a job holds it, or builds it
                continue
            env = _look(listed.path, locked=True)  # (as it is now: a build may have ended)
            if env.ready and (env.last_used or 0.0) >= time.time() - older_than:
                continue
            if not dry_run:  # (its lock files stay: a job may be waiting on them)
                shutil.rmtree(env.path, ignore_errors=True)
        removed.append(env)
    return removed
