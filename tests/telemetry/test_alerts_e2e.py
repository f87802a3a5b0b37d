"""Alerts raised by a real supervisor, sent to real receivers, and `on_alert: stop`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, ferry, ferry_json, job_status, wait_for
from tests.telemetry.receivers import smtp_server, webhook_server

pytestmark = pytest.mark.slow


def events(job_id: str) -> list[str]:
    return [e["message"] for e in job_status(job_id)["events"]]


def test_nan_alert_stops_the_job_and_the_end_is_announced(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "import time\nfrom ferry import runtime\n"
        "for step in range(1, 1000):\n"
        "    runtime.report(step=step, loss=float('nan') if step >= 5 else 1.0 / step)\n"
        "    time.sleep(0.05)\n"
    )
    with webhook_server() as hook:
        (project / "job.yaml").write_text(
            "command: python train.py\n"
            "alerts:\n"
            "  on_alert: stop\n"
            "  notify: [{webhook: '${HOOK_URL}'}]\n"
        )
        result = ferry("run", "job.yaml", cwd=project, env={"HOOK_URL": hook.url + "/T/B/x"})
        assert result.returncode != 0
        assert "ferry: ALERT loss is NaN at step 5" in result.stderr  # as it happened
        job_id = ferry_json("jobs")[0]["id"]
        status = job_status(job_id)
        assert status["status"] == "FAILED"
        assert status["reason"].startswith("stopped on alert: loss is NaN at step 5")
        wait_for(lambda: len(hook.posts) == 2, what="the alert and the end posted")
        kinds = [body["alert"] for _, body in hook.posts]
        assert kinds == ["nan", "failed"]
        assert hook.posts[1][1]["status"] == "FAILED"
    text = wait_for(
        lambda: (t := "\n".join(events(job_id))).count("alert sent by webhook") == 2 and t,
        what="both deliveries recorded",
    )
    assert "alert: loss is NaN at step 5" in text
    assert text.count("alert sent by webhook to ${HOOK_URL}") == 2
    assert "/T/B/x" not in text and "/T/B/x" not in ferry("status", job_id).stdout


def test_global_email_settings_and_no_progress(home: Path, project: Path) -> None:
    with smtp_server() as box:
        ferry("config", "set", "alerts.email", "me@example.com")
        ferry("config", "set", "alerts.smtp_server", f"127.0.0.1:{box.port}")
        (project / "stall.py").write_text(
            "import time\nprint('loading', flush=True)\ntime.sleep(30)\n"
        )
        (project / "job.yaml").write_text(
            "command: python stall.py\nalerts: {no_progress: 3s, on_alert: stop, on_end: [failed]}\n"
        )
        result = ferry("run", "job.yaml", cwd=project)
        assert result.returncode != 0
        job_id = ferry_json("jobs")[0]["id"]
        assert job_status(job_id)["reason"].startswith("stopped on alert: no progress for")
        wait_for(lambda: len(box.messages) == 2, what="two e-mails")
    subjects = sorted(m["Subject"] for m in box.messages)
    assert subjects == [
        f"[ferry] stall ({job_id}): failed",
        f"[ferry] stall ({job_id}): no progress",
    ]


def test_memory_near_the_limit_is_an_event_without_notifiers(home: Path, project: Path) -> None:
    ferry("config", "set", "telemetry.interval", "0.3s")
    (project / "grow.py").write_text(
        "import time\nblock = bytearray(80_000_000)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "time.sleep(4)\n"
    )
    (project / "job.yaml").write_text(
        "command: python grow.py\nresources: {memory: 100MB}\nalerts: {memory_above: 60}\n"
    )
    assert ferry("run", "job.yaml", cwd=project).returncode == 0  # notify only: the job goes on
    job_id = ferry_json("jobs")[0]["id"]
    [alert] = [e for e in events(job_id) if e.startswith("alert:")]
    assert "of the job's 100.0 MB" in alert or "of the job's 95.4 MiB" in alert, alert
    assert job_status(job_id)["status"] == "SUCCEEDED"


def test_bad_alert_settings_are_refused_before_the_job_runs(home: Path, project: Path) -> None:
    cases = {
        "alerts: {memory_above: 150}": "at most 100",
        "alerts: {notify: [{webhook: ftp://x}]}": "must be an http:// or https:// URL",
        "alerts: {notify: [{webhook: 'http://x', email: a@b.c}]}": "names one of webhook, email or command",
        "alerts: {on_alert: explode}": "on_alert",
        "alerts: {notify: [{webhook: '${NOT_SET_ANYWHERE}'}]}": "${NOT_SET_ANYWHERE}",
    }
    for text, expected in cases.items():
        (project / "job.yaml").write_text(f"command: python x.py\n{text}\n")
        line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), 2)
        assert expected in line, line
    assert ferry_json("jobs") == []
    result = ferry("config", "set", "alerts.webhook", "hooks.example.com")
    assert "http:// or https://" in assert_one_line_error(result, 2)


def test_alert_flags_and_a_command_notifier(home: Path, project: Path, tmp_path: Path) -> None:
    said = tmp_path / "said.txt"
    (project / "train.py").write_text(
        "import time\nfrom ferry import runtime\n"
        "runtime.report(step=1, loss=float('inf'))\ntime.sleep(30)\n"
    )
    result = ferry(
        "run",
        "--notify",
        f'command=echo "$FERRY_ALERT $FERRY_ALERT_JOB_STATUS" >> {said}',
        "--on-alert",
        "stop",
        "--",
        "python",
        "train.py",
        cwd=project,
    )
    assert result.returncode != 0
    job_id = ferry_json("jobs")[0]["id"]
    assert "stopped on alert: loss is infinite at step 1" in job_status(job_id)["reason"]
    wait_for(lambda: said.exists() and len(said.read_text().splitlines()) == 2, what="2 lines")
    assert said.read_text().splitlines() == ["nan RUNNING", "failed FAILED"]
    line = assert_one_line_error(
        ferry("run", "--notify", "pager=123", "--", "true", cwd=project), 2
    )
    assert "--notify expects webhook=URL, email=ADDRESS or command=CMD" in line


def test_a_lost_supervisor_is_announced_by_the_command_that_notices(
    home: Path, project: Path
) -> None:
    import os
    import signal

    from ferry.store import open_store

    (project / "sleep.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    (project / "job.yaml").write_text("command: python sleep.py\nretries: {on_preemption: 0}\n")
    with webhook_server() as hook:
        result = ferry(
            "run",
            "--detach",
            "--notify",
            "webhook=${HOOK}",
            "job.yaml",
            cwd=project,
            env={"HOOK": f"{hook.url}/x"},
        )  # the command that notices below runs without HOOK: the job's own env is used
        job_id = result.stdout.strip()
        wait_for(lambda: job_status(job_id)["status"] == "RUNNING", what="RUNNING")
        supervisor = open_store().get_job(job_id).supervisor_pid
        assert supervisor
        os.kill(supervisor, signal.SIGKILL)

        def gone() -> bool:
            try:
                os.kill(supervisor, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(gone, what="the supervisor to die")
        ferry_json("jobs")  # notices, marks the job failed, announces it
        wait_for(lambda: hook.posts, what="the announcement")
    [(_, body)] = hook.posts
    assert body["alert"] == "failed" and body["status"] == "FAILED"
    assert "supervisor lost" in body["message"]
    wait_for(lambda: "alert sent by webhook to ${HOOK}" in events(job_id), what="the event")


def test_values_at_the_very_end_and_out_of_range_are_handled(home: Path, project: Path) -> None:
    (project / "short.py").write_text("print('step=1 loss=1e39')\nprint('step=2 loss=nan')\n")
    assert ferry("run", "--", "python", "short.py", cwd=project).returncode == 0
    job_id = ferry_json("jobs")[0]["id"]
    status = job_status(job_id)
    assert status["status"] == "SUCCEEDED"  # a value beyond float32 did not upset the export
    assert any(m.startswith("alert: loss is NaN at step 2") for m in events(job_id))
    from tests.telemetry.test_export import read_scalars

    scalars = read_scalars(Path(status["outputs"]) / "tensorboard" / "ferry")
    assert scalars["loss"][0] == (1, float("inf"))


def test_a_lightgbm_warning_is_neither_a_metric_nor_a_divergence(home: Path, project: Path) -> None:
    # LightGBM prints this on stdout, many times over, in healthy runs; the job trains for a
    # few heartbeats so that a wrong alert would stop it while it runs
    (project / "boost.py").write_text(
        "import time\n"
        "for it in range(1, 31):\n"
        "    print('[LightGBM] [Warning] No further splits with positive gain, best gain: -inf',"
        " flush=True)\n"
        "    print(f'iter={it} binary_logloss={1 / it:.4f}', flush=True)\n"
        "    time.sleep(0.1)\n"
    )
    result = ferry("run", "--on-alert", "stop", "--", "python", "boost.py", cwd=project)
    assert result.returncode == 0, result.stderr
    job_id = ferry_json("jobs")[0]["id"]
    assert job_status(job_id)["status"] == "SUCCEEDED"
    assert not [e for e in events(job_id) if e.startswith("alert:")]
    names = {m["name"] for m in ferry_json("metrics", job_id)}
    assert "gain" not in names and "binary_logloss" in names
