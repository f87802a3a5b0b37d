"""Costs of real local jobs: accrual per attempt, the job's cost cap through the preemption
path, the monthly budget, estimates, reports and --backend auto, through the real CLI."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, ferry, ferry_json, job_status, submit, wait_for

pytestmark = pytest.mark.slow

# saves on the notice, as a script using the runtime would, and runs until stopped
SAVER = textwrap.dedent("""
    import os, sys, time
    from ferry import runtime
    runtime.on_preemption(lambda: open("saved.txt", "w").write("saved"))
    print("started", flush=True)
    while True:
        time.sleep(0.05)
""")


def _price(per_second: float) -> None:
    ferry("config", "set", "local.price_hour", str(per_second * 3600))
    ferry("config", "set", "telemetry.interval", "1s")
    ferry("config", "set", "local.stop_grace", "1s")  # (the cap looks ahead the grace too)


def test_a_job_is_stopped_by_its_budget_and_can_save_first(home: Path, project: Path) -> None:
    (project / "train.py").write_text(SAVER)
    _price(1.0)  # 1 USD a second: a 3 USD cap is reached in about 2 s
    job_id = submit("--max-cost", "3", "--", "python", "train.py", cwd=project)
    data = wait_for(
        lambda: (s := job_status(job_id))["status"] == "FAILED" and s, 60, "the budget stop"
    )
    assert data["reason"] == "budget reached: 3.00 USD"
    assert 0.9 <= data["cost"] <= 3.0  # stopped before what a stop takes would pass the cap
    assert data["attempts"][0]["price"] == 3600.0
    assert any("budget reached: 3.00 USD, stopping the attempt" in e["message"]
               for e in data["events"])  # fmt: skip
    # the notice reached the script (it runs in the job's code folder): it saved first
    assert (home / "jobs" / job_id / "work" / "saved.txt").read_text() == "saved"
    shown = ferry("status", job_id)
    assert "Cost" in shown.stdout and "of max_cost 3.00" in shown.stdout


def test_preempted_attempts_are_paid_for_too(home: Path, project: Path) -> None:
    (project / "train.py").write_text(SAVER)
    _price(0.01)
    job_id = submit("--", "python", "train.py", cwd=project)
    wait_for(lambda: "started" in ferry("logs", job_id).stdout, 30, "the first attempt")
    assert ferry("preempt", job_id).returncode == 0
    wait_for(lambda: len(job_status(job_id)["attempts"]) == 2, 30, "the second attempt")
    assert ferry("cancel", job_id, "--wait").returncode == 0
    data = job_status(job_id)
    first, second = data["attempts"]
    assert first["status"] == "PREEMPTED" and first["cost"] > 0 and second["cost"] > 0
    assert data["cost"] == pytest.approx(first["cost"] + second["cost"], abs=1e-5)
    took = first["ended_at"] - first["started_at"]
    assert first["cost"] == pytest.approx(0.01 * took, rel=0.05)
    report = ferry_json("cost", "report", "--since", "1h")
    assert report["by"][0]["job"] == job_id
    assert report["total_usd"] == pytest.approx(data["cost"], rel=0.05)


def test_a_spent_monthly_budget_refuses_new_jobs(home: Path, project: Path) -> None:
    _price(1.0)
    ferry("run", "--", "python", "-c", "import time; time.sleep(1.5)", cwd=project)
    assert ferry("budget", "set", "--monthly", "1").returncode == 0
    state = ferry_json("budget")
    assert state["exhausted"] and state["spent_usd"] >= 1.0 and not state["hard"]
    refused = ferry("run", "--detach", "--", "python", "-c", "pass", cwd=project)
    line = assert_one_line_error(refused, 1)
    assert "the monthly budget of 1.00 USD is spent" in line
    assert "ferry budget set --monthly" in line
    assert len(ferry_json("jobs")) == 1  # nothing stored
    assert ferry("budget", "clear").returncode == 0
    assert ferry("run", "--", "python", "-c", "pass", cwd=project).returncode == 0


def test_a_hard_monthly_budget_stops_running_jobs(home: Path, project: Path) -> None:
    (project / "train.py").write_text(SAVER)
    _price(1.0)
    job_id = submit("--", "python", "train.py", cwd=project)
    wait_for(lambda: "started" in ferry("logs", job_id).stdout, 30, "the job to start")
    # set while the job runs: it is stopped at the next look at the month (BUDGET_POLL)
    assert ferry("budget", "set", "--monthly", "2", "--hard").returncode == 0
    data = wait_for(
        lambda: (s := job_status(job_id))["status"] == "FAILED" and s, 60, "the budget stop"
    )
    assert data["reason"] == "monthly budget reached: 2.00 USD"
    assert (home / "jobs" / job_id / "work" / "saved.txt").exists()


def test_estimate_report_and_auto_backend(home: Path, project: Path) -> None:
    spec = project / "job.yaml"
    spec.write_text("name: tiny\ncommand: python -c pass\nresources: {accelerator: 'H100:8'}\n")
    out = ferry("cost", "estimate", str(spec), "--hours", "10", "--json", cwd=project)
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["choice"]["provider"] == "gcp"  # (vertex)
    assert data["hours"] == 10 and data["skipped"][0]["total_usd"] > 0
    refused = ferry("run", "--backend", "auto", str(spec), cwd=project)
    line = assert_one_line_error(refused, 2)  # the cheapest is on Vertex AI, which needs a bucket
    assert line.startswith("ferry: the vertex backend writes the job's outputs to a gs:// bucket")
    # a CPU job goes to this machine, priced at local.price_hour (under the clouds' CPU
    # machines); the estimate says so
    _price(0.1 / 3600)
    cpu = project / "cpu.yaml"
    cpu.write_text("name: cpu\ncommand: python -c pass\nest_runtime: 2h\n")
    shown = ferry("cost", "estimate", str(cpu), cwd=project)
    assert shown.returncode == 0
    assert "this machine (local backend) · 0.10 USD/h · ~0.20 USD for 2h (est_runtime)" in (
        shown.stdout
    )
    run = ferry("run", "--backend", "auto", str(cpu), cwd=project)
    assert run.returncode == 0, run.stderr
    assert "ferry: plan: this machine (local backend) · 0.10 USD/h" in run.stderr
    csv_out = ferry("cost", "report", "--by", "backend", "--csv").stdout
    rows = list(csv.reader(io.StringIO(csv_out)))
    assert rows[0] == ["backend", "usd"] and rows[1][0] == "local"
    png = project / "spend.png"
    assert ferry("cost", "report", "--by", "day", "-o", str(png)).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_expensive_launch_asks_first(home: Path, project: Path) -> None:
    _price(20 / 3600)  # 20 USD/h, above the default confirm_above of 10
    ferry("config", "set", "cost.when_not_interactive", "refuse")
    refused = ferry("run", "--", "python", "-c", "pass", cwd=project)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    plan, line = refused.stderr.splitlines()
    assert plan == "ferry: plan: this machine (local backend) · 20.00 USD/h"
    assert line == (
        "ferry: not launched: 20.00 USD/h is above cost.confirm_above (10.00) "
        "(pass --yes to launch it)"
    )
    assert ferry_json("jobs") == []
    assert ferry("run", "--yes", "--", "python", "-c", "pass", cwd=project).returncode == 0
