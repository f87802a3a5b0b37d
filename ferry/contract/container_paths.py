"""Container paths without a container: ``/opt/ml/...`` and ``/gcs/<bucket>/...`` for scripts
that hard-code them, in a private mount namespace.

The job's command runs under ``unshare`` (util-linux) in a namespace of its own, chrooted
into a root made of bind mounts of this machine's top-level folders, to which ``/opt/ml``
(SageMaker's tree, bound to the job's folders) and ``/gcs/<bucket>/...`` (Vertex AI's
Cloud Storage FUSE paths, bound to the job's staged inputs and outputs) are added. Nothing
changes outside the namespace, and no root is needed where the kernel allows user
namespaces; where it does not, the job is refused with the way to enable them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path

from ferry.errors import FerryError

# what a script hard-codes when it expects a provider's container: SageMaker's tree, and
# Vertex AI's Cloud Storage FUSE paths
OPT_ML_MARK, GCS_MARK = "/opt/ml/", "/gcs/"
MARKERS = (OPT_ML_MARK, GCS_MARK)
OPT_ML = "/opt/ml"  # where a SageMaker container has the job's tree
# in words, for messages
MARKER_WORDS = {
    OPT_ML_MARK: "/opt/ml/ (SageMaker's folders)",
    GCS_MARK: "/gcs/ (Vertex AI's Cloud Storage FUSE paths)",
}


def mentioned(code: Path, limit: int = 1 << 20) -> frozenset[str]:
    """Which of :data:`MARKERS` the text files of the snapshot ``code`` mention. The
    answer for a snapshot shared through the code store is kept beside its tree, whose
    files never change: the next job from the same files reads none of them."""
    if not code.is_symlink():
        return _mentioned(code, limit)
    from ferry.packaging.code_store import remembered

    found = remembered(code, "container-paths", lambda: " ".join(sorted(_mentioned(code, limit))))
    return frozenset(m for m in found.split() if m in MARKERS)


def _mentioned(code: Path, limit: int) -> frozenset[str]:
    needles = {m: m.encode() for m in MARKERS}
    found: set[str] = set()
    for dirpath, _, files in os.walk(code):
        for name in files:
            path = Path(dirpath) / name
            try:
                if path.stat().st_size > limit:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\0" not in data[:1024]:
                found.update(m for m, needle in needles.items() if needle in data)
                if len(found) == len(MARKERS):
                    return frozenset(found)
    return frozenset(found)


@cache
def _user_namespace_flags() -> tuple[str, ...]:
    """``()`` as root; ``--user --map-root-user`` for others, if the kernel allows it."""
    if os.geteuid() == 0:
        return ()
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        raise FerryError(
            "this kernel does not let unprivileged users create mount namespaces, which "
            "/opt/ml and /gcs paths need",
            "enable them (sysctl kernel.unprivileged_userns_clone=1, or "
            "kernel.apparmor_restrict_unprivileged_userns=0), or set paths: host",
        )
    return ("--user", "--map-root-user")


def wrap(
    argv: list[str],
    cwd: str,
    root: Path,
    binds: list[tuple[str, str]],
    read_only: tuple[str, ...] = (),
) -> list[str]:
    """The command line that runs ``argv`` in ``cwd`` with ``binds`` (source, target)
    added to a private view of this machine built under ``root`` (an empty folder)."""
    if shutil.which("unshare") is None or shutil.which("chroot") is None:
        raise FerryError(
            "container paths (/opt/ml, /gcs) need the unshare and chroot commands",
            "install util-linux and coreutils",
        )
    root.mkdir(parents=True, exist_ok=True)
    script = _setup_script(root, binds, read_only)
    return [
        "unshare",
        *_user_namespace_flags(),
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "ferry-paths",
        cwd,
        *argv,
    ]


def _setup_script(root: Path, binds: list[tuple[str, str]], read_only: tuple[str, ...]) -> str:
    r = shlex.quote(str(root))
    lines = [
        "set -e",
        f"R={r}",
        'mount -t tmpfs ferry-root "$R"',
        # every top-level folder of this machine, as it is
        'for e in /*; do n="${e#/}"',
        '  if [ -L "$e" ]; then cp -P "$e" "$R/$n"',
        '  elif [ -d "$e" ]; then mkdir "$R/$n"; mount --rbind "$e" "$R/$n"',
        '  else touch "$R/$n"; mount --bind "$e" "$R/$n"; fi',
        "done",
    ]
    tops = sorted({Path(target).parts[1] for _, target in binds})
    for top in tops:
        # a fresh layer over this top-level folder, with its entries bound back in
        t = shlex.quote(top)
        lines += [
            f'if [ -d /{t} ] && [ ! -L /{t} ]; then mount -t tmpfs ferry-{t} "$R"/{t}',
            f'  for e in /{t}/* /{t}/.[!.]*; do [ -e "$e" ] || continue; n="${{e##*/}}"',
            '    if [ -d "$e" ] && [ ! -L "$e" ]; then mkdir "$R/' + top + '/$n"; '
            'mount --rbind "$e" "$R/' + top + '/$n"',
            '    else cp -P "$e" "$R/' + top + '/$n" 2>/dev/null || true; fi',
            "  done",
            f'else rm -f "$R"/{t}; mkdir -p "$R"/{t}; fi',
        ]
    for source, target in binds:
        s, t = shlex.quote(source), shlex.quote(target)
        lines += [
            f'if [ -d {s} ]; then mkdir -p "$R"{t}; '
            f'else mkdir -p "$(dirname "$R"{t})"; touch "$R"{t}; fi',
            f'mount --bind {s} "$R"{t}',
        ]
    for path in read_only:  # local inputs: the job reads them, it must not change them
        p = shlex.quote(path)
        lines += [f'mount --bind {p} "$R"{p}', f'mount -o remount,bind,ro "$R"{p}']
    for source, target in binds:
        if target == OPT_ML:  # SageMaker's toolkit finds the tree where the job sees it
            was = shlex.quote(source)
            lines.append(f'[ "${{SAGEMAKER_BASE_DIR:-}}" != {was} ] || SAGEMAKER_BASE_DIR={OPT_ML}')
    lines.append('exec chroot "$R" sh -c \'cd "$0" && exec "$@"\' "$@"')
    return "\n".join(lines)


def binds_for(
    opt_ml: Path,
    model: Path,
    checkpoints: Path,
    output: Path,
    tensorboard: Path,
    gcs: dict[str, str],
) -> list[tuple[str, str]]:
    """The mounts of a job: SageMaker's ``/opt/ml`` tree onto the job's folders, and
    ``/gcs/...`` paths (target -> local source) for its gs:// inputs and outputs."""
    binds = [
        (str(opt_ml), OPT_ML),
        (str(model), "/opt/ml/model"),
        (str(checkpoints), "/opt/ml/checkpoints"),
        (str(output), "/opt/ml/output/data"),
        (str(tensorboard), "/opt/ml/output/tensorboard"),
    ]
    binds += [(source, target) for target, source in sorted(gcs.items())]
    return binds


def gcs_path(uri: str) -> str | None:
    """``gs://bucket/key`` -> ``/gcs/bucket/key`` (Vertex AI's FUSE path); None otherwise."""
    if not uri.startswith("gs://"):
        return None
    return "/gcs/" + uri[len("gs://") :].strip("/")
