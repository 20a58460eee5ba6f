"""Requests routed to a partition's leader follow it when its broker dies.

A client that looked the leaders up before a broker died holds metadata
naming the dead broker. Connecting to it fails; that failure must make the
next attempt ask for fresh metadata, as a NOT_LEADER_OR_FOLLOWER answer does,
or every attempt goes back to the dead broker until the deadline although a
new leader was elected (Java's NetworkClient asks for a metadata update on
every disconnect). Virtual time throughout.
"""

from __future__ import annotations

import trio
import trio.testing

from gengroup import Admin, TopicPartition
from gengroup.broker import FakeCluster

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
