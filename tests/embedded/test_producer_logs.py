"""What the producer logs while a partition's Produce fails, against the embedded broker."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from gengroup.broker import Disconnect, Fail, FakeCluster, Intercepted
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
    # Each kind of error once, however they alternate.
    assert [level for level, _ in third] == [logging.WARNING, logging.INFO] + [
        logging.DEBUG
    ] * 3 + [logging.INFO], third
    assert [r.value for r in fake.records("t", 0)] == [b"warm-up", b"a", b"b", b"c", b"d"]


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
