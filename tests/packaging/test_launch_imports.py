"""What starting a job costs in Python: the CLI and the supervisor import only what this job
needs, and pydantic does not search installed packages for plugins at each start."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ferry, wait_for

# never on the way of a local job without inputs from a bucket
HEAVY = ("fsspec", "s3fs", "gcsfs", "adlfs", "boto3", "botocore", "ray", "torch", "optuna")


def imported(importtime_output: str) -> set[str]:
    """Top-level package names in ``python -X importtime`` output."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", importtime_output, re.M)
    return {name.split(".")[0] for name in names}


def test_a_job_without_inputs_imports_no_storage_or_cloud_library(
    home: Path, project: Path
) -> None:
    result = ferry("run", "--", "python", "-c", "pass", cwd=project, env=_IMPORTTIME)
    assert result.returncode == 0, result.stderr
    cli = imported(result.stderr)
    supervisor_logs = [p.read_text() for p in (home / "jobs").glob("*/supervisor.log")]
    supervisor = set().union(*(imported(text) for text in supervisor_logs))
    assert "ferry" in cli and "ferry" in supervisor  # (the import lines were there to see)
    assert not cli & set(HEAVY)
    assert not supervisor & set(HEAVY)


_IMPORTTIME = {"PYTHONPROFILEIMPORTTIME": "1"}

_SUBMIT = """
import json, os, sys
import ferry
import pydantic.plugin._loader as plugins
show = "import os; print(os.environ.get('PYDANTIC_DISABLE_PLUGINS'))"
job = ferry.submit(command=["python", "-c", show], code=sys.argv[1])
job.wait(60)
print(json.dumps({
    "searched": plugins._plugins is not None,  # pydantic's cache of the plugins it found
    "here": os.environ.get("PYDANTIC_DISABLE_PLUGINS"),
    "job": job.logs().strip(),
}))
"""


def submit_and_look(project: Path, setting: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if setting is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = setting
    proc = subprocess.run(
        [sys.executable, "-c", _SUBMIT, str(project)],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    seen: dict[str, Any] = json.loads(proc.stdout)
    return seen


def test_pydantic_plugins_are_not_searched_and_nothing_leaks(home: Path, project: Path) -> None:
    seen = submit_and_look(project, None)
    assert seen == {"searched": False, "here": None, "job": "None"}
    seen = submit_and_look(project, "logfire")  # a setting of the user's own is kept
    assert seen["here"] == "logfire" and seen["job"] == "logfire"


def supervisors_of(home: Path) -> list[int]:
    """The supervisor processes started for this FERRY_HOME."""
    from ferry.procs import SUPERVISOR_NAME, environ_of

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            name = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        if name == SUPERVISOR_NAME and f"FERRY_HOME={home}".encode() in environ_of(int(entry)):
            found.append(int(entry))
    return found


def test_a_standby_supervisor_ends_with_a_command_that_submits_nothing(
    home: Path, project: Path
) -> None:
    (project / "job.yaml").write_text("command: python -c pass\nsecrets: [NOT_SET_ANYWHERE]\n")
    result = ferry("run", "job.yaml", cwd=project)
    assert result.returncode == 2 and "NOT_SET_ANYWHERE" in result.stderr
    wait_for(lambda: not supervisors_of(home), 30, "the standby supervisor to end")
    result = ferry("run", "--", "python", "-c", "print('ran')", cwd=project)
    assert result.returncode == 0 and result.stdout == "ran\n", result.stderr
    wait_for(lambda: not supervisors_of(home), 30, "the supervisor to end")
