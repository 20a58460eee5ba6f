"""The producer against the embedded broker."""

from __future__ import annotations

import contextlib
import itertools
import logging
import traceback
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup._errors import (
    BrokerError,
    BufferExhausted,
    ClosedInFlight,
    ConnectionClosed,
    GengroupError,
    KafkaConnectionError,
    RequestTimedOut,
)
from gengroup._producer_queue import Pending, Queue
from gengroup._types import TopicPartition
from gengroup.broker import BrokerSettings, Delay, Drop, Fail, FakeCluster, Intercepted
from gengroup.io.cluster import Cluster
from gengroup.producer import Producer, ProducerRecord
from gengroup.protocol.versions import ApiKey

# ---------------------------------------------------------------------------- bad input


async def test_a_bad_record_fails_its_own_send_not_its_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Records that cannot be encoded fail at their own call; the good records
    sent at the same time, which would share their batch, are delivered."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, linger=0.05) as producer,
    ):
        outcomes: dict[str, Any] = {}

        async def send(name: str, **kwargs: Any) -> None:
            try:
                outcomes[name] = await producer.send("t", name.encode(), **kwargs)
            except Exception as exc:
                outcomes[name] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "good-1")
            tg.start_soon(lambda: send("bad-ts", timestamp_ms=2**64))
            tg.start_soon(send, "good-2")
            tg.start_soon(lambda: send("bad-header", headers=[("\ud800", b"x")]))
            tg.start_soon(send, "good-3")
        assert isinstance(outcomes.pop("bad-ts"), ValueError)
        assert isinstance(outcomes.pop("bad-header"), ValueError)
        assert all(meta.topic == "t" for meta in outcomes.values()), outcomes
        assert sorted(r.value for r in cluster.records("t")) == [b"good-1", b"good-2", b"good-3"]


BAD_ARGUMENTS = {
    "partition True": (TypeError, "partition", {"partition": True}),
    "partition 1.5": (TypeError, "partition", {"partition": 1.5}),
    "partition '1'": (TypeError, "partition", {"partition": "1"}),
    "timestamp '123'": (TypeError, "timestamp_ms", {"timestamp_ms": "123"}),
    "timestamp True": (TypeError, "timestamp_ms", {"timestamp_ms": True}),
    "timestamp nan": (TypeError, "timestamp_ms", {"timestamp_ms": float("nan")}),
    "timestamp -5": (ValueError, "timestamp_ms", {"timestamp_ms": -5}),
    "timestamp 2**63": (ValueError, "timestamp_ms", {"timestamp_ms": 2**63}),
    "topic 5": (TypeError, "topic", {"topic": 5}),
    "topic not UTF-8": (ValueError, "topic", {"topic": "t\ud800"}),
    "headers None": (TypeError, "headers", {"headers": None}),
    "headers dict": (TypeError, "headers", {"headers": {"a": b"b"}}),
    "header name not UTF-8": (ValueError, "header name", {"headers": [("\udfff", None)]}),
}


@pytest.mark.parametrize(("error", "names", "kwargs"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS)
async def test_a_bad_argument_raises_a_typed_error_at_once_naming_it(
    autojump_clock: trio.testing.MockClock,
    error: type[Exception],
    names: str,
    kwargs: dict[str, Any],
) -> None:
    async with (
        FakeCluster(topics={"t": 2}) as cluster,
        Producer(cluster.bootstrap, delivery_timeout=5) as producer,
    ):
        topic = kwargs.pop("topic", "t")
        started = trio.current_time()
        with pytest.raises(error, match=names):
            await producer.send(topic, b"v", **kwargs)
        assert trio.current_time() == started  # checked before any wait
        # time.time() * 1000 is a timestamp: its whole milliseconds are sent.
        meta = await producer.send("t", b"ok", partition=1, timestamp_ms=1.5e12 + 0.7)
        assert (meta.partition, type(meta.partition), meta.timestamp) == (1, int, 1_500_000_000_000)
        assert [cluster.high_watermark("t", p) for p in (0, 1)] == [0, 1]


async def test_send_many_with_a_bad_record_queues_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap) as producer,
    ):
        good: list[Any] = [b"r%d" % i for i in range(10)]
        with pytest.raises(TypeError, match=r"records\[10\]: value"):
            await producer.send_many("t", [*good, "not bytes"])
        with pytest.raises(ValueError, match=r"records\[3\]: timestamp_ms"):
            await producer.send_many(
                "t", [*good[:3], ProducerRecord(b"x", timestamp_ms=-1), *good[3:]]
            )
        await producer.flush()
        assert cluster.high_watermark("t") == 0


# ---------------------------------------------------------------------------- batches


async def test_a_batch_too_large_for_the_topic_is_split_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each record fits the topic's ``max.message.bytes``, their batch does not:
    the batch is split and requeued at the head of its partition, order kept.
    A record too large on its own still fails."""
    async with FakeCluster() as cluster:
        cluster.create_topic("small", 1, configs={"max.message.bytes": "10000"})
        async with Producer(cluster.bootstrap, linger=1.0) as producer:
            values = [b"%04d" % i + b"y" * 996 for i in range(20)]
            metas = await producer.send_many("small", values)
            assert [m.offset for m in metas] == list(range(20))
            assert [r.value for r in cluster.records("small")] == values
            with pytest.raises(BrokerError, match="MESSAGE_TOO_LARGE"):
                await producer.send("small", b"z" * 20_000)
            assert (await producer.send("small", b"after")).offset == 20


async def test_produce_requests_stay_within_max_request_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Eight partitions' batches of 400 KB are ready at once for one broker that
    accepts requests of 2 MB (``socket.request.max.bytes``): they go in
    requests of at most ``max_request_bytes``, two batches each, all at once.
    They went in one request of 3.2 MB, which the broker refused by closing
    the connection."""
    settings = BrokerSettings(socket_request_max_bytes=2_000_000)
    async with (
        FakeCluster(topics={"t": 8}, settings=settings) as cluster,
        Producer(cluster.bootstrap, linger=1.0, max_request_bytes=1_000_000) as producer,
    ):
        await producer.send("t", b"warm-up")
        sizes: list[int] = []

        def measure(call: Intercepted) -> None:
            sizes.append(
                sum(
                    len(part.records)
                    for topic in call.request.topic_data
                    for part in topic.partition_data
                )
            )

        cluster.control(ApiKey.PRODUCE, measure)
        records = [ProducerRecord(b"v" * 100_000, partition=p) for p in range(8) for _ in range(4)]
        started = trio.current_time()
        metas = await producer.send_many("t", records)
        assert trio.current_time() - started == pytest.approx(1.0, abs=0.01)  # no retry
        assert len(metas) == 32
        assert len(sizes) == 4 and all(700_000 < size <= 1_000_000 for size in sizes), sizes


# ---------------------------------------------------------------------------- time bounds


async def test_delivery_timeout_bounds_a_produce_request_never_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A broker that never answers: the record in flight and the record queued
    behind it each fail at their own delivery timeout, although the request
    may wait ``request_timeout`` (10 s) + 5 s."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, delivery_timeout=3, request_timeout=10) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Drop())
        failed_at: dict[str, float] = {}

        async def send(name: str, delay: float) -> None:
            await trio.sleep(delay)
            with pytest.raises(RequestTimedOut, match="delivery_timeout=3"):
                await producer.send("t", name.encode())
            failed_at[name] = trio.current_time() - started

        started = trio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "in flight", 0.0)
            tg.start_soon(send, "queued behind it", 1.0)
        assert failed_at["in flight"] == pytest.approx(3.0, abs=0.1)
        assert failed_at["queued behind it"] == pytest.approx(4.0, abs=0.1)


def causes(error: BaseException) -> list[BaseException]:
    """``error``'s cause chain, itself excluded."""
    chain: list[BaseException] = []
    seen = error.__cause__
    while seen is not None and seen not in chain and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__
    return chain


@pytest.mark.parametrize("fault", ["NOT_ENOUGH_REPLICAS", "broker down"])
async def test_a_record_retried_until_delivery_timeout_fails_with_request_timed_out_on_time(
    autojump_clock: trio.testing.MockClock, fault: str
) -> None:
    """Whatever its retries failed with, a record not delivered within
    ``delivery_timeout`` fails with RequestTimedOut saying so, the last error
    as its cause, at the deadline: not a backoff early (the last error came
    out, as soon as the next backoff would have crossed the deadline)."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, delivery_timeout=3, retry_backoff=0.4) as producer,
    ):
        await producer.send("t", b"warm-up")
        last: type[Exception]
        if fault == "broker down":
            await cluster.stop_broker(0)
            last = KafkaConnectionError
        else:
            cluster.control(ApiKey.PRODUCE, lambda call: Fail(19))
            last = BrokerError
        started = trio.current_time()
        with pytest.raises(
            RequestTimedOut, match="not delivered within delivery_timeout=3"
        ) as caught:
            await producer.send("t", b"x")
        assert trio.current_time() - started == pytest.approx(3.0, abs=0.01)
        assert any(isinstance(e, last) for e in causes(caught.value)), causes(caught.value)


async def test_waiting_for_buffer_room_is_bounded_by_max_block_and_counts_toward_delivery(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(
            cluster.bootstrap, buffer_bytes=2000, delivery_timeout=4, max_block=10
        ) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Drop())
        failed_after: dict[str, float] = {}

        async def send(name: str, delay: float, error: type[Exception]) -> None:
            await trio.sleep(delay)
            called = trio.current_time()
            with pytest.raises(error):
                await producer.send("t", b"x" * 1500)
            failed_after[name] = trio.current_time() - called

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "fills the buffer", 0.0, RequestTimedOut)
            # Finds room at 4 s, when the first fails: its own 4 s count from 2 s.
            tg.start_soon(send, "waits for room", 2.0, RequestTimedOut)
        assert failed_after == pytest.approx({"fills the buffer": 4.0, "waits for room": 4.0})

    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, buffer_bytes=2000, max_block=1) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Drop())
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer.send, "t", b"x" * 1500)
            await trio.sleep(0.5)
            called = trio.current_time()
            with pytest.raises(BufferExhausted, match="buffer_bytes=2000"):
                await producer.send("t", b"x" * 1500)
            assert trio.current_time() - called == pytest.approx(1.0)
            tg.cancel_scope.cancel()


async def test_sends_waiting_for_buffer_room_are_served_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A large record waits for room; a small one that comes later and would
    fit at once waits behind it, and is queued after it (as Java's BufferPool
    serves its waiters). It went first, as every small record after it could:
    under steady load the large record found no room until ``max_block``."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, buffer_bytes=10_000, max_block=5) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Delay(1.0))
        offsets: dict[str, int] = {}

        async def send(name: str, size: int, delay: float) -> None:
            await trio.sleep(delay)
            offsets[name] = (await producer.send("t", name.encode().ljust(size, b"."))).offset

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "first", 4000, 0.0)  # answered at 1 s
            tg.start_soon(send, "second", 4000, 0.05)  # sent after it, answered at 2 s
            tg.start_soon(send, "large", 5000, 0.1)  # room at 1 s, when "first" is answered
            tg.start_soon(send, "small", 1000, 0.2)  # would fit at once: 9 KB of 10 KB
        assert offsets["large"] < offsets["small"], offsets


async def test_a_send_behind_one_that_gives_up_waiting_for_room_is_served_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Arrival order never makes a send wait past its own ``max_block``: when
    the large record ahead of it gives up, a small record that fits is queued
    at once."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, buffer_bytes=10_000, max_block=2) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Delay(30.0), once=True)
        outcomes: dict[str, object] = {}
        at: dict[str, float] = {}

        async def send(name: str, size: int, delay: float) -> None:
            await trio.sleep(delay)
            try:
                outcomes[name] = await producer.send("t", name.encode().ljust(size, b"."))
            except Exception as exc:
                outcomes[name] = exc
            at[name] = trio.current_time() - started

        started = trio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "in flight", 9000, 0.0)  # answered after 30 s
            tg.start_soon(send, "large", 5000, 0.5)  # gives up at 2.5 s
            tg.start_soon(send, "small", 900, 1.0)  # fits, waits behind "large"
        assert isinstance(outcomes["large"], BufferExhausted)
        assert at["large"] == pytest.approx(2.5, abs=0.01)
        # Queued at 2.5 s, before its own max_block (3 s) passed, and sent
        # once the partition's request in flight was answered, at 30 s.
        assert outcomes["small"].offset == 2  # type: ignore[attr-defined]
        assert at["small"] == pytest.approx(30.0, abs=0.1)


async def test_send_many_reports_records_that_found_no_buffer_room(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each record's outcome is known: those queued are delivered or fail on
    their own; those that found no room within ``max_block`` get
    BufferExhausted and were not queued."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, buffer_bytes=2000, max_block=1, delivery_timeout=5) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Drop())
        outcomes = await producer.send_many("t", [b"x" * 900] * 4, return_exceptions=True)
        assert [type(o) for o in outcomes] == [RequestTimedOut] * 2 + [BufferExhausted] * 2
        # Again, with records queued behind the request still unanswered: the
        # first error in order comes out.
        with pytest.raises(RequestTimedOut, match="still unanswered"):
            await producer.send_many("t", [b"x" * 900] * 4)
        assert cluster.high_watermark("t") == 1


async def test_send_many_larger_than_the_buffer_waits_for_room_record_by_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The records shared the call's ``max_block``: 100 KB through a buffer of
    20 KB against a broker answering slowly had most of 100 fail with
    BufferExhausted, though the broker kept up."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, buffer_bytes=20_000, max_block=3) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Delay(1.0))
        started = trio.current_time()
        outcomes = await producer.send_many("t", [b"x" * 1000] * 100, return_exceptions=True)
        assert trio.current_time() - started > 3  # longer than max_block: it kept waiting
        assert [type(o).__name__ for o in outcomes] == ["RecordMetadata"] * 100
        assert cluster.high_watermark("t") == 101


def test_expiring_takes_the_expired_records_wherever_they_are_queued() -> None:
    """In deadline order the expired records are a prefix, taken from the head;
    a record queued behind a younger one (it waited longer) is found too."""
    queue = Queue(TopicPartition("t", 0))
    for created in (1.0, 2.0, 3.0):
        queue.append(Pending(None, b"v", (), 0, 10, created))
    assert not queue.unordered
    assert [p.created for p in queue.take_expired(now=12.5, timeout=10.0)] == [1.0, 2.0]
    assert queue.expire_at == 13.0 and queue.bytes == 10
    queue.append(Pending(None, b"v", (), 0, 10, 0.5))  # waited since 0.5
    assert queue.unordered
    assert [p.created for p in queue.take_expired(now=12.5, timeout=10.0)] == [0.5]
    assert [p.created for p in queue.records] == [3.0] and not queue.unordered
    assert queue.expire_at == 13.0 and queue.bytes == 10


async def test_waiting_for_a_leader_backs_off_with_jitter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Metadata answers LEADER_NOT_AVAILABLE while a record waits for a leader:
    the refreshes back off exponentially (not every ``retry_backoff``), with
    jitter, and the record fails at its delivery timeout."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, delivery_timeout=4, retry_backoff=0.1) as producer,
    ):
        await producer.send("t", b"warm-up")
        seen: list[float] = []

        def no_leader(call: Intercepted) -> Fail:
            seen.append(trio.current_time())
            return Fail(5)

        cluster.control(ApiKey.METADATA, no_leader)
        cluster.control(ApiKey.PRODUCE, lambda call: Fail(6), once=True)
        started = trio.current_time()
        with pytest.raises(RequestTimedOut, match="LEADER_NOT_AVAILABLE") as caught:
            await producer.send("t", b"x", partition=0)
        assert any(isinstance(e, BrokerError) for e in causes(caught.value))
        assert trio.current_time() - started == pytest.approx(4.0, abs=0.05)
        gaps = [b - a for a, b in itertools.pairwise(seen)]
        assert 3 <= len(seen) <= 12, gaps
        assert max(gaps) > 4 * min(gaps), gaps  # it grows
        assert len({round(gap, 6) for gap in gaps}) == len(gaps), gaps  # jittered


# ---------------------------------------------------------------------------- failures


async def test_a_produce_request_whose_connection_the_broker_dropped_is_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The broker drops the connection while a Produce request waits to be
    written (another request holds the connection's send lock): the request
    fails with BrokenConnection and its records are retried on a new
    connection. They failed at once with ConnectionClosed, the error of a
    closed producer."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, delivery_timeout=20) as producer,
    ):
        await producer.send("t", b"warm-up")
        conn = await producer.cluster.connection(0)
        async with anyio.create_task_group() as tg:
            await conn._send_lock.acquire()  # as a request being written holds it
            outcome: list[object] = []

            async def send() -> None:
                try:
                    outcome.append(await producer.send("t", b"x"))
                except Exception as exc:
                    outcome.append(exc)

            tg.start_soon(send)
            while not conn._send_lock.statistics().tasks_waiting:
                await trio.sleep(0.001)
            assert cluster.cut_connections()
            await conn.wait_closed()
            conn._send_lock.release()
        assert [type(o).__name__ for o in outcome] == ["RecordMetadata"], outcome
        assert [r.value for r in cluster.records("t")] == [b"warm-up", b"x"]


# ---------------------------------------------------------------------------- closing


class Boom(Exception):
    pass


async def _queue_then_leave(how: str, cut: bool) -> tuple[int, BaseException | bool]:
    """Five sends queued (lingering) and then cancelled by the end of the
    block: left by a sibling's exception, or by a cancelled scope around it.
    Returns the records in the log and what came out of the block."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        scope = anyio.CancelScope()
        came_out: BaseException | bool = False
        try:
            with scope:
                async with Producer(cluster.bootstrap, linger=30, delivery_timeout=60) as producer:
                    await producer.flush()
                    async with anyio.create_task_group() as tg:
                        for i in range(5):
                            tg.start_soon(producer.send, "t", b"%d" % i)
                        while len(producer._outstanding) < 5:
                            await anyio.sleep(0.01)
                        if cut:  # the close must open a connection again
                            await producer.cluster.connection(0)
                            assert cluster.cut_connections()
                        if how == "exception":
                            raise Boom
                        scope.cancel()
                        await anyio.sleep_forever()
        except BaseException as exc:
            came_out = exc
        if how == "cancelled":
            came_out = scope.cancelled_caught
        return len(cluster.records("t")), came_out


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize(
    ("how", "cut"), [("exception", False), ("cancelled", False), ("cancelled", True)]
)
def test_records_of_cancelled_sends_are_delivered_whatever_ends_the_block(
    backend: str, how: str, cut: bool
) -> None:
    """A send cancelled once its record is queued only stops waiting: leaving
    the block by an exception or a cancellation still delivers the record
    (it used to be dropped, and nobody heard of it), even when that needs a
    new connection, and then the block's exception or cancellation comes out
    as it was."""
    in_log, came_out = anyio.run(_queue_then_leave, how, cut, backend=backend)
    assert in_log == 5
    if how == "exception":
        assert isinstance(came_out, BaseExceptionGroup), came_out
        assert [type(e) for e in came_out.exceptions] == [Boom], came_out
    else:
        assert came_out is True  # the cancellation reached its scope


async def test_leaving_waits_for_delivery_at_most_delivery_timeout(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker is down when the block is left by an exception: the records
    queued are retried until their own delivery timeout, no longer, and fail
    with RequestTimedOut; their failure is logged once, for the senders that
    stopped waiting."""
    caplog.set_level(logging.WARNING, logger="gengroup")  # whatever an earlier test set
    outcomes: list[BaseException] = []

    async def send(producer: Producer, value: bytes) -> None:
        try:
            await producer.send("t", value)
        except Exception as exc:
            outcomes.append(exc)

    async with FakeCluster(topics={"t": 1}) as cluster:
        async with anyio.create_task_group() as senders:
            with pytest.raises(Boom):
                async with Producer(cluster.bootstrap, linger=1, delivery_timeout=5) as producer:
                    await producer.send("t", b"warm-up")
                    await cluster.stop_broker(0)
                    started = trio.current_time()
                    for value in (b"a", b"b"):
                        senders.start_soon(send, producer, value)
                    await trio.sleep(0.5)
                    raise Boom
            took = trio.current_time() - started
    assert took <= 5.0 + 0.1, took
    assert [type(e) for e in outcomes] == [RequestTimedOut, RequestTimedOut], outcomes
    closing = [r for r in caplog.records if "the Producer closed with" in r.getMessage()]
    assert len(closing) == 1 and "2 of its 2" in closing[0].getMessage(), caplog.records


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_record_in_flight_when_its_cluster_closes_may_have_been_written(backend: str) -> None:
    """The shared Cluster is closed while a Produce request is at the broker:
    its record is told it may have been written (ClosedInFlight), as it was,
    and the record queued behind it that it was never sent. Both used to be
    told the same ConnectionClosed, and a caller resending on it wrote the
    first one twice."""

    async def main() -> tuple[dict[str, BaseException], int]:
        outcomes: dict[str, BaseException] = {}

        async def send(producer: Producer, value: bytes) -> None:
            try:
                await producer.send("t", value)
            except Exception as exc:
                outcomes[value.decode()] = exc

        async with FakeCluster(topics={"t": 1}) as cluster:
            async with Cluster(cluster.bootstrap) as shared, Producer(shared) as producer:
                await producer.send("t", b"warm-up")
                cluster.control(ApiKey.PRODUCE, lambda call: Delay(0.5))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(send, producer, b"in flight")
                    while not producer._queues[TopicPartition("t", 0)].in_flight:
                        await anyio.sleep(0.01)
                    tg.start_soon(send, producer, b"queued")
                    while len(producer._outstanding) < 2:
                        await anyio.sleep(0.01)
                    await shared.aclose()
            await anyio.sleep(1.0)  # the broker answers the held request
            return outcomes, len(cluster.records("t"))

    outcomes, in_log = anyio.run(main, backend=backend)
    assert in_log == 2  # the record in flight was written
    assert isinstance(outcomes["in flight"], ClosedInFlight), outcomes
    assert "may have been written" in str(outcomes["in flight"])
    assert isinstance(outcomes["queued"], ConnectionClosed), outcomes
    assert not isinstance(outcomes["queued"], ClosedInFlight), outcomes


async def test_a_shutdown_tells_records_in_flight_they_may_have_been_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """What the shutdown fails -- left when the close's bound passed -- is
    told apart: a record in an unanswered Produce request gets the error that
    says it may have been written, a record still queued the one that says it
    was never sent."""
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Producer(cluster.bootstrap, delivery_timeout=30) as producer,
    ):
        await producer.send("t", b"warm-up")
        cluster.control(ApiKey.PRODUCE, lambda call: Drop())
        outcomes: dict[str, BaseException] = {}

        async def send(value: bytes) -> None:
            try:
                await producer.send("t", value)
            except Exception as exc:
                outcomes[value.decode()] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, b"in flight")
            await trio.sleep(1)
            tg.start_soon(send, b"queued")
            await trio.sleep(1)
            producer._shutdown(ConnectionClosed("not sent"), ClosedInFlight("may be written"))
    assert type(outcomes["in flight"]) is ClosedInFlight, outcomes
    assert type(outcomes["queued"]) is ConnectionClosed, outcomes


async def _enter_in_a_cancelled_scope() -> bool:
    async with FakeCluster(topics={"t": 1}) as cluster:
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with Producer(cluster.bootstrap):
                await anyio.sleep(1)
        return scope.cancelled_caught


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_producer_entered_in_a_cancelled_scope_does_not_hang(backend: str) -> None:
    """The task that holds the producer's own Cluster open is shielded until
    the shutdown; started from a cancelled scope, trio's start waited for it
    to end (it is not moved to the producer's task group then): forever."""
    assert anyio.run(_enter_in_a_cancelled_scope, backend=backend) is True


async def _natively_cancelled_while_leaving() -> str:
    import asyncio

    async with FakeCluster(topics={"t": 1}) as cluster:
        producer = Producer(cluster.bootstrap, delivery_timeout=5, linger=0)

        async def send_quietly() -> None:
            with contextlib.suppress(ConnectionClosed):  # failed once the task is cancelled
                await producer.send("t", b"dropped")

        async def body() -> None:
            async with anyio.create_task_group() as senders, producer:
                await producer.send("t", b"warm-up")
                cluster.control(ApiKey.PRODUCE, lambda call: Drop())
                senders.start_soon(send_quietly)
                await anyio.sleep(0.2)
                raise Boom

        task = asyncio.get_running_loop().create_task(body())
        await asyncio.sleep(1.0)  # the close waits for the dropped record's delivery
        task.cancel()  # as asyncio.run does on Ctrl-C
        (outcome,) = await asyncio.gather(task, return_exceptions=True)
        return type(outcome).__name__


def test_a_close_interrupted_by_a_native_cancellation_still_ends_the_producer() -> None:
    """asyncio's own cancellation reaches a shielded wait: the close is cut
    short, the records are failed, and the producer's task group is still
    exited (it was left open, and leaving the block raised RuntimeError about
    a cancel scope exited in the wrong order)."""
    assert anyio.run(_natively_cancelled_while_leaving, backend="asyncio") == "CancelledError"


async def test_a_record_retried_after_a_broken_connection_may_have_been_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A record whose Produce request was at the broker when the connection
    broke waits for its retry when the shared Cluster is closed: it is told it
    may have been written (a real broker may have written it), not that it
    was never sent."""
    outcome: list[BaseException | None] = []
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with (
            Cluster(cluster.bootstrap) as shared,
            Producer(shared, retry_backoff=2.0, linger=0) as producer,
        ):
            await producer.send("t", b"warm-up")
            cluster.control(ApiKey.PRODUCE, lambda call: Delay(0.3), once=True)

            async def send() -> None:
                try:
                    await producer.send("t", b"x")
                    outcome.append(None)
                except ConnectionClosed as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                queue = None
                while queue is None or not queue.in_flight:
                    await anyio.sleep(0.01)
                    queue = producer._queues.get(TopicPartition("t", 0))
                await anyio.sleep(0.05)
                cluster.cut_connections()
                await anyio.sleep(0.5)  # the retry backs off (2 s)
                assert queue.retry is not None
                await shared.aclose()
    assert len(outcome) == 1 and isinstance(outcome[0], ClosedInFlight), outcome


# ---------------------------------------------------------------------------- aclose


async def _aclose_inside_the_block() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with Producer(cluster.bootstrap, linger=30, delivery_timeout=60) as producer:
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(producer.send, "t", b"%d" % i)
                while len(producer._outstanding) < 3:
                    await anyio.sleep(0.01)
                await producer.aclose()  # the lingering records go now, not in 30 s
                seen["in log after aclose"] = len(cluster.records("t"))
            with anyio.fail_after(1):  # the block's body is not cancelled
                await anyio.sleep(0.01)
            with pytest.raises(ConnectionClosed, match="not open"):
                await producer.send("t", b"late")
            with pytest.raises(ConnectionClosed, match="not open"):
                await producer.send_many("t", [b"late"])
            await producer.flush()
            with pytest.raises(ConnectionClosed):  # its own Cluster closed with it
                await producer.cluster.connection(0)
            await producer.aclose()  # again: nothing more
        await producer.aclose()  # and after the block
        await producer.__aexit__(None, None, None)  # left again: nothing more
        seen["in log"] = len(cluster.records("t"))
    return seen


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_aclose_inside_the_block_delivers_then_refuses_sends(backend: str) -> None:
    """aclose() closes as leaving the block does: the queued records are
    delivered, then sends are refused with ConnectionClosed and the
    producer's own Cluster is closed; the body goes on, not cancelled. A
    second aclose(), leaving the block, and leaving it again do nothing more."""
    seen = anyio.run(_aclose_inside_the_block, backend=backend)
    assert seen == {"in log after aclose": 3, "in log": 3}


async def test_aclose_is_bounded_by_delivery_timeout_and_leaving_adds_nothing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker is down: aclose() returns once the records' delivery timeout
    passed, their failure logged once; leaving the block then neither waits
    nor logs again."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    outcomes: list[BaseException] = []

    async def send(producer: Producer, value: bytes) -> None:
        try:
            await producer.send("t", value)
        except Exception as exc:
            outcomes.append(exc)

    async with FakeCluster(topics={"t": 1}) as cluster:
        async with Producer(cluster.bootstrap, linger=1, delivery_timeout=5) as producer:
            await producer.send("t", b"warm-up")
            await cluster.stop_broker(0)
            started = trio.current_time()
            async with anyio.create_task_group() as senders:
                for value in (b"a", b"b"):
                    senders.start_soon(send, producer, value)
                await trio.sleep(0.5)
                await producer.aclose()
                closed = trio.current_time()
            assert closed - started <= 5.0 + 0.1, closed - started
            assert [type(e) for e in outcomes] == [RequestTimedOut, RequestTimedOut], outcomes
        assert trio.current_time() == closed
    closing = [r for r in caplog.records if "the Producer closed with" in r.getMessage()]
    assert len(closing) == 1 and "2 of its 2" in closing[0].getMessage(), caplog.records


async def test_concurrent_acloses_both_return_once_delivered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A second aclose() while the first delivers returns when the first does,
    not before."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with Producer(cluster.bootstrap, linger=0) as producer:
            await producer.send("t", b"warm-up")
            cluster.control(ApiKey.PRODUCE, lambda call: Delay(2.0), once=True)
            returned: list[int] = []

            async def close() -> None:
                await producer.aclose()
                returned.append(len(cluster.records("t")))

            async with anyio.create_task_group() as tg:
                tg.start_soon(producer.send, "t", b"slow")
                await trio.sleep(0.1)
                tg.start_soon(close)
                tg.start_soon(close)
    assert returned == [2, 2]


async def test_a_producer_closed_before_it_was_entered_cannot_be_entered() -> None:
    producer = Producer("127.0.0.1:9")
    await producer.aclose()
    await producer.aclose()
    with pytest.raises(GengroupError, match=r"closed \(aclose\(\)\) before it was entered"):
        async with producer:
            pass
    with pytest.raises(ConnectionClosed, match="not open"):
        await producer.send("t", b"x")


async def test_a_producer_is_entered_only_once(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster:
        producer = Producer(cluster.bootstrap)
        async with producer:
            with pytest.raises(GengroupError, match="entered only once"):
                async with producer:
                    pass
            await producer.send("t", b"x")  # the failed entry left it open
        with pytest.raises(GengroupError, match="entered only once"):
            async with producer:
                pass
        with pytest.raises(GengroupError, match="not entered"):
            await Producer(cluster.bootstrap).__aexit__(None, None, None)


async def test_aclose_ends_a_send_waiting_for_its_topics_metadata(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A send waiting for the metadata of a topic that does not exist (on a
    shared Cluster, which stays open) raises ConnectionClosed once aclose()
    runs, not UNKNOWN_TOPIC_OR_PARTITION at the end of ``max_block``."""
    outcome: list[tuple[BaseException, float]] = []
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        Cluster(cluster.bootstrap) as shared,
        Producer(shared, max_block=10, allow_auto_create_topics=False) as producer,
    ):

        async def send_missing() -> None:
            try:
                await producer.send("missing", b"x")
            except Exception as exc:
                outcome.append((exc, trio.current_time()))

        async with anyio.create_task_group() as senders:
            senders.start_soon(send_missing)
            await trio.sleep(0.2)
            closing = trio.current_time()
            await producer.aclose()
        ((error, at),) = outcome
        assert isinstance(error, ConnectionClosed), error
        assert "metadata of topic 'missing'" in str(error), error
        assert at - closing < 1.0, at - closing


@pytest.mark.parametrize("where", ["_send_batches_once", "_drain"])
async def test_an_interrupt_in_a_background_task_ends_the_producer_at_once(
    autojump_clock: trio.testing.MockClock, where: str
) -> None:
    """On trio Ctrl-C raises KeyboardInterrupt in whichever task runs: one
    raised in a task sending a Produce request (which took its records off
    their queue) or in the sender loop shuts the producer down, failing the
    records, instead of leaving the close to wait for them (nobody sends them
    any more) until ``delivery_timeout``."""
    outcome: list[BaseException] = []
    async with FakeCluster(topics={"t": 1}) as cluster:
        producer = Producer(cluster.bootstrap, delivery_timeout=120, linger=0)
        original = getattr(producer, where)

        def interrupting(*args: Any) -> Any:
            if producer._outstanding:
                raise KeyboardInterrupt
            return original(*args)

        setattr(producer, where, interrupting)
        start = trio.current_time()
        with pytest.raises(KeyboardInterrupt):  # as itself, not in an exception group
            async with producer:
                try:
                    await producer.send("t", b"x")
                except Exception as exc:
                    outcome.append(exc)
        assert trio.current_time() - start < 1.0
        # The send has its outcome at once: in flight, its record may have been written.
        expected = ClosedInFlight if where == "_send_batches_once" else ConnectionClosed
        assert [type(exc) for exc in outcome] == [expected], outcome
        assert "the Producer was interrupted (KeyboardInterrupt())" in str(outcome[0])
        assert cluster.records("t") == []


async def test_a_log_filter_that_raises_does_not_hold_the_close(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An application's logging filter that raises on the producer's WARNING
    crashes the sender loop; the shutdown that follows logs the failing
    partitions again, which raises again, and must still fail the records and
    end the tasks first, not leave the close to wait for ``delivery_timeout``."""

    class Raising(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.levelno >= logging.WARNING and "producer:" in str(record.msg):
                raise RuntimeError("a log filter's bug")
            return True

    caplog.set_level(logging.WARNING, logger="gengroup")
    logger = logging.getLogger("gengroup")
    raising = Raising()
    logger.addFilter(raising)
    disabled, logger.disabled = logger.disabled, False  # another test's dictConfig may disable it
    outcome: list[BaseException] = []
    try:
        async with FakeCluster(topics={"t": 1}) as cluster:
            cluster.control(ApiKey.PRODUCE, lambda call: Fail(19))  # NOT_ENOUGH_REPLICAS
            start = trio.current_time()
            with pytest.raises(RuntimeError):  # the filter's, as itself
                async with Producer(cluster.bootstrap, retry_backoff=0.1, delivery_timeout=10) as p:
                    try:
                        await p.send("t", b"x", partition=0)
                    except Exception as exc:
                        outcome.append(exc)
            assert trio.current_time() - start < 5.0
            assert len(outcome) == 1 and isinstance(outcome[0], GengroupError), outcome
    finally:
        logger.removeFilter(raising)
        logger.disabled = disabled


async def test_a_background_crash_comes_out_with_its_cause_and_the_body_error_as_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A bug in a background task comes out of the block as itself, with its
    own cause (not in an exception group, and not stripped of its chain);
    an exception the block raised meanwhile is its context, not lost."""

    class InTheBody(Exception):
        pass

    async with FakeCluster(topics={"t": 1}) as cluster:
        producer = Producer(cluster.bootstrap, delivery_timeout=120, linger=0)
        original = producer._drain

        def crashing(*args: Any) -> Any:
            if producer._outstanding:
                try:
                    raise ValueError("the root cause")
                except ValueError as exc:
                    raise RuntimeError("a bug in a background task") from exc
            return original(*args)

        producer._drain = crashing  # type: ignore[method-assign]
        with pytest.raises(RuntimeError) as raised:
            async with producer:
                with pytest.raises(GengroupError):
                    await producer.send("t", b"x")
                raise InTheBody
    assert isinstance(raised.value.__cause__, ValueError), raised.value.__cause__
    assert isinstance(raised.value.__context__, InTheBody), raised.value.__context__
    assert "the root cause" in "".join(traceback.format_exception(raised.value))
