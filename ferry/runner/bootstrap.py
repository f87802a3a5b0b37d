"""The first thing a cloud machine runs where the provider does not install Ferry itself
(SageMaker, and Vertex AI with ``environment.image``): ``python3 -c <this file> WHEEL
EXTRA RUN_FOLDER CODE``.

It uses nothing but the standard library, since it runs before anything is installed:

1. ``pip install "WHEEL[EXTRA]"``: Ferry's wheel, from a path on the machine (a
   SageMaker channel, Vertex AI's ``/gcs`` mount), with the storage package its bucket
   needs (``gcs``, ``s3``). What pip prints goes to the machine's log, so the provider's
   logs show what was installed.
2. ``python -m ferry.runner.cloud RUN_FOLDER CODE`` in place of this process.

When pip fails, its last lines are printed and written to ``/opt/ml/output/failure``
where that folder exists (SageMaker shows that file as the job's ``FailureReason``),
and the bootstrap exits 1: the attempt fails with pip's own words.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

TAIL = 8  # pip's last lines in a failure
FAILURE_FILE = "/opt/ml/output/failure"  # SageMaker's: its text becomes the FailureReason


def command(wheel: str, extra: str, python: str = "python3") -> list[str]:
    """The command that runs this bootstrap on a machine (its source inline): the words
    before ``RUN_FOLDER CODE``."""
    return [python, "-c", Path(__file__).read_text(), wheel, extra]


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: bootstrap WHEEL EXTRA RUN_FOLDER CODE", file=sys.stderr)
        return 2
    wheel, extra, folder, code = argv
    wanted = f"{wheel}[{extra}]" if extra else wheel
    print(f"ferry bootstrap: installing {wanted} with {sys.executable}", flush=True)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        wanted,
    ]
    proc = subprocess.Popen(pip, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    tail: list[str] = []
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        print(line, flush=True)
        if line.strip():
            tail = [*tail[-(TAIL - 1) :], line.strip()]
    code_ = proc.wait()
    if code_ != 0:
        why = f"Ferry could not be installed (pip exit code {code_}): " + " | ".join(tail[-4:])
        print(f"ferry bootstrap: {why}", file=sys.stderr, flush=True)
        if os.path.isdir(os.path.dirname(FAILURE_FILE)):
            with contextlib.suppress(OSError):  # (said on stderr all the same)
                Path(FAILURE_FILE).write_text(why[:1000])
        return 1
    print("ferry bootstrap: starting the runner", flush=True)
    runner = [sys.executable, "-m", "ferry.runner.cloud", folder, code]
    os.execv(sys.executable, runner)
    return 1  # (not reached)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
