"""Each notifier against a real receiver on 127.0.0.1."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ferry.telemetry.alerts import Alert
from ferry.telemetry.notify import JobInfo, MailSettings, Notifier, Target, expand
from tests.telemetry.receivers import smtp_server, webhook_server

JOB = JobInfo("a1b2c3d4", "digits")
NAN = Alert("nan", "loss is NaN at step 7: training has likely diverged")


def test_webhook_posts_slack_compatible_json_with_the_alert() -> None:
    with webhook_server() as hook:
        notifier = Notifier([Target("webhook", hook.url + "/services/T0/B0/secret")], JOB, {})
        notifier.send(NAN)
        outcomes = notifier.close()
    [(path, body)] = hook.posts
    assert path == "/services/T0/B0/secret"
    assert body["text"].startswith("Ferry job digits (a1b2c3d4): loss is NaN at step 7")
    assert body["alert"] == "nan" and body["job_id"] == "a1b2c3d4" and body["status"] == "RUNNING"
    assert outcomes == ["alert sent by webhook to 127.0.0.1"]  # never the secret path


def test_webhook_url_from_the_environment_and_errors_reported() -> None:
    with webhook_server() as hook:
        hook.status = 404
        env = {"HOOK": hook.url + "/hook"}
        notifier = Notifier([Target("webhook", "${HOOK}")], JOB, env)
        notifier.send(NAN)
        assert notifier.close() == ["alert not sent by webhook to ${HOOK}: HTTP 404 Not Found"]
        assert len(hook.posts) == 1  # a 4xx is not retried
        hook.status = 503
        started = time.monotonic()
        notifier.send(NAN)
        [outcome] = notifier.close()
        assert outcome.endswith("HTTP 503 Service Unavailable") and len(hook.posts) == 4
        assert time.monotonic() - started >= 3  # two retries, 1 s then 2 s apart
    with pytest.raises(ValueError, match=r"\$\{MISSING\} is not set"):
        expand("${MISSING}/x", {})


def test_a_malformed_secret_url_is_never_repeated() -> None:
    for url in (
        "https//hooks.example.com/SECRET",
        "http://127.0.0.1:9/SECRET 2",
        "http://[x/SECRET",
    ):
        notifier = Notifier(
            [Target("webhook", "${HOOK}"), Target("webhook", url)], JOB, {"HOOK": url}
        )
        notifier.send(NAN)
        outcomes = notifier.close()
        assert len(outcomes) == 2 and all("not sent" in o for o in outcomes), outcomes
        assert not any("SECRET" in o for o in outcomes), outcomes


def test_email_through_a_real_smtp_server() -> None:
    with smtp_server() as box:
        mail = MailSettings(server=f"127.0.0.1:{box.port}", sender="ferry@example.com")
        notifier = Notifier([Target("email", "me@example.com, you@example.com")], JOB, {}, mail)
        notifier.send(Alert("failed", "failed: exit code 3"), status="FAILED")
        assert notifier.close() == ["alert sent by e-mail to me@example.com, you@example.com"]
    [message] = box.messages
    assert box.recipients == [["me@example.com", "you@example.com"]]
    assert message["Subject"] == "[ferry] digits (a1b2c3d4): failed"
    assert message["From"] == "ferry@example.com"
    assert (
        "failed: exit code 3" in message.get_payload()
        and "ferry status a1b2c3d4" in message.get_payload()
    )


def test_email_login_without_a_password_is_reported() -> None:
    with smtp_server() as box:
        mail = MailSettings(server=f"127.0.0.1:{box.port}", user="me")
        notifier = Notifier([Target("email", "me@example.com")], JOB, {}, mail)
        notifier.send(NAN)
        [outcome] = notifier.close()
        assert "FERRY_SMTP_PASSWORD" in outcome and outcome.startswith("alert not sent by e-mail")
        notifier = Notifier(
            [Target("email", "me@example.com")], JOB, {"FERRY_SMTP_PASSWORD": "pw"}, mail
        )
        notifier.send(NAN)
        [outcome] = notifier.close()
        assert "offers no STARTTLS; the password is not sent in clear text" in outcome
    assert box.messages == []


def test_command_sees_the_alert_in_its_environment(tmp_path: Path) -> None:
    out = tmp_path / "alert.json"
    command = (
        'printf \'{"kind": "%s", "message": "%s", "job": "%s", "status": "%s", "x": "%s"}\' '
        f'"$FERRY_ALERT" "$FERRY_ALERT_MESSAGE" "$FERRY_ALERT_JOB_ID" "$FERRY_ALERT_JOB_STATUS" "$X" > {out}'
    )
    notifier = Notifier(
        [Target("command", command)], JOB, {"X": "from-env", "PATH": "/usr/bin:/bin"}
    )
    notifier.send(NAN)
    assert notifier.close() == ["alert sent by command"]
    assert json.loads(out.read_text()) == {
        "kind": "nan",
        "message": NAN.message,
        "job": "a1b2c3d4",
        "status": "RUNNING",
        "x": "from-env",
    }
    failing = Notifier(
        [Target("command", "echo no route >&2; exit 4")], JOB, {"PATH": "/usr/bin:/bin"}
    )
    failing.send(NAN)
    assert failing.close() == ["alert not sent by command: exit code 4 no route"]


def test_a_dead_receiver_does_not_hold_up_the_sender() -> None:
    notifier = Notifier([Target("webhook", "http://127.0.0.1:9/hook")], JOB, {})
    started = time.monotonic()
    notifier.send(NAN)
    assert time.monotonic() - started < 0.1  # sent from the background thread
    [outcome] = notifier.close()
    assert outcome.startswith("alert not sent by webhook to 127.0.0.1: no answer")
