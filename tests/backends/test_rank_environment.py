"""A rank sees the same contract on every backend: one job, two ranks, run here and on Ray,
Vertex AI and SageMaker (their test servers and provider doubles), each rank's contract
variables compared with the same rank's here. The only differences allowed are those
ferry/contract/variables.py declares for the backend."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ferry.contract.variables import DIFFERENCES, is_contract
from tests.backends.conftest import ready
from tests.conftest import ferry, job_logs

DUMP = """
import json, os
print("ENV", os.environ.get("RANK", "-"), json.dumps(dict(os.environ)), flush=True)
"""
# variables naming a file only the attempt uses (its metrics, its failure reason): where
# it is differs with the machine, not what it is for
ATTEMPT_FILES = ("FERRY_METRICS_FILE", "FERRY_FAILURE_FILE", "CLOUD_ML_HP_METRIC_FILE")


@pytest.fixture(
    params=[
        pytest.param("ray", marks=pytest.mark.xdist_group("ray")),
        pytest.param("vertex", marks=pytest.mark.xdist_group("vertex")),
        pytest.param("sagemaker", marks=pytest.mark.xdist_group("sagemaker")),
    ]
)
def elsewhere(
    request: pytest.FixtureRequest, home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A backend other than local, with the place its jobs go to ready."""
    ready(request, request.param, monkeypatch)
    (project / "dump.py").write_text(DUMP)
    return str(request.param)


def test_a_rank_sees_the_same_contract_here_and_elsewhere(elsewhere: str, project: Path) -> None:
    here = _ranks(project, "local")
    there = _ranks(project, elsewhere)
    assert sorted(here) == sorted(there) == ["0", "1"]
    declared = DIFFERENCES[elsewhere]
    for rank in here:
        ours, theirs = here[rank], there[rank]
        undeclared = {
            name: (ours.get(name), theirs.get(name))
            for name in ours.keys() | theirs.keys()
            if ours.get(name) != theirs.get(name) and name not in declared
        }
        assert not undeclared, f"rank {rank} on {elsewhere} differs from here: {undeclared}"
        # torchrun's rule, whatever the machine's environment held (Ray sets its CPU share)
        assert ours["OMP_NUM_THREADS"] == theirs["OMP_NUM_THREADS"] == "1"
        assert theirs["MY_SETTING"] == "kept" and theirs["WORLD_SIZE"] == "2"


@pytest.mark.xdist_group("ray")
def test_a_gangs_threads_are_the_specs_when_it_sets_them(
    home: Path, project: Path, ray_head: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", ray_head)
    (project / "dump.py").write_text(DUMP)
    for backend in ("local", "ray"):
        ranks = _ranks(project, backend, "OMP_NUM_THREADS: '3'")
        assert {r: e["OMP_NUM_THREADS"] for r, e in ranks.items()} == {"0": "3", "1": "3"}


def _ranks(project: Path, backend: str, env: str = "") -> dict[str, dict[str, str]]:
    """Each rank's contract variables (and the spec's own) in a job of two ranks on
    ``backend``, normalised: the job's id, its outputs folder and its gang's port named
    by their role, and the attempt's own files by theirs."""
    (project / "job.yaml").write_text(
        f"backend: {backend}\ncommand: [python, dump.py]\nhyperparameters: {{lr: 0.1}}\n"
        f"resources: {{cpus: 2, procs_per_node: 2}}\nenv: {{MY_SETTING: kept, {env}}}\n"
    )
    done = ferry("run", "job.yaml", cwd=project, timeout=180)
    assert done.returncode == 0, done.stderr
    job_id = json.loads(ferry("jobs", "--json").stdout)[0]["id"]
    found: dict[str, dict[str, str]] = {}
    for line in job_logs(job_id).splitlines():
        if "ENV " in line:
            _, rank, data = line[line.index("ENV ") :].split(" ", 2)
            found[rank] = _normalised(json.loads(data), job_id)
    return found


def _normalised(environ: dict[str, Any], job_id: str) -> dict[str, str]:
    outputs = os.path.dirname(environ["FERRY_MODEL_DIR"])
    port = environ.get("MASTER_PORT", "")
    out = {}
    for name, value in environ.items():
        if not (is_contract(name) or name == "MY_SETTING"):
            continue
        if name in ATTEMPT_FILES:
            value = "<a file of the attempt>"
        value = value.replace(outputs, "<outputs>").replace(job_id, "<job>")
        out[name] = value.replace(f":{port}", ":<port>") if port else value
    if port:
        out["MASTER_PORT"] = "<port>"
    return out


def test_the_contract_reference_lists_every_declared_difference() -> None:
    text = (Path(__file__).parents[2] / "docs" / "contract.md").read_text()
    for backend, differences in DIFFERENCES.items():
        for name in differences:
            assert f"| {backend} | `{name}` |" in text, (backend, name)
