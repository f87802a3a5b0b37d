"""`make demo` installs Ferry and what the example needs, not the dev tool chain."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# import name -> the distribution that provides it
DISTRIBUTIONS = {"sklearn": "scikit-learn", "torch": "torch", "numpy": "numpy"}


def _extra(name: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"][name]
    return {r.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip() for r in requirements}


def test_make_demo_installs_the_example_extra_only() -> None:
    plan = subprocess.run(
        ["make", "-n", "-B", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line]
    packages = [line for line in installs if "'pip>=" not in line]  # (a current pip first)
    assert len(installs) == len(packages) + 1, plan
    assert packages and all("'.[example]'" in line for line in packages), plan
    assert "[dev]" not in plan


def test_the_example_extra_holds_what_the_example_imports() -> None:
    imported: set[str] = set()
    for script in (ROOT / "examples" / "digits").glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"ferry", "__future__"}
    assert third_party, "the example imports nothing: this test reads the wrong files"
    unknown = third_party - set(DISTRIBUTIONS)
    assert not unknown, f"add {sorted(unknown)} to DISTRIBUTIONS and the example extra"
    assert {DISTRIBUTIONS[name] for name in third_party} <= _extra("example")
    assert _extra("example") <= _extra("dev")  # `make test` runs the example too
