"""Bad input to the real `ferry` command: one `ferry: ...` line, no traceback, exit 2 for usage
errors and 1 otherwise (``--debug`` shows the traceback)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, ferry

USAGE = 2
FAILURE = 1


# ---------------------------------------------------------------------------------------
# ferry run


def test_run_without_a_command_or_a_spec(home: Path, project: Path) -> None:
    line = assert_one_line_error(ferry("run", cwd=project), USAGE)
    assert "no command" in line
    assert "ferry run -- python train.py" in line  # how to give one


def test_run_with_an_empty_command_after_the_dashes(home: Path, project: Path) -> None:
    assert "no command" in assert_one_line_error(ferry("run", "--", cwd=project), USAGE)


def test_run_with_a_missing_code_folder(home: Path, project: Path) -> None:
    line = assert_one_line_error(
        ferry("run", "--code", "/nonexistent", "--", "true", cwd=project), USAGE
    )
    assert "/nonexistent" in line
    assert "does not exist" in line


def test_run_with_an_unknown_backend(home: Path, project: Path) -> None:
    line = assert_one_line_error(
        ferry("run", "--backend", "nope", "--", "true", cwd=project), USAGE
    )
    assert "backend" in line
    assert "'nope'" in line
    assert "local" in line  # what would be valid


def test_run_with_a_bad_memory_size(home: Path, project: Path) -> None:
    line = assert_one_line_error(ferry("run", "--memory", "lots", "--", "true", cwd=project), USAGE)
    assert "memory" in line
    assert "'lots'" in line
    assert "32GB" in line


def test_run_with_a_memory_size_too_large_to_compute(home: Path, project: Path) -> None:
    # Today: "ferry: internal error: OverflowError ..." with exit 1.
    huge = "9" * 400 + "TB"
    line = assert_one_line_error(ferry("run", "--memory", huge, "--", "true", cwd=project), USAGE)
    assert "memory" in line
    assert "internal error" not in line


def test_run_with_a_bad_duration(home: Path, project: Path) -> None:
    line = assert_one_line_error(
        ferry("run", "--max-runtime", "6x", "--", "true", cwd=project), USAGE
    )
    assert "max_runtime" in line
    assert "'6x'" in line
    assert "6h" in line


def test_run_with_an_unknown_accelerator(home: Path, project: Path) -> None:
    line = assert_one_line_error(
        ferry("run", "--accelerator", "A101", "--", "true", cwd=project), USAGE
    )
    assert "accelerator" in line
    assert "'A101'" in line
    assert "A100" in line  # the closest one


@pytest.mark.parametrize(
    "flags",
    [
        ["--env", "1A=b"],
        ["--env", "NOEQUALS"],
        ["--nodes", "0"],
        ["--cpus", "many"],
        ["--cpus", "nan"],
        ["--name", "has space"],
        ["--input", "x"],
        ["--secret", "not-a-name"],
        ["--no-such-flag"],
    ],
)
def test_run_with_other_bad_flags(home: Path, project: Path, flags: list[str]) -> None:
    assert_one_line_error(ferry("run", *flags, "--", "true", cwd=project), USAGE)


def test_run_asking_for_more_cpus_than_the_machine_has(home: Path, project: Path) -> None:
    line = assert_one_line_error(ferry("run", "--cpus", "1000", "--", "true", cwd=project), FAILURE)
    assert "1000 CPUs" in line
    assert "this machine has" in line
    assert "CPU" in line.split("this machine has", 1)[1]


def test_run_asking_for_more_memory_than_the_machine_has(home: Path, project: Path) -> None:
    line = assert_one_line_error(
        ferry("run", "--memory", "1000TB", "--", "true", cwd=project), FAILURE
    )
    assert "memory" in line
    assert "this machine has" in line


def test_run_asking_for_a_gpu_on_a_machine_without_gpus(home: Path, project: Path) -> None:
    # Declare no GPUs, so the test means the same on a machine that has some.
    assert ferry("config", "set", "local.gpus", "0").returncode == 0
    line = assert_one_line_error(
        ferry("run", "--accelerator", "A100:1", "--", "true", cwd=project), FAILURE
    )
    assert "1 GPU" in line
    assert "no GPUs" in line
    assert "ferry config set local.gpus" in line


def test_run_with_a_missing_spec_file(home: Path, project: Path) -> None:
    line = assert_one_line_error(ferry("run", "missing.yaml", cwd=project), USAGE)
    assert "missing.yaml" in line
    assert "does not exist" in line


def test_run_with_a_folder_as_the_spec_file(home: Path, project: Path) -> None:
    (project / "jobs").mkdir()
    line = assert_one_line_error(ferry("run", "jobs", cwd=project), USAGE)
    assert "folder" in line


def test_run_with_broken_yaml_names_the_line(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text("name: x\ncommand: python train.py\nenv: {A: 1\n")
    line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), USAGE)
    assert "job.yaml" in line
    assert "line 4" in line


def test_run_with_a_list_as_the_spec(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text("- python\n- train.py\n")
    line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), USAGE)
    assert "expected a mapping" in line


def test_run_with_an_unknown_field_in_the_spec(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text("command: python train.py\nresources: {memroy: 1GB}\n")
    line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), USAGE)
    assert "resources.memroy" in line
    assert "did you mean memory?" in line


# ---------------------------------------------------------------------------------------
# Looking jobs up


def test_status_of_no_such_job(home: Path, project: Path) -> None:
    line = assert_one_line_error(ferry("status", "nosuchjob"), FAILURE)
    assert "'nosuchjob'" in line
    assert "ferry jobs" in line


@pytest.mark.parametrize("command", ["logs", "cancel", "wait"])
def test_other_commands_on_no_such_job(home: Path, command: str) -> None:
    line = assert_one_line_error(ferry(command, "nosuch"), FAILURE)
    assert "'nosuch'" in line


def test_an_ambiguous_prefix_lists_the_matches(home: Path, project: Path) -> None:
    ids = []
    for _ in range(2):
        result = ferry("run", "--name", "same", "--detach", "--", "true", cwd=project)
        assert result.returncode == 0, result.stderr
        ids.append(result.stdout.strip())
    assert ids[0] != ids[1]
    assert all(job_id.startswith("same") for job_id in ids)
    line = assert_one_line_error(ferry("status", "same"), USAGE)
    assert "2 jobs" in line
    for job_id in ids:
        assert job_id in line
    # the full id still finds exactly one
    assert ferry("status", ids[0]).returncode == 0


# ---------------------------------------------------------------------------------------
# Other commands


def test_config_set_with_a_bad_value(home: Path) -> None:
    line = assert_one_line_error(ferry("config", "set", "local.gpus", "many"), USAGE)
    assert "local.gpus" in line
    assert "'many'" in line


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("local.memory", "lots"),
        ("local.stop_grace", "6x"),
        ("local.cpus", "0"),
        ("backend", "nope"),
        ("snapshot.max_size", "lots"),
    ],
)
def test_config_set_checks_each_key(home: Path, key: str, value: str) -> None:
    assert key in assert_one_line_error(ferry("config", "set", key, value), USAGE)


def test_config_set_an_unknown_key(home: Path) -> None:
    line = assert_one_line_error(ferry("config", "set", "no.such.key", "1"), USAGE)
    assert "'no.such.key'" in line
    assert "ferry config list" in line


def test_config_key_typo_suggests_the_key(home: Path) -> None:
    line = assert_one_line_error(ferry("config", "get", "local.gpu"), USAGE)
    assert "did you mean local.gpus?" in line


def test_config_without_an_action(home: Path) -> None:
    assert_one_line_error(ferry("config"), USAGE)


def test_an_unknown_command(home: Path) -> None:
    line = assert_one_line_error(ferry("bogus-command"), USAGE)
    assert "bogus-command" in line
    assert "run" in line  # the valid commands


def test_jobs_with_an_unknown_status(home: Path) -> None:
    line = assert_one_line_error(ferry("jobs", "--status", "NOPE"), USAGE)
    assert "'NOPE'" in line
    assert "RUNNING" in line  # the valid statuses


def test_a_command_after_dashes_for_a_command_that_takes_none(home: Path) -> None:
    # Usage error (exit 2) like every other wrong argument; today it exits 1.
    line = assert_one_line_error(ferry("jobs", "--", "x"), USAGE)
    assert "ferry jobs" in line


def test_status_without_a_job(home: Path) -> None:
    assert_one_line_error(ferry("status"), USAGE)


def test_a_store_written_by_a_newer_ferry(home: Path) -> None:
    assert ferry("jobs").returncode == 0
    db = home / "ferry.db"
    assert db.exists()
    connection = sqlite3.connect(db)
    try:
        connection.execute("PRAGMA user_version = 999")
        connection.commit()
    finally:
        connection.close()
    line = assert_one_line_error(ferry("jobs"), FAILURE)
    assert "newer Ferry" in line
    assert "999" in line


def test_debug_shows_the_traceback(home: Path) -> None:
    result = ferry("--debug", "status", "nosuchjob")
    assert result.returncode != 0
    assert "Traceback" in result.stderr
    assert "JobNotFound" in result.stderr


# ---------------------------------------------------------------------------------------
# Help and config round trips


@pytest.mark.parametrize("command", ["run", "jobs", "status", "logs", "cancel", "wait", "config"])
def test_every_command_has_help_with_an_example(home: Path, command: str) -> None:
    result = ferry(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "example" in result.stdout.lower()
    assert result.stderr == ""


def test_top_level_help(home: Path) -> None:
    result = ferry("--help")
    assert result.returncode == 0
    assert "example" in result.stdout.lower()
    for command in ("run", "jobs", "status", "logs", "cancel", "wait", "config"):
        assert command in result.stdout


def test_config_set_get_list_unset(home: Path) -> None:
    assert ferry("config", "set", "local.gpus", "2").returncode == 0
    got = ferry("config", "get", "local.gpus")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "2"

    listed = ferry("config", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["key"]: row for row in json.loads(listed.stdout)}
    assert rows["local.gpus"]["value"] == "2"
    assert "help" in rows["local.gpus"]
    assert rows["backend"]["default"] == "local"

    assert ferry("config", "unset", "local.gpus").returncode == 0
    assert ferry("config", "get", "local.gpus").stdout.strip() == ""
    rows = {row["key"]: row for row in json.loads(ferry("config", "list", "--json").stdout)}
    assert rows["local.gpus"]["value"] is None


def test_config_unset_of_a_key_never_set(home: Path) -> None:
    assert ferry("config", "unset", "local.gpus").returncode == 0
    assert ferry("config", "get", "local.gpus").stdout.strip() == ""


def test_config_values_with_quotes_survive(home: Path) -> None:
    value = 'gs://bucket/"odd"\\path'
    assert ferry("config", "set", "outputs_root", value).returncode == 0
    assert ferry("config", "get", "outputs_root").stdout.rstrip("\n") == value
