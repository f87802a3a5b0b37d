"""Checks of values that both a job spec and Ferry's settings take (``notify.webhook`` and
``alerts.webhook``, ``tracking.mlflow`` in either): one wording for each mistake."""

from __future__ import annotations


def check_webhook(url: str) -> None:
    """Refuse a webhook that is not an http(s) URL with a host (or a ``${NAME}`` to expand)."""
    from urllib.parse import urlsplit

    if url.startswith("${"):  # checked once expanded, when an alert is sent
        return
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in url
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            "a webhook must be an http:// or https:// URL with a host, or ${NAME} to take"
            " it from the environment"
        )


def check_tracking_uri(uri: str) -> None:
    """Refuse an MLflow tracking URI holding a password (it would be stored)."""
    from urllib.parse import urlsplit

    try:
        password = urlsplit(uri).password
    except ValueError:
        raise ValueError(f"{uri!r} is not a valid tracking URI") from None
    if password is not None:
        raise ValueError(
            "a password in the tracking URI would be stored with the job; set"
            " MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD in the environment"
        )
