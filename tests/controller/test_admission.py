"""Admission in-process: the controller decides which jobs start and hands each to the
starter its caller gave; it starts no process itself."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from ferry import config
from ferry.controller import cancel, schedule, submit
from ferry.spec import JobSpec, spec_from_dict
from ferry.status import JobStatus
from ferry.store import Job, open_store


def _spec(project: Path) -> JobSpec:
    return spec_from_dict(
        {"command": ["python", "-c", "pass"], "code": str(project), "resources": {"cpus": 1}}
    )


def test_each_admitted_job_goes_to_the_starter_and_a_failing_start_fails_only_its_job(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.set_value("local.cpus", "1")  # room for one job at a time
    store = open_store()
    started: list[str] = []

    def record(job: Job) -> None:
        started.append(job.id)

    first, second, third = (submit(_spec(project), start=record, store=store) for _ in range(3))
    assert started == [first.id]  # the others wait for room
    assert (second.status, third.status) == (JobStatus.QUEUED, JobStatus.QUEUED)
    assert not psutil.Process(os.getpid()).children()  # no process was started here

    def refuse(job: Job) -> None:
        started.append(job.id)
        if job.id == second.id:
            raise OSError("no more processes")

    # the first job ends (no one follows it here: the test ends it), freeing its room
    store.transition(first.id, JobStatus.FAILED, expected={JobStatus.STARTING}, reason="ended")
    assert [job.id for job in schedule(store, "local", start=refuse)] == [second.id]
    failed = store.get_job(second.id)
    assert failed.status is JobStatus.FAILED
    assert failed.reason == "could not start its supervisor: no more processes"
    assert store.get_job(third.id).status is JobStatus.QUEUED
    schedule(store, "local", start=refuse)  # (the failed job's room is free again)
    assert started == [first.id, second.id, third.id]
    assert store.get_job(third.id).status is JobStatus.STARTING
    # a running job's cancel is its follower's to carry out: nothing starts
    assert cancel(store, store.get_job(third.id), start=refuse).status is JobStatus.CANCELLING
    assert started == [first.id, second.id, third.id]
    store.transition(third.id, JobStatus.CANCELLED, expected={JobStatus.CANCELLING})
