"""What the producer logs while a partition's Produce fails, against the embedded broker."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from itertools import pairwise
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

import gengroup.producer as producer_module
from gengroup._errors import RequestTimedOut
from gengroup._producer_failures import GAVE_UP_EVERY, REMEMBER, Failures, partitions_named
from gengroup._types import TopicPartition
from gengroup.broker import Delay, Disconnect, Drop, Fail, FakeCluster, Intercepted
from gengroup.io.outage import FLAPPING, LOUD_AFTER
from gengroup.producer import Producer
from gengroup.protocol.versions import ApiKey


async def test_a_partition_failing_is_logged_once_and_once_when_written_again(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A retriable Produce error is a WARNING naming the partition, the broker
    and the error when the partition starts failing, DEBUG for each retry after
    an error it already failed with, INFO for another, and one INFO line when the
    partition is written again: once per change of state, not per retry."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake:
        failing: list[int] = []  # the error codes to answer Produce with, in turn

        def answer(call: Intercepted) -> Fail | None:
            return Fail(failing.pop(0)) if failing else None

        fake.control(ApiKey.PRODUCE, answer)
        async with Producer(fake.bootstrap, retry_backoff=0.1, delivery_timeout=30) as producer:
            await producer.send("t", b"warm-up", partition=0)
            caplog.clear()
            failing[:] = [19] * 6  # NOT_ENOUGH_REPLICAS
            await producer.send("t", b"a", partition=0)
            first = _produce_logs(caplog)
            caplog.clear()
            failing[:] = [19, 19, 7]  # ... then REQUEST_TIMED_OUT
            await producer.send("t", b"b", partition=0)
            second = _produce_logs(caplog)
            caplog.clear()
            failing[:] = [19, 7, 19, 7, 19]  # errors alternating, as leadership moves
            await producer.send("t", b"c", partition=0)
            third = _produce_logs(caplog)
            caplog.clear()
            await producer.send("t", b"d", partition=0)
            assert _produce_logs(caplog) == []
    level, said = first[0]
    assert level == logging.WARNING
    assert said.startswith("producer: Produce to t[0] on broker 0 failing (1 attempt(s))"), said
    assert "NOT_ENOUGH_REPLICAS" in said and "delivery_timeout" in said
    assert [level for level, _ in first] == [logging.WARNING] + [logging.DEBUG] * 5 + [
        logging.INFO
    ], first
    assert first[-1][1] == "producer: t[0] written again on broker 0, after 6 failed attempt(s)"
    assert [level for level, _ in second] == [
        logging.WARNING,
        logging.DEBUG,
        logging.INFO,  # now failing with another error
        logging.INFO,  # written again
    ], second
    assert "now failing" in second[2][1] and "REQUEST_TIMED_OUT" in second[2][1]
    # Each kind of error once, however they alternate (the ``now failing`` line
    # waits up to the longest retry backoff, for other partitions to join it).
    assert [level for level, _ in third if level > logging.DEBUG] == [
        logging.WARNING,
        logging.INFO,
        logging.INFO,
    ], third
    assert [level for level, _ in third].count(logging.DEBUG) == 3, third
    shifted = [said for level, said in third if level == logging.INFO and "now failing" in said]
    assert len(shifted) == 1 and "t[0] on broker 0 now failing (2 attempt(s))" in shifted[0]
    assert "REQUEST_TIMED_OUT" in shifted[0], third
    assert [r.value for r in fake.records("t", 0)] == [b"warm-up", b"a", b"b", b"c", b"d"]


class NotLeader(Exception):
    """NOT_LEADER_OR_FOLLOWER, as the failures log reads an error (its ``code``)."""

    code = 6


def _refuse_produce_for(fake: FakeCluster, seconds: float, broker: int | None = None) -> float:
    """Every Produce (to ``broker``, if given) answered NOT_ENOUGH_REPLICAS for
    ``seconds`` from now: when it started."""
    start = trio.current_time()
    fake.control(
        ApiKey.PRODUCE,
        lambda call: Fail(19) if trio.current_time() < start + seconds else None,
        broker_id=broker,
    )
    return start


def _produce_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith("producer: ") and "t[" in r.getMessage()
    ]


async def test_a_broken_connection_is_logged_as_its_partitions_failing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A Produce request whose connection broke fails each of its partitions (retried)."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake:
        async with Producer(fake.bootstrap, retry_backoff=0.1) as producer:
            await producer.send("t", b"warm-up")
            caplog.clear()
            fake.control(ApiKey.PRODUCE, lambda call: Disconnect(), once=True)
            await producer.send("t", b"a")
    logged = _produce_logs(caplog)
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO], logged
    assert "t[0] on broker 0 failing" in logged[0][1] and "BrokenConnection" in logged[0][1]


# ------------------------------------------------ a broker's event: a line, not one per partition


def _producer_logs(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and r.getMessage().startswith("producer: ")
    ]


async def _send_to_each(producer: Producer, topic: str, count: int) -> list[BaseException]:
    """Send a record to each of ``count`` partitions at once; the errors raised."""
    errors: list[BaseException] = []

    async def send(partition: int) -> None:
        try:
            await producer.send(topic, b"x", partition=partition)
        except Exception as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for partition in range(count):
            nursery.start_soon(send, partition)
    return errors


@pytest.mark.parametrize("max_request_bytes", [1_048_576, 200])
async def test_partitions_failing_on_a_broker_are_one_warning_and_one_info_per_broker(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    max_request_bytes: int,
) -> None:
    """NOT_LEADER_OR_FOLLOWER for every partition a broker leads is one WARNING
    for that broker (its count of partitions, a few named) and one INFO when
    they are written again, the per-partition detail at DEBUG: also when the
    partitions went in a request each (``max_request_bytes`` 200)."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    async with FakeCluster(brokers=2, topics={"orders": 50}) as fake:
        tried: set[int] = set()

        def answer(call: Intercepted) -> Fail | None:
            """NOT_LEADER_OR_FOLLOWER for a request carrying a partition's first attempt."""
            sent = {int(p.index) for t in call.request.topic_data for p in t.partition_data}
            if sent <= tried:
                return None
            tried.update(sent)
            return Fail(6)

        async with Producer(
            fake.bootstrap, retry_backoff=0.1, max_request_bytes=max_request_bytes
        ) as producer:
            assert await _send_to_each(producer, "orders", 50) == []  # warm-up
            caplog.clear()
            fake.control(ApiKey.PRODUCE, answer)
            assert await _send_to_each(producer, "orders", 50) == []
    warnings = sorted(_producer_logs(caplog, logging.WARNING))
    infos = sorted(_producer_logs(caplog, logging.INFO))
    assert len(warnings) == 2, warnings
    for node, said in enumerate(warnings):
        assert said.startswith(f"producer: Produce to 25 partitions (orders[{node}], "), said
        assert f" and 22 more) on broker {node} failing, retrying until each record's " in said
        assert "NOT_LEADER_OR_FOLLOWER" in said
    assert len(infos) == 2, infos
    for node, said in enumerate(infos):
        assert said.startswith(f"producer: 25 partitions (orders[{node}], "), said
        assert f" and 22 more) written again on broker {node}, after " in said
    debug = _producer_logs(caplog, logging.DEBUG)
    for partition in range(50):  # each partition's detail
        assert any(f"Produce to orders[{partition}] on broker" in said for said in debug)
        assert any(
            said.startswith(f"producer: orders[{partition}] written again") for said in debug
        )
    assert all(len(fake.records("orders", p)) == 2 for p in range(50))


async def test_a_broker_restart_is_a_warning_and_an_info_naming_the_brokers(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker stopping under the Produce requests of its partitions (their
    leadership moves to the other broker) is one WARNING naming it, and one
    INFO once its partitions are written on the other."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    async with FakeCluster(brokers=2) as fake:
        fake.create_topic("orders", 50, replication_factor=2)
        led = sorted(p for p in range(50) if fake.state.topics.partition("orders", p).leader == 0)
        async with Producer(fake.bootstrap, retry_backoff=0.1) as producer:
            assert await _send_to_each(producer, "orders", 50) == []
            caplog.clear()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_send_to_each, producer, "orders", 50)
                await trio.lowlevel.checkpoint()  # queued, not yet sent
                await fake.restart_broker(0, downtime=2)
    named = ", ".join(f"orders[{p}]" for p in led[:3])
    warnings = _producer_logs(caplog, logging.WARNING)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        f"producer: Produce to {len(led)} partitions ({named} and {len(led) - 3} more) "
        "on broker 0 failing, retrying until each record's delivery_timeout: BrokenConnection"
    ), warnings
    assert _producer_logs(caplog, logging.INFO) == [
        f"producer: {len(led)} partitions ({named} and {len(led) - 3} more) written again "
        f"on broker 1, after {len(led)} failed attempt(s) since failing on broker 0"
    ]
    assert all(len(fake.records("orders", p)) == 2 for p in range(50))


async def test_records_expiring_on_a_broker_down_are_one_warning_each_send_its_error(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker down past the delivery timeout: each send raises its
    RequestTimedOut, as before, and the log has one WARNING when the
    partitions start failing, one when their records failed (naming the
    count and the error), and one INFO when the broker is back and they are
    written again (their records all gave up: no wave's end says it)."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    async with FakeCluster(topics={"orders": 20}) as fake:
        async with Producer(fake.bootstrap, retry_backoff=0.1, delivery_timeout=3) as producer:
            assert await _send_to_each(producer, "orders", 20) == []
            caplog.clear()
            await fake.stop_broker(0)
            errors = await _send_to_each(producer, "orders", 20)
            assert [type(e) for e in errors] == [RequestTimedOut] * 20, errors
            warnings = _producer_logs(caplog, logging.WARNING)
            assert _producer_logs(caplog, logging.INFO) == []
            caplog.clear()
            await fake.start_broker(0)
            assert await _send_to_each(producer, "orders", 20) == []
            assert _producer_logs(caplog, logging.WARNING) == []
            assert _producer_logs(caplog, logging.INFO) == [
                "producer: 20 partitions (orders[0], orders[1], orders[2] and 17 more) written "
                "again on broker 0 since their records gave up"
            ]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(
        "producer: Produce to 20 partitions (orders[0], orders[1], orders[2] and 17 more) "
        "on broker 0 failing, retrying until each record's delivery_timeout: BrokenConnection"
    ), warnings
    assert warnings[1].startswith(
        "producer: gave up on 20 partitions (orders[0], orders[1], orders[2] and 17 more) "
        "failing since Produce to broker 0 failed, after "
    ), warnings
    assert (
        "each send raising its error (RequestTimedOut: orders[0]: 1 record(s) not " in (warnings[1])
    )


async def test_one_partition_giving_up_is_named(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake:
        async with Producer(fake.bootstrap, retry_backoff=0.1, delivery_timeout=2) as producer:
            await producer.send("t", b"warm-up")
            fake.control(ApiKey.PRODUCE, lambda call: Fail(19))
            with pytest.raises(RequestTimedOut):
                await producer.send("t", b"a")
    logged = _producer_logs(caplog, logging.WARNING)
    assert len(logged) == 2, logged
    assert logged[0].startswith("producer: Produce to t[0] on broker 0 failing (1 attempt(s))")
    assert logged[1].startswith(
        "producer: gave up on t[0] failing since Produce to broker 0 failed, after "
    ), logged
    assert "NOT_ENOUGH_REPLICAS" in logged[1]


def test_partitions_are_named_a_few_then_counted() -> None:
    tps = [TopicPartition("orders", p) for p in (7, 3, 12, 40, 5)]
    assert partitions_named(tps[:1]) == "orders[7]"
    assert partitions_named(tps[:2]) == "2 partitions (orders[3] and orders[7])"
    assert partitions_named(tps[:3]) == "3 partitions (orders[3], orders[7] and orders[12])"
    assert partitions_named(tps) == "5 partitions (orders[3], orders[5], orders[7] and 2 more)"


# ------------------------------------------------ each change of state reaches the log


@asynccontextmanager
async def _batch_a_request(
    *, idempotence: bool, request_bytes: int
) -> AsyncIterator[tuple[FakeCluster, Producer]]:
    """A topic t of two partitions and a producer (delivery_timeout 30 s) whose
    requests are small enough to hold one partition's batch each, warmed up."""
    async with FakeCluster(topics={"t": 2}) as fake:
        async with Producer(
            fake.bootstrap,
            retry_backoff=0.1,
            delivery_timeout=30,
            idempotence=idempotence,
            max_request_bytes=request_bytes,
        ) as producer:
            assert await _send_to_each(producer, "t", 2) == []  # warm-up
            yield fake, producer


def _sent(call: Intercepted) -> set[int]:
    return {int(p.index) for t in call.request.topic_data for p in t.partition_data}


@pytest.mark.parametrize("code", [19, 6])
async def test_partitions_starting_to_fail_while_another_fails_all_along_are_a_warning(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    """t[0] fails all along; each time the broker then fails the other
    partitions for a while (with t[0]'s error or another), they are a WARNING
    of their own (all of them named, counted) and an INFO when written again:
    an older wave of the broker still open swallows nothing."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    event = {"on": False}

    def answer(call: Intercepted) -> Fail | None:
        if event["on"]:
            return Fail(code)
        return Fail(19) if 0 in _sent(call) else None  # t[0]: NOT_ENOUGH_REPLICAS

    async with FakeCluster(topics={"t": 10}) as fake:
        async with Producer(
            fake.bootstrap, retry_backoff=0.1, delivery_timeout=120, max_request_bytes=200
        ) as producer:
            assert await _send_to_each(producer, "t", 10) == []  # warm-up
            fake.control(ApiKey.PRODUCE, answer)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_send_to_each, producer, "t", 1)  # t[0], failing
                await trio.sleep(30)
                for _ in range(2):  # two events of the broker
                    caplog.clear()
                    event["on"] = True
                    async with trio.open_nursery() as sends:
                        for partition in range(1, 10):
                            sends.start_soon(partial(producer.send, "t", b"x", partition=partition))
                        await trio.sleep(5)
                        event["on"] = False
                    warnings = _producer_logs(caplog, logging.WARNING)
                    assert len(warnings) == 1, warnings
                    assert warnings[0].startswith(
                        "producer: Produce to 9 partitions (t[1], t[2], t[3] and 6 more) "
                        "on broker 0 failing, retrying until each record's delivery_timeout"
                    ), warnings
                    written = [
                        said
                        for said in _producer_logs(caplog, logging.INFO)
                        if "written again" in said
                    ]
                    assert len(written) == 1, written
                    assert written[0].startswith(
                        "producer: 9 partitions (t[1], t[2], t[3] and 6 more) written again "
                        "on broker 0, after "
                    ), written
                    await trio.sleep(10)
                nursery.cancel_scope.cancel()


async def test_a_partitions_lines_count_its_own_attempts(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """t[0] gives up, t[1] (failing with it, on the same broker) is written
    again: the gave-up line counts t[0]'s failed attempts, not t[1]'s."""
    caplog.set_level(logging.DEBUG, logger="gengroup")

    def answer(call: Intercepted) -> Fail | None:
        return Fail(19) if 0 in _sent(call) or trio.current_time() < 9 else None

    async with FakeCluster(topics={"t": 2}) as fake:
        async with Producer(
            fake.bootstrap, retry_backoff=0.1, delivery_timeout=20, max_request_bytes=200
        ) as producer:
            fake.control(ApiKey.PRODUCE, answer)
            errors = await _send_to_each(producer, "t", 2)
    assert [type(error) for error in errors] == [RequestTimedOut]
    debug = _producer_logs(caplog, logging.DEBUG)
    own = [said for said in debug if said.startswith("producer: Produce to t[0] on broker 0 ")]
    t1 = [said for said in debug if said.startswith("producer: t[1] written again")]
    assert len(t1) == 1, t1
    warnings = _producer_logs(caplog, logging.WARNING)
    assert warnings[0].startswith("producer: Produce to 2 partitions (t[0] and t[1]) on broker 0")
    assert warnings[1].startswith(
        f"producer: gave up on t[0] failing since Produce to broker 0 failed, after {len(own)} "
        "failed attempt(s): their records failed, each send raising its error (RequestTimedOut"
    ), (warnings, len(own))
    assert warnings[1].endswith("; t[1] written again on broker 0"), warnings


async def test_a_new_error_of_a_brokers_partitions_is_one_info_naming_them_all(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """4 partitions failing with NOT_ENOUGH_REPLICAS, each in its own request,
    then with NOT_LEADER_OR_FOLLOWER (their retries spread over the backoff):
    one INFO ``now failing`` names the 4."""
    caplog.set_level(logging.DEBUG, logger="gengroup")

    def answer(call: Intercepted) -> Fail | None:
        now = trio.current_time()
        return Fail(19) if now < 3 else Fail(6) if now < 6 else None

    async with FakeCluster(topics={"t": 4}) as fake:
        async with Producer(
            fake.bootstrap, retry_backoff=0.1, delivery_timeout=60, max_request_bytes=200
        ) as producer:
            fake.control(ApiKey.PRODUCE, answer)
            assert await _send_to_each(producer, "t", 4) == []
    named = "4 partitions (t[0], t[1], t[2] and 1 more)"
    assert _producer_logs(caplog, logging.WARNING) == [
        f"producer: Produce to {named} on broker 0 failing, retrying until each record's "
        "delivery_timeout: RetriableBrokerError: NOT_ENOUGH_REPLICAS (19): Produce to t[0] "
        "on broker 0: "
    ]
    infos = _producer_logs(caplog, logging.INFO)
    assert len(infos) == 2, infos
    assert infos[0].startswith(
        f"producer: Produce to {named} on broker 0 now failing, retrying until each record's "
        "delivery_timeout: NotLeaderOrFollower"
    ), infos
    assert infos[1].startswith(f"producer: {named} written again on broker 0, after "), infos


async def test_a_batch_expiring_in_flight_gives_up_its_partition_when_it_expires(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A retry never answered fails its records at their delivery timeout (the
    request still in flight): the gave-up WARNING comes then, not when the
    request times out, and also if the Producer closes right after."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake:
        calls: list[float] = []

        def answer(call: Intercepted) -> Fail | Drop:
            calls.append(trio.current_time())
            return Fail(19) if len(calls) == 1 else Drop()

        async with Producer(fake.bootstrap, retry_backoff=0.1, delivery_timeout=5) as producer:
            await producer.send("t", b"warm-up")
            fake.control(ApiKey.PRODUCE, answer)
            with pytest.raises(RequestTimedOut):
                await producer.send("t", b"a")
    warnings = _producer_logs(caplog, logging.WARNING)
    assert len(warnings) == 2, warnings
    assert warnings[1].startswith(
        "producer: gave up on t[0] failing since Produce to broker 0 failed, after 1 failed "
        "attempt(s): their records failed, each send raising its error (RequestTimedOut: t[0]: "
        "1 record(s) not acknowledged within delivery_timeout=5 s"
    ), warnings


async def test_a_first_attempt_never_answered_is_said_failing_and_giving_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A delivery timeout below the request's: the broker never answers the
    first attempt, whose records fail in flight at their delivery timeout
    before the request times out. The partition is said failing and giving
    up then, as after a failed attempt (it was DEBUG only)."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 1}) as fake:
            async with Producer(fake.bootstrap, delivery_timeout=5, request_timeout=30) as p:
                await p.send("t", b"warm-up")
                fake.control(ApiKey.PRODUCE, lambda call: Drop())
                start = trio.current_time()
                with pytest.raises(RequestTimedOut):
                    await p.send("t", b"a")
                assert trio.current_time() - start == pytest.approx(5, abs=0.1)
    warnings = [(at, said) for at, level, said in timed.lines if level == logging.WARNING]
    assert len(warnings) == 2, warnings
    (failing_at, failing), (gave_up_at, gave_up) = warnings
    assert failing.startswith("producer: Produce to t[0] on broker 0 failing"), failing
    assert "RequestTimedOut" in failing, failing
    assert gave_up.startswith("producer: gave up on t[0]"), gave_up
    assert "not acknowledged within delivery_timeout=5 s" in gave_up, gave_up
    assert failing_at - start == gave_up_at - start == pytest.approx(5, abs=0.1)


@pytest.mark.parametrize("idempotence", [True, False])
async def test_a_broker_answering_after_the_delivery_timeout_is_a_few_lines(
    autojump_clock: trio.testing.MockClock, idempotence: bool
) -> None:
    """A broker answering every Produce 8 s late, for two minutes, a record a
    second, delivery_timeout 5 s: each batch fails in flight, and its late
    answer is not the partition written again (which would make each batch
    a new pair of WARNINGs). Failing and giving up are said once; written
    again (INFO) when the broker answers in time, if the partition is still
    failing then (one that gave up and waits for no retry is not)."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 1}) as fake:
            async with Producer(
                fake.bootstrap, delivery_timeout=5, request_timeout=30, idempotence=idempotence
            ) as p:
                await p.send("t", b"warm-up")
                start = trio.current_time()
                fake.control(
                    ApiKey.PRODUCE,
                    lambda call: Delay(8) if trio.current_time() - start < 120 else None,
                )
                outcomes: list[bool] = []

                async def one(i: int) -> None:
                    try:
                        await p.send("t", b"r%d" % i)
                        outcomes.append(True)
                    except RequestTimedOut:
                        outcomes.append(False)

                async with trio.open_nursery() as nursery:
                    for i in range(160):
                        nursery.start_soon(one, i)
                        await trio.sleep(1)
    assert outcomes.count(False) >= 100 and outcomes[-1], outcomes
    warnings = [said for _, level, said in timed.lines if level == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "t[0] on broker 0 failing" in warnings[0] and "gave up on t[0]" in warnings[1]
    assert max(level for _, level, _ in timed.lines) == logging.WARNING
    assert len([said for _, _, said in timed.lines if "written again" in said]) <= 1


def test_a_wave_open_at_close_is_said_to_give_up() -> None:
    """The Producer closing with partitions failing: the WARNING held and the
    gave-up line of their wave come out, with the close's error."""
    failures = Failures(hold=0.1, settle=1.2)
    queues = [_StubQueue(TopicPartition("t", p)) for p in range(2)]
    for queue in queues:
        failures.failed(queue, TimeoutError("slow"), 3, now=1.0)
    with _capture() as logged:
        failures.close(ConnectionError("closed"), ConnectionResetError("in flight"))
    assert [level for level, _ in logged] == [logging.WARNING, logging.WARNING], logged
    assert logged[0][1].startswith("producer: Produce to 2 partitions (t[0] and t[1]) on broker 3")
    assert logged[1][1] == (
        "producer: gave up on 2 partitions (t[0] and t[1]) failing since Produce to broker 3 "
        "failed, after 2 failed attempt(s): their records failed, each send raising its error "
        "(ConnectionError: closed)"
    )
    assert all(queue.failing is None and queue.failures == 0 for queue in queues)


@pytest.mark.parametrize("backoff", [0.1, 1.0])
async def test_the_held_warning_of_a_leaderless_partition_waits_no_longer_than_the_backoff(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    backoff: float,
) -> None:
    """A partition failing as its broker stops, then without a leader (never
    in flight again): its WARNING is logged ``retry_backoff`` after it failed."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    monkeypatch.setattr(  # the shortest jitter: the retries come before the hold ends
        producer_module,
        "backoff_delay",
        lambda attempt, base, cap=1.0: min(base * 2**attempt, cap) * 0.8,
    )
    failed: list[float] = []
    original = Failures.failed

    def failing(self: Failures, queue: Any, error: BaseException, node: int, now: float) -> None:
        failed.append(now)
        original(self, queue, error, node, now)

    monkeypatch.setattr(Failures, "failed", failing)
    logged: list[float] = []

    class Timed(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING and "on broker 0 failing" in record.getMessage():
                logged.append(trio.current_time())

    handler = Timed()
    logging.getLogger("gengroup").addHandler(handler)
    try:
        async with FakeCluster(brokers=2) as fake:
            fake.create_topic("t", 1, replication_factor=1)
            fake.state.topics.move_leader("t", 0, 0)
            fake.state.notify()
            async with Producer(
                fake.bootstrap, retry_backoff=backoff, delivery_timeout=60
            ) as producer:
                await producer.send("t", b"w")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(producer.send, "t", b"x")
                    await trio.lowlevel.checkpoint()
                    await fake.stop_broker(0)
                    await trio.sleep(20)
                    await fake.start_broker(0)
    finally:
        logging.getLogger("gengroup").removeHandler(handler)
    assert len(logged) == 1 and failed, (logged, failed)
    assert logged[0] - failed[0] <= backoff * 1.01, (failed, logged)


async def test_partitions_moved_to_a_broker_failing_with_the_same_error_are_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Partitions failing on broker 0 move to broker 1, which fails them with
    the same error: an INFO names broker 1."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(brokers=2) as fake:
        fake.create_topic("t", 4, replication_factor=2)
        for partition in range(4):
            fake.state.topics.move_leader("t", partition, 0)
        fake.state.notify()
        failing = {"node": 0}

        def answer(call: Intercepted) -> Fail | None:
            failed = trio.current_time() < 30 and call.broker_id == failing["node"]
            return Fail(19) if failed else None

        async with Producer(fake.bootstrap, retry_backoff=0.1, delivery_timeout=120) as producer:
            assert await _send_to_each(producer, "t", 4) == []
            fake.control(ApiKey.PRODUCE, answer)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_send_to_each, producer, "t", 4)
                await trio.sleep(5)
                for partition in range(4):
                    fake.state.topics.move_leader("t", partition, 1)
                fake.state.notify()
                failing["node"] = 1
    infos = _producer_logs(caplog, logging.INFO)
    assert any(" on broker 1 now failing, retrying " in said for said in infos), infos
    assert infos[-1].startswith("producer: 4 partitions (t[0], t[1], t[2] and 1 more) written "), (
        infos
    )


class _StubQueue:
    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.failing: Any = None  # the wave it belongs to
        self.failures = 0
        self.in_flight = False
        self.is_idle = False

    def idle(self) -> bool:
        return self.is_idle


@contextmanager
def _capture() -> Iterator[list[tuple[int, str]]]:
    logged: list[tuple[int, str]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append((record.levelno, record.getMessage()))

    handler, logger = Capture(), logging.getLogger("gengroup")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logged
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# ------------------------------------------------ a trickle of records to a broker failing for long


async def _trickle(producer: Producer, partitions: int, every: float, until: float) -> int:
    """Send a record to each partition in turn, ``every`` seconds apart, until
    ``until``; how many sends raised RequestTimedOut."""
    expired = 0

    async def send(partition: int) -> None:
        nonlocal expired
        try:
            await producer.send("t", b"x", partition=partition)
        except RequestTimedOut:
            expired += 1

    async with trio.open_nursery() as nursery:
        while trio.current_time() < until:
            for partition in range(partitions):
                nursery.start_soon(send, partition)
                await trio.sleep(every)
    return expired


def _named(line: str) -> int:
    """How many partitions a line names first (``t[0]``: 1, ``5 partitions (...)``: 5)."""
    said = line.removeprefix("producer: ")
    return int(said.split(" ", 1)[0]) if said.split(" ", 2)[1] == "partitions" else 1


class _Timed(logging.Handler):
    """The gengroup lines of INFO and above, with the trio time they were logged at."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((trio.current_time(), record.levelno, record.getMessage()))


@contextmanager
def _timed() -> Iterator[_Timed]:
    handler, logger = _Timed(), logging.getLogger("gengroup")
    level, disabled = logger.level, logger.disabled
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.disabled = False  # another test's dictConfig may disable it
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled


@pytest.mark.parametrize("idempotence", [True, False])
@pytest.mark.parametrize("partitions", [20, 1])
async def test_a_trickle_of_records_to_a_broker_failing_for_minutes_is_a_few_lines(
    autojump_clock: trio.testing.MockClock, partitions: int, idempotence: bool
) -> None:
    """A broker failing NOT_ENOUGH_REPLICAS for 300 s while partitions each get
    a record every 40 s (one partition every 2 s), each record expiring after
    30 s: a partition whose records gave up and that fails again the same way
    is still failing, not starting to; the log says the broker failing, the
    partitions joining it one at a time (INFO), records giving up (at once,
    then those gathered since at most every GAVE_UP_EVERY) and the partitions
    written again, not a line per record (nor an epoch bump's INFO each)."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": partitions}) as fake:
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=idempotence
            ) as producer:
                assert await _send_to_each(producer, "t", partitions) == []  # warm-up
                timed.lines.clear()
                start = _refuse_produce_for(fake, 300)
                expired = await _trickle(producer, partitions, 40 / partitions, start + 330)
                assert expired >= 6 * partitions, expired  # most records of the outage
    warnings = [(at - start, said) for at, level, said in timed.lines if level == logging.WARNING]
    infos = [said for _, level, said in timed.lines if level == logging.INFO]
    said = [said for _, said in warnings]
    assert said[0].startswith("producer: Produce to t[0] on broker 0 failing (1 attempt(s))")
    assert "NOT_ENOUGH_REPLICAS" in said[0], said
    # t[0]'s first record gives up at +30 s, said then.
    assert said[1].startswith("producer: gave up on t[0] failing since "), said
    assert 30 <= warnings[1][0] <= 31, warnings
    written = [line for line in infos if " written again on broker 0, after " in line]
    assert len(written) == 1, infos
    bumps = [line for line in infos if "epoch bumped" in line]
    assert len(bumps) == (1 if idempotence else 0), bumps
    if partitions == 1:
        assert len(warnings) == 2, warnings
        assert written[0].startswith("producer: t[0] written again on broker 0, after "), infos
        assert len(infos) == 1 + len(bumps), infos
    else:  # the 19 others gave up within the next minute: one line, GAVE_UP_EVERY later
        assert len(warnings) == 3, warnings
        assert said[2].startswith(
            "producer: gave up on 19 partitions (t[1], t[2], t[3] and 16 more) failing since "
        ), said
        assert warnings[2][0] - warnings[1][0] == pytest.approx(GAVE_UP_EVERY, abs=1.0)
        assert written[0].endswith(
            "; the records of 20 partitions (t[0], t[1], t[2] and 17 more) failed before"
        ), written
        joined = [line for line in infos if " on broker 0 now failing " in line]
        assert len(joined) == partitions - 1, infos
        # The partitions idle when the broker answers again (their records all
        # gave up) are written outside the wave: the all-clear says them, at
        # once for the first, the others gathered a minute later.
        back = [line for line in infos if " records gave up" in line]
        assert len(back) == 2, infos
        assert back[0].startswith("producer: t[") and " partitions " not in back[0], back
        assert sum(_named(line) for line in written + back) == partitions, (written, back)
        assert len(infos) == len(joined) + 1 + len(back) + len(bumps), infos


async def test_a_partition_starting_to_fail_beside_an_old_wave_says_when_it_gives_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """t[0] fails all along; 105 s later the broker fails t[1] for one record
    of it: t[1] joins t[0]'s wave (INFO), and its record giving up is a
    WARNING when it gives up, not when t[0]'s wave ends (which it does not).
    (Not at 100 s: t[0]'s records, one every 10 s, expire on that grid, and
    in the instant between one expiring and the next failing t[0] has no
    wave for t[1] to join: t[1] then starts one of its own, a WARNING.)"""

    def answer(call: Intercepted) -> Fail | None:
        return Fail(19) if 0 in _sent(call) or event["on"] else None

    event = {"on": False}
    with _timed() as timed:
        async with _batch_a_request(idempotence=False, request_bytes=200) as (fake, producer):
            fake.control(ApiKey.PRODUCE, answer)
            async with trio.open_nursery() as nursery:  # t[0]: a record every 10 s
                nursery.start_soon(_trickle, producer, 1, 10.0, trio.current_time() + 600)
                await trio.sleep(105)
                event["on"] = True
                with pytest.raises(RequestTimedOut):
                    await producer.send("t", b"y", partition=1)
                gave_up = trio.current_time()
                event["on"] = False
                await trio.sleep(1)
                nursery.cancel_scope.cancel()
    t1 = [(at, level, said) for at, level, said in timed.lines if "t[1]" in said]
    assert [level for _, level, _ in t1] == [logging.INFO, logging.WARNING], t1
    assert " on broker 0 now failing " in t1[0][2], t1
    assert t1[1][2].startswith("producer: gave up on t[1] failing since Produce to broker 0 ")
    assert t1[1][0] - gave_up <= 0.5, t1


def test_closing_says_the_partitions_still_failing_give_up_even_those_that_did_before() -> None:
    """A partition that gave up and fails again the same way is still failing
    (DEBUG); closing the producer then fails its records for another reason,
    said at WARNING."""

    class NotEnoughReplicas(Exception):
        code = 19

    failures, queue = Failures(hold=0.1, settle=1.2), _StubQueue(TopicPartition("t", 0))
    with _capture() as logged:
        failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(2.0)
        queue.is_idle = True
        failures.report(31.0)  # its records gave up
        queue.is_idle = False
        failures.failed(queue, NotEnoughReplicas(), 0, 40.0)  # still failing
        assert [level for level, _ in logged] == [logging.WARNING, logging.WARNING], logged
        failures.report(41.0)
        failures.close(ConnectionError("the producer closed"))
    assert [level for level, _ in logged] == [logging.WARNING] * 3, logged
    assert logged[2][1].startswith("producer: gave up on t[0] failing since "), logged
    assert "ConnectionError: the producer closed" in logged[2][1], logged


async def test_a_broker_closing_every_produce_connection_for_minutes_is_a_few_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The broker closes each connection on its Produce request for 300 s and
    answers the rest (Metadata): the cluster goes unreachable and reachable
    again at each retry, which the log says at WARNING at most every
    FLAPPING seconds (the rest at DEBUG), not a WARNING and an INFO per retry."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 20}) as fake:
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=False
            ) as producer:
                assert await _send_to_each(producer, "t", 20) == []  # warm-up
                timed.lines.clear()
                start = trio.current_time()
                fake.control(
                    ApiKey.PRODUCE,
                    lambda call: Disconnect() if trio.current_time() < start + 300 else None,
                )
                expired = await _trickle(producer, 20, 2.0, start + 330)
                assert expired >= 100, expired
    outages = [(at, level) for at, level, said in timed.lines if "cluster unreachable" in said]
    back = [level for _, level, said in timed.lines if "cluster reachable again" in said]
    assert outages, "the flapping is said"
    warned = [at for at, level in outages if level == logging.WARNING]
    assert len(warned) <= 300 / FLAPPING + 1, warned
    assert all(later - earlier >= FLAPPING for earlier, later in pairwise(warned)), warned
    assert back.count(logging.INFO) <= len(warned), back


@pytest.mark.parametrize("idempotence", [True, False])
async def test_records_expiring_back_to_back_are_said_when_the_first_fail(
    autojump_clock: trio.testing.MockClock, idempotence: bool
) -> None:
    """A record every 20 s to a partition whose broker fails it for 400 s,
    each expiring after 30 s: the partition never runs out of records to
    send (it never gives up), yet its records failing are a WARNING when the
    first do, once, not when the stream stops."""
    expired: list[float] = []
    with _timed() as timed:
        async with FakeCluster(topics={"t": 1}) as fake:
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=idempotence
            ) as producer:
                assert await _send_to_each(producer, "t", 1) == []  # warm-up
                start = _refuse_produce_for(fake, 400)

                async def send() -> None:
                    try:
                        await producer.send("t", b"x", partition=0)
                    except RequestTimedOut:
                        expired.append(trio.current_time() - start)

                async with trio.open_nursery() as nursery:
                    for _ in range(22):
                        nursery.start_soon(send)
                        await trio.sleep(20)
    gave_up = [
        (at - start, said)
        for at, level, said in timed.lines
        if level == logging.WARNING and said.startswith("producer: gave up on t[0] ")
    ]
    assert len(expired) >= 18 and expired[0] == pytest.approx(30, abs=0.5), expired
    assert len(gave_up) == 1, gave_up
    assert gave_up[0][0] - expired[0] <= 0.5, (expired[0], gave_up)
    assert "RequestTimedOut" in gave_up[0][1], gave_up


async def test_a_second_outage_soon_after_a_first_is_a_warning_once_it_lasts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The only broker down 40 s, back 10 s, then down 600 s: the second
    outage begins within FLAPPING of the first's WARNING, so it begins at
    DEBUG, but is a WARNING once it lasted LOUD_AFTER, and so is its end's
    INFO; its records failing are said too."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 2}) as fake:
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=False
            ) as producer:
                assert await _send_to_each(producer, "t", 2) == []  # warm-up
                async with trio.open_nursery() as nursery:
                    await fake.stop_broker(0)
                    nursery.start_soon(_trickle, producer, 1, 40.0, trio.current_time() + 40)
                    await trio.sleep(40)
                    await fake.start_broker(0)
                    await producer.send("t", b"x", partition=0)  # written again
                    await trio.sleep(10)
                    second = trio.current_time()
                    await fake.stop_broker(0)
                    nursery.start_soon(_trickle, producer, 1, 40.0, second + 600)
                    await trio.sleep(600)
                    await fake.start_broker(0)
                    await producer.send("t", b"x", partition=1)
    during = [
        (at - second, level, said)
        for at, level, said in timed.lines
        if at >= second and level >= logging.INFO
    ]
    outage = [(at, said) for at, level, said in during if "cluster unreachable" in said]
    assert len(outage) == 1 and outage[0][1].startswith("cluster unreachable for "), during
    assert LOUD_AFTER <= outage[0][0] <= LOUD_AFTER + 2, outage
    assert any("cluster reachable again after 6" in said for _, _, said in during), during
    assert any(said.startswith("producer: gave up on t[0] ") for _, _, said in during), during


def test_a_partition_merged_into_an_older_wave_is_said_failing_then_giving_up_once() -> None:
    """t[0] starts failing alone beside t[1]'s wave and its first records fail
    for good before its line is due: the line saying it fails comes first,
    then one saying its records gave up, and no second one while it stays in
    that wave (the merge keeps what was said)."""

    failures = Failures(hold=0.1, settle=1.2)
    older, lone = _StubQueue(TopicPartition("t", 1)), _StubQueue(TopicPartition("t", 0))
    with _capture() as logged:
        failures.failed(older, NotLeader(), 0, 0.0)
        failures.report(0.2)  # t[1]'s wave: a WARNING
        failures.failed(lone, NotLeader(), 0, 10.0)
        failures.records_failed(lone, RequestTimedOut("expired"))
        failures.report(10.0)  # not due yet
        failures.report(10.2)  # joins t[1]'s wave; its records' failure said after
        for at in (20.0, 100.0, 200.0):
            failures.records_failed(lone, RequestTimedOut("expired again"))
            failures.report(at)
    said = [(level, line.split(",")[0]) for level, line in logged]
    assert said == [
        (logging.WARNING, "producer: Produce to t[1] on broker 0 failing (1 attempt(s))"),
        (logging.INFO, "producer: Produce to t[0] on broker 0 now failing (1 attempt(s))"),
        (logging.WARNING, "producer: gave up on t[0] failing since Produce to broker 0 failed"),
    ], logged


@pytest.mark.parametrize("idempotence", [True, False])
async def test_a_partition_failing_for_good_beside_healthy_ones_gets_no_all_clear(
    autojump_clock: trio.testing.MockClock, idempotence: bool
) -> None:
    """t[0] fails NOT_ENOUGH_REPLICAS for 600 s, a record every minute, each giving
    up after 30 s; t[1], on the same broker, is written every 5 s. t[0] is still
    failing after its first records gave up (DEBUG): nothing says it, or the
    broker, written again, neither once nor each minute (a first attempt at
    saying partitions written again after their records gave up said it at
    every write on the broker: a line per record of t[0]). (A request holds one
    partition's batch: the control fails t[0]'s, as a broker failing one
    partition would.)"""
    with _timed() as timed:
        async with _batch_a_request(idempotence=idempotence, request_bytes=400) as (fake, producer):
            timed.lines.clear()
            fake.control(ApiKey.PRODUCE, lambda call: Fail(19) if 0 in _sent(call) else None)
            expired: list[int] = []

            async def send(partition: int) -> None:
                try:
                    await producer.send("t", b"x" * 200, partition=partition)
                except RequestTimedOut:
                    expired.append(partition)

            async with trio.open_nursery() as nursery:
                for i in range(120):
                    if i % 12 == 0:
                        nursery.start_soon(send, 0)
                    nursery.start_soon(send, 1)
                    await trio.sleep(5)
    assert expired == [0] * 10, expired
    warnings = [said for _, level, said in timed.lines if level == logging.WARNING]
    assert len(warnings) == 2, warnings  # failing; gave up
    back = [said for _, _, said in timed.lines if " again" in said or "failed before" in said]
    assert not back, back


# ------------------------------------------------ the all-clear after records gave up


def _all_clear(lines: list[tuple[float, int, str]]) -> list[tuple[float, str]]:
    """The INFO lines saying partitions written again after their records gave up."""
    return [
        (at, said)
        for at, level, said in lines
        if level == logging.INFO and " records gave up" in said and " written again " in said
    ]


@pytest.mark.parametrize("idempotence", [True, False])
async def test_an_outage_longer_than_remember_is_one_all_clear_when_written_again(
    autojump_clock: trio.testing.MockClock, idempotence: bool
) -> None:
    """The broker fails NOT_ENOUGH_REPLICAS for 395 s (longer than REMEMBER)
    while each of 4 partitions gets a record every 40 s, each giving up after
    30 s (still failing, after the first): the first records after it are
    written at once, outside any wave, and one INFO says the 4 written again
    then (their last records gave up 10 s before, their first 370 s before)."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 4}) as fake:
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=idempotence
            ) as producer:
                assert await _send_to_each(producer, "t", 4) == []  # warm-up
                timed.lines.clear()
                start = _refuse_produce_for(fake, 395)
                for _ in range(10):  # at +0, +40, ... +360 s
                    errors = await _send_to_each(producer, "t", 4)
                    assert [type(e) for e in errors] == [RequestTimedOut] * 4, errors
                    await trio.sleep(10)
                written = trio.current_time()
                assert written - start == pytest.approx(400, abs=1)
                for _ in range(3):
                    assert await _send_to_each(producer, "t", 4) == []
                    await trio.sleep(20)
    assert [(at - written, said) for at, said in _all_clear(timed.lines)] == [
        (
            pytest.approx(0, abs=0.5),
            "producer: 4 partitions (t[0], t[1], t[2] and 1 more) written again on broker 0 "
            "since their records gave up",
        )
    ], timed.lines
    back = [said for _, _, said in timed.lines if " written again " in said]
    assert len(back) == 1, back
    warnings = [said for _, level, said in timed.lines if level == logging.WARNING]
    assert len(warnings) == 2, warnings  # failing; gave up


async def test_a_partition_is_said_written_again_once_for_an_outage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """t[0] and t[1] give up as their broker fails for 100 s; a record of t[1]
    sent at +80 s fails (still failing) until the broker is back, then t[1] is
    written in that wave, whose end says it; t[0] is written at once at +110 s
    (the all-clear). Written every 5 s after that, neither is said again, nor
    t[1] by an all-clear besides its wave's line."""
    with _timed() as timed:
        async with _batch_a_request(idempotence=False, request_bytes=200) as (fake, producer):
            timed.lines.clear()
            start = _refuse_produce_for(fake, 100)
            errors = await _send_to_each(producer, "t", 2)
            assert [type(e) for e in errors] == [RequestTimedOut] * 2, errors
            await trio.sleep_until(start + 80)
            await producer.send("t", b"y", partition=1)  # written at +100 s
            await trio.sleep_until(start + 110)
            for _ in range(40):
                assert await _send_to_each(producer, "t", 2) == []
                await trio.sleep(5)
    after = [(at - start, said) for at, level, said in timed.lines if at >= start + 100]
    t0 = [(at, said) for at, said in after if "t[0]" in said]
    t1 = [(at, said) for at, said in after if "t[1]" in said]
    assert len(t0) == 1 and t0[0][0] == pytest.approx(110, abs=0.5), t0
    assert t0[0][1] == "producer: t[0] written again on broker 0 since its records gave up", t0
    assert len(t1) == 1 and 100 <= t1[0][0] <= 102, t1  # its next retry (backoff up to 1.2 s)
    assert t1[0][1].startswith("producer: t[1] written again on broker 0, after "), t1
    assert [said for _, said in after if " again" in said] == [t1[0][1], t0[0][1]], after


def test_partitions_joining_a_wave_without_a_line_of_their_own_get_their_all_clear() -> None:
    """t[0] joins t[1]'s wave (INFO ``now failing``) and gives up; after t[1]'s
    wave ended, it fails again (still failing: a wave without a line, DEBUG)
    and gives up again at 330 s; written at 400 s (370 s after it first gave
    up), outside any wave: the all-clear names it."""

    failures = Failures(hold=0.1, settle=1.2)
    t0, t1 = _StubQueue(TopicPartition("t", 0)), _StubQueue(TopicPartition("t", 1))
    with _capture() as logged:
        failures.failed(t1, NotLeader(), 0, 0.0)
        failures.report(0.2)  # t[1]'s wave: a WARNING
        failures.failed(t0, NotLeader(), 0, 10.0)
        failures.report(10.2)  # t[0] joins it: INFO
        t0.is_idle = True
        failures.report(40.0)  # t[0] gave up: a WARNING
        failures.written(t1, 0)  # t[1]'s wave ends
        t0.is_idle = False
        failures.failed(t0, NotLeader(), 0, 100.0)  # still failing: DEBUG
        failures.report(100.0)
        t0.is_idle = True
        failures.report(330.0)  # gave up again, not said again
        assert len(logged) == 4, logged
        failures.report(400.0)
        failures.written(t0, 0)
        failures.report(400.0)
    said = [(level, line.split(",")[0]) for level, line in logged]
    assert said == [
        (logging.WARNING, "producer: Produce to t[1] on broker 0 failing (1 attempt(s))"),
        (logging.INFO, "producer: Produce to t[0] on broker 0 now failing (1 attempt(s))"),
        (logging.WARNING, "producer: gave up on t[0] failing since Produce to broker 0 failed"),
        (logging.INFO, "producer: t[1] written again on broker 0"),
        (logging.INFO, "producer: t[0] written again on broker 0 since its records gave up"),
    ], logged


async def test_a_partition_that_gave_up_on_a_broker_written_on_another_gets_its_all_clear(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """t[0]'s record gives up as broker 0 fails it; its leadership then moves
    to broker 1, where its next record is written at once: the all-clear
    names broker 1, and broker 0 it failed on."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.create_topic("t", 1, replication_factor=2)
            fake.state.topics.move_leader("t", 0, 0)
            fake.state.notify()
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=5, metadata_max_age=10
            ) as producer:
                await producer.send("t", b"warm-up")
                fake.control(ApiKey.PRODUCE, lambda call: Fail(19) if call.broker_id == 0 else None)
                with pytest.raises(RequestTimedOut):
                    await producer.send("t", b"x")
                fake.state.topics.move_leader("t", 0, 1)
                fake.state.notify()
                await trio.sleep(15)  # the producer's metadata refreshed
                await producer.send("t", b"y")
                await producer.send("t", b"z")
    assert [said for _, said in _all_clear(timed.lines)] == [
        "producer: t[0] written again on broker 1 since its records gave up on broker 0"
    ], timed.lines
    assert [r.value for r in fake.records("t", 0)] == [b"warm-up", b"y", b"z"]


async def test_a_partition_that_gave_up_hours_ago_is_not_said_written_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """t[0]'s record gave up two hours ago, t[1]'s a minute ago: both written
    now, the all-clear names t[1] only (t[0]'s outage is long over)."""
    failing: set[int] = set()
    with _timed() as timed:
        async with _batch_a_request(idempotence=False, request_bytes=200) as (fake, producer):
            fake.control(ApiKey.PRODUCE, lambda call: Fail(19) if _sent(call) & failing else None)
            failing.add(0)
            with pytest.raises(RequestTimedOut):
                await producer.send("t", b"x", partition=0)
            failing.clear()
            await trio.sleep(7200)
            failing.add(1)
            with pytest.raises(RequestTimedOut):
                await producer.send("t", b"x", partition=1)
            failing.clear()
            await trio.sleep(60)
            assert await _send_to_each(producer, "t", 2) == []
    assert [said for _, said in _all_clear(timed.lines)] == [
        "producer: t[1] written again on broker 0 since its records gave up"
    ], timed.lines


def test_a_give_up_older_than_remember_not_yet_forgotten_is_not_said_written_again() -> None:
    """t[0] gave up at 31 s, still remembered at 320 s (then 289 s old), t[1]
    at 370 s; both written at 400 s, before t[0] is forgotten: the all-clear
    names t[1] only."""

    class NotEnoughReplicas(Exception):
        code = 19

    failures = Failures(hold=0.1, settle=1.2)
    t0, t1 = _StubQueue(TopicPartition("t", 0)), _StubQueue(TopicPartition("t", 1))
    with _capture() as logged:
        failures.failed(t0, NotEnoughReplicas(), 0, 1.0)
        failures.report(2.0)
        t0.is_idle = True
        failures.report(31.0)  # t[0] gave up
        failures.report(320.0)
        failures.failed(t1, NotEnoughReplicas(), 0, 340.0)
        failures.report(341.0)
        t1.is_idle = True
        failures.report(370.0)  # t[1] gave up
        failures.report(400.0)
        del logged[:]
        failures.written(t0, 0)
        failures.written(t1, 0)
        failures.report(400.5)
    assert logged == [
        (logging.INFO, "producer: t[1] written again on broker 0 since its records gave up")
    ], logged


async def test_partitions_coming_back_one_record_at_a_time_are_one_all_clear_a_minute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The broker fails NOT_ENOUGH_REPLICAS for 120 s while 50 partitions get a
    record a second in turn (each every 50 s, giving up after 30 s): those
    whose records all gave up come back one record at a time once it is over,
    outside any wave; the all-clear says the first at once, those written in
    the next minute in one line then, not a line each."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 50}) as fake:
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=False
            ) as producer:
                assert await _send_to_each(producer, "t", 50) == []  # warm-up
                timed.lines.clear()
                start = _refuse_produce_for(fake, 120)
                expired = await _trickle(producer, 50, 1.0, start + 250)
                assert expired >= 50, expired
    back = [(at - start, said) for at, said in _all_clear(timed.lines)]
    assert len(back) == 2, back
    assert 120 <= back[0][0] <= 121 and _named(back[0][1]) == 1, back
    assert back[1][0] - back[0][0] == pytest.approx(GAVE_UP_EVERY, abs=1), back
    assert _named(back[1][1]) > 10, back
    written = [
        said
        for _, level, said in timed.lines
        if level == logging.INFO and " written again on broker 0, after " in said
    ]
    assert sum(_named(said) for said in written) + sum(_named(s) for _, s in back) == 50, (
        written,
        back,
    )


# ------------------------------------------------ the all-clear and the gave-up WARNINGs, in order


class NotEnoughReplicas(Exception):
    """NOT_ENOUGH_REPLICAS, as the failures log reads an error (its ``code``)."""

    code = 19


def _heads(lines: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """Each line up to its error or attempts (``..., retrying``, ``..., after``)."""
    return [(level, re.split(r", (?:retrying|after) ", said)[0]) for level, said in lines]


@pytest.mark.parametrize("closing", [False, True])
def test_a_held_all_clear_is_not_said_once_its_partition_fails_again(closing: bool) -> None:
    """t[0] and t[1] give up on broker 0; t[0] is written again at 40 s (its
    all-clear at once), t[1] at 50 s (held until 100 s). t[1] fails again at
    60 s, then gives up at 90 s (or the producer closes at 70 s): its held
    all-clear, no longer true, is not said; the last line on t[1] says it gave up."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1 = _StubQueue(TopicPartition("t", 0)), _StubQueue(TopicPartition("t", 1))
    with _capture() as logged:
        for queue in (t0, t1):
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        t0.is_idle = t1.is_idle = True
        failures.report(31.0)  # both gave up
        t0.is_idle = t1.is_idle = False
        failures.report(40.0)
        failures.written(t0, 0)
        failures.report(40.1)  # t[0]'s all-clear, at once
        failures.report(50.0)
        failures.written(t1, 0)
        assert failures.report(50.1) == pytest.approx(100.1)  # t[1]'s, held
        failures.failed(t1, NotEnoughReplicas(), 0, 60.0)
        failures.report(60.2)  # a new wave
        if closing:
            failures.close(ConnectionError("closed"))
        else:
            t1.is_idle = True
            failures.report(90.0)  # gave up again
            t1.is_idle = False
            assert failures.report(101.0) == float("inf")
    assert _heads(logged) == [
        (logging.WARNING, "producer: Produce to 2 partitions (t[0] and t[1]) on broker 0 failing"),
        (
            logging.WARNING,
            "producer: gave up on 2 partitions (t[0] and t[1]) failing since Produce to broker 0 "
            "failed",
        ),
        (logging.INFO, "producer: t[0] written again on broker 0 since its records gave up"),
        (logging.WARNING, "producer: Produce to t[1] on broker 0 failing (1 attempt(s))"),
        (logging.WARNING, "producer: gave up on t[1] failing since Produce to broker 0 failed"),
    ], logged


async def test_a_partition_written_then_failing_again_gets_no_all_clear_after_it_gave_up_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """t[0] and t[1] fail on broker 0 until 35 s, their records (sent at 0 s)
    giving up at 30 s. t[0]'s record at 40 s is written: its all-clear at once;
    t[1]'s at 50 s too, its all-clear held (broker 0 said one at 40 s). t[1]
    fails again from 55 s and its record sent at 60 s gives up at 90 s: the
    last line on t[1] says so, none says it written again."""
    with _timed() as timed:
        async with _batch_a_request(idempotence=False, request_bytes=200) as (fake, producer):
            start = trio.current_time()

            def answer(call: Intercepted) -> Fail | None:
                now = trio.current_time() - start
                return Fail(19) if now < 35 or (now >= 55 and 1 in _sent(call)) else None

            fake.control(ApiKey.PRODUCE, answer)

            async def send(at: float, partition: int, expires: bool) -> None:
                await trio.sleep_until(start + at)
                if expires:
                    with pytest.raises(RequestTimedOut):
                        await producer.send("t", b"x", partition=partition)
                else:
                    await producer.send("t", b"x", partition=partition)

            async with trio.open_nursery() as nursery:
                for at, partition, expires in [
                    (0, 0, True), (0, 1, True), (40, 0, False), (50, 1, False), (60, 1, True)
                ]:  # fmt: skip
                    nursery.start_soon(send, at, partition, expires)
            await trio.sleep_until(start + 200)
    t1 = [(round(at - start), said) for at, level, said in timed.lines if "t[1]" in said]
    assert [said.split(" failing")[0] for _, said in t1] == [
        "producer: Produce to 2 partitions (t[0] and t[1]) on broker 0",
        "producer: gave up on 2 partitions (t[0] and t[1])",
        "producer: Produce to t[1] on broker 0",
        "producer: gave up on t[1]",
    ], t1
    assert [said for _, said in _all_clear(timed.lines)] == [
        "producer: t[0] written again on broker 0 since its records gave up"
    ], timed.lines


def test_an_all_clear_waits_for_an_earlier_wave_to_say_its_partition_gave_up() -> None:
    """t[0..2] fail NOT_LEADER on broker 0: t[0] gives up at 30 s (said at
    once), t[1] at 31 s (held until the wave's next gave-up line, at 90 s).
    t[1] then fails on broker 1 (broker 0's wave says first that it gave up
    there), gives up there (said at once) and is written on broker 1 at 40 s:
    the lines come in that order, the all-clear last."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1, t2 = (_StubQueue(TopicPartition("t", p)) for p in range(3))
    with _capture() as logged:
        for queue in (t0, t1, t2):
            failures.failed(queue, NotLeader(), 0, 1.0)
        failures.report(1.2)
        t0.is_idle = True
        failures.report(30.0)  # t[0] gave up: said at once
        t0.is_idle, t1.is_idle = False, True
        failures.report(31.0)  # t[1] gave up: held
        t1.is_idle = False
        del logged[:3]
        failures.failed(t1, NotEnoughReplicas(), 1, 35.0)  # leadership moved to broker 1
        failures.report(35.2)
        t1.is_idle = True
        failures.report(36.0)  # gave up there too: said at once
        t1.is_idle = False
        failures.report(40.0)
        failures.written(t1, 1)
        failures.report(40.1)
        failures.report(90.0)
    assert [head for _, head in _heads(logged)] == [
        "producer: gave up on t[1] failing since Produce to broker 0 failed",
        "producer: Produce to t[1] on broker 1 failing (1 attempt(s))",
        "producer: gave up on t[1] failing since Produce to broker 1 failed",
        "producer: t[1] written again on broker 1 since its records gave up",
    ], logged


async def _moved_during_an_outage(broker_1_until: float, t1_sends: list[float]) -> list[Any]:
    """Broker 0 refuses t[0..2] NOT_LEADER_OR_FOLLOWER for 120 s (t[0] sends at
    0 s, t[2] every 25 s); t[1]'s leader moves to broker 1 at 32 s, which
    refuses it NOT_ENOUGH_REPLICAS until ``broker_1_until``; t[1] sends at 1 s
    and at ``t1_sends``. The lines logged: (seconds from the start, level, line)."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.create_topic("t", 3, replication_factor=2)
            for partition in range(3):
                fake.move_partition_leader("t", partition, 0)
            async with Producer(
                fake.bootstrap,
                retry_backoff=0.1,
                delivery_timeout=30,
                idempotence=False,
                max_request_bytes=200,  # a request a partition
            ) as producer:
                assert await _send_to_each(producer, "t", 3) == []  # warm-up
                timed.lines.clear()
                start = trio.current_time()

                def answer(call: Intercepted) -> Fail | None:
                    now = trio.current_time() - start
                    if call.broker_id == 0 and now < 120:
                        return Fail(6)
                    return Fail(19) if call.broker_id == 1 and now < broker_1_until else None

                fake.control(ApiKey.PRODUCE, answer)

                async def send(at: float, partition: int) -> None:
                    await trio.sleep_until(start + at)
                    with contextlib.suppress(RequestTimedOut):
                        await producer.send("t", b"x", partition=partition)

                async def move() -> None:
                    await trio.sleep_until(start + 32)
                    fake.move_partition_leader("t", 1, 1)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(move)
                    for at, partition in [(0, 0), (1, 1)] + [(at, 1) for at in t1_sends]:
                        nursery.start_soon(send, at, partition)
                    for at in (0, 25, 50, 75, 100):
                        nursery.start_soon(send, at, 2)
                await trio.sleep_until(start + 130)
    return [(at - start, level, line) for at, level, line in timed.lines]


async def test_a_partition_giving_up_on_two_brokers_gets_its_all_clear_after_both_warnings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Broker 0 refuses t[0..2] (NOT_LEADER_OR_FOLLOWER) until 120 s: t[0]'s
    record gives up at 30 s (said at once), t[1]'s at 31 s (held for the
    wave's next gave-up line, at 90 s). t[1]'s leadership moves to broker 1 at
    32 s, which fails it NOT_ENOUGH_REPLICAS until 72 s: broker 0's wave says
    t[1] gave up as it starts failing there; its record at 40 s gives up there
    at 70 s, its record at 75 s is written, and its all-clear comes then."""
    lines = await _moved_during_an_outage(72, [40, 75])
    heads = [
        (round(at), re.split(r" failing since|, (?:retrying|after) ", said)[0])
        for at, _, said in lines
    ]
    t1 = [(at, head) for at, head in heads if "t[1]" in head]
    assert [head for _, head in t1[-4:]] == [
        "producer: gave up on t[1]",  # on broker 0, said as it starts failing on broker 1
        "producer: Produce to t[1] on broker 1 failing (1 attempt(s))",
        "producer: gave up on t[1]",  # on broker 1, at 70 s
        "producer: t[1] written again on broker 1 since its records gave up",
    ], t1
    assert t1[-1][0] == 75, t1


def test_partitions_coming_back_one_at_a_time_keep_the_gave_up_warnings_a_minute_apart() -> None:
    """20 partitions of a wave fail on broker 0; from 30 s one a time gives
    up, then its next record is written (outside the wave) 2 s later: the
    wave's gave-up WARNING keeps its pace (the first at once, the next a
    minute later), and each partition's all-clear waits for it."""
    failures = Failures(hold=0.1, settle=1.2)
    queues = [_StubQueue(TopicPartition("t", p)) for p in range(20)]
    with _capture() as logged:
        for queue in queues:
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        for i, queue in enumerate(queues[:10]):
            queue.is_idle = True
            failures.report(30.0 + 3 * i)  # it gave up
            queue.is_idle = False
            failures.report(32.0 + 3 * i)
            failures.written(queue, 0)  # its next record goes through
            failures.report(32.1 + 3 * i)
        for now in (90.0, 92.1):
            failures.report(now)
    assert [(level, said.split(" failing since")[0]) for level, said in _heads(logged[1:])] == [
        (logging.WARNING, "producer: gave up on t[0]"),  # at 30 s
        (logging.INFO, "producer: t[0] written again on broker 0 since its records gave up"),
        (
            logging.WARNING,
            "producer: gave up on 9 partitions (t[1], t[2], t[3] and 6 more)",
        ),  # 90 s
        (
            logging.INFO,
            "producer: 9 partitions (t[1], t[2], t[3] and 6 more) written again on broker 0 "
            "since their records gave up",
        ),  # 92.1 s
    ], logged


async def test_followers_catching_up_one_partition_at_a_time_are_a_few_gave_up_warnings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Broker 0 fails 20 partitions NOT_ENOUGH_REPLICAS; its followers then
    catch up one partition at a time (t[p] until 40 + 3p s). Each partition
    gets a record at 3p s (it gives up 30 s later) and one at 3p + 45 s
    (written): the give-ups, over 57 s, are a few WARNINGs, not one each."""
    with _timed() as timed:
        async with FakeCluster(topics={"t": 20}) as fake:
            async with Producer(
                fake.bootstrap,
                retry_backoff=0.1,
                delivery_timeout=30,
                idempotence=False,
                max_request_bytes=200,  # a request per partition: the fault is per partition
            ) as producer:
                assert await _send_to_each(producer, "t", 20) == []  # warm-up
                start = trio.current_time()

                def answer(call: Intercepted) -> Fail | None:
                    now = trio.current_time() - start
                    return Fail(19) if any(now < 40 + 3 * p for p in _sent(call)) else None

                fake.control(ApiKey.PRODUCE, answer)
                expired = 0

                async def send(at: float, partition: int) -> None:
                    nonlocal expired
                    await trio.sleep_until(start + at)
                    try:
                        await producer.send("t", b"x", partition=partition)
                    except RequestTimedOut:
                        expired += 1

                async with trio.open_nursery() as nursery:
                    for partition in range(20):
                        nursery.start_soon(send, 3 * partition, partition)
                        nursery.start_soon(send, 3 * partition + 45, partition)
                assert expired == 20
    gave_up = [
        at - start
        for at, level, said in timed.lines
        if level == logging.WARNING and " gave up on " in said
    ]
    assert len(gave_up) <= 3, gave_up  # (a line each before: 10 in 30 s)
    assert 1 <= len(_all_clear(timed.lines)) <= 3, timed.lines


def test_the_all_clear_comes_after_the_gave_up_warning_it_answers() -> None:
    """t[1] gives up in a wave whose gave-up WARNING is held (t[0]'s was said
    at 30 s), then is written outside it: its all-clear waits for that
    WARNING, a minute after the last."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1, t2 = (_StubQueue(TopicPartition("t", p)) for p in range(3))
    with _capture() as logged:
        for queue in (t0, t1, t2):
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        t0.is_idle = True
        failures.report(30.0)  # t[0] gave up: said at once
        t0.is_idle, t1.is_idle = False, True
        failures.report(31.0)  # t[1] gave up: held until 90 s
        t1.is_idle = False
        failures.report(35.0)
        failures.written(t1, 0)  # outside the wave (t[2] still failing)
        assert failures.report(35.1) == pytest.approx(90.0)
        del logged[:2]
        failures.report(90.0)
    assert _heads(logged) == [
        (logging.WARNING, "producer: gave up on t[1] failing since Produce to broker 0 failed"),
        (logging.INFO, "producer: t[1] written again on broker 0 since its records gave up"),
    ], logged


def test_partitions_never_written_again_are_forgotten() -> None:
    """1000 partitions give up, then their topic is deleted: after REMEMBER
    seconds, nothing of them is kept."""
    failures = Failures(hold=0.1, settle=1.2)
    queues = [_StubQueue(TopicPartition("gone", p)) for p in range(1000)]
    with _capture():
        for queue in queues:
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        for queue in queues:
            queue.is_idle = True
        failures.report(30.0)
        assert len(vars(failures)["_down"]) == 1000
        failures.report(30.0 + REMEMBER + 1)
    kept = {
        name: len(value) for name, value in vars(failures).items() if isinstance(value, dict | list)
    }
    assert not any(kept.values()), kept


def test_a_held_all_clear_does_not_ask_to_be_woken_at_the_time_it_is_asked() -> None:
    """Broker 0's all-clear is said at 40.1 s; t[6], written on broker 0 at 56 s,
    is held until 100.1 s and then still by broker 1's wave (whose next gave-up
    WARNING is due at 110 s). report(100.1) does not return 100.1, which would
    make the sender drain again at once, for ever in virtual time (the held
    line's time was decided as ``a > now - 60``, its being due as ``now >= a + 60``:
    as floats, 100.1 - 60 < 40.1 while 100.1 >= 40.1 + 60)."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1, t5, t6, t7 = (_StubQueue(TopicPartition("t", p)) for p in (0, 1, 5, 6, 7))
    with _capture():
        for queue in (t0, t1):
            failures.failed(queue, NotLeader(), 0, 1.0)
        failures.report(1.2)
        t0.is_idle = True
        failures.report(30.0)  # t[0] gave up: said
        t0.is_idle = False
        failures.report(35.0)
        failures.written(t0, 0)  # outside any wave
        failures.report(40.1)  # its all-clear at once: broker 0's last at 40.1
        for queue in (t5, t6, t7):
            failures.failed(queue, NotEnoughReplicas(), 1, 41.0)
        failures.report(41.2)
        t5.is_idle = True
        failures.report(50.0)  # t[5] gave up: said (broker 1's wave, said at 50)
        t5.is_idle, t6.is_idle = False, True
        failures.report(55.0)  # t[6] gave up: held until 110
        t6.is_idle = False
        failures.report(55.5)
        failures.written(t6, 0)  # leadership moved to broker 0: its all-clear held
        failures.report(56.0)
        wakes = [failures.report(100.1) for _ in range(3)]
    assert all(wake > 100.1 for wake in wakes), wakes


async def test_a_held_all_clear_is_not_said_once_its_partition_lost_its_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two partitions with one replica each, on broker 0, fail NOT_ENOUGH_REPLICAS
    until 35 s and their records at 0 s give up at 30 s; one is written at 40 s
    (broker 0's all-clear at once), the other at 50 s (its all-clear held). Broker
    0 stops at 55 s: the second has no leader, and its record at 60 s fails
    waiting for one. The held line does not then say it written again."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.create_topic("t", 4, replication_factor=1)
            led = [p for p in range(4) if fake.state.topics.partition("t", p).leader == 0]  # type: ignore[union-attr]
            held, first = led[:2]
            async with Producer(
                fake.bootstrap,
                retry_backoff=0.1,
                delivery_timeout=30,
                idempotence=False,
                max_request_bytes=200,  # a request a partition
            ) as producer:
                for p in range(4):
                    await producer.send("t", b"w", partition=p)
                timed.lines.clear()
                start = _refuse_produce_for(fake, 35, broker=0)
                outcomes: dict[tuple[float, int], bool] = {}

                async def send_at(when: float, p: int) -> None:
                    await trio.sleep_until(start + when)
                    try:
                        await producer.send("t", b"x", partition=p)
                    except RequestTimedOut:
                        outcomes[when, p] = False
                    else:
                        outcomes[when, p] = True

                async def stop() -> None:
                    await trio.sleep_until(start + 55)
                    await fake.stop_broker(0)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stop)
                    # The other partition's record at 56 s finds broker 0 gone: the
                    # metadata refreshed then has no leader for either partition.
                    sends = [
                        (0, held),
                        (0, first),
                        (40, first),
                        (50, held),
                        (56, first),
                        (60, held),
                    ]
                    for when, p in sends:
                        nursery.start_soon(send_at, when, p)
                await trio.sleep_until(start + 130)
    assert outcomes == {
        (0, held): False, (0, first): False, (40, first): True, (50, held): True,
        (56, first): False, (60, held): False,
    }  # fmt: skip
    name = f"t[{held}]"
    back = [
        at - start
        for at, _, line in timed.lines
        if line.startswith(f"producer: {name} written again") and "since" in line
    ]
    assert not [at for at in back if at > 60], back


def test_partitions_written_again_inside_their_wave_keep_the_gave_up_warnings_a_minute_apart() -> (
    None
):
    """6 partitions of a wave on broker 0; from 30 s, every 10 s, one's first
    records give up (more of it queued: it stays in the wave), and 5 s later its
    next batch is written inside the wave. Its gave-up WARNING keeps the wave's
    pace (the write forced it out: a WARNING a partition, 10 s apart)."""
    failures = Failures(hold=0.1, settle=1.2)
    queues = [_StubQueue(TopicPartition("t", p)) for p in range(6)]
    with _capture() as logged:
        for queue in queues:
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        for i, queue in enumerate(queues[:5]):
            failures.records_failed(queue, TimeoutError("delivery timeout"))
            failures.report(30.0 + 10 * i)
            failures.written(queue, 0)
            failures.report(35.0 + 10 * i)
    gave_up = [line for _, line in logged if "gave up on" in line]
    assert len(gave_up) <= 2, gave_up


async def test_a_partition_written_on_a_second_broker_is_said_to_give_up_on_the_first_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Broker 0 refuses t[0..2] NOT_LEADER for 120 s: t[0]'s record gives up at
    30 s (said), t[1]'s at 31 s (held until 90 s). t[1]'s leader moves to broker 1
    at 32 s, which refuses it NOT_ENOUGH_REPLICAS until 45 s: its record at 40 s
    fails there, a new wave, which ends as it is written at 45 s. Broker 0's
    WARNING that t[1] gave up comes before that wave's ``written again`` line,
    not after it (the last line on a healthy partition)."""
    lines = await _moved_during_an_outage(45, [40])
    said = [(at, line) for at, level, line in lines if level >= logging.INFO]
    # In the order said (the two lines may come at the same instant).
    back = [
        i for i, (_, line) in enumerate(said) if line.startswith("producer: t[1] written again")
    ]
    assert back, said
    heads = [line.split(" failing since")[0] for _, line in said]
    gave_up = [i for i, head in enumerate(heads) if "gave up on" in head and "t[1]" in head]
    assert gave_up and max(gave_up) < back[0], said


def test_a_partition_back_after_its_records_failed_waiting_for_a_leader_gets_its_all_clear() -> (
    None
):
    """t[0] and t[2] give up on broker 0 at 30 s; t[2] is written at 40 s (its
    all-clear at once), t[0] at 50 s (held). A record of t[0] then fails waiting
    for a leader (no wave; the producer says so to ``no_leader``, then
    ``records_failed``): the held line is dropped, a WARNING says t[0] gave up
    waiting for a leader, and once t[0] is written again its all-clear comes then."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t2 = (_StubQueue(TopicPartition("t", p)) for p in (0, 2))
    with _capture() as logged:
        for queue in (t0, t2):
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        t0.is_idle = t2.is_idle = True
        failures.report(30.0)
        t0.is_idle = t2.is_idle = False
        failures.written(t2, 0)
        failures.report(40.0)
        failures.written(t0, 0)
        failures.report(50.0)
        waited = RequestTimedOut("waited for a leader")
        failures.no_leader(t0, waited, 30.0, 90.0)
        failures.records_failed(t0, waited)
        failures.report(90.0)
        failures.report(100.0)
        assert not [line for _, line in logged if line.startswith("producer: t[0] written")]
        failures.written(t0, 1)  # its leader is back, on broker 1
        for now in (120.0, 180.0):
            failures.report(now)
    said = [line.split(": none")[0] for _, line in logged if "t[0]" in line.split(" failing")[0]]
    assert said[-2:] == [
        "producer: gave up on t[0] waiting for a leader",
        "producer: t[0] written again on broker 1 since its records gave up waiting for a leader",
    ], logged


def test_a_gave_up_warning_held_by_a_write_in_its_wave_comes_before_the_partitions_next_lines() -> (
    None
):
    """t[0] and t[1] fail on broker 0 (wave A); t[1] gives up at 30 s (said), t[0]
    at 31 s (held by A's pace) and is written inside A at 32 s. t[0] then fails
    on broker 1, gives up there and is written there: A says t[0] gave up on
    broker 0 before any of those lines."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1 = (_StubQueue(TopicPartition("t", p)) for p in (0, 1))
    with _capture() as logged:
        for queue in (t0, t1):
            failures.failed(queue, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        failures.records_failed(t1, RequestTimedOut("delivery timeout"))
        failures.report(30.0)
        failures.records_failed(t0, RequestTimedOut("delivery timeout"))
        failures.report(31.0)
        failures.written(t0, 0)  # inside A
        failures.report(32.0)
        failures.failed(t0, NotLeader(), 1, 34.0)
        failures.report(34.2)
        t0.is_idle = True
        failures.report(64.0)
        t0.is_idle = False
        failures.written(t0, 1)  # outside any wave
        for now in (65.0, 90.0, 100.0):
            failures.report(now)
    said = [line for _, line in logged]
    on0 = [i for i, line in enumerate(said) if "gave up on t[0]" in line and "broker 0" in line]
    on1 = [i for i, line in enumerate(said) if "t[0]" in line and "broker 1" in line]
    assert on0 and on1 and max(on0) < min(on1), said


# ------------------------------------------------ records expiring while they wait for a leader


async def _without_a_leader(
    sends: Iterable[tuple[float, int]], back_at: float, written_at: float
) -> tuple[list[tuple[float, int, str]], dict[tuple[float, int], BaseException | None]]:
    """3 partitions with one replica each, on broker 0, which is down from the
    start (no leader known, never sent to); records sent at ``sends`` (seconds,
    partition), broker 0 back at ``back_at``, a record to each partition at
    ``written_at``, the producer closed 70 s later. The producer's lines
    (seconds from the start) and each send's error (None: written)."""
    outcomes: dict[tuple[float, int], BaseException | None] = {}
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.state.create_topic("t", 3, 1, assignments=[[0]] * 3)
            await fake.stop_broker(0)
            async with Producer(fake.bootstrap, retry_backoff=0.1, delivery_timeout=30) as producer:
                start = trio.current_time()

                async def send_at(when: float, p: int) -> None:
                    await trio.sleep_until(start + when)
                    try:
                        await producer.send("t", b"x", partition=p)
                    except RequestTimedOut as exc:
                        outcomes[when, p] = exc
                    else:
                        outcomes[when, p] = None

                async def restart() -> None:
                    await trio.sleep_until(start + back_at)
                    await fake.start_broker(0)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(restart)
                    for when, p in [*sends, *((written_at, p) for p in range(3))]:
                        nursery.start_soon(send_at, when, p)
                await trio.sleep_until(start + written_at + 70)
    lines = [(at - start, level, said) for at, level, said in timed.lines]
    return [line for line in lines if line[2].startswith("producer: ")], outcomes


def _said_back_once(lines: list[tuple[float, int, str]], after: float) -> None:
    """After ``after``, t[0], t[1] and t[2] are each said written again once,
    since their records gave up waiting for a leader, in a line or two (one
    at once, the others gathered: their retries go at jittered times)."""
    back = [(at, said) for at, level, said in lines if level == logging.INFO]
    assert 1 <= len(back) <= 2, lines
    for at, said in back:
        assert at >= after, lines
        assert re.fullmatch(
            r"producer: .* written again on broker 0 since (its|their) records gave up "
            r"waiting for a leader",
            said,
        ), said
    for p in range(3):
        assert sum(f"t[{p}]" in said for _, said in back) == 1, (p, back)


async def test_records_expiring_without_a_leader_are_one_warning_then_an_all_clear(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """3 partitions without a leader (their broker down, none elected) get a
    record each at 0, 10, 40 and 70 s, each expiring unsent: one WARNING when
    the first expire, naming the partitions and why, none per batch after it;
    each send raises RequestTimedOut naming its partition and how long no
    leader was known: since the start, not since the record was sent. The
    records after the broker is back are written, and said so (an INFO)."""
    sends = [(when, p) for when in (0, 10, 40, 70) for p in range(3)]
    lines, outcomes = await _without_a_leader(sends, back_at=110, written_at=115)
    assert len(outcomes) == 15, outcomes
    for (when, p), error in outcomes.items():
        if when < 110:
            assert isinstance(error, RequestTimedOut), (when, p, error)
            said = str(error)
            assert said.startswith(  # (also the records queued behind an earlier batch)
                f"t[{p}]: 1 record(s) not delivered within delivery_timeout=30 s: "
                f"no leader known for {when + 30:.1f} s (last error: "
            ), said
            assert "LEADER_NOT_AVAILABLE" in said, said
        else:
            assert error is None, (when, p, error)
    warnings = [(round(at, 1), said) for at, level, said in lines if level >= logging.WARNING]
    assert warnings == [
        (
            30.0,
            "producer: gave up on 3 partitions (t[0], t[1] and t[2]) waiting for a leader: "
            "none known for 30.0 s (StaleMetadataError: LEADER_NOT_AVAILABLE (5): no leader "
            "known for t[0]); their records failed, each send raising its error "
            "(RequestTimedOut)",
        )
    ], lines
    _said_back_once(lines, after=115)


async def test_partitions_expiring_without_a_leader_one_after_another_are_a_warning_a_minute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Without a leader, t[0]'s record expires at 30 s, t[1]'s at 40 s, t[2]'s
    at 50 s: a WARNING at 30 s for t[0], one at 90 s for the other two (the pace
    of a wave's gave-up lines); each is said written again once its broker is
    back, after those WARNINGs."""
    lines, _ = await _without_a_leader([(0, 0), (10, 1), (20, 2)], back_at=95, written_at=100)
    warnings = [
        (round(at, 1), said.split(": none")[0])
        for at, level, said in lines
        if level >= logging.WARNING
    ]
    assert warnings == [
        (30.0, "producer: gave up on t[0] waiting for a leader"),
        (90.0, "producer: gave up on 2 partitions (t[1] and t[2]) waiting for a leader"),
    ], lines
    _said_back_once(lines, after=100)


async def test_a_partition_dropped_from_a_held_all_clear_as_it_loses_its_leader_is_said(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two partitions with one replica each, on broker 0, fail NOT_ENOUGH_REPLICAS
    until 35 s and their records at 0 s give up at 30 s; one is written at 40 s,
    the other at 50 s (its all-clear held). Broker 0 stops at 55 s: the second's
    record at 60 s waits for a leader and expires at 90 s, which drops the held
    all-clear: a WARNING says it gave up waiting for a leader (the first's
    record at 56 s, failing on broker 0 before, gives up in that wave's line),
    and the INFO once it is written again, broker 0 back, says so."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.create_topic("t", 4, replication_factor=1)
            led = [p for p in range(4) if fake.state.topics.partition("t", p).leader == 0]  # type: ignore[union-attr]
            held, first = led[:2]
            async with Producer(
                fake.bootstrap,
                retry_backoff=0.1,
                delivery_timeout=30,
                idempotence=False,
                max_request_bytes=200,  # a request a partition
            ) as producer:
                for p in range(4):
                    await producer.send("t", b"w", partition=p)
                timed.lines.clear()
                start = _refuse_produce_for(fake, 35, broker=0)

                async def send_at(when: float, p: int) -> None:
                    await trio.sleep_until(start + when)
                    with contextlib.suppress(RequestTimedOut):
                        await producer.send("t", b"x", partition=p)

                async def stop_then_start() -> None:
                    await trio.sleep_until(start + 55)
                    await fake.stop_broker(0)
                    await trio.sleep_until(start + 100)
                    await fake.start_broker(0)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stop_then_start)
                    for when, p in [(0, held), (0, first), (40, first), (50, held), (56, first)]:
                        nursery.start_soon(send_at, when, p)
                    nursery.start_soon(send_at, 60, held)
                    nursery.start_soon(send_at, 105, held)
    name = f"t[{held}]"
    said = [
        (round(at - start), level, line)
        for at, level, line in timed.lines
        if line.startswith("producer: ") and name in line.split(" failing")[0]
    ]
    # None known since broker 0 stopped (the refresh after 55 s), before the record at 60 s.
    known = [
        float(n) for _, _, line in said for n in re.findall(r"none known for ([0-9.]+) s", line)
    ]
    assert len(known) == 1 and 34.0 <= known[0] <= 35.0, said
    assert [(at, level, line) for at, level, line in said if at >= 50] == [
        (
            90,
            logging.WARNING,
            f"producer: gave up on {name} waiting for a leader: none known for {known[0]:.1f} s ("
            f"StaleMetadataError: LEADER_NOT_AVAILABLE (5): no leader known for {name}); "
            "their records failed, each send raising its error (RequestTimedOut)",
        ),
        (
            pytest.approx(105, abs=2),
            logging.INFO,
            f"producer: {name} written again on broker 0 since its records gave up waiting "
            "for a leader",
        ),
    ], said
    other = f"t[{first}]"
    assert not [
        line
        for _, _, line in timed.lines
        if line.startswith(f"producer: gave up on {other} waiting for a leader")
    ], timed.lines


def test_a_held_warning_of_records_expiring_without_a_leader_comes_before_the_next_lines() -> None:
    """t[0]'s records expire without a leader at 30 s (said at once), t[1]'s at
    40 s (held until 90 s): t[1] written at 50 s gets its all-clear at 90 s,
    after that WARNING. t[2]'s expire at 95 s (held until 150 s), then its Produce
    fails on broker 0 at 100 s: the WARNING held comes out first, before the
    wave's. The producer closing says the last one held."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1, t2, t3 = (_StubQueue(TopicPartition("t", p)) for p in range(4))
    no_leader = RequestTimedOut("t[x]: no leader known for 30.0 s")
    no_leader.__cause__ = NotLeader("no leader known")
    with _capture() as logged:
        failures.no_leader(t0, no_leader, 30.0, 30.0)
        assert failures.report(30.0) == float("inf")
        failures.no_leader(t1, no_leader, 30.0, 40.0)
        assert failures.report(40.0) == pytest.approx(90.0)
        failures.written(t1, 1)
        assert failures.report(50.0) == pytest.approx(90.0)
        assert len(logged) == 1, logged
        failures.report(90.0)
        failures.no_leader(t2, no_leader, 30.0, 95.0)
        failures.report(95.0)
        failures.failed(t2, NotEnoughReplicas(), 0, 100.0)
        failures.report(100.2)
        failures.no_leader(t3, no_leader, 30.0, 110.0)
        failures.report(110.0)
        failures.close(ConnectionError("closed"))
    assert _heads((level, said.split(": none")[0]) for level, said in logged) == [
        (logging.WARNING, "producer: gave up on t[0] waiting for a leader"),
        (logging.WARNING, "producer: gave up on t[1] waiting for a leader"),
        (
            logging.INFO,
            "producer: t[1] written again on broker 1 since its records gave up "
            "waiting for a leader",
        ),
        (logging.WARNING, "producer: gave up on t[2] waiting for a leader"),
        (logging.WARNING, "producer: Produce to t[2] on broker 0 failing (1 attempt(s))"),
        (logging.WARNING, "producer: gave up on t[2] failing since Produce to broker 0 failed"),
        (logging.WARNING, "producer: gave up on t[3] waiting for a leader"),
    ], logged


async def test_a_partition_failing_on_its_broker_after_it_had_no_leader_is_said_failing_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """t[0] and t[1] (one replica each, on broker 0) are refused NOT_ENOUGH_REPLICAS
    until 200 s: t[0]'s record at 0 s gives up at 30 s. Broker 0 stops at 35 s
    (t[1]'s record at 36 s finds it gone: no leader known then) and is back at
    75 s: t[0]'s record at 40 s gives up waiting for a leader at 70 s; the one at
    80 s is refused again, which is said (a WARNING, then its giving up), not
    taken as still failing since 30 s; the one at 205 s is written."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.state.create_topic("t", 2, 1, assignments=[[0], [0]])
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=False
            ) as producer:
                await producer.send("t", b"w", partition=0)
                timed.lines.clear()
                start = _refuse_produce_for(fake, 200)

                async def send_at(when: float, p: int) -> None:
                    await trio.sleep_until(start + when)
                    with contextlib.suppress(RequestTimedOut):
                        await producer.send("t", b"x", partition=p)

                async def stop_then_start() -> None:
                    await trio.sleep_until(start + 35)
                    await fake.stop_broker(0)
                    await trio.sleep_until(start + 75)
                    await fake.start_broker(0)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stop_then_start)
                    for when, p in [(0, 0), (36, 1), (40, 0), (80, 0), (205, 0)]:
                        nursery.start_soon(send_at, when, p)
    heads = [
        (round(at - start), level, re.split(r", (?:retrying|after) |: none", line)[0])
        for at, level, line in timed.lines
        if line.startswith("producer: ")
    ]
    said = [(at, level, head) for at, level, head in heads if "t[0]" in head]
    assert said == [
        (0, logging.WARNING, "producer: Produce to t[0] on broker 0 failing (1 attempt(s))"),
        (30, logging.WARNING, "producer: gave up on t[0] failing since Produce to broker 0 failed"),
        (70, logging.WARNING, "producer: gave up on t[0] waiting for a leader"),
        (80, logging.WARNING, "producer: Produce to t[0] on broker 0 failing (1 attempt(s))"),
        (
            110,
            logging.WARNING,
            "producer: gave up on t[0] failing since Produce to broker 0 failed",
        ),
        (205, logging.INFO, "producer: t[0] written again on broker 0 since its records gave up"),
    ], timed.lines


def test_an_all_clear_names_where_its_partitions_gave_up_a_leader_missing_too() -> None:
    """t[0]'s records give up on broker 0 at 30 s, t[1]'s waiting for a leader
    at 35 s; both are written on broker 1 at 40 s: one all-clear names both causes."""
    failures = Failures(hold=0.1, settle=1.2)
    t0, t1 = (_StubQueue(TopicPartition("t", p)) for p in range(2))
    no_leader = RequestTimedOut("t[1]: no leader known for 30.0 s")
    with _capture() as logged:
        failures.failed(t0, NotEnoughReplicas(), 0, 1.0)
        failures.report(1.2)
        t0.is_idle = True
        failures.report(30.0)
        t0.is_idle = False
        failures.no_leader(t1, no_leader, 30.0, 35.0)
        failures.report(35.0)
        failures.written(t0, 1)
        failures.written(t1, 1)
        failures.report(40.0)
    assert _heads(logged)[1:] == [
        (logging.WARNING, "producer: gave up on t[0] failing since Produce to broker 0 failed"),
        (
            logging.WARNING,
            "producer: gave up on t[1] waiting for a leader: none known for 30.0 s ("
            "RequestTimedOut: t[1]: no leader known for 30.0 s); their records failed, each send "
            "raising its error (RequestTimedOut)",
        ),
        (
            logging.INFO,
            "producer: 2 partitions (t[0] and t[1]) written again on broker 1 since their records "
            "gave up on broker 0 or waiting for a leader",
        ),
    ], logged


async def test_records_queued_behind_a_batch_waiting_for_a_leader_say_so_as_they_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``send_many`` of more records than a batch takes, to a partition without a
    leader: the first batch and the records queued behind it expire together,
    each raising RequestTimedOut saying how long no leader was known, the
    leader's error on its cause chain; one WARNING says the partition."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.state.create_topic("t", 1, 1, assignments=[[0]])
            await fake.stop_broker(0)
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, max_batch_bytes=1000
            ) as producer:
                outcomes = await producer.send_many("t", [b"x" * 100] * 30, return_exceptions=True)
    assert all(isinstance(error, RequestTimedOut) for error in outcomes), outcomes
    for error in outcomes:
        assert isinstance(error, BaseException)
        said = str(error)  # (those queued behind the batch too: docs/failures.md says so)
        assert re.match(
            r"t\[0\]: \d+ record\(s\) not delivered within delivery_timeout=30 s: "
            r"no leader known for 30\.0 s \(last error: ",
            said,
        ), said
        chain, cause = [], error.__cause__
        while cause is not None:
            chain.append(str(cause))
            cause = cause.__cause__
        assert any("LEADER_NOT_AVAILABLE" in said for said in chain), (error, chain)
    warnings = [said for _, level, said in timed.lines if level >= logging.WARNING]
    assert [said.split(": none")[0] for said in warnings] == [
        "producer: gave up on t[0] waiting for a leader"
    ], warnings


async def test_a_crashed_leader_of_a_partition_sent_to_now_and_then_is_one_warning_for_no_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A partition with one replica, its leader (broker 0) known to the producer,
    which crashes at 5 s; a record every 40 s from 10 s. The first fails to
    connect (its WARNING) and gives up at 40 s while it waits for a leader (the
    wave's gave-up WARNING); the next records expiring so (80 s, 120 s) are the
    same state, not a WARNING of their own. Broker 0 back at 125 s, the record
    at 130 s is written: an INFO says so."""
    with _timed() as timed:
        async with FakeCluster(brokers=2) as fake:
            fake.state.create_topic("t", 1, 1, assignments=[[0]])
            async with Producer(
                fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, idempotence=False
            ) as producer:
                await producer.send("t", b"w", partition=0)
                timed.lines.clear()
                start = trio.current_time()
                outcomes: dict[float, BaseException | None] = {}

                async def send_at(when: float) -> None:
                    await trio.sleep_until(start + when)
                    try:
                        await producer.send("t", b"x", partition=0)
                    except RequestTimedOut as exc:
                        outcomes[when] = exc
                    else:
                        outcomes[when] = None

                async def stop_then_start() -> None:
                    await trio.sleep_until(start + 5)
                    await fake.stop_broker(0)
                    await trio.sleep_until(start + 125)
                    await fake.start_broker(0)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stop_then_start)
                    for when in (10, 50, 90, 130):
                        nursery.start_soon(send_at, when)
    assert sorted(outcomes) == [10, 50, 90, 130], outcomes
    assert [when for when, error in outcomes.items() if error is None] == [130], outcomes
    said = [
        (round(at - start), level, re.split(r", (?:retrying|after) |: none", line)[0])
        for at, level, line in timed.lines
        if line.startswith("producer: ") and level >= logging.INFO
    ]
    assert said == [
        (10, logging.WARNING, "producer: Produce to t[0] on broker 0 failing (1 attempt(s))"),
        (40, logging.WARNING, "producer: gave up on t[0] failing since Produce to broker 0 failed"),
        (
            pytest.approx(130, abs=2),
            logging.INFO,
            "producer: t[0] written again on broker 0 since its records gave up waiting for a "
            "leader",
        ),
    ], timed.lines


async def test_records_sent_before_their_leader_is_lost_say_how_long_none_was_known(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A partition with one replica on broker 0, down from the start: the record
    at 0 s expires at 30 s, none known for 30 s. Broker 0 is back at 40 s (a
    metadata refresh finds its leader, nothing sent), stops again at 105 s: the
    record sent at 100 s (lingering until 110 s) expires at 130 s saying no
    leader was known since the refresh found none (at most 1 s after 105 s),
    not since its send call, nor since the first outage."""
    outcomes: dict[float, BaseException | None] = {}
    async with FakeCluster(brokers=2) as fake:
        fake.state.create_topic("t", 1, 1, assignments=[[0]])
        await fake.stop_broker(0)
        async with Producer(
            fake.bootstrap, retry_backoff=0.1, delivery_timeout=30, linger=10, metadata_max_age=1
        ) as producer:
            start = trio.current_time()

            async def send_at(when: float) -> None:
                await trio.sleep_until(start + when)
                try:
                    await producer.send("t", b"x", partition=0)
                except RequestTimedOut as exc:
                    outcomes[when] = exc
                else:
                    outcomes[when] = None

            async def start_then_stop() -> None:
                await trio.sleep_until(start + 40)
                await fake.start_broker(0)
                await trio.sleep_until(start + 105)
                await fake.stop_broker(0)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(start_then_stop)
                for when in (0, 100):
                    nursery.start_soon(send_at, when)
    waited = {}
    for when, error in outcomes.items():
        found = re.search(r"no leader known for ([0-9.]+) s", str(error))
        assert found is not None, (when, error)
        waited[when] = float(found.group(1))
    assert 29.0 <= waited[0] <= 30.0, outcomes  # (from the first refresh: lingering till 10 s)
    assert 23.9 <= waited[100] <= 25.0, outcomes


def test_records_expiring_without_a_leader_five_minutes_after_the_last_are_a_warning_again() -> (
    None
):
    """t[0]'s records expire without a leader at 30 s (a WARNING), at 100 s
    (DEBUG: still without one) and at 500 s, more than five minutes after the
    last did so: a WARNING again."""
    failures = Failures(hold=0.1, settle=1.2)
    t0 = _StubQueue(TopicPartition("t", 0))
    no_leader = RequestTimedOut("t[0]: no leader known for 30.0 s")
    with _capture() as logged:
        logging.getLogger("gengroup").setLevel(logging.DEBUG)
        for now in (30.0, 100.0, 500.0):
            failures.no_leader(t0, no_leader, now, now)
            failures.report(now)
    assert [(level, said.split(": none")[0].split(":")[0:2]) for level, said in logged] == [
        (logging.WARNING, ["producer", " gave up on t[0] waiting for a leader"]),
        (logging.DEBUG, ["producer", " t[0] still without a leader"]),
        (logging.WARNING, ["producer", " gave up on t[0] waiting for a leader"]),
    ], logged
