"""Requests routed to a partition's leader follow it when its broker dies.

A client that looked the leaders up before a broker died holds metadata
naming the dead broker. Connecting to it fails; that failure must make the
next attempt ask for fresh metadata, as a NOT_LEADER_OR_FOLLOWER answer does,
or every attempt goes back to the dead broker until the deadline although a
new leader was elected (Java's NetworkClient asks for a metadata update on
every disconnect). Virtual time throughout.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from gengroup import Admin, ConsumerGroup, TopicPartition
from gengroup.broker import FakeCluster, Intercepted
from gengroup.broker.faults import Fail
from gengroup.protocol.versions import ApiKey

TPS = [TopicPartition("t", p) for p in range(3)]


def replicated(cluster: FakeCluster) -> None:
    """Topic ``t``: three partitions with a replica on every broker, two records each."""
    cluster.create_topic("t", 3, replication_factor=3)
    for tp in TPS:
        cluster.produce("t", [b"a", b"b"], partition=tp.partition)


def leader_of(cluster: FakeCluster, tp: TopicPartition) -> int:
    return cluster._partition(tp.topic, tp.partition).leader


async def test_list_offsets_follows_a_leader_whose_broker_died(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        replicated(cluster)
        async with Admin(cluster.bootstrap, timeout=30.0) as admin:
            assert await admin.list_offsets(TPS, "latest") == dict.fromkeys(TPS, 2)
            victim = leader_of(cluster, TPS[0])
            await cluster.stop_broker(victim)  # its partitions are led elsewhere now
            assert leader_of(cluster, TPS[0]) != victim
            started = trio.current_time()
            assert await admin.list_offsets(TPS, "latest") == dict.fromkeys(TPS, 2)
            # One refused connection, a refresh, one backoff: not the 30 s deadline.
            assert trio.current_time() - started < 1.0


async def test_delete_records_follows_a_leader_whose_broker_died(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        replicated(cluster)
        async with Admin(cluster.bootstrap, timeout=30.0) as admin:
            assert await admin.list_offsets(TPS, "earliest") == dict.fromkeys(TPS, 0)
            victim = leader_of(cluster, TPS[0])
            await cluster.stop_broker(victim)
            started = trio.current_time()
            assert await admin.delete_records(dict.fromkeys(TPS, 1)) == dict.fromkeys(TPS, 1)
            assert trio.current_time() - started < 1.0


async def test_a_start_offset_lookup_that_times_out_is_not_called_the_coordinator(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The partitions' leaders answer ListOffsets with NOT_LEADER_OR_FOLLOWER
    for longer than ``request_timeout``: the group's log line names the start
    offsets, not an unreachable coordinator, and the group forms once the
    leaders answer."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(brokers=3, topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster:
        refused_until = trio.current_time() + 12.0

        def not_yet(call: Intercepted) -> Fail | None:
            return Fail(6) if trio.current_time() < refused_until else None

        cluster.control(ApiKey.LIST_OFFSETS, not_yet)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, start_offset="earliest", request_timeout=10.0
        ) as group:
            async for gen in group:
                assert set(gen.assignments) == set(TPS)
                break
    lines = [r.getMessage() for r in caplog.records if "ListOffsets" in r.getMessage()]
    assert lines and all("start offsets: ListOffsets did not complete" in m for m in lines), lines
    assert not any("coordinator unreachable" in r.getMessage() for r in caplog.records)
