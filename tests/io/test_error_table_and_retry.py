"""The error table decides classes, retriability and member outcomes; the retry loop obeys it."""

from __future__ import annotations

import re

import pytest
from kio.schema.errors import ErrorCode

from gengroup._error_table import ERROR_TABLE, Outcome, outcome_for, policy_for
from gengroup._errors import (
    BrokenConnection,
    ClusterUnreachable,
    CoordinatorError,
    StaleMetadataError,
    error_for_code,
    is_retriable,
)
from gengroup.io.retry import Backoff, GiveUp, backoff_delay, retry


@pytest.mark.parametrize("code", [int(c) for c in ErrorCode if int(c)])
def test_every_code_gets_the_class_of_its_action(code: int) -> None:
    err = error_for_code(code)
    policy = policy_for(code)
    assert err.action == policy.action
    assert err.retriable == policy.kafka_retriable
    assert is_retriable(err) == policy.retriable


def test_member_outcomes_come_from_the_table() -> None:
    assert outcome_for(ErrorCode.rebalance_in_progress) is Outcome.REJOIN
    assert outcome_for(ErrorCode.unknown_member_id) is Outcome.RESET_MEMBER
    assert outcome_for(ErrorCode.not_coordinator) is Outcome.FIND_COORDINATOR
    assert outcome_for(ErrorCode.unknown_server_error) is Outcome.RETRY
    assert outcome_for(ErrorCode.not_leader_or_follower) is Outcome.RETRY
    assert outcome_for(ErrorCode.group_authorization_failed) is Outcome.FATAL
    assert outcome_for(-12345) is Outcome.FATAL
    assert ERROR_TABLE[int(ErrorCode.not_coordinator)].action == "find_coordinator"


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    for attempt, nominal in [(0, 0.1), (1, 0.2), (3, 0.8), (10, 1.0)]:
        assert nominal * 0.8 <= backoff_delay(attempt, 0.1) <= nominal * 1.2
    b = Backoff(0.1)
    b.next_delay()
    b.next_delay()
    assert b.attempt == 2
    b.reset()
    assert b.attempt == 0


async def test_retry_runs_the_tables_action_before_retrying() -> None:
    calls: list[str] = []
    errors = [
        error_for_code(ErrorCode.not_leader_or_follower),
        error_for_code(ErrorCode.not_coordinator),
        BrokenConnection("gone"),
    ]

    async def attempt() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    async def refresh() -> None:
        calls.append("refresh")

    async def find() -> None:
        calls.append("find")

    got = await retry(
        "op", attempt, timeout=5, backoff=0.001, refresh_metadata=refresh, find_coordinator=find
    )
    assert got == "done"
    # A connection failure refreshes the metadata too: the leader asked may be gone.
    assert calls == ["refresh", "find", "refresh"]


async def test_a_refresh_that_cannot_connect_is_retried_as_the_attempts_failure(
    autojump_clock: object,
) -> None:
    """A leader's broker died and the metadata refresh after it finds no broker
    either: the loop goes on (the refresh's error is the last one), and stops
    on an exhausted outage."""
    refreshes: list[BaseException] = [BrokenConnection("cannot connect to 127.0.0.1:2: refused")]
    attempts = 0

    async def attempt() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise BrokenConnection("cannot connect to 127.0.0.1:1: connection refused")
        return "done"

    async def refresh() -> None:
        if refreshes:
            raise refreshes.pop(0)

    assert await retry("op", attempt, timeout=5, backoff=0.1, refresh_metadata=refresh) == "done"
    assert attempts == 3

    async def refused() -> None:
        raise BrokenConnection("cannot connect to 127.0.0.1:1: connection refused")

    async def nothing_answers() -> None:
        raise BrokenConnection("cannot connect to 127.0.0.1:2: connection refused")

    with pytest.raises(TimeoutError, match=re.escape("last error: cannot connect to 127.0.0.1:2")):
        await retry("op", refused, timeout=5, backoff=0.1, refresh_metadata=nothing_answers)

    async def exhausted() -> None:
        raise ClusterUnreachable({"127.0.0.1:2": "connection refused"}, 61.0, exhausted=True)

    with pytest.raises(ClusterUnreachable):
        await retry("op", refused, timeout=5, backoff=0.1, refresh_metadata=exhausted)


async def test_retry_stops_on_non_retriable_and_give_up_errors() -> None:
    async def fatal() -> None:
        raise error_for_code(ErrorCode.group_authorization_failed)

    with pytest.raises(Exception, match="GROUP_AUTHORIZATION_FAILED"):
        await retry("op", fatal, timeout=5, backoff=0.001)

    async def give_up() -> None:
        raise GiveUp(error_for_code(ErrorCode.unknown_topic_or_partition))

    with pytest.raises(StaleMetadataError):
        await retry("op", give_up, timeout=5, backoff=0.001)


async def test_retry_times_out_naming_the_last_error() -> None:
    async def moved() -> None:
        raise error_for_code(ErrorCode.not_coordinator)

    with pytest.raises(TimeoutError, match="NOT_COORDINATOR"):
        await retry("op", moved, timeout=0.05, backoff=0.001)
    assert isinstance(error_for_code(ErrorCode.not_coordinator), CoordinatorError)


async def test_an_outer_deadline_names_the_last_error_of_an_inner_retry(
    autojump_clock: object,
) -> None:
    """An admin call retries a coordinator lookup that retries connections: the
    outer deadline passing inside the inner loop still names what failed."""

    async def refused() -> None:
        raise BrokenConnection("cannot connect to 127.0.0.1:1: connection refused")

    async def inner() -> None:
        await retry("lookup", refused, timeout=100.0, backoff=0.1)

    with pytest.raises(TimeoutError, match=re.escape("last error: cannot connect to 127.0.0.1:1")):
        await retry("admin call", inner, timeout=5.0, backoff=0.1)


def test_an_exhausted_cluster_unreachable_is_not_retried() -> None:
    causes = {"127.0.0.1:1": "connection refused"}
    assert is_retriable(ClusterUnreachable(causes, 1.0))
    assert not is_retriable(ClusterUnreachable(causes, 61.0, exhausted=True))
