"""The job status table: terminal states are final, every state is reachable."""

from __future__ import annotations

from ferry.status import (
    ACTIVE,
    TERMINAL,
    TRANSITIONS,
    AttemptStatus,
    JobStatus,
    can_move,
    sources_of,
)


def test_terminal_states_have_no_way_out() -> None:
    for status in TERMINAL:
        assert status.is_terminal()
        assert TRANSITIONS[status] == frozenset()


def test_every_state_is_reachable_from_queued() -> None:
    seen = {JobStatus.QUEUED}
    frontier = [JobStatus.QUEUED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobStatus)


def test_active_and_queries() -> None:
    assert not JobStatus.QUEUED.is_active()
    assert all(s.is_active() for s in ACTIVE)
    assert can_move(JobStatus.RUNNING, JobStatus.CANCELLING)
    assert not can_move(JobStatus.SUCCEEDED, JobStatus.RUNNING)
    assert JobStatus.QUEUED in sources_of(JobStatus.CANCELLED)
    assert str(JobStatus.RUNNING) == "RUNNING"
    assert AttemptStatus.LOST.is_terminal() and not AttemptStatus.RUNNING.is_terminal()
