"""Telling people about alerts: a webhook (Slack, Discord or any JSON endpoint), e-mail over
SMTP, or a shell command.

Notifications are sent from a background thread, so a slow mail server never holds up the
supervisor's watch loop; ``close()`` waits (bounded) for what is still queued. Each outcome
becomes an event of the job. Targets may hold ``${NAME}``, filled from the submitter's
environment at send time: a webhook's secret URL need not be stored anywhere.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import re
import subprocess
import threading
import time
from typing import Any, NamedTuple

from ferry.telemetry.alerts import Alert

TIMEOUT = 10.0  # seconds per delivery attempt
COMMAND_TIMEOUT = 60.0
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Target(NamedTuple):
    """One place alerts go."""

    kind: str  # webhook | email | command
    value: str  # as configured, ${NAME} not yet expanded

    def shown(self) -> str:
        """How the target appears in events: a webhook by its host only (its path is
        usually the secret)."""
        if self.kind == "webhook":
            if self.value.startswith("${"):
                return f"webhook to {self.value.split('}')[0]}}}"
            from urllib.parse import urlsplit

            try:
                return f"webhook to {urlsplit(self.value).hostname or 'an unnamed host'}"
            except ValueError:
                return "webhook"
        if self.kind == "email":
            return f"e-mail to {self.value}"
        return "command"


class JobInfo(NamedTuple):
    """What a notification says about its job."""

    id: str
    name: str
    status: str = "RUNNING"


class MailSettings(NamedTuple):
    server: str = "localhost:25"
    sender: str | None = None
    user: str | None = None


def targets_for(alerts: dict[str, Any] | None) -> list[Target]:
    """The job's notify list, or else those set with ``ferry config set alerts.*``."""
    from ferry import config

    listed = (alerts or {}).get("notify")
    if listed is not None:
        out = []
        for entry in listed:
            for kind in ("webhook", "email", "command"):
                if entry.get(kind):
                    out.append(Target(kind, str(entry[kind])))
        return out
    return [
        Target(kind, str(value))
        for kind in ("webhook", "email", "command")
        if (value := config.get(f"alerts.{kind}"))
    ]


def mail_settings() -> MailSettings:
    from ferry import config

    return MailSettings(
        server=str(config.get("alerts.smtp_server")),
        sender=config.get("alerts.smtp_from"),
        user=config.get("alerts.smtp_user"),
    )


def expand(text: str, env: dict[str, str]) -> str:
    """``${NAME}`` replaced from ``env``; a name that is not set is an error."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ValueError(f"${{{name}}} is not set in the environment the job was sent from")
        return env[name]

    return _VAR.sub(one, text)


def _without_url(message: str, url: str) -> str:
    """``message`` with the webhook's URL, and its path (usually the secret), taken out."""
    from urllib.parse import urlsplit

    message = message.replace(url, "<webhook URL>")
    try:
        path = urlsplit(url).path
    except ValueError:
        return message
    return message.replace(path, "/<path>") if len(path) > 1 else message


def subject(job: JobInfo, alert: Alert) -> str:
    return f"[ferry] {job.name} ({job.id}): {alert.kind.replace('_', ' ')}"


def text(job: JobInfo, alert: Alert) -> str:
    return f"Ferry job {job.name} ({job.id}): {alert.message}\nDetails: ferry status {job.id}"


def send_webhook(url: str, job: JobInfo, alert: Alert) -> None:
    """POST the alert as JSON: ``{"content": ...}`` to Discord, ``{"text": ...}`` (Slack's
    field) with the alert's fields to anything else. Retries twice on 5xx or no answer."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    body = text(job, alert)
    host = urlsplit(url).hostname or ""
    payload: dict[str, Any]
    if host.endswith(("discord.com", "discordapp.com")):
        payload = {"content": body[:2000]}
    elif host.endswith("slack.com"):
        payload = {"text": body}
    else:
        payload = {
            "text": body,
            "job_id": job.id,
            "job_name": job.name,
            "status": job.status,
            "alert": alert.kind,
            "message": alert.message,
        }
    data = json.dumps(payload).encode()
    for attempt in range(3):
        request = urllib.request.Request(
            url,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "ferry"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                response.read()
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == 2:
                raise RuntimeError(f"HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            if attempt == 2:
                reason = getattr(exc, "reason", exc)
                raise RuntimeError(f"no answer: {reason}") from None
        time.sleep(1.0 + attempt)


def send_email(
    to: str, job: JobInfo, alert: Alert, mail: MailSettings, password: str | None
) -> None:
    """Send the alert through the configured SMTP server: STARTTLS when the server offers
    it (SSL from the start on port 465), and a login when ``alerts.smtp_user`` is set."""
    import smtplib
    import ssl
    from email.message import EmailMessage

    from ferry.procs import hostname

    host, _, port_text = mail.server.rpartition(":")
    host, port = (host, int(port_text)) if host else (mail.server, 25)
    message = EmailMessage()
    message["From"] = mail.sender or f"ferry@{hostname()}"
    message["To"] = to
    message["Subject"] = subject(job, alert)
    message.set_content(text(job, alert) + "\n")
    context = ssl.create_default_context()  # the server's certificate and name are checked
    smtp: smtplib.SMTP
    if port == 465:
        smtp = smtplib.SMTP_SSL(host, port, timeout=TIMEOUT, context=context)
    else:
        smtp = smtplib.SMTP(host, port, timeout=TIMEOUT)
    with smtp:
        smtp.ehlo()
        secure = port == 465
        if not secure and smtp.has_extn("starttls"):
            smtp.starttls(context=context)
            smtp.ehlo()
            secure = True
        if mail.user:
            if password is None:
                raise RuntimeError("alerts.smtp_user is set but $FERRY_SMTP_PASSWORD is not")
            if not secure:
                raise RuntimeError(
                    f"{host} offers no STARTTLS; the password is not sent in clear text"
                    " (use port 465, or a server that offers STARTTLS)"
                )
            smtp.login(mail.user, password)
        smtp.send_message(message, to_addrs=[a.strip() for a in to.split(",")])


def run_command(command: str, job: JobInfo, alert: Alert, env: dict[str, str]) -> None:
    """Run the command with /bin/sh; it sees the alert in FERRY_ALERT_* variables."""
    from ferry import procs

    variables = {
        **env,
        "FERRY_ALERT": alert.kind,
        "FERRY_ALERT_MESSAGE": alert.message,
        "FERRY_ALERT_JOB_ID": job.id,
        "FERRY_ALERT_JOB_NAME": job.name,
        "FERRY_ALERT_JOB_STATUS": job.status,
    }
    with procs.SPAWN_LOCK:  # not one of the job's leftovers: the attempt's end must spare it
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            env=variables,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        procs.spare(proc.pid)
    try:
        _, err = proc.communicate(timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
        raise RuntimeError(f"still running after {COMMAND_TIMEOUT:g}s; stopped") from None
    finally:
        procs.unspare(proc.pid)
    if proc.returncode:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"exit code {proc.returncode} {last[0][:200]}".strip())


class Notifier:
    """Sends alerts to every target from one background thread."""

    def __init__(
        self,
        targets: list[Target],
        job: JobInfo,
        env: dict[str, str],
        mail: MailSettings | None = None,
    ) -> None:
        self.targets = targets
        self.job = job
        self.env = env
        self.mail = mail
        # what happened to each notification, for the supervisor to record as events (the
        # store's connection belongs to the supervisor's thread)
        self._outcomes: collections.deque[str] = collections.deque()
        self._queue: queue.Queue[tuple[Alert, str] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def send(self, alert: Alert, status: str = "RUNNING") -> None:
        if not self.targets:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ferry-notify", daemon=True)
            self._thread.start()
        self._queue.put((alert, status))

    def detach(self) -> list[str]:
        """Let what is queued go out in the background while this process goes on (with
        the next job); :func:`finish_all` waits for it before the process ends. Returns
        the outcomes known so far."""
        if self._thread is not None:
            self._queue.put(None)
            _detached.append(self)
        return self.outcomes()

    def close(self, timeout: float = 30.0) -> list[str]:
        """Wait up to ``timeout`` seconds for queued notifications to go out; returns the
        outcomes not yet taken."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None
        return self.outcomes()

    def outcomes(self) -> list[str]:
        """What happened to the notifications sent since the last call, one line each."""
        out = []
        while self._outcomes:
            out.append(self._outcomes.popleft())
        return out

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            alert, status = item
            job = JobInfo(self.job.id, self.job.name, status)
            for target in self.targets:
                try:
                    self._deliver(target, job, alert)
                except Exception as exc:  # any failure is the target's; the job goes on
                    self._outcomes.append(f"alert not sent by {target.shown()}: {exc}")
                else:
                    self._outcomes.append(f"alert sent by {target.shown()}")

    def _deliver(self, target: Target, job: JobInfo, alert: Alert) -> None:
        value = expand(target.value, self.env) if target.kind != "command" else target.value
        if target.kind == "webhook":
            try:
                send_webhook(value, job, alert)
            except RuntimeError as exc:
                raise RuntimeError(_without_url(str(exc), value)) from None
            except Exception as exc:  # not a URL at all (http.client, urllib refuse it)
                raise RuntimeError(f"not a valid URL ({type(exc).__name__})") from None
        elif target.kind == "email":
            mail = self.mail or mail_settings()
            send_email(value, job, alert, mail, self.env.get("FERRY_SMTP_PASSWORD"))
        else:
            run_command(value, job, alert, self.env)


_detached: list[Notifier] = []


def finish_done() -> list[tuple[str, str]]:
    """(job id, outcome) of what the detached notifiers that have finished did; those are
    dropped (a long-lived process, the watcher, records them as it goes)."""
    out: list[tuple[str, str]] = []
    for notifier in list(_detached):
        if notifier._thread is None or not notifier._thread.is_alive():
            with contextlib.suppress(ValueError):  # (taken by another caller)
                _detached.remove(notifier)
            out += [(notifier.job.id, outcome) for outcome in notifier.outcomes()]
    return out


def finish_all(timeout: float) -> list[tuple[str, str]]:
    """Wait, ``timeout`` seconds at most in all, for detached notifiers to finish; returns
    (job id, outcome) of what they did."""
    end = time.monotonic() + timeout
    out: list[tuple[str, str]] = []
    while _detached:
        notifier = _detached.pop()
        if notifier._thread is not None:
            notifier._thread.join(max(0.0, end - time.monotonic()))
        out += [(notifier.job.id, outcome) for outcome in notifier.outcomes()]
    return out


def end_alert(status: str, reason: str | None, alerts: dict[str, Any] | None) -> Alert | None:
    """The alert announcing a job's end, if its ``alerts.on_end`` asks for one."""
    ended = status.lower()
    if ended not in (alerts or {}).get("on_end", ("succeeded", "failed")):
        return None
    return Alert(ended, f"{ended}: {reason}" if reason else ended)


def announce_end(job_id: str, status: str, spec: dict[str, Any], env: dict[str, str]) -> None:
    """Announce the end of a job whose supervisor is gone, from a process of its own (the
    command that noticed it does not wait on a slow receiver)."""
    import sys

    from ferry.errors import FerryError

    alerts = spec.get("alerts")
    try:
        if end_alert(status, None, alerts) is None or not targets_for(alerts):
            return
    except FerryError:  # a config file edited into nonsense: nowhere to send it
        return
    helper = subprocess.Popen(
        [sys.executable, "-m", "ferry.telemetry.notify", job_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert helper.stdin is not None
    with contextlib.suppress(OSError), helper.stdin:  # the submitter's environment, privately
        helper.stdin.write(json.dumps(env).encode())


def _main(job_id: str) -> int:
    import sys

    from ferry.store import open_store

    env = json.loads(sys.stdin.read() or "{}")
    store = open_store()
    job = store.get_job(job_id)
    alerts = job.plan.alerts
    alert = end_alert(job.status.value, job.reason, alerts)
    if alert is None:
        return 0
    notifier = Notifier(targets_for(alerts), JobInfo(job.id, job.name), env)
    notifier.send(alert, job.status.value)
    for outcome in notifier.close(timeout=120.0):
        store.add_event(job_id, outcome)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1]))
