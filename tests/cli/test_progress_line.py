"""Attached `ferry run` on a terminal: a live progress line under the streamed output."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import FERRY

pytestmark = pytest.mark.slow


def run_on_a_terminal(args: list[str], cwd: Path, timeout: float = 60) -> str:
    """Run `ferry ARGS` with stdout and stderr on a pseudo-terminal; return all it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [FERRY, *args], cwd=cwd, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL
    )
    os.close(slave)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: ferry has exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=10) == 0
    return b"".join(chunks).decode(errors="replace")


def test_progress_line_shows_step_rate_eta_and_metrics(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "import time\nfrom ferry import runtime\n"
        "for step in range(1, 41):\n"
        "    runtime.report(step=step, steps_total=40, loss=1.0 / step)\n"
        "    print(f'line {step}', flush=True)\n"
        "    time.sleep(0.1)\n"
    )
    text = run_on_a_terminal(["run", "--", "python", "train.py"], project)
    progress = re.findall(
        r"ferry: step (\d+)/40 · ([\d.]+)/s(?: · ETA (\S+))? · loss=([\d.]+)", text
    )
    assert progress, text
    assert any(eta for _, _, eta, _ in progress)  # while it ran
    assert progress[-1][0] == "40" and progress[-1][3] == "0.025"  # as it ended
    # the output itself is intact: each line whole, in order, on its own line
    lines = [re.sub(r"\x1b\[K|\r", "", line) for line in text.splitlines()]
    printed = [line for line in lines if line.startswith("line ")]
    assert printed == [f"line {i}" for i in range(1, 41)], lines


def test_no_progress_line_when_output_is_not_a_terminal(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "import time\nfrom ferry import runtime\n"
        "for step in range(1, 21):\n"
        "    runtime.report(step=step, steps_total=20, loss=1.0 / step)\n"
        "    time.sleep(0.1)\n"
    )
    result = subprocess.run(
        [FERRY, "run", "--", "python", "train.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "step" not in result.stderr and "\x1b" not in result.stderr
