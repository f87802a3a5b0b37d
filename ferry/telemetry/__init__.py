"""What the supervisor measures and watches: samplers, alert rules, notifiers, exports."""

from __future__ import annotations

import re

_TELEMETRY = re.compile(r"(?:sys|host|gpu\d+)/")


def is_telemetry(name: str) -> bool:
    """Whether a metric is one the supervisor sampled (``sys/*``, ``host/*``, ``gpu<i>/*``)
    rather than one the script reported."""
    return _TELEMETRY.match(name) is not None


ALERT_PREFIX = "alert: "  # how an alert's event starts (the rest is the alert's message)


def is_alert(message: str) -> bool:
    """Whether a job event records an alert."""
    return message.startswith(ALERT_PREFIX)
