"""The producer's partitioner: Java-compatible murmur2, and the null-key strategies."""

from __future__ import annotations

from collections import Counter

import anyio
import confluent_kafka
import pytest
from hypothesis import given, strategies as st

from gengroup._types import TopicPartition
from gengroup.producer import Producer, ProducerRecord, murmur2, partition_for_key
from tests.io import admin_with_topics, create_topic

# Apache Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_empty_key() -> None:
    # seed ^ 0, then only the final mix: a value other Kafka ports agree on.
    assert murmur2(b"") == 275646681


def test_partition_for_key_uses_to_positive() -> None:
    # toPositive(-790332482) = -790332482 & 0x7fffffff = 1357151166
    assert partition_for_key(b"foobar", 50) == 1357151166 % 50 == 16
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_partition_for_key_rejects_zero_partitions() -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for_key(b"k", 0)


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_murmur2_is_a_signed_int32_and_partition_in_range(key: bytes, n: int) -> None:
    h = murmur2(key)
    assert -(2**31) <= h < 2**31
    assert 0 <= partition_for_key(key, n) < n


def _confluent_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> list[int]:
    """Produce ``keys`` with librdkafka's Java-compatible partitioner; return the partitions."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    got: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            got[msg.key()] = msg.partition()

    for key in keys:
        producer.produce(topic, value=b"librdkafka", key=key, on_delivery=on_delivery)
    remaining = producer.flush(30)
    assert remaining == 0 and not errors, (remaining, errors)
    return [got[k] for k in keys]


@pytest.mark.kafka
async def test_keyed_records_land_where_librdkafka_murmur2_puts_them(
    bootstrap: str, topic: str
) -> None:
    partitions = 7
    keys = [f"key-{i}".encode() for i in range(200)] + [k for k, _ in KAFKA_VECTORS]
    await create_topic(bootstrap, topic, partitions)
    async with Producer(bootstrap) as producer:
        ours = await producer.send_many(topic, [ProducerRecord(b"gengroup", key=k) for k in keys])
    theirs = await anyio.to_thread.run_sync(_confluent_partitions, bootstrap, topic, keys)
    assert [m.partition for m in ours] == theirs
    assert [m.partition for m in ours] == [partition_for_key(k, partitions) for k in keys]
    assert len(set(theirs)) == partitions  # the keys really spread


@pytest.mark.kafka
async def test_null_keys_round_robin_and_sticky(bootstrap: str, topic: str) -> None:
    async with admin_with_topics(bootstrap, {topic: 4}) as admin:
        async with Producer(bootstrap, partitioner="round_robin") as producer:
            metas = await producer.send_many(topic, [b"rr"] * 40)
        counts = Counter(m.partition for m in metas)
        assert counts == {0: 10, 1: 10, 2: 10, 3: 10}
        # Sticky: one batch per send_many call of small records (all queued
        # before the first drain) lands on a single partition.
        async with Producer(bootstrap, linger=0.05) as producer:
            first = await producer.send_many(topic, [b"sticky"] * 20)
            second = await producer.send_many(topic, [b"sticky"] * 20)
        assert len({m.partition for m in first}) == 1
        assert len({m.partition for m in second}) == 1
        assert first[0].partition != second[0].partition  # switched after a batch
        # Offsets inside a batch are consecutive.
        assert [m.offset for m in first] == list(range(first[0].offset, first[0].offset + 20))
        latest = await admin.list_offsets([TopicPartition(topic, p) for p in range(4)], "latest")
        assert sum(latest.values()) == 80
