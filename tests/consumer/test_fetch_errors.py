"""Fetch errors meet a group member as they meet the Java consumer.

On the embedded broker, in virtual time: a partition the broker answers with
an error is fetched again after a backoff of its own, growing while the
error lasts (not once per round trip, which made thousands of requests a
second), with the error counted and logged once, and once more when it is
fetched again; CORRUPT_MESSAGE (the broker's log damaged) reaches the
partition's worker as a ``CorruptRecordError`` at its next step and every
one after, until a seek. A Fetch answered with a top-level
UNKNOWN_SERVER_ERROR or REQUEST_TIMED_OUT is fetched again after the
broker's backoff (it used to end the generation and close the group);
an authorization failure still ends it.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import BrokerError, ConsumerGroup, CorruptRecordError, Generation, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Fail, Intercepted, Respond
from gengroup.protocol.framing import build, response_module
from gengroup.protocol.versions import ApiKey

from ..embedded import fetch_topic
from .helpers import EMBEDDED_SETTINGS

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
#: Requests a failing control answers at most: a hot loop ends there (and fails
#: the test's bounds) instead of spinning on.
GUARD = 300


def _answer_with(code: int, which: Callable[[TopicPartition, int], bool]) -> Callable[..., object]:
    """A Fetch control answering ``code`` for each partition asked for at an offset
    ``which`` accepts (the others get nothing), declining sessions so that every
    request names its partitions; it passes requests through once ``GUARD`` were
    answered, or when it asks for no such partition."""
    answered = 0

    def handle(req: Intercepted) -> Respond | None:
        nonlocal answered
        asked = [
            (TopicPartition("t", int(p.partition)), int(p.fetch_offset))  # one topic
            for t in req.request.topics
            for p in t.partitions
        ]
        failing = [tp for tp, offset in asked if which(tp, offset)]
        if not failing or answered >= GUARD:
            return None
        answered += 1
        mod = response_module(ApiKey.FETCH, req.api_version)
        partitions = tuple(
            build(
                mod.PartitionData,
                partition_index=tp.partition,
                error_code=ErrorCode(code),
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=None,
            )
            for tp, _ in asked
            if tp in failing
        )
        topics = (
            build(mod.FetchableTopicResponse, **fetch_topic(req, "t"), partitions=partitions),
        )
        return Respond(
            build(
                mod.FetchResponse,
                throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none,
                session_id=0,
                responses=topics,
            )
        )

    return handle


def _counter(counts: dict[int, int], key: int) -> Callable[[Intercepted], None]:
    def count(req: Intercepted) -> None:
        counts[key] += 1

    return count


async def _collect(gen: Generation, tp: TopicPartition, into: list[bytes]) -> None:
    async for batch in gen.fetch(tp):
        into += [r.value or b"" for r in batch]


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@pytest.mark.parametrize(
    "code", [ErrorCode.not_leader_or_follower, ErrorCode.unknown_server_error], ids=str
)
async def test_a_partition_answered_with_an_error_is_fetched_again_after_a_backoff(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, code: ErrorCode
) -> None:
    """From the start, for 10 s, both partitions are answered with the error (stale leadership,
    or UNKNOWN_SERVER_ERROR, retried as Java does): a few dozen Fetch and
    Metadata requests in all (each partition waits its own jittered backoff,
    0.1 s doubling up to 1 s; metadata is refreshed no more often than the
    retry backoff), every error counted, one line saying the partitions fail
    and one that they are fetched again; then every record produced is
    handed out. The requests used to go out back to back (thousands a
    second), uncounted, with nothing logged for stale leadership and one
    line per partition per retry otherwise; UNKNOWN_SERVER_ERROR ended the
    generation."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        counts = {ApiKey.FETCH: 0, ApiKey.METADATA: 0}
        controls = [
            cluster.control(ApiKey.METADATA, _counter(counts, ApiKey.METADATA)),
            cluster.control(ApiKey.FETCH, _counter(counts, ApiKey.FETCH)),
            cluster.control(ApiKey.FETCH, _answer_with(code, lambda tp, offset: True)),
        ]
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            got: list[bytes] = []
            gen.start_soon(_collect, gen, T0, got)
            gen.start_soon(_collect, gen, T1, got)
            await trio.sleep(10)
            for control in controls:
                control.remove()
            errors = group.metrics().fetch_errors
            cluster.produce("t", [b"a"] * 5, partition=0)
            cluster.produce("t", [b"b"] * 5, partition=1)
            with trio.fail_after(10):
                while len(got) < 10:
                    await trio.sleep(0.1)
            assert sorted(got) == [b"a"] * 5 + [b"b"] * 5
            gen.cancel("test over")
    assert 10 <= counts[ApiKey.FETCH] <= 40, counts
    assert counts[ApiKey.METADATA] <= 40, counts
    assert errors >= counts[ApiKey.FETCH]  # each answer failed one partition at least
    name = ErrorCode(code).name.upper()
    failing = _messages(caplog, name)
    assert len(failing) <= 2, failing  # both partitions on one line, or one each
    assert sorted(tp for m in failing for tp in ("t[0]", "t[1]") if tp in m) == ["t[0]", "t[1]"]
    again = _messages(caplog, "fetching t[")
    assert sorted(tp for m in again for tp in ("t[0]", "t[1]") if tp in m) == ["t[0]", "t[1]"]
    assert len(again) <= 2, again


async def test_corrupt_message_reaches_the_worker_at_every_step_until_a_seek(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker answers t[0] from offset 3 on with CORRUPT_MESSAGE (its log is
    damaged there): the worker gets 0-2, then a CorruptRecordError naming the
    partition and the offset at its next step and every one after, however
    long it waits, with the partition not fetched again and one WARNING;
    after a seek past the damage it goes on. The partition used to be
    fetched again back to back, forever, with one INFO line each time, and
    the worker never heard of it."""
    caplog.set_level(logging.INFO, logger="gengroup")
    damaged = _answer_with(ErrorCode.corrupt_message, lambda tp, offset: tp == T0 and offset == 3)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [b"x"] * 3, partition=0)
        fetches = {ApiKey.FETCH: 0}
        cluster.control(ApiKey.FETCH, damaged)
        cluster.control(ApiKey.FETCH, _counter(fetches, ApiKey.FETCH))
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            batches = gen.fetch(T0)
            batch = await anext(batches)
            assert ([r.offset for r in batch], batch.next_offset) == ([0, 1, 2], 3)
            cluster.produce("t", [b"y"] * 3, partition=0)
            expected = r"^Fetch t\[0\]: the broker found its log damaged at offset 3"
            with trio.fail_after(5), pytest.raises(CorruptRecordError, match=expected) as caught:
                await anext(batches)
            assert isinstance(caught.value.__cause__, BrokerError)
            assert caught.value.__cause__.code == ErrorCode.corrupt_message
            fetched = fetches[ApiKey.FETCH]
            for _ in range(3):
                await trio.sleep(5)
                with pytest.raises(CorruptRecordError, match=expected):
                    await anext(batches)
            assert fetches[ApiKey.FETCH] == fetched  # not fetched again
            assert group.metrics().fetch_errors == 1
            gen.seek(T0, 4)
            with trio.fail_after(5):
                batch = await anext(batches)
            assert [r.offset for r in batch] == [4, 5]
            gen.cancel("test over")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "offset 3" in warnings[0].getMessage()
    assert not _messages(caplog, "retrying")


@pytest.mark.parametrize(
    "code", [ErrorCode.unknown_server_error, ErrorCode.request_timed_out], ids=str
)
async def test_a_fetch_failing_as_a_whole_is_retried_after_the_brokers_backoff(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, code: ErrorCode
) -> None:
    """Fetch is answered with a top-level error, first once, then for 10 s: the
    generation goes on (the fetch session dropped, the next request full),
    each failure counted, the requests backed off (a few dozen in 10 s), one
    line when the broker starts failing and one when it answers again, and
    every record produced is handed out. One such answer used to end the
    generation and close the group."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            got: list[bytes] = []
            gen.start_soon(_collect, gen, T0, got)
            await trio.sleep(1)
            before = group.metrics()
            cluster.control(ApiKey.FETCH, lambda req: Fail(code), once=True)
            await trio.sleep(2)
            cluster.produce("t", [b"a"] * 5, partition=0)
            with trio.fail_after(5):
                while len(got) < 5:
                    await trio.sleep(0.1)
            after = group.metrics()
            assert after.fetch_errors - before.fetch_errors == 1
            assert after.fetch_session_resets - before.fetch_session_resets == 1

            counts = {ApiKey.FETCH: 0}
            answered = 0

            def failing(req: Intercepted) -> Fail | None:
                nonlocal answered
                answered += 1
                return Fail(code) if answered <= GUARD else None

            controls = [
                cluster.control(ApiKey.FETCH, _counter(counts, ApiKey.FETCH)),
                cluster.control(ApiKey.FETCH, failing),
            ]
            await trio.sleep(10)
            for control in controls:
                control.remove()
            cluster.produce("t", [b"b"] * 5, partition=0)
            with trio.fail_after(5):
                while len(got) < 10:
                    await trio.sleep(0.1)
            assert got == [b"a"] * 5 + [b"b"] * 5
            assert not gen.ended
            assert group.metrics().fetch_errors - after.fetch_errors == counts[ApiKey.FETCH]
            gen.cancel("test over")
    assert 10 <= counts[ApiKey.FETCH] <= 40, counts
    assert len(_messages(caplog, "fetch from broker 0 failed")) == 2  # once per run of failures
    assert len(_messages(caplog, "fetching from broker 0 again")) == 2


async def test_a_fetch_refused_for_authorization_still_ends_the_generation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A fatal top-level error (CLUSTER_AUTHORIZATION_FAILED) is not retried: it
    ends the generation and comes out of the group."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            cluster.control(ApiKey.FETCH, lambda req: Fail(ErrorCode.cluster_authorization_failed))
            with trio.fail_after(30), pytest.raises(BrokerError, match="CLUSTER_AUTHORIZATION"):
                await gen.wait_ended()
                await group.next()


def test_two_errors_taking_turns_on_a_partition_are_a_line_each_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A leader hint naming a broker not yet leading makes a partition's answers
    alternate between NOT_LEADER_OR_FOLLOWER and UNKNOWN_LEADER_EPOCH until it
    takes over: each code is said once, not once per turn, until the
    partition's next good answer."""
    from gengroup._errors import error_for_code
    from gengroup.consumer.fetch_errors import FetchErrors
    from gengroup.consumer.metrics import GroupMetrics

    caplog.set_level(logging.INFO, logger="gengroup")
    metrics = GroupMetrics()
    errors = FetchErrors("g", 0.1, metrics)
    codes = [ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch] * 10
    for code in codes:
        errors.partition_failed(0, T0, error_for_code(int(code)))
        errors.flush(0)
    errors.partition_ok(T0)
    errors.flush(0)
    errors.partition_failed(0, T0, error_for_code(int(codes[0])))  # a new outage: said again
    errors.flush(0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 4, said
    assert "NOT_LEADER_OR_FOLLOWER" in said[0] and "UNKNOWN_LEADER_EPOCH" in said[1]
    assert "fetching t[0] again" in said[2] and "NOT_LEADER_OR_FOLLOWER" in said[3]
    assert metrics.fetch_errors == len(codes) + 1
