"""A broker that dies mid-request gives callers typed errors, never a hang.

These tests start their own broker (the session one must stay up) and SIGKILL it.
``anyio.fail_after`` is only a hang guard here, not a timing assertion.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, Generation
from gengroup._errors import BrokenConnection, ClusterUnreachable, KafkaConnectionError
from gengroup._types import TopicPartition
from gengroup.admin import Admin
from gengroup.io.connection import open_connection
from gengroup.io.fetch import fetch_once, read_partition
from gengroup.producer import Producer
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaBroker, kafka_broker
from tests.embedded import metadata
from tests.io import cluster_with_topic, long_poll_fetch

HANG_GUARD = 60.0


@pytest.mark.kafka
async def test_kill_during_long_poll_fetch_raises_broken_connection(topic: str) -> None:
    tp = TopicPartition(topic, 0)
    async with (
        kafka_broker() as broker,
        cluster_with_topic(broker.bootstrap, topic, connect_timeout=3) as cluster,
    ):
        leader = cluster.leader_for(tp)
        # A second, standalone connection with a request in flight at the kill.
        host, port = broker.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port)) as conn:
            version = conn.versions[ApiKey.FETCH]
            errors: dict[str, BaseException] = {}

            async def long_poll_cluster() -> None:
                try:
                    await fetch_once(cluster, leader, {tp: 0}, max_wait=20.0)
                except BaseException as exc:
                    errors["cluster"] = exc

            async def long_poll_connection() -> None:
                try:
                    await conn.request(long_poll_fetch(version, tp, 20.0), timeout=60.0)
                except BaseException as exc:
                    errors["connection"] = exc

            with anyio.fail_after(HANG_GUARD):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_poll_cluster)
                    tg.start_soon(long_poll_connection)
                    # Both requests sent (a loaded machine may take a while to
                    # open the cluster's fetch connection) before the kill.
                    while not (cluster.awaiting(leader, "fetch") and conn.awaiting):
                        await anyio.sleep(0.01)
                    await anyio.to_thread.run_sync(broker.kill)
            assert isinstance(errors.get("cluster"), BrokenConnection), errors
            assert isinstance(errors.get("connection"), BrokenConnection), errors
            assert not conn.is_usable

            # Everything afterwards fails typed, and fast.
            with anyio.fail_after(HANG_GUARD):
                with pytest.raises(BrokenConnection):
                    await conn.request(metadata(conn.versions[ApiKey.METADATA], None, auto=False))
                with pytest.raises(BrokenConnection):
                    await fetch_once(cluster, leader, {tp: 0}, max_wait=1.0)
                with pytest.raises(BrokenConnection):
                    await cluster.refresh_metadata([topic])
                with pytest.raises(TimeoutError, match="last error"):
                    await read_partition(cluster, tp, 0, 1, time_limit=2.0)


@asynccontextmanager
async def own_broker_and_producer(
    topic: str, partitions: int, **settings: Any
) -> AsyncIterator[tuple[KafkaBroker, Producer]]:
    """A broker of the test's own and a producer (``settings`` passed on), once ``topic`` exists."""
    async with (
        kafka_broker() as broker,
        Producer(broker.bootstrap, **settings) as producer,
    ):
        await Admin(producer.cluster).create_topics({topic: partitions})
        yield broker, producer


@pytest.mark.kafka
async def test_producer_fails_typed_when_broker_stays_dead(topic: str) -> None:
    settings = {"delivery_timeout": 3.0, "retry_backoff": 0.05}
    async with own_broker_and_producer(topic, 2, **settings) as (broker, producer):
        first = await producer.send(topic, b"before")
        assert first.offset == 0
        await anyio.to_thread.run_sync(broker.kill)
        with anyio.fail_after(HANG_GUARD):
            with pytest.raises(KafkaConnectionError):
                await producer.send(topic, b"after", partition=first.partition)
            outcome = await producer.send_many(topic, [b"x", b"y"], return_exceptions=True)
            assert all(isinstance(o, KafkaConnectionError) for o in outcome), outcome


@pytest.mark.kafka
async def test_producer_retries_across_a_broker_restart(topic: str) -> None:
    async with own_broker_and_producer(topic, 1, delivery_timeout=90.0) as (broker, producer):
        await producer.send(topic, b"one")
        await anyio.to_thread.run_sync(broker.kill)
        results: list[int] = []

        async def send_while_down() -> None:
            results.append((await producer.send(topic, b"two")).offset)

        with anyio.fail_after(HANG_GUARD + 60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(send_while_down)
                await anyio.sleep(1.0)  # the send is retrying against a dead broker
                assert not results
                await anyio.to_thread.run_sync(broker.restart)
        assert results == [1]
        records = await read_partition(producer.cluster, TopicPartition(topic, 0), 0, 2)
        assert [r.value for r in records] == [b"one", b"two"]


@pytest.mark.kafka
async def test_group_raises_cluster_unreachable_when_the_only_broker_dies(
    topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A member consuming from a real broker that is then killed: ``async for``
    ends with ClusterUnreachable naming the address, the cluster's WARNING is
    logged once, and the heartbeat failure once (not once per attempt)."""
    caplog.set_level(logging.INFO, logger="gengroup")
    tp = TopicPartition(topic, 0)
    consumed: list[int] = []
    settings: dict[str, Any] = {
        "session_timeout": 6.0,
        "heartbeat_interval": 0.5,
        "rebalance_timeout": 6.0,
        "unreachable_timeout": 5.0,
        "join_backoff": 0.1,
    }

    async def worker(gen: Generation) -> None:
        async for batch in gen.fetch(tp):
            consumed.extend(r.offset for r in batch.records)
            gen.mark(tp, batch.next_offset)

    async with own_broker_and_producer(topic, 1) as (broker, producer):
        for value in (b"a", b"b", b"c"):
            await producer.send(topic, value, partition=0)
        with anyio.fail_after(HANG_GUARD), pytest.raises(ClusterUnreachable) as info:
            async with ConsumerGroup("g-" + topic, [topic], broker.bootstrap, **settings) as group:
                async for gen in group:
                    gen.start_soon(worker, gen)
                    while len(consumed) < 3:
                        await anyio.sleep(0.05)
                    await anyio.to_thread.run_sync(broker.kill)
    assert consumed == [0, 1, 2]
    assert info.value.exhausted
    assert info.value.causes == {broker.bootstrap: "connection refused"}
    warnings = [
        r for r in caplog.records if r.name == "gengroup.cluster" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    heartbeat = [r for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert len(heartbeat) <= 1, [r.getMessage() for r in heartbeat]
