"""The vertex backend against the JobService test server and its provider double
(tests/backends/vertex_server.py says what they simulate), with the bucket on
gcp-storage-emulator: real `ferry` commands, real supervisors, the real runner on the
double's "VM"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conftest import grid_sweep, loss_points
from tests.backends.vertex_server import VertexServer
from tests.conftest import (
    assert_one_line_error,
    ferry,
    ferry_json,
    job_logs,
    job_status,
    submit,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vertex")]


def _job_of(server: VertexServer, job_id: str) -> Any:
    found = [j for j in server.jobs.values() if j.body["labels"]["ferry-job"] == job_id]
    assert found, f"no custom job for {job_id}"
    return found[-1]


def test_a_job_runs_as_a_custom_job_and_its_model_lands_in_the_bucket(
    on_vertex: dict[str, Any], project: Path
) -> None:
    server, gs, bucket = on_vertex["server"], on_vertex["gs"], on_vertex["bucket"]
    (project / "job.yaml").write_text(
        "name: vx\ncommand: python train.py\nhyperparameters: {lr: 0.1}\n"
        "env: {TOKEN: visible}\nsecrets: [HIDDEN]\nlimits: {max_runtime: 1h}\n"
    )
    done = ferry(
        "run", "--backend", "vertex", "job.yaml", cwd=project, timeout=180, env={"HIDDEN": "s3cr3t"}
    )
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    assert "SUCCEEDED" in done.stderr and "model: model.txt" in done.stderr
    logs = job_logs(job_id)
    assert '"FERRY_JOB_ID": "' + job_id in logs and '"TOKEN": "visible"' in logs
    assert 'hyperparameters {"lr": 0.1}' in logs and "done" in logs
    assert gs.cat_file(f"{bucket}/runs/{job_id}/model/model.txt") == b"weights"
    # the request: what Vertex AI reads, with the limits Ferry owns
    sent = server.requests[-1]
    spec = sent["jobSpec"]
    pool = spec["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {"machineType": "n1-standard-4"}
    assert pool["pythonPackageSpec"]["pythonModule"] == "ferry.runner.cloud"
    assert pool["pythonPackageSpec"]["executorImageUri"].endswith(":latest")
    assert spec["scheduling"] == {  # (restartJobOnWorkerRestart: false, the default)
        "strategy": "STANDARD",
        "timeout": f"{3600 + 30 + 300}s",
        "disableRetries": True,
    }
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": f"gs://{bucket}/runs/{job_id}"}
    assert sent["labels"]["ferry-job"] == job_id and sent["labels"]["ferry-attempt"] == "1"
    assert sent["labels"]["ferry_run"].startswith(f"{job_id}-1-")  # (found again by it)
    # secrets reach the job through the run folder, never the request (the console shows it)
    assert "s3cr3t" not in json.dumps(sent) and "HIDDEN" not in json.dumps(sent)
    job = _job_of(server, job_id)
    assert job.state == "JOB_STATE_SUCCEEDED"
    runs = gs.find(f"{bucket}/.ferry/runs/")
    assert runs and not any(path.endswith("secrets.json") for path in runs)
    events = " | ".join(e["message"] for e in job_status(job_id)["events"])
    assert "console.cloud.google.com/vertex-ai/locations/us-central1/training/" in events
    said = assert_one_line_error(ferry("logs", job_id, "--provider"), 1)
    assert "own log in Cloud Logging, which Ferry does not read" in said, said
    assert "open the job's Logs tab: https://console.cloud.google.com/vertex-ai/" in said
    # the same folder again: nothing to upload
    again = ferry(
        "run", "--backend", "vertex", "--detach", "job.yaml", cwd=project, env={"HIDDEN": "x"}
    )
    second = again.stdout.strip()
    assert again.returncode == 0 and second and second != job_id, (again.stdout, again.stderr)
    wait_for(lambda: job_status(second)["status"] == "SUCCEEDED", 120, "the second job")
    events = " | ".join(e["message"] for e in job_status(second)["events"])
    assert "code and Ferry's wheel unchanged: 0 bytes sent" in events, events


def test_a_failing_script_fails_the_job_with_its_last_lines(
    on_vertex: dict[str, Any], project: Path
) -> None:
    done = ferry(
        "run", "--backend", "vertex", "--", "python", "train.py", "exit3", cwd=project, timeout=120
    )
    assert done.returncode == 3, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    status = job_status(job_id)
    assert status["status"] == "FAILED" and "about to fail" in status["reason"]


def test_failing_requirements_fail_the_attempt_with_pips_words(
    on_vertex: dict[str, Any], project: Path
) -> None:
    (project / "requirements.txt").write_text("no-such-package-anywhere==1.0\n")
    done = ferry(
        "run",
        "--backend",
        "vertex",
        "--requirements",
        "requirements.txt",
        "--",
        "python",
        "train.py",
        cwd=project,
        timeout=120,
    )
    assert done.returncode != 0
    job_id = ferry_json("jobs")[0]["id"]
    reason = job_status(job_id)["reason"]
    assert "could not be installed" in reason and "no-such-package-anywhere" in reason, reason


def test_cancel_reaches_the_runner_through_the_bucket(
    on_vertex: dict[str, Any], project: Path, tmp_path: Path
) -> None:
    server = on_vertex["server"]
    job_id = submit("--backend", "vertex", "--", "python", "train.py", "long", cwd=project)
    wait_for(lambda: "starting at" in job_logs(job_id), 120, "the job to start on the VM")
    assert ferry("cancel", job_id).returncode == 0
    wait_for(lambda: job_status(job_id)["status"] == "CANCELLED", 60, "the cancel")
    assert "notice at" in job_logs(job_id)  # it was told, and answered, before it ended
    job = _job_of(server, job_id)
    wait_for(lambda: job.state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_CANCELLED"), 30, "its end")
    assert job.procs and all(p.poll() is not None for p in job.procs)  # nothing left running


def test_cancel_ends_a_job_still_waiting_for_its_machine_at_once(
    on_vertex: dict[str, Any], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = on_vertex["server"]
    monkeypatch.setattr(server, "provision", 120.0)  # (PENDING for two minutes)
    job_id = submit("--backend", "vertex", "--", "python", "train.py", cwd=project)
    wait_for(lambda: "JOB_STATE_PENDING" in json.dumps(job_status(job_id)), 60, "PENDING")
    assert ferry("cancel", job_id).returncode == 0
    wait_for(lambda: job_status(job_id)["status"] == "CANCELLED", 30, "the cancel")
    job = _job_of(server, job_id)
    assert job.cancelled and not job.procs  # cancelled on Vertex AI; its command never ran


def test_a_preempted_spot_job_resumes_from_its_checkpoint(
    on_vertex: dict[str, Any], project: Path, tmp_path: Path
) -> None:
    server = on_vertex["server"]
    release = tmp_path / "release"  # (the double's VM is this machine: the script sees it)
    (project / "job.yaml").write_text(
        f"name: spot\ncommand: python train.py long {release}\nresources: {{spot: true}}\n"
        "checkpoint: {paths: [step.txt]}\n"
    )
    job_id = submit("--backend", "vertex", "job.yaml", cwd=project)
    wait_for(lambda: loss_points(job_id) >= 8, 120, "a few reported steps")
    first = _job_of(server, job_id)
    server.preempt(first.name)
    second = ("logs", job_id, "--attempt", "2")
    wait_for(lambda: "starting at" in ferry(*second).stdout, 120, "the second attempt")
    release.touch()
    wait_for(lambda: job_status(job_id)["status"] == "SUCCEEDED", 120, "the job to finish")
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert "spot capacity taken back" in status["attempts"][0]["reason"]
    assert _job_of(server, job_id).body["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    first_log, second_log = job_logs(job_id, "--attempt", "1"), job_logs(job_id, "--attempt", "2")
    assert "notice at" in first_log  # the runner passed SIGTERM on, and the step was saved
    assert "starting at 0" in first_log
    resumed = [line for line in second_log.splitlines() if "starting at" in line]
    assert int(resumed[0].split()[-1]) >= 8, resumed


def test_no_capacity_passes_the_offering_over_and_tries_the_next(
    on_vertex: dict[str, Any], project: Path
) -> None:
    server = on_vertex["server"]
    server.script[:] = ["stockout", "quota"]
    (project / "job.yaml").write_text(
        "name: t4\ncommand: python train.py\nresources: {accelerator: 'T4:1'}\n"
    )
    done = ferry("run", "--backend", "vertex", "job.yaml", cwd=project, timeout=240)
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    attempts = job_status(job_id)["attempts"]
    assert [a["status"] for a in attempts] == ["FAILED", "FAILED", "SUCCEEDED"]
    assert "Resources are insufficient in region" in attempts[0]["reason"]
    assert "exceed quota limits" in attempts[1]["reason"]
    # the attached run says each time why it moved on, and where each custom job is
    said = done.stderr
    assert f"ferry: attempt 2 of {job_id} (attempt 1 failed: " in said, said
    assert "Resources are insufficient in region" in said.split("attempt 2 of", 1)[1]
    assert f"ferry: attempt 3 of {job_id} (attempt 2 failed: " in said, said
    assert "ferry: Vertex AI custom job projects/test-project/" in said, said
    assert "console.cloud.google.com/vertex-ai/" in said
    regions = [r["jobSpec"] for r in server.requests[-3:]]
    assert len(regions) == 3
    offerings = [a["offering"] for a in attempts]
    assert len(set(offerings)) == 3, offerings  # each refusal moved on to another offering


def test_a_job_made_by_a_create_whose_answer_was_lost_is_followed_not_orphaned(
    on_vertex: dict[str, Any], project: Path
) -> None:
    server = on_vertex["server"]
    server.script[:] = ["lost-answer"]
    done = ferry("run", "--backend", "vertex", "--", "python", "train.py", cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    made = [j for j in server.jobs.values() if j.body["labels"]["ferry-job"] == job_id]
    assert len(made) == 1 and made[0].state == "JOB_STATE_SUCCEEDED"  # one, and it is the one
    assert len(job_status(job_id)["attempts"]) == 1


def test_dry_run_prints_the_request_with_placeholders_and_no_settings(
    home: Path, project: Path
) -> None:
    (project / "job.yaml").write_text(
        "name: dry\ncommand: python train.py\nresources: {accelerator: 'A100:1', spot: true}\n"
        "limits: {max_runtime: 2h}\n"
    )
    out = ferry("run", "--backend", "vertex", "--dry-run", "job.yaml", cwd=project)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)["request"]
    body = shown["body"]
    pool = body["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {
        "machineType": "a2-highgpu-1g",
        "acceleratorType": "NVIDIA_TESLA_A100",
        "acceleratorCount": 1,
    }
    assert body["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert body["jobSpec"]["scheduling"]["timeout"] == f"{7200 + 30 + 300}s"
    assert "/projects/<PROJECT>/locations/" in shown["url"]
    assert shown["gcloud"].startswith("gcloud ai custom-jobs create '--project=<PROJECT>'")
    filled = {p["placeholder"] for p in shown["placeholders"]}
    assert {"<PROJECT>", "<BUCKET>", "<JOB_ID>"} <= filled
    assert "ferry: <PROJECT>: ferry config set vertex.project PROJECT" in out.stderr
    # with the settings, those are the real values
    ferry("config", "set", "vertex.project", "my-proj")
    ferry("config", "set", "outputs_root", "gs://my-bucket/runs")
    out = ferry("run", "--backend", "vertex", "--dry-run", "job.yaml", cwd=project)
    shown = json.loads(out.stdout)["request"]
    filled = {p["placeholder"] for p in shown["placeholders"]}
    assert "<PROJECT>" not in filled and "<BUCKET>" not in filled
    assert "/projects/my-proj/" in shown["url"] and "gs://my-bucket/" in json.dumps(shown["body"])


def test_flex_start_waits_for_its_machines_then_runs(
    on_vertex: dict[str, Any], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = on_vertex["server"]
    monkeypatch.setattr(server, "flex_wait", 3.0)  # (the machines gathered in 3 s)
    (project / "job.yaml").write_text(
        "name: flex\ncommand: python train.py\nresources: {accelerator: 'A100:1', spot: flex}\n"
        "limits: {max_runtime: 1h}\n"
    )
    done = ferry("run", "--backend", "vertex", "job.yaml", cwd=project, timeout=180)
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    assert server.requests[-1]["jobSpec"]["scheduling"] == {
        "strategy": "FLEX_START",
        "timeout": f"{3600 + 30 + 300}s",
        "disableRetries": True,
        "maxWaitDuration": f"{24 * 3600 + 60}s",  # (Ferry's own day of waiting speaks first)
    }
    status = job_status(job_id)
    (attempt,) = status["attempts"]
    assert attempt["status"] == "SUCCEEDED" and "flex-start" in attempt["offering"]
    assert "JOB_STATE_PENDING" in " | ".join(e["message"] for e in status["events"])


def test_flex_start_gives_up_waiting_after_max_pending(
    on_vertex: dict[str, Any], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = on_vertex["server"]
    monkeypatch.setattr(server, "flex_wait", 120.0)
    (project / "job.yaml").write_text(
        "name: flex\ncommand: python train.py\nresources: {accelerator: 'A100:1', spot: flex}\n"
        "limits: {max_pending: 3s}\n"
    )
    job_id = submit("job.yaml", "--backend", "vertex", cwd=project)
    wait_for(
        lambda: (tried := job_status(job_id)["attempts"]) and tried[0]["status"] == "FAILED",
        60,
        "the give-up",
    )
    first = job_status(job_id)["attempts"][0]
    assert "still JOB_STATE_PENDING after limits.max_pending (3.0s)" in first["reason"]
    made = [j for j in server.jobs.values() if j.body["labels"]["ferry-job"] == job_id]
    assert made[0].body["jobSpec"]["scheduling"]["maxWaitDuration"] == "63s"
    wait_for(lambda: made[0].cancelled, 30, "the provider's job cancelled")
    assert ferry("cancel", job_id, "--wait").returncode == 0  # (the next offering: not waited)
    assert not any(j.procs for j in made)  # nothing of it ever ran


def test_flex_start_is_refused_where_it_cannot_run(home: Path, project: Path) -> None:
    (project / "job.yaml").write_text(
        "name: flex\ncommand: python train.py\nresources: {accelerator: 'A100:1'}\n"
    )
    out = ferry("run", "--backend", "vertex", "--flex-start", "--dry-run", "job.yaml", cwd=project)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["request"]["body"]["jobSpec"]["scheduling"]["strategy"] == (
        "FLEX_START"
    )
    refusals = {
        ("--accelerator", "T4:1"): "Vertex AI has flex-start capacity for L4, A100, A100-80GB, "
        "H100, H200, B200 only, and this job asks for T4:1",
        ("--max-runtime", "8d"): "Vertex AI runs a flex-start job (resources.spot: flex) for 7 "
        "days at most",
        ("--backend", "sagemaker"): "the sagemaker backend does not support flex-start capacity",
        ("--backend", "local"): "the local backend does not support flex-start capacity",
    }
    for flags, words in refusals.items():
        args = ("run", "--backend", "vertex", *flags, "--flex-start", "--dry-run", "job.yaml")
        said = assert_one_line_error(ferry(*args, cwd=project), 1)
        assert words in said, said
    clash = ferry("run", "--spot", "--flex-start", "job.yaml", cwd=project)
    assert clash.returncode == 2 and "not allowed with argument" in clash.stderr
    assert ferry_json("jobs") == []


def test_the_request_is_parsed_strictly(home: Path) -> None:
    from ferry.backends.vertex_request import validate
    from ferry.errors import FerryError

    good = {"displayName": "x", "jobSpec": {"workerPoolSpecs": []}}
    assert validate(good).display_name == "x"
    for bad in (
        {"displayName": "x", "jobSpec": {"workerPools": []}},  # not a field
        {"jobSpec": {"scheduling": {"strategy": "CHEAP"}}},  # not an enum value
        {"jobSpec": {"scheduling": {"timeout": "an hour"}}},  # not a duration
    ):
        with pytest.raises(FerryError, match="Vertex AI would refuse"):
            validate(bad)


@pytest.mark.parametrize(
    "resources",
    [
        "{cpus: 4}",
        "{accelerator: 'A100:1', spot: true}",
        "{accelerator: 'H100:8', spot: flex}",
        "{accelerator: tpu-v5e-8}",
        "{accelerator: 'L4:1', nodes: 3}",
    ],
)
def test_requests_hold_to_the_discovery_document(home: Path, project: Path, resources: str) -> None:
    from tests.backends.vertex_schema import parent_problem, problems

    (project / "job.yaml").write_text(
        f"name: d\ncommand: python train.py\nresources: {resources}\nlimits: {{max_runtime: 2h}}\n"
    )
    for extra in ([], ["--env", "A=1"]):
        out = ferry("run", "--backend", "vertex", "--dry-run", *extra, "job.yaml", cwd=project)
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)["request"]
        assert problems(shown["body"]) == []
        parent = shown["url"].split("/v1/", 1)[1].rsplit("/customJobs", 1)[0]
        assert parent_problem(parent) is None
    (project / "job.yaml").write_text(  # a container image of the user's: a containerSpec
        f"name: d\ncommand: python train.py\nresources: {resources}\n"
        "environment: {image: 'us-docker.pkg.dev/p/r/train:1'}\n"
    )
    out = ferry("run", "--backend", "vertex", "--dry-run", "job.yaml", cwd=project)
    assert out.returncode == 0, out.stderr
    assert problems(json.loads(out.stdout)["request"]["body"]) == []


def test_the_discovery_document_check_finds_what_the_api_refuses() -> None:
    from tests.backends.vertex_schema import document, parent_problem, problems

    machine = document()["schemas"]["GoogleCloudAiplatformV1MachineSpec"]["properties"]

    pool = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": "1",
        "pythonPackageSpec": {
            "executorImageUri": "i",
            "packageUris": ["gs://b/w.whl"],
            "pythonModule": "m",
        },
    }
    good = {"displayName": "x", "jobSpec": {"workerPoolSpecs": [pool]}}
    assert problems(good) == []
    bad = json.loads(json.dumps(good))
    bad["state"] = "JOB_STATE_RUNNING"
    del bad["displayName"]
    spec = bad["jobSpec"]
    spec["scheduling"] = {"strategy": "ON_DEMAND", "timeout": "1h", "disableRetries": "yes"}
    spec["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = "NVIDIA_TESLA_K81"
    spec["workerPoolSpecs"][0]["replicaCount"] = "two"
    del spec["workerPoolSpecs"][0]["pythonPackageSpec"]["pythonModule"]
    assert sorted(problems(bad)) == sorted(
        [
            ".state: output only, not for a request",
            ".displayName: required",
            ".jobSpec.scheduling.strategy: 'ON_DEMAND' is deprecated",
            ".jobSpec.scheduling.timeout: expected a duration in seconds such as '3600s', not '1h'",
            ".jobSpec.scheduling.disableRetries: expected true or false, not 'yes'",
            ".jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType: 'NVIDIA_TESLA_K81' is not "
            f"one of {', '.join(machine['acceleratorType']['enum'])}",
            ".jobSpec.workerPoolSpecs[0].replicaCount: expected a whole number, not 'two'",
            ".jobSpec.workerPoolSpecs[0].pythonPackageSpec.pythonModule: required",
        ]
    )
    assert parent_problem("projects/p/locations/us-central1") is None
    assert parent_problem("projects/p") is not None


def test_outputs_outside_a_bucket_are_refused_at_submit(home: Path, project: Path) -> None:
    refused = ferry("run", "--backend", "vertex", "--", "python", "train.py", cwd=project)
    line = assert_one_line_error(refused, 2)
    assert "writes the job's outputs to a gs:// bucket" in line
    assert ferry_json("jobs") == []


def test_a_sweep_of_a_vertex_script_runs_its_trials_on_vertex(
    on_vertex: dict[str, Any], project: Path
) -> None:
    # a script written for Vertex AI's hyperparameter tuning: --x=VALUE, the metric printed
    (project / "tune.py").write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--x', type=float, required=True)\n"
        "x = parser.parse_args().x\n"
        "print(f'loss={(x - 2) ** 2 + 0.5}', flush=True)\n"
    )
    (project / "job.yaml").write_text("name: tune\ncommand: python tune.py\ncontract: vertex\n")
    trials = grid_sweep(project, "vertex", "x=choice:0,3")
    assert [(t["params"]["x"], t["objective"]) for t in trials] == [(3, 1.5), (0, 4.5)]
    sent = [r["jobSpec"]["workerPoolSpecs"][0] for r in on_vertex["server"].requests[-2:]]
    assert all(p["pythonPackageSpec"]["pythonModule"] == "ferry.runner.cloud" for p in sent)


# The pattern of Vertex AI's custom-training samples (the LightGBM one among them): gs://
# URIs rewritten to /gcs/, where Cloud Storage FUSE shows every bucket on the training VM.
FUSE_SAMPLE = """
import argparse, csv, os, pickle
from sklearn.ensemble import HistGradientBoostingClassifier

parser = argparse.ArgumentParser()
parser.add_argument("--training-data", required=True)
parser.add_argument("--model-dir", default=os.environ.get("AIP_MODEL_DIR"))
args = parser.parse_args()

def fuse(uri):  # gs://bucket/key is /gcs/bucket/key on a Vertex AI training VM
    return uri.replace("gs://", "/gcs/")

with open(fuse(args.training_data)) as file:
    rows = list(csv.reader(file))[1:]
x = [[float(v) for v in row[:-1]] for row in rows]
y = [int(row[-1]) for row in rows]
model = HistGradientBoostingClassifier(max_iter=20).fit(x, y)
print(f"train_accuracy={model.score(x, y):.3f}", flush=True)
model_dir = fuse(args.model_dir)
os.makedirs(model_dir, exist_ok=True)
with open(os.path.join(model_dir, "model.pkl"), "wb") as file:
    pickle.dump(model, file)
"""


def test_a_script_reading_gcs_fuse_paths_runs_on_vertex_and_here_unchanged(
    on_vertex: dict[str, Any], project: Path
) -> None:
    import io

    from sklearn.datasets import load_breast_cancer

    gs, bucket = on_vertex["gs"], on_vertex["bucket"]
    data = load_breast_cancer()
    table = io.StringIO()
    table.write(",".join([*(f"f{i}" for i in range(data.data.shape[1])), "label"]) + "\n")
    for row, label in zip(data.data, data.target, strict=True):
        table.write(",".join([*(f"{v:g}" for v in row), str(label)]) + "\n")
    gs.pipe(f"{bucket}/data/train.csv", table.getvalue().encode())
    uri = f"gs://{bucket}/data/train.csv"
    (project / "task.py").write_text(FUSE_SAMPLE)
    # no paths: in the spec (the input is named so that this machine can show it at /gcs/)
    (project / "job.yaml").write_text(
        f"name: fuse\ncommand: python task.py --training-data {uri}\ninputs: {{train: {uri}}}\n"
    )
    for backend, paths in (("vertex", "host"), ("local", "container")):
        done = ferry("run", "--backend", backend, "job.yaml", cwd=project, timeout=180)
        assert done.returncode == 0, (backend, done.stderr)
        job = ferry_json("jobs")[0]
        assert job["backend"] == backend and job["spec"]["paths"] == paths, job["spec"]
        assert "train_accuracy=" in job_logs(job["id"])
        gs.invalidate_cache()
        assert gs.info(f"{bucket}/runs/{job['id']}/model/model.pkl")["size"] > 1000


def test_code_that_needs_paths_vertex_lacks_is_refused_before_any_plan(
    on_vertex: dict[str, Any], project: Path
) -> None:
    (project / "sm.py").write_text("open('/opt/ml/model/m.txt', 'w').write('m')\n")
    refused = ferry("run", "--backend", "vertex", "--", "python", "sm.py", cwd=project)
    line = assert_one_line_error(refused, 1)
    assert "mentions /opt/ml/ (SageMaker's folders)" in line and "--paths host" in line, line
    assert "plan:" not in refused.stderr
    assert ferry_json("jobs") == []
    explicit = ferry(
        "run", "--backend", "vertex", "--paths", "container", "--", "true", cwd=project
    )
    line = assert_one_line_error(explicit, 1)
    assert "makes no container paths (paths: container): its machines have /gcs/" in line, line
    assert line.endswith("(leave paths at auto)"), line
