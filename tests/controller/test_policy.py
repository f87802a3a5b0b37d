"""The outcome policy, in-process: what follows each way an attempt can end, under the job's
retry limits, and a job's whole life driven by a scripted backend."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferry.controller.policy import (
    MAX_CODE_RETRIES,
    Counter,
    Decision,
    Ended,
    History,
    Limits,
    Outcome,
    decide,
    resume_allowed,
)
from ferry.status import AttemptStatus as A
from ferry.status import JobStatus as J

NONE = History()
DEFAULT = Limits()


def test_an_exit_0_succeeds_and_a_failing_exit_fails_with_its_last_lines() -> None:
    assert decide(Ended(Outcome.EXITED, 0), NONE, DEFAULT) == Decision(
        A.SUCCEEDED, "exit code 0", J.SUCCEEDED
    )
    failed = decide(Ended(Outcome.EXITED, 3, "exit code 3 (last log lines: boom)"), NONE, DEFAULT)
    assert failed == Decision(A.FAILED, "exit code 3 (last log lines: boom)", J.FAILED)
    # without words, the code as a shell shows it, with the signal's name
    assert decide(Ended(Outcome.EXITED, -15), NONE, DEFAULT).reason == "exit code 143 (SIGTERM)"
    with pytest.raises(ValueError):
        decide(Ended(Outcome.EXITED), NONE, DEFAULT)


def test_failing_exits_are_retried_while_on_error_allows_with_growing_backoff() -> None:
    limits = Limits(on_error=2)
    first = decide(Ended(Outcome.EXITED, 1, "exit code 1"), NONE, limits)
    assert first.retry and first.charge is Counter.RETRIES and first.backoff == 1
    assert first.why == "retry 1 of 2 after exit code 1" and first.attempt is A.FAILED
    second = decide(Ended(Outcome.EXITED, 1, "exit code 1"), History(retries=1), limits)
    assert second.why == "retry 2 of 2 after exit code 1" and second.backoff == 2
    last = decide(Ended(Outcome.EXITED, 1, "exit code 1"), History(retries=2), limits)
    assert last == Decision(A.FAILED, "exit code 1", J.FAILED)
    # a provider's failure is an error too, named in its own words
    provider = decide(Ended(Outcome.PROVIDER_FAILED, None, "quota exceeded"), NONE, limits)
    assert provider.retry and provider.why == "retry 1 of 2 after quota exceeded"
    assert not decide(Ended(Outcome.PROVIDER_FAILED, None, "quota"), NONE, DEFAULT).retry


def test_listed_exit_codes_are_always_retried_without_using_on_error() -> None:
    limits = Limits(on_exit_codes=frozenset({75, 137}))
    retry = decide(Ended(Outcome.EXITED, 75, "exit code 75"), NONE, limits)
    assert retry.charge is Counter.CODE_RETRIES and retry.backoff == 1
    assert retry.why == "exit code 75; exit code 75 is always retried (retries.on_exit_codes)"
    # a death by SIGKILL is the shell's 137
    assert decide(Ended(Outcome.EXITED, -9, "killed"), History(retries=5), limits).retry
    # ... but not for ever
    end = decide(Ended(Outcome.EXITED, 75, "x"), History(code_retries=MAX_CODE_RETRIES), limits)
    assert end == Decision(
        A.FAILED, f"x; retried {MAX_CODE_RETRIES} times (retries.on_exit_codes)", J.FAILED
    )
    # other codes still follow on_error (0 here)
    assert not decide(Ended(Outcome.EXITED, 1, "x"), NONE, limits).retry


def test_a_script_that_says_why_it_failed_fails_even_with_exit_0_and_is_no_code_retry() -> None:
    said = ("out of disk", "FERRY_FAILURE_FILE")
    limits = Limits(on_exit_codes=frozenset({75}))
    for code in (0, 75):
        decision = decide(Ended(Outcome.EXITED, code, said=said), NONE, limits)
        assert decision.job is J.FAILED and decision.attempt is A.FAILED
    assert decision.reason == "out of disk (from FERRY_FAILURE_FILE; exit code 75)"
    retried = decide(Ended(Outcome.EXITED, 0, said=said), NONE, Limits(on_error=1))
    assert retried.charge is Counter.RETRIES


@pytest.mark.parametrize("outcome", [Outcome.PREEMPTED, Outcome.LOST])
def test_preemptions_and_losses_share_one_counter_and_resume_at_once(outcome: Outcome) -> None:
    word, status = ("preempted", A.PREEMPTED) if outcome is Outcome.PREEMPTED else ("lost", A.LOST)
    limits = Limits(on_preemption=2, on_error=5)
    first = decide(Ended(outcome, -15, "ferry preempt"), NONE, limits)
    assert first == Decision(
        status,
        f"{word} (ferry preempt); 1 of 2",
        charge=Counter.PREEMPTIONS,
        why=f"{word} (ferry preempt); 1 of 2",
    )
    assert first.backoff == 0  # capacity comes back at once
    second = decide(Ended(outcome, -15, "ferry preempt"), History(preemptions=1), limits)
    assert second.retry and second.reason.endswith("2 of 2")
    third = decide(Ended(outcome, -15, "ferry preempt"), History(preemptions=2), limits)
    assert third == Decision(status, f"{word} 3 times (retries.on_preemption is 2)", J.FAILED)
    # error retries do not use preemptions, nor the other way round
    assert decide(Ended(outcome, None), History(retries=5), limits).retry
    assert not decide(Ended(outcome, None), NONE, Limits(on_preemption=0, on_error=5)).retry
    # the resume of a lost supervisor asks the same counter
    assert resume_allowed(History(preemptions=1), limits) == (True, 2)
    assert resume_allowed(History(preemptions=2), limits) == (False, 3)


@pytest.mark.parametrize(
    ("outcome", "detail", "attempt", "job"),
    [
        (Outcome.CANCELLED, "", A.CANCELLED, J.CANCELLED),
        (Outcome.TIMED_OUT, "max_runtime 1m reached", A.TIMED_OUT, J.FAILED),
        (Outcome.BUDGET, "budget reached: 2.00 USD", A.FAILED, J.FAILED),
        (Outcome.MONTHLY_BUDGET, "monthly budget reached: 9.00 USD", A.FAILED, J.FAILED),
        (Outcome.ALERT, "stopped on alert: loss is NaN", A.FAILED, J.FAILED),
    ],
)
def test_stops_the_controller_made_end_the_job_whatever_the_retries(
    outcome: Outcome, detail: str, attempt: A, job: J
) -> None:
    generous = Limits(on_preemption=100, on_error=100, on_exit_codes=frozenset({143}))
    decision = decide(Ended(outcome, -15, detail), NONE, generous)
    assert (decision.attempt, decision.job) == (attempt, job)
    assert decision.reason == (detail or "cancelled")


# A job's whole life against a scripted backend: each attempt ends as the script says, the
# controller's loop applies each decision as the supervisor does (charging one counter per
# new attempt), and the totals never pass the limits.

ENDINGS = st.sampled_from(
    [
        Ended(Outcome.EXITED, 0),
        Ended(Outcome.EXITED, 1, "exit code 1"),
        Ended(Outcome.EXITED, 75, "exit code 75"),
        Ended(Outcome.EXITED, -9, "exit code 137 (SIGKILL)"),
        Ended(Outcome.PREEMPTED, -15, "spot"),
        Ended(Outcome.LOST, None, "node died"),
        Ended(Outcome.PROVIDER_FAILED, None, "no capacity"),
        Ended(Outcome.TIMED_OUT, -15, "max_runtime 1m reached"),
        Ended(Outcome.CANCELLED, -15),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    script=st.lists(ENDINGS, min_size=1, max_size=60),
    on_preemption=st.integers(0, 6),
    on_error=st.integers(0, 6),
    codes=st.sets(st.sampled_from([75, 137]), max_size=2),
)
def test_a_scripted_backend_never_gets_more_attempts_than_the_limits_allow(
    script: list[Ended], on_preemption: int, on_error: int, codes: set[int]
) -> None:
    limits = Limits(on_preemption, on_error, frozenset(codes))
    history, attempts, final = NONE, 0, None
    for ended in script:
        attempts += 1
        decision = decide(ended, history, limits)
        assert (decision.job is None) == (decision.charge is not None)
        if decision.job is not None:
            final = decision
            break
        assert decision.why and decision.charge is not None
        name = decision.charge.value
        history = dataclasses.replace(history, **{name: getattr(history, name) + 1})
    assert history.preemptions <= on_preemption and history.retries <= on_error
    # each attempt after the first was charged to one counter (one more is due if the
    # script ran out while the job was still retrying)
    started = attempts + (final is None)
    assert started == 1 + history.preemptions + history.retries + history.code_retries
    if final is not None:
        last = script[attempts - 1]
        if last.outcome is Outcome.EXITED and last.code == 0:
            assert final.job is J.SUCCEEDED
        elif last.outcome is Outcome.CANCELLED:
            assert final.job is J.CANCELLED
        else:
            assert final.job is J.FAILED
