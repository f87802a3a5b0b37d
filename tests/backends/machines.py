"""What both provider doubles (tests/backends/vertex_server.py, sagemaker_server.py) do
with a job's machines: the image's interpreter, a machine taken back, and the machines of a
job of several started together, their names resolved to this machine (each sees an
``/etc/hosts`` of its own), and waited for as the providers wait: the job ends when every
machine's command has, and the first that fails makes the provider take the others back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def image_python(root: Path) -> Path:
    """An interpreter standing for a prebuilt image's: a venv whose packages are this
    session's (torch, gcsfs, pip ...) through a ``.pth``, but not Ferry, which the job's
    request installs."""
    import site
    import sysconfig

    folder = root / "image"
    python = folder / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    ours = sysconfig.get_paths()["purelib"]
    found = sorted((folder / "lib").glob("python*/site-packages"))[0]
    (found / "image-packages.pth").write_text(f"{ours}\n")
    assert site  # (the .pth is read by the new interpreter's site module)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('ferry') is None)"],
        capture_output=True,
        text=True,
        cwd=str(root),
    )
    assert probe.stdout.strip() == "True", probe
    return python


def stop_with_grace(proc: subprocess.Popen[bytes], grace: float) -> None:
    """What a provider does to a machine it takes back: SIGTERM to the command's process
    group, SIGKILL after ``grace`` seconds (on a thread: the caller goes on)."""

    def stop() -> None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)

    threading.Thread(target=stop, daemon=True).start()


def names_here(vm: Path, names: list[str]) -> tuple[str, str]:
    """The mount that makes the job's machines' ``names`` resolve to this machine, as each
    provider's network resolves them to its machines: an ``/etc/hosts`` of the machine's
    own (under ``vm``), for :func:`ferry.contract.container_paths.wrap`."""
    hosts = vm / "hosts"
    known = Path("/etc/hosts").read_text() if Path("/etc/hosts").is_file() else ""
    hosts.write_text(f"{known.rstrip()}\n127.0.0.1 {' '.join(names)}\n")
    return str(hosts), "/etc/hosts"


def start(
    machines: list[tuple[list[str], dict[str, str], Path]], home: bool
) -> list[subprocess.Popen[bytes]]:
    """Start each machine's ``(command, variables, folder)``, its output to the folder's
    ``log.txt``, in a session of its own (run in the folder's ``home`` when ``home``)."""
    procs = []
    for argv, env, vm in machines:
        with open(vm / "log.txt", "ab") as log:
            cwd = vm / "home" if home else None
            procs.append(
                subprocess.Popen(
                    argv, env=env, cwd=cwd, stdout=log, stderr=log, start_new_session=True
                )
            )
    return procs


def wait_all(procs: list[subprocess.Popen[bytes]], grace: float) -> tuple[int, int]:
    """Wait for every machine's command. The first that fails has the others taken back
    (:func:`stop_with_grace`). Returns its exit code and index, else ``(0, 0)``."""
    failed: tuple[int, int] | None = None
    while any(p.poll() is None for p in procs):
        for index, proc in enumerate(procs):
            code = proc.poll()
            if failed is None and code:
                failed = (code, index)
                for other in procs:
                    if other.poll() is None:
                        stop_with_grace(other, grace)
        time.sleep(0.1)
    if failed is None:  # (one that failed as the last ones ended)
        failed = next(((p.returncode, i) for i, p in enumerate(procs) if p.returncode), None)
    return failed or (0, 0)
