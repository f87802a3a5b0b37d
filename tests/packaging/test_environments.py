"""environment.requirements on this machine: a virtual environment per requirements hash,
built once (really, with pip) and reused; its failures, its locks and ``ferry env``.

The packages are wheels made here (no network): the requirements say ``--no-index`` and
``--find-links wheels``."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from ferry.packaging import environments
from tests.backends.test_local import wait_status
from tests.conftest import (
    assert_one_line_error,
    ferry,
    ferry_json,
    job_logs,
    job_status,
    submit,
)
from tests.packaging.wheels import make_wheel

SCRIPT = textwrap.dedent(
    """
    import sys
    import demo_pkg
    from ferry import runtime
    print("demo", demo_pkg.VERSION, "in", sys.prefix, flush=True)
    runtime.report(loss=0.25, step=1)
    """
)


def _project(project: Path, requirement: str = "demo-pkg") -> Path:
    make_wheel(project / "wheels", "1.0")
    (project / "requirements.txt").write_text(
        f"--no-index\n--find-links wheels  # made by the test\n{requirement}\n"
    )
    (project / "train.py").write_text(SCRIPT)
    return project


def _events(status: dict) -> str:
    return " ".join(e["message"] for e in status["events"])


# uv is in the dev set `make test` installs: its cases run wherever the suite does
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_job_runs_in_an_environment_built_once_and_reused(
    home: Path, project: Path, installer: str
) -> None:
    assert ferry("config", "set", "env.installer", installer).returncode == 0
    _project(project)
    first = submit("--requirements", "requirements.txt", "--", "python", "train.py", cwd=project)
    status = wait_status(first, "SUCCEEDED", timeout=120)
    (env,) = ferry_json("env", "ls")
    assert env["ready"] and env["packages"] == ["demo-pkg 1.0"], env
    assert f"in {env['path']}" in job_logs(first)  # `python` meant the environment's
    assert f"built from requirements.txt with {installer}" in _events(status), _events(status)
    assert any(m["name"] == "loss" for m in ferry_json("metrics", first))  # ferry.runtime
    build_log = home / "jobs" / status["id"] / "environment.log"
    assert "demo-pkg" in build_log.read_text() or "demo_pkg" in build_log.read_text()
    # the same requirements: the same environment, not built again
    second = submit("--requirements", "requirements.txt", "--", "python", "train.py", cwd=project)
    again = wait_status(second, "SUCCEEDED", timeout=60)
    assert "reused (1 packages" in _events(again), _events(again)
    assert f"in {env['path']}" in job_logs(second)
    assert not (home / "jobs" / again["id"] / "environment.log").read_text()  # none installed
    assert len(ferry_json("env", "ls")) == 1
    # a new wheel in the folder it names, the same text: another environment
    make_wheel(project / "wheels", "1.1")
    third = submit("--requirements", "requirements.txt", "--", "python", "train.py", cwd=project)
    wait_status(third, "SUCCEEDED", timeout=120)
    assert "demo 1.1 in" in job_logs(third)
    assert len(ferry_json("env", "ls")) == 2


@pytest.mark.parametrize(
    ("installer", "words"),
    [
        ("pip", "No matching distribution found for no-such-package==9"),
        ("uv", "no-such-package was not found in the provided package"),
    ],
)
def test_a_requirement_that_cannot_be_installed_fails_the_job_with_the_installers_words(
    home: Path, project: Path, installer: str, words: str
) -> None:
    assert ferry("config", "set", "env.installer", installer).returncode == 0
    _project(project, "no-such-package==9")
    result = ferry(
        "run", "--requirements", "requirements.txt", "--", "python", "train.py", cwd=project
    )
    assert result.returncode != 0
    assert "FAILED before it started: environment.requirements could not" in result.stderr
    (job,) = ferry_json("jobs")
    status = wait_status(job["id"], "FAILED")
    assert status["reason"].startswith("environment.requirements could not be installed"), status
    assert words in status["reason"], status["reason"]
    assert f"({installer} exit code 1)" in status["reason"]
    assert str(home / "jobs" / status["id"] / "environment.log") in status["reason"]
    assert ferry_json("env", "ls") == []  # nothing half built is left


def test_requirements_outside_the_code_or_editable_are_refused_at_submit(
    home: Path, project: Path
) -> None:
    _project(project)
    line = assert_one_line_error(
        ferry("run", "--requirements", "nope.txt", "--", "python", "train.py", cwd=project), 2
    )
    assert "nope.txt is not in the job's code folder" in line
    line = assert_one_line_error(
        ferry("run", "--requirements", "../x.txt", "--", "python", "train.py", cwd=project), 2
    )
    assert "not inside the job's code folder" in line
    (project / "editable.txt").write_text("-e .\n")
    line = assert_one_line_error(
        ferry("run", "--requirements", "editable.txt", "--", "python", "train.py", cwd=project),
        2,
    )
    assert "editable.txt line 1 (-e .) is an editable install" in line
    assert ferry_json("jobs") == []


def test_a_half_built_environment_is_built_again_and_a_held_one_survives_prune(
    home: Path, project: Path, monkeypatch: object
) -> None:
    _project(project)
    want = environments.wanted(project / "requirements.txt", project, dict(os.environ))
    half = home / "envs" / want.folder
    (half / "bin").mkdir(parents=True)  # a build killed before its marker
    (half / "bin" / "junk").write_text("")
    job = submit("--requirements", "requirements.txt", "--", "python", "train.py", cwd=project)
    status = wait_status(job, "SUCCEEDED", timeout=120)
    assert "built from requirements.txt" in _events(status)
    assert not (half / "bin" / "junk").exists()
    # held (as by a running job): prune leaves it; released, it goes
    with open(os.devnull, "wb") as log:
        held = environments.ensure(want, project, log)
    assert not held.built
    assert ferry_json("env", "prune", "--all") == []
    (listed,) = ferry_json("env", "ls")
    assert listed["in_use"], listed
    held.release()
    dry = ferry_json("env", "prune", "--all", "--dry-run")
    assert [e["key"] for e in dry] == [want.folder] and half.exists()
    result = ferry("env", "prune", "--older-than", "1d")  # used just now: kept
    assert result.returncode == 0 and half.exists(), result.stderr
    assert [e["key"] for e in ferry_json("env", "prune", "--all")] == [want.folder]
    assert not half.exists() and ferry_json("env", "ls") == []
    line = assert_one_line_error(ferry("env", "prune"), 2)
    assert "--older-than" in line


def test_jobs_asking_at_once_for_a_new_environment_build_it_once_and_run_together(
    home: Path, project: Path
) -> None:
    _project(project)
    release = project.parent / "release"
    (project / "hold.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.05)\n"
    )
    held = submit("--requirements", "requirements.txt", "--", "python", "hold.py", cwd=project)
    quick = submit("--requirements", "requirements.txt", "--", "python", "train.py", cwd=project)
    # the second waits for the build, not for the first job's end
    done = wait_status(quick, "SUCCEEDED", timeout=120)
    assert job_status(held)["status"] == "RUNNING"
    release.touch()
    first = wait_status(held, "SUCCEEDED", timeout=60)
    events = [_events(first), _events(done)]
    assert sum("built from" in e for e in events) == 1, events
    assert sum("reused" in e for e in events) == 1, events
    (env,) = ferry_json("env", "ls")
    marker = json.loads((Path(env["path"]) / environments.READY).read_text())
    assert "demo-pkg" in marker["requirements"] and marker["installer"] in ("uv", "pip")


def test_what_a_shared_environment_cannot_hold_is_refused_at_submit(
    home: Path, project: Path
) -> None:
    _project(project)
    (project / "src").mkdir()
    (project / "src" / "setup.py").write_text("")
    (project / "folder.txt").write_text("./src\n")
    line = assert_one_line_error(
        ferry("run", "--requirements", "folder.txt", "--", "python", "train.py", cwd=project), 2
    )
    assert "names the folder src" in line and "pip wheel src -w wheels" in line
    (project / "gone.txt").write_text("--find-links dist\ndemo-pkg\n")
    line = assert_one_line_error(
        ferry("run", "--requirements", "gone.txt", "--", "python", "train.py", cwd=project), 2
    )
    assert "names dist, which is not in the job's code folder" in line and ".gitignore" in line
    # a URL's fragment is not a comment (pip reads it so too): the line is read whole
    (project / "url.txt").write_text("demo-pkg @ https://example.com/d.whl#sha256=ab  # why\n")
    want = environments.wanted(project / "url.txt", project, {})
    assert want.text == "demo-pkg @ https://example.com/d.whl#sha256=ab"
    assert ferry_json("jobs") == []
