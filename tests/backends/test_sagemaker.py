"""The sagemaker backend against moto's SageMaker (requests) and the life-cycle test server
with its provider double (tests/backends/sagemaker_server.py says what they simulate),
with the bucket and CloudWatch Logs on moto's server: real `ferry` commands, real
supervisors, the real bootstrap and runner on the double's instance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.backends.conftest import grid_sweep, loss_points
from tests.backends.sagemaker_server import SageMakerServer
from tests.conftest import (
    assert_one_line_error,
    ferry,
    ferry_json,
    job_logs,
    job_status,
    submit,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sagemaker")]


def _jobs_of(server: SageMakerServer, job_id: str) -> list[Any]:
    return [
        j for j in server.jobs.values() if {"Key": "ferry-job", "Value": job_id} in j.body["Tags"]
    ]


def _job_of(server: SageMakerServer, job_id: str) -> Any:
    found = _jobs_of(server, job_id)
    assert found, f"no training job for {job_id}"
    return found[-1]


def _events(job_id: str) -> str:
    return " | ".join(e["message"] for e in job_status(job_id)["events"])


def test_a_job_runs_as_a_training_job_and_its_model_lands_in_the_bucket(
    on_sagemaker: dict[str, Any], project: Path, s3_endpoint: str
) -> None:
    server, s3, bucket = on_sagemaker["server"], on_sagemaker["s3"], on_sagemaker["bucket"]
    (project / "job.yaml").write_text(
        "name: sm\ncommand: python train.py\nhyperparameters: {lr: 0.1}\n"
        "env: {TOKEN: visible}\nsecrets: [HIDDEN]\nlimits: {max_runtime: 1h}\n"
        "metrics: {loss: 'loss=([0-9.]+)'}\n"
    )
    done = ferry(
        "run",
        "--backend",
        "sagemaker",
        "job.yaml",
        cwd=project,
        timeout=180,
        env={"HIDDEN": "s3cr3t"},
    )
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    assert "SUCCEEDED" in done.stderr and "model: model.txt" in done.stderr
    logs = job_logs(job_id)
    assert '"FERRY_JOB_ID": "' + job_id in logs and '"TOKEN": "visible"' in logs
    assert 'hyperparameters {"lr": 0.1}' in logs and "done" in logs
    model = s3.get_object(Bucket=bucket, Key=f"runs/{job_id}/model/model.txt")
    assert model["Body"].read() == b"weights"
    # the request: what SageMaker reads, with the limits Ferry owns
    sent = server.requests[-1]
    name = sent["TrainingJobName"]
    assert name.startswith(f"{job_id}-1-")
    algorithm = sent["AlgorithmSpecification"]
    assert algorithm["ContainerEntrypoint"] == [
        "python3",
        "/opt/ml/input/data/ferry-wheel/bootstrap.py",
    ]
    assert algorithm["ContainerArguments"][1:] == [
        "s3",
        f"s3://{bucket}/.ferry/runs/{name}",
        "/opt/ml/input/data/ferry-code",
    ]
    # in the bucket's region, not this machine's (AWS_DEFAULT_REGION is us-east-1)
    assert algorithm["TrainingImage"].startswith("763104351884.dkr.ecr.eu-west-1.amazonaws.com/")
    assert algorithm["MetricDefinitions"] == [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
    assert sent["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert sent["StoppingCondition"]["MaxRuntimeInSeconds"] == 3600 + 120 + 300
    assert "MaxWaitTimeInSeconds" not in sent["StoppingCondition"]  # (not spot)
    assert sent["HyperParameters"] == {"lr": "0.1"} and sent["Environment"] == {"TOKEN": "visible"}
    assert {"Key": "ferry-attempt", "Value": "1"} in sent["Tags"]
    # secrets reach the job through the run folder, never the request (the console shows it)
    assert "s3cr3t" not in json.dumps(sent) and "HIDDEN" not in json.dumps(sent)
    job = _job_of(server, job_id)
    assert job.status == "Completed"
    runs = s3.list_objects_v2(Bucket=bucket, Prefix=".ferry/runs/").get("Contents", [])
    assert runs and not any(o["Key"].endswith("secrets.json") for o in runs)
    events = _events(job_id)
    assert (
        f"eu-west-1.console.aws.amazon.com/sagemaker/home?region=eu-west-1#/jobs/{name}" in events
    )
    assert "provider: InProgress/Training" in events and "provider: Completed" in events
    # the cost is SageMaker's billable seconds at the offering's price
    billable = job.answer()["BillableTimeInSeconds"]
    attempt = job_status(job_id)["attempts"][0]
    assert attempt["cost"] == pytest.approx(attempt["price"] * billable / 3600, abs=1e-6)
    # the request is one moto's SageMaker reads too, as sent
    import boto3

    moto = boto3.client("sagemaker", endpoint_url=s3_endpoint, region_name="eu-west-1")
    moto.create_training_job(**{**sent, "TrainingJobName": f"moto-{name}"[:63]})
    described = moto.describe_training_job(TrainingJobName=f"moto-{name}"[:63])
    assert described["AlgorithmSpecification"]["TrainingImage"] == algorithm["TrainingImage"]
    # the same folder again: nothing to upload
    again = ferry(
        "run", "--backend", "sagemaker", "--detach", "job.yaml", cwd=project, env={"HIDDEN": "x"}
    )
    second = again.stdout.strip()
    assert again.returncode == 0 and second and second != job_id, (again.stdout, again.stderr)
    wait_for(lambda: job_status(second)["status"] == "SUCCEEDED", 120, "the second job")
    assert "code and Ferry's wheel unchanged: 0 bytes sent" in _events(second)


def test_inputs_come_as_channels_and_hard_coded_paths_reach_the_outputs(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server, s3, bucket = on_sagemaker["server"], on_sagemaker["s3"], on_sagemaker["bucket"]
    s3.put_object(Bucket=bucket, Key="data/train/numbers.txt", Body=b"1 2 3\n")
    s3.put_object(Bucket=bucket, Key="data/labels.csv", Body=b"a,b\n")
    s3.put_object(Bucket=bucket, Key="data/train_old/stale.txt", Body=b"old\n")
    s3.put_object(Bucket=bucket, Key="data/labels.csv.bak", Body=b"old\n")
    (project / "sm_script.py").write_text(
        "import os\nfrom pathlib import Path\n"
        "print('train', sorted(os.listdir(os.environ['FERRY_INPUT_TRAIN'])), flush=True)\n"
        "print('labels', Path(os.environ['FERRY_INPUT_LABELS']).read_text().strip(), flush=True)\n"
        "Path('/opt/ml/model').mkdir(parents=True, exist_ok=True)\n"
        "Path('/opt/ml/model/hardcoded.txt').write_text('here')\n"
    )
    (project / "job.yaml").write_text(
        "name: ch\ncommand: python sm_script.py\ninputs:\n"
        f"  train: s3://{bucket}/data/train\n  labels: s3://{bucket}/data/labels.csv\n"
    )
    done = ferry("run", "--backend", "sagemaker", "job.yaml", cwd=project, timeout=180)
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    logs = job_logs(job_id)
    assert "train ['numbers.txt']" in logs and "labels a,b" in logs
    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
        for c in server.requests[-1]["InputDataConfig"]
    }
    # a folder is a channel (its prefix ends with /: data/train_old/ stays out); a single
    # object is not (its prefix would take data/labels.csv.bak too): the runner copies it
    assert channels["train"] == f"s3://{bucket}/data/train/"
    assert "labels" not in channels and {"ferry-wheel", "ferry-code"} <= set(channels)
    events = _events(job_id)
    assert "input train:" not in events and "input labels: 1 files" in events
    # what the script wrote to the instance's own /opt/ml/model joined the outputs
    kept = s3.get_object(Bucket=bucket, Key=f"runs/{job_id}/model/hardcoded.txt")
    assert kept["Body"].read() == b"here"


def test_a_failing_script_fails_the_job_with_its_last_lines(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    done = ferry(
        "run",
        "--backend",
        "sagemaker",
        "--",
        "python",
        "train.py",
        "exit3",
        cwd=project,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    status = job_status(job_id)
    assert status["status"] == "FAILED" and "about to fail" in status["reason"]


def test_a_failed_install_is_told_in_sagemakers_words_and_its_log(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    server.script[:] = ["broken-wheel"]
    done = ferry(
        "run", "--backend", "sagemaker", "--", "python", "train.py", cwd=project, timeout=120
    )
    assert done.returncode != 0
    job_id = ferry_json("jobs")[0]["id"]
    reason = job_status(job_id)["reason"]
    # the bootstrap's words, as SageMaker's FailureReason, and the log's last lines
    assert "AlgorithmError: Ferry could not be installed (pip exit code" in reason, reason
    assert "its log ends:" in reason
    assert "ferry bootstrap: installing" in job_logs(job_id)  # from CloudWatch Logs
    assert "CloudWatch" in _events(job_id)


def test_cancel_reaches_the_runner_through_the_bucket(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    job_id = submit("--backend", "sagemaker", "--", "python", "train.py", "long", cwd=project)
    wait_for(lambda: "starting at" in job_logs(job_id), 120, "the job to start")
    assert ferry("cancel", job_id).returncode == 0
    wait_for(lambda: job_status(job_id)["status"] == "CANCELLED", 60, "the cancel")
    assert "notice at" in job_logs(job_id)  # it was told, and answered, before it ended
    job = _job_of(server, job_id)
    wait_for(lambda: job.status in ("Completed", "Stopped"), 30, "its end")
    assert job.procs and all(p.poll() is not None for p in job.procs)  # nothing left running


def test_cancel_stops_a_job_still_waiting_for_its_instance_at_once(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    server.script[:] = ["pending"]
    job_id = submit("--backend", "sagemaker", "--", "python", "train.py", cwd=project)
    wait_for(lambda: "InProgress/Starting" in _events(job_id), 60, "Starting")
    assert ferry("cancel", job_id).returncode == 0
    wait_for(lambda: job_status(job_id)["status"] == "CANCELLED", 30, "the cancel")
    job = _job_of(server, job_id)
    assert job.status == "Stopped" and not job.procs  # stopped; its container never ran


def test_a_spot_interruption_resumes_from_the_checkpoint_in_a_new_training_job(
    on_sagemaker: dict[str, Any], project: Path, tmp_path: Path
) -> None:
    server, bucket = on_sagemaker["server"], on_sagemaker["bucket"]
    release = tmp_path / "release"  # (the double's instance is this machine: the script sees it)
    (project / "job.yaml").write_text(
        f"name: spot\ncommand: python train.py long {release}\nresources: {{spot: true}}\n"
        "checkpoint: {paths: [step.txt]}\nlimits: {max_runtime: 2h, max_pending: 40m}\n"
    )
    job_id = submit("--backend", "sagemaker", "job.yaml", cwd=project)
    wait_for(lambda: loss_points(job_id) >= 8, 120, "a few reported steps")
    first = _job_of(server, job_id)
    # SageMaker restarts the job by itself soon after: the interruption is in its history
    server.interrupt(first.name, restart_after=0.2)
    second = ("logs", job_id, "--attempt", "2")
    wait_for(lambda: "starting at" in ferry(*second).stdout, 120, "the second attempt")
    release.touch()
    wait_for(lambda: job_status(job_id)["status"] == "SUCCEEDED", 120, "the job to finish")
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert "spot capacity taken back" in status["attempts"][0]["reason"]
    assert first.status == "Stopped" and first.runs <= 2  # Ferry stopped it
    sent = first.body
    assert sent["EnableManagedSpotTraining"] is True
    assert sent["CheckpointConfig"] == {
        "S3Uri": f"s3://{bucket}/runs/{job_id}/checkpoints",
        "LocalPath": "/opt/ml/checkpoints",
    }
    stopping = sent["StoppingCondition"]
    assert stopping["MaxRuntimeInSeconds"] == 7200 + 120 + 300
    assert stopping["MaxWaitTimeInSeconds"] == stopping["MaxRuntimeInSeconds"] + 2400
    assert "notice at" in job_logs(job_id, "--attempt", "1")
    resumed = [line for line in ferry(*second).stdout.splitlines() if "starting at" in line]
    assert int(resumed[0].split()[-1]) >= 8, resumed
    assert len(_jobs_of(server, job_id)) == 2


def test_the_training_jobs_own_log_is_a_second_source(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    done = ferry(
        "run", "--backend", "sagemaker", "--", "python", "train.py", cwd=project, timeout=180
    )
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    # CloudWatch Logs has the container's output (the double ships it as the agent would)
    shown = wait_for(
        lambda: (
            (out := ferry("logs", job_id, "--provider")).returncode == 0
            and "done" in out.stdout
            and out
        ),
        30,
        "the job's CloudWatch lines",
    )
    assert "starting at 0" in shown.stdout
    assert not shown.stdout.startswith("[algo-")  # (one host: its lines as they are)
    last = ferry("logs", job_id, "--provider", "--tail", "1")
    assert last.returncode == 0 and len(last.stdout.splitlines()) == 1, last
    none = ferry("logs", job_id, "--provider", "--tail", "0")
    assert none.returncode == 0 and none.stdout == ""
    for flags in (["-f"], ["--stream", "stderr"], ["--rank", "0"]):
        refused = assert_one_line_error(ferry("logs", job_id, "--provider", *flags), 2)
        assert "--provider prints the provider's log as it is, without" in refused
    # a local job has no provider's log: one sentence that says where its log is
    local = ferry("run", "--", "python", "-c", "print('here')", cwd=project)
    assert local.returncode == 0
    here = next(j["id"] for j in ferry_json("jobs") if j["backend"] == "local")
    said = assert_one_line_error(ferry("logs", here, "--provider"), 1)
    assert f"keeps no log of its own: ferry logs {here} shows all" in said, said


def test_no_capacity_passes_the_offering_over_and_tries_the_next(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    server.script[:] = ["capacity", "quota"]
    done = ferry(
        "run", "--backend", "sagemaker", "--", "python", "train.py", cwd=project, timeout=240
    )
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    attempts = job_status(job_id)["attempts"]
    assert [a["status"] for a in attempts] == ["FAILED", "FAILED", "SUCCEEDED"]
    assert "CapacityError: Unable to provision" in attempts[0]["reason"]
    assert "account-level service limit 'ml.m5" in attempts[1]["reason"]
    # the attached run says each time why it moved on, and where each training job is
    said = done.stderr
    assert f"ferry: attempt 2 of {job_id} (attempt 1 failed: " in said, said
    assert "CapacityError: Unable to provision" in said.split("attempt 2 of", 1)[1]
    assert f"ferry: attempt 3 of {job_id} (attempt 2 failed: " in said, said
    assert said.count("ferry: SageMaker training job ") == 2, said  # (none for the quota)
    assert "console.aws.amazon.com/sagemaker/" in said
    offerings = [a["offering"] for a in attempts]
    assert len(set(offerings)) == 3, offerings  # each refusal moved on to another offering
    assert all("eu-west-1" in o for o in offerings)  # (the bucket's region)


def test_a_job_made_by_a_create_whose_answer_was_lost_is_followed_not_orphaned(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    server.script[:] = ["lost-answer"]
    done = ferry(
        "run", "--backend", "sagemaker", "--", "python", "train.py", cwd=project, timeout=120
    )
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    made = _jobs_of(server, job_id)
    assert len(made) == 1 and made[0].status == "Completed"  # one, and it is the one
    assert len(job_status(job_id)["attempts"]) == 1


def test_a_create_that_keeps_failing_is_looked_for_by_its_name(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    server = on_sagemaker["server"]
    server.script[:] = ["lost-answers"]  # (made, but every try answered with HTTP 500)
    done = ferry(
        "run", "--backend", "sagemaker", "--", "python", "train.py", cwd=project, timeout=120
    )
    assert done.returncode == 0, done.stderr
    job_id = ferry_json("jobs")[0]["id"]
    made = _jobs_of(server, job_id)
    assert len(made) == 1 and made[0].status == "Completed"
    assert len(job_status(job_id)["attempts"]) == 1


def test_dry_run_prints_the_request_with_placeholders_and_no_settings(
    home: Path, project: Path
) -> None:
    (project / "job.yaml").write_text(
        "name: dry\ncommand: python train.py\nresources: {accelerator: 'A10G:1', spot: true}\n"
        "limits: {max_runtime: 2h}\nhyperparameters: {lr: 0.01}\n"
    )
    out = ferry("run", "--backend", "sagemaker", "--dry-run", "job.yaml", cwd=project)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)["request"]
    body = shown["body"]
    assert body["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge"
    assert body["EnableManagedSpotTraining"] is True
    assert body["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200 + 120 + 300
    assert body["RoleArn"] == "<ROLE_ARN>" and body["HyperParameters"] == {"lr": "0.01"}
    assert shown["aws"].startswith("aws sagemaker create-training-job --region ")
    assert (
        "is the cheapest region for this instance: the job runs in its bucket's" in (shown["note"])
    )
    filled = {p["placeholder"] for p in shown["placeholders"]}
    assert {"<ROLE_ARN>", "<BUCKET>", "<JOB_ID>"} <= filled
    assert "ferry: <ROLE_ARN>: ferry config set sagemaker.role ROLE_ARN" in out.stderr
    # with the settings, those are the real values; and still no network (a listener
    # stands for S3 and SageMaker: nothing reaches it)
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    where = f"http://127.0.0.1:{listener.getsockname()[1]}"
    ferry("config", "set", "storage.s3.endpoint_url", where)
    ferry("config", "set", "sagemaker.endpoint", where)
    role = "arn:aws:iam::111122223333:role/trainer"
    ferry("config", "set", "sagemaker.role", role)
    ferry("config", "set", "sagemaker.region", "eu-west-1")
    ferry("config", "set", "outputs_root", "s3://my-bucket/runs")
    out = ferry("run", "--backend", "sagemaker", "--dry-run", "job.yaml", cwd=project)
    shown = json.loads(out.stdout)["request"]
    filled = {p["placeholder"] for p in shown["placeholders"]}
    assert "<ROLE_ARN>" not in filled and "<BUCKET>" not in filled
    assert shown["body"]["RoleArn"] == role and "eu-west-1" in shown["aws"]
    assert "s3://my-bucket/" in json.dumps(shown["body"])
    with pytest.raises(BlockingIOError):
        listener.accept()  # (no connection was made)
    listener.close()


def test_the_request_is_checked_against_botocores_model(home: Path) -> None:
    from ferry.backends.sagemaker_request import validate
    from ferry.errors import FerryError

    good: dict[str, Any] = {
        "TrainingJobName": "job-1-abc",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 5},
        "StoppingCondition": {"MaxRuntimeInSeconds": 60},
    }
    validate(good)
    for change, words in (
        ({"TrainingJobNam": "x"}, "Unknown parameter"),  # not a field
        ({"TrainingJobName": "a_b"}, "does not match"),  # a pattern
        ({"TrainingJobName": "x" * 64}, "more than 63"),  # a length
        ({"ResourceConfig": {**good["ResourceConfig"], "InstanceType": "ml.x9.huge"}}, "values"),
        ({"RoleArn": "role"}, "RoleArn"),
        ({"Environment": {f"K{i}": "v" for i in range(101)}}, "more than 100"),
        ({"StoppingCondition": {"MaxPendingTimeInSeconds": 10**7}}, "more than 2419200"),
        ({"HyperParameters": {"k": "v" * 2501}}, "more than 2500"),
    ):
        with pytest.raises(FerryError, match="SageMaker would refuse") as refused:
            validate({**good, **change})
        assert words in refused.value.message, refused.value.message


def test_what_sagemaker_would_refuse_is_refused_at_submit_naming_the_field(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    long = "x" * 600
    refused = ferry(
        "run",
        "--backend",
        "sagemaker",
        "--env",
        f"BIG={long}",
        "--",
        "python",
        "train.py",
        cwd=project,
    )
    line = assert_one_line_error(refused, 2)
    assert "SageMaker would refuse this job's request (the spec's env)" in line, line
    (project / "job.yaml").write_text("command: python train.py\ninputs: {ferry-code: s3://b/x/}\n")
    refused = ferry("run", "--backend", "sagemaker", "job.yaml", cwd=project)
    line = assert_one_line_error(refused, 2)
    assert "would be SageMaker's channel 'ferry-code'" in line, line
    assert ferry_json("jobs") == []


def test_outputs_outside_a_bucket_are_refused_at_submit(home: Path, project: Path) -> None:
    refused = ferry("run", "--backend", "sagemaker", "--", "python", "train.py", cwd=project)
    line = assert_one_line_error(refused, 2)
    assert "writes the job's outputs to a s3:// bucket" in line
    assert ferry_json("jobs") == []


def test_a_sweep_of_a_sagemaker_script_runs_its_trials_on_sagemaker(
    on_sagemaker: dict[str, Any], project: Path
) -> None:
    # a script written for SageMaker: its hyperparameters in hyperparameters.json and
    # SM_HP_*, its metric printed for the MetricDefinitions
    (project / "tune.py").write_text(
        "import json, os\n"
        "given = json.load(open('/opt/ml/input/config/hyperparameters.json'))\n"
        "x = float(given['x'])\n"
        "assert float(os.environ['SM_HP_X']) == x\n"
        "print(f'loss={(x - 2) ** 2 + 0.25}', flush=True)\n"
    )
    (project / "job.yaml").write_text("name: tune\ncommand: python tune.py\ncontract: sagemaker\n")
    trials = grid_sweep(project, "sagemaker", "x=choice:1,4")
    assert [(t["params"]["x"], t["objective"]) for t in trials] == [(1, 1.25), (4, 4.25)]
