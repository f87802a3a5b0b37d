"""The digits example end to end: through `ferry run` (as `make demo` does) and plain python."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ferry, ferry_json

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parents[2] / "examples" / "digits"


def test_digits_through_ferry(home: Path, tmp_path: Path) -> None:
    result = ferry("run", str(EXAMPLE / "job.yaml"), "-p", "epochs=4", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "epoch=4/4" in result.stdout
    job = ferry_json("jobs")[0]
    assert job["id"].startswith("digits-cnn-")
    model = Path(job["outputs"]) / "model"
    assert (model / "model.pt").stat().st_size > 10_000
    assert json.loads((model / "metrics.json").read_text())["test_accuracy"] > 0.8
    assert (Path(job["outputs"]) / "checkpoints" / "last.pt").exists()
    # the example folder itself is left untouched
    assert not (EXAMPLE / "model").exists()


def test_digits_with_plain_python(tmp_path: Path) -> None:
    work = tmp_path / "digits"
    shutil.copytree(EXAMPLE, work)
    result = subprocess.run(
        [sys.executable, "train.py", "--epochs", "2"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert "test_accuracy=" in result.stdout
    assert (work / "model" / "model.pt").exists()


def test_demo_script(home: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / "demo.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "demo: test accuracy" in result.stdout
    assert "demo: model in" in result.stdout and "model.pt" in result.stdout
