"""The secret values a process that follows jobs (a supervisor, the watcher) holds: those
of the jobs it follows now, and no others.

A job's secrets (``secrets:``, ``--secret``) come from its submitter's environment, and a
supervisor forked from the submitter starts with that environment; its own work for the
job (staging, uploads, a provider's API) may need them, as the job does. But such a
process outlives the job: a supervisor lingers for the next job or adopts a queued one, the
watcher follows others. So it takes each job's secrets from the job's private launch file
as it starts following the job, and forgets a secret once no job it follows has it in its
environment: from ``os.environ``, and from the environment it was started with, which
``/proc/PID/environ`` shows to the user's other processes
(:func:`ferry.procs.blank_environment`). The names stay known to the process: whatever it
starts that is no job's own (a supervisor executed for another job, a Ray head) gets its
environment without them (:func:`environment`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ferry.procs import blank_environment

_names: set[str] = set()  # every name a job submitted or followed here declared a secret
# job id -> the secrets its environment holds, for each job this process follows (names
# declared after a job was taken are not counted for it: at worst one is forgotten early)
_followed: dict[str, frozenset[str]] = {}


def declare(names: Iterable[str]) -> None:
    """``names`` are secrets: a job submitted from this process declared them."""
    _names.update(names)


def names() -> frozenset[str]:
    """The names declared secrets in this process."""
    return frozenset(_names)


def follow(job_id: str, env: Mapping[str, str], secrets: Iterable[str]) -> list[str]:
    """This process follows job ``job_id`` from now on, submitted with the environment
    ``env`` and declaring ``secrets``: the secrets ``env`` holds go into ``os.environ``
    (another job's values may have been there), and those that no job followed here holds
    are forgotten. Returns the names forgotten now."""
    _names.update(secrets)
    held = frozenset(name for name in _names if name in env)
    _followed[job_id] = held
    for name in held:
        os.environ[name] = env[name]
    return _forget_unheld()


def unfollow(job_id: str) -> list[str]:
    """This process no longer follows job ``job_id``: the secrets no job followed here
    holds are forgotten. Returns the names forgotten now."""
    _followed.pop(job_id, None)
    return _forget_unheld()


def forget_followed() -> None:
    """In a process just forked from one that follows jobs: it follows none of them (what
    they hold is forgotten once this one follows a job of its own)."""
    _followed.clear()


def environment() -> dict[str, str]:
    """This process's environment without the secrets: for a process it starts that is no
    job's own, and may outlive the jobs followed here."""
    return {name: value for name, value in os.environ.items() if name not in _names}


def _forget_unheld() -> list[str]:
    held = frozenset().union(*_followed.values())
    gone = [name for name in _names if name not in held]
    forgotten = [name for name in gone if os.environ.pop(name, None) is not None]
    blank_environment(gone)  # (where os.environ lost one before, the block may still show it)
    return forgotten
