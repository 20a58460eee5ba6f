"""Admin.delete_records (DeleteRecords): the log start moves up to the offset asked for and
never back, -1 means the high watermark, and every refusal is a typed error naming its
partition; on real Kafka and on the embedded broker alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from gengroup import (
    Admin,
    BrokerError,
    OffsetOutOfRange,
    Producer,
    TopicPartition,
    UnknownTopicOrPartition,
)
from gengroup.admin import NewTopic
from gengroup.broker import FakeCluster, Intercepted
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaBroker


async def scenario(bootstrap: str, topic: str, compacted: str) -> None:
    """Ten records in partition 0, five in partition 1; deletions and refusals."""
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Admin(bootstrap) as admin, Producer(admin.cluster) as producer:
        await admin.create_topics({topic: 2})
        for p, count in ((0, 10), (1, 5)):
            for i in range(count):
                await producer.send(topic, str(i).encode(), partition=p)

        assert await admin.delete_records({}) == {}
        # -1: up to the high watermark.
        assert await admin.delete_records({tp0: 4, tp1: -1}) == {tp0: 4, tp1: 5}
        assert await admin.list_offsets([tp0, tp1], "earliest") == {tp0: 4, tp1: 5}
        assert await admin.list_offsets([tp0, tp1], "latest") == {tp0: 10, tp1: 5}
        # The low watermark never moves back; the same call again changes nothing.
        assert await admin.delete_records({tp0: 2}) == {tp0: 4}
        assert await admin.delete_records({tp0: 4}) == {tp0: 4}
        # At the high watermark itself: allowed, the partition is then empty.
        assert await admin.delete_records({tp1: 5}) == {tp1: 5}

        with pytest.raises(OffsetOutOfRange, match=rf"{topic}\[0\]"):
            await admin.delete_records({tp0: 11})  # above the high watermark
        with pytest.raises(OffsetOutOfRange, match=rf"{topic}\[0\]"):
            await admin.delete_records({tp0: -2})
        assert await admin.list_offsets([tp0], "earliest") == {tp0: 4}  # untouched
        with pytest.raises(UnknownTopicOrPartition):
            await admin.delete_records({TopicPartition(topic, 7): 0})
        with pytest.raises(UnknownTopicOrPartition):
            await admin.delete_records({TopicPartition(topic + "-missing", 0): 0})
        with pytest.raises(TypeError):
            await admin.delete_records({tp0: "5"})  # type: ignore[dict-item]

        # A compacted topic's records are not deleted by offset: POLICY_VIOLATION.
        await admin.create_topics([NewTopic(compacted, 1, configs={"cleanup.policy": "compact"})])
        await producer.send(compacted, b"v", key=b"k", partition=0)
        with pytest.raises(BrokerError) as refused:
            await admin.delete_records({TopicPartition(compacted, 0): 1})
        assert refused.value.code == ErrorCode.policy_violation
        assert f"{compacted}[0]" in str(refused.value)


@pytest.mark.kafka
async def test_delete_records_on_real_kafka(
    kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    await scenario(kafka.bootstrap, unique_name("delete"), unique_name("compacted"))


async def test_delete_records_on_the_embedded_broker() -> None:
    async with FakeCluster() as cluster:
        await scenario(cluster.bootstrap, "t", "compacted")
        with pytest.raises(BrokerError) as internal:
            async with Admin(cluster.bootstrap) as admin:
                await admin.fetch_offsets("g")  # the offsets topic exists from here on
                await admin.delete_records({TopicPartition("__consumer_offsets", 0): 0})
        assert internal.value.code == ErrorCode.invalid_topic_exception
        assert cluster.errors == []


async def test_one_request_per_leader_and_a_moved_leader_is_followed() -> None:
    async with FakeCluster(brokers=3, topics={"t": 6}) as cluster:
        tps = [TopicPartition("t", p) for p in range(6)]
        for tp in tps:
            cluster.produce("t", [b"a", b"b", b"c"], partition=tp.partition)
        sent: list[tuple[int, list[TopicPartition]]] = []

        def record(call: Intercepted) -> None:
            parts = [
                TopicPartition(t.name, p.partition_index)
                for t in call.request.topics
                for p in t.partitions
            ]
            sent.append((call.broker_id, sorted(parts)))

        cluster.control(ApiKey.DELETE_RECORDS, record)
        leaders = {tp: cluster._partition(tp.topic, tp.partition).leader for tp in tps}
        assert len(set(leaders.values())) == 3
        async with Admin(cluster.bootstrap) as admin:
            assert await admin.delete_records(dict.fromkeys(tps, 1)) == dict.fromkeys(tps, 1)
            assert sorted(sent) == sorted(
                (node, sorted(tp for tp in tps if leaders[tp] == node)) for node in range(3)
            )
            # The admin's metadata still names the old leader of t[0]: the old leader
            # answers NOT_LEADER_OR_FOLLOWER, the admin refreshes and asks the new one.
            tp0 = tps[0]
            new = (leaders[tp0] + 1) % 3
            cluster.move_partition_leader("t", 0, new)
            sent.clear()
            assert await admin.delete_records({tp0: 2}) == {tp0: 2}
            assert sent == [(leaders[tp0], [tp0]), (new, [tp0])]
        assert cluster.records("t", 0)[0].offset == 2


async def test_a_timeout_longer_than_kafka_can_carry_is_capped() -> None:
    """An Admin timeout of 35 days: the broker's wait (for its followers, for a
    topic's creation) is an int32 of milliseconds, 24.8 days at most: capped,
    not an encoding error."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        tp = TopicPartition("t", 0)
        async with Admin(cluster.bootstrap, timeout=3_000_000.0) as admin:
            async with Producer(admin.cluster) as producer:
                await producer.send("t", b"v", partition=0)
            assert await admin.delete_records({tp: 1}) == {tp: 1}
            await admin.create_topics({"u": 1})  # the same int32 wait
