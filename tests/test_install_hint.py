"""An extra's install hint says how to get it into the Ferry that runs: from the clone an
editable install came from (``pip install 'ferry[vertex]'`` there would fetch another
package from the index), from the index for an install that came from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ferry
from ferry.errors import install_hint
from ferry.packaging.wheel import ferry_wheel


def test_an_editable_install_is_told_its_clone() -> None:
    clone = Path(ferry.__file__).resolve().parent.parent
    assert install_hint("vertex") == f"pip install -e '{clone}[vertex]'"


def test_an_install_from_a_wheel_is_told_the_package_index(tmp_path: Path) -> None:
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    done = subprocess.run(
        [*pip, "--disable-pip-version-check", "--target", str(target), str(ferry_wheel())],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    show = "from ferry.errors import install_hint; print(install_hint('sagemaker'))"
    out = subprocess.run(  # (-I: this clone is not on the path, the install is)
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {show}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pip install 'ferry[sagemaker]'"
