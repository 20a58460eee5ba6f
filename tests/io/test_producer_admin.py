"""Producer and Admin against the real broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from math import inf
from typing import Any

import anyio
import confluent_kafka
import pytest

from gengroup._errors import (
    BrokerError,
    ConfigError,
    ConnectionClosed,
    GroupIdNotFound,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from gengroup._types import TopicPartition
from gengroup.admin import Admin, NewTopic
from gengroup.io.connection import BrokerConnection
from gengroup.io.fetch import read_partition
from gengroup.producer import Compression, Producer, ProducerRecord
from tests.io import admin_with_topics, cluster_with_topic, create_topic

pytestmark = pytest.mark.kafka

HANG_GUARD = 60.0


async def until_queued(producer: Producer, count: int) -> None:
    """Until ``count`` records wait in ``producer`` for their outcome, however
    slowly a loaded machine queues them (the caller's hang guard bounds it)."""
    while len(producer._outstanding) < count:
        await anyio.sleep(0.01)


# ---------------------------------------------------------------------------- admin: topics


async def test_create_topics_exist_ok_and_delete(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    a, b = unique_name("admin-a"), unique_name("admin-b")
    async with Admin(bootstrap) as admin:
        await admin.create_topics(
            [NewTopic(a, 3), NewTopic(b, 1, configs={"retention.ms": "60000"})]
        )
        # Metadata already shows every partition with a leader.
        assert admin.cluster.partition_count(a) == 3
        assert all(p.leader >= 0 for p in admin.cluster.topics[a].partitions.values())
        with pytest.raises(TopicAlreadyExists, match=a):
            await admin.create_topics({a: 3})
        await admin.create_topics({a: 3}, exist_ok=True)
        await admin.create_topics({a: 5, unique_name("admin-c"): 2}, exist_ok=True)
        assert admin.cluster.partition_count(a) == 3  # exist_ok leaves it as it is

        await admin.delete_topics([a, b])
        md = await admin.cluster.refresh_metadata([a, b])
        assert all(md[t].error_code == 3 for t in (a, b))
        with pytest.raises(UnknownTopicOrPartition):
            await admin.delete_topics([a])
        await admin.delete_topics([a], missing_ok=True)


async def test_create_topic_errors_are_typed(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap, timeout=10) as admin:
        with pytest.raises(BrokerError) as bad_rf:
            await admin.create_topics([NewTopic(f"{topic}-rf", 1, replication_factor=3)])
        assert bad_rf.value.name == "INVALID_REPLICATION_FACTOR"
        with pytest.raises(BrokerError) as bad_config:
            await admin.create_topics(
                [NewTopic(f"{topic}-cfg", 1, configs={"cleanup.policy": "sometimes"})]
            )
        assert bad_config.value.name == "INVALID_CONFIG"
        with pytest.raises(BrokerError) as bad_name:
            await admin.create_topics({"bad/name": 1})
        assert bad_name.value.name == "INVALID_TOPIC_EXCEPTION"


async def test_create_partitions_and_list_offsets(bootstrap: str, topic: str) -> None:
    async with cluster_with_topic(bootstrap, topic, 2) as cluster:
        admin = Admin(cluster)
        await admin.create_partitions(topic, 5)
        assert cluster.partition_count(topic) == 5
        assert all(p.leader >= 0 for p in cluster.topics[topic].partitions.values())
        with pytest.raises(BrokerError) as shrink:
            await admin.create_partitions(topic, 3)
        assert shrink.value.name == "INVALID_PARTITIONS"

        tps = [TopicPartition(topic, p) for p in range(5)]
        assert await admin.list_offsets(tps, "earliest") == dict.fromkeys(tps, 0)
        assert await admin.list_offsets(tps, "latest") == dict.fromkeys(tps, 0)

        base = 1_700_000_000_000
        async with Producer(cluster) as producer:
            for i in range(10):
                await producer.send(topic, b"x", partition=4, timestamp_ms=base + i * 1000)
            await producer.send(topic, b"y", partition=4, timestamp_ms=base + 3000)
        tp4 = TopicPartition(topic, 4)
        latest = await admin.list_offsets(tps, "latest")
        assert latest[tp4] == 11 and latest[tps[0]] == 0
        assert (await admin.list_offsets([tp4], "earliest"))[tp4] == 0
        # By time: the first offset whose timestamp is >= the one asked for.
        assert (await admin.list_offsets([tp4], base + 2500))[tp4] == 3
        assert (await admin.list_offsets([tp4], base))[tp4] == 0
        assert (await admin.list_offsets([tp4], base + 99_000))[tp4] == -1
        with pytest.raises(ValueError, match="offset spec"):
            await admin.list_offsets([tp4], "middle")  # type: ignore[arg-type]
        with pytest.raises(UnknownTopicOrPartition):
            await admin.list_offsets([TopicPartition(f"{topic}-nope", 0)], "latest")


# ---------------------------------------------------------------------------- admin: groups


class ConfluentMember:
    """A librdkafka group member polling in a thread until told to stop."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": "rdkafka-member",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10_000,
            }
        )
        self.topic = topic
        self.seen = 0
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self, expected: int) -> None:
        try:
            self.consumer.subscribe([self.topic])
            while not self.stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.seen += 1
                    if self.seen == expected:
                        self.consumer.commit(asynchronous=False)
                        self.ready.set()
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            raise
        finally:
            self.consumer.close()


async def test_groups_list_describe_fetch_offsets_delete(
    bootstrap: str, topic: str, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("grp")
    async with admin_with_topics(bootstrap, {topic: 3}) as admin:
        async with Producer(admin.cluster) as producer:
            metas = await producer.send_many(
                topic, [ProducerRecord(b"v", partition=i % 3) for i in range(12)]
            )
        assert sorted(m.partition for m in metas) == [0] * 4 + [1] * 4 + [2] * 4

        member = ConfluentMember(bootstrap, group, topic)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, member.run, 12)
            try:
                with anyio.fail_after(HANG_GUARD):
                    await anyio.to_thread.run_sync(member.ready.wait)
                assert member.error is None

                listing = {g.group_id: g for g in await admin.list_groups()}
                assert listing[group].protocol_type == "consumer"
                assert listing[group].state == "Stable"

                described = (await admin.describe_groups([group]))[group]
                assert described.state == "Stable"
                assert described.protocol_type == "consumer"
                assert described.protocol in ("range", "roundrobin", "cooperative-sticky")
                (m,) = described.members
                assert m.client_id == "rdkafka-member" and m.member_id
                assert m.group_instance_id is None
                assert m.partitions == {TopicPartition(topic, p) for p in range(3)}
                assert m.raw_assignment

                committed = await admin.fetch_offsets(group)
                assert committed == {TopicPartition(topic, p): 4 for p in range(3)}
                # Kafka answers a stable read as a write: once what it read is replicated.
                assert await admin.fetch_offsets(group, require_stable=True) == committed
                assert await admin.fetch_offsets(group, [TopicPartition(topic, 1)]) == {
                    TopicPartition(topic, 1): 4
                }
                with pytest.raises(BrokerError) as busy:
                    await admin.delete_groups([group])
                assert busy.value.name == "NON_EMPTY_GROUP"
            finally:
                member.stop.set()

        await admin.delete_groups([group])
        gone = (await admin.describe_groups([group]))[group]
        assert gone.state == "Dead" and gone.members == ()
        assert await admin.fetch_offsets(group) == {}
        with pytest.raises(GroupIdNotFound):
            await admin.delete_groups([group])


# ---------------------------------------------------------------------------- producer


@pytest.mark.parametrize("acks", [-1, 1, 0, "all"])
async def test_acks_modes(bootstrap: str, topic: str, acks: Any) -> None:
    async with cluster_with_topic(bootstrap, topic) as cluster:
        async with Producer(cluster, acks=acks) as producer:
            metas = [await producer.send(topic, f"{i}".encode()) for i in range(5)]
        expected = [-1] * 5 if acks == 0 else list(range(5))
        assert [m.offset for m in metas] == expected
        got = await read_partition(cluster, TopicPartition(topic, 0), 0, 5)
        assert [r.value for r in got] == [b"0", b"1", b"2", b"3", b"4"]
        # The shared cluster is still usable after the producer closed.
        assert cluster.partition_count(topic) == 1


async def test_concurrent_sends_share_one_request_per_broker(
    bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    produce_requests: list[int] = []
    original = BrokerConnection.request

    async def spy(self: BrokerConnection, request: Any, **kwargs: Any) -> Any:
        if type(request).__name__ == "ProduceRequest":
            produce_requests.append(sum(len(t.partition_data) for t in request.topic_data))
        return await original(self, request, **kwargs)

    monkeypatch.setattr(BrokerConnection, "request", spy)
    async with cluster_with_topic(bootstrap, topic, 4) as cluster:
        # A linger no test run reaches: the flush, once all 400 are queued,
        # is what sends them, however slowly a loaded machine queues them.
        async with Producer(cluster, linger=60.0, compression=Compression.LZ4) as producer:
            results: dict[int, Any] = {}

            async def one(i: int) -> None:
                results[i] = await producer.send(
                    topic, f"value-{i}".encode(), key=f"key-{i}".encode()
                )

            with anyio.fail_after(HANG_GUARD):
                async with anyio.create_task_group() as tg:
                    for i in range(400):
                        tg.start_soon(one, i)
                    await until_queued(producer, 400)
                    assert produce_requests == []
                    await producer.flush()
        assert len(results) == 400
        assert len({r.partition for r in results.values()}) == 4
        # Everything lingered together: one request carrying every partition.
        assert produce_requests == [4]
        per_partition: dict[int, list[int]] = {}
        for r in results.values():
            per_partition.setdefault(r.partition, []).append(r.offset)
        for offsets in per_partition.values():
            assert sorted(offsets) == list(range(len(offsets)))


async def test_small_batches_keep_order(bootstrap: str, topic: str) -> None:
    async with cluster_with_topic(bootstrap, topic) as cluster:
        async with Producer(cluster, max_batch_bytes=500, compression=Compression.GZIP) as p:
            metas = await p.send_many(topic, [f"{i:04d}".encode() * 10 for i in range(300)])
        assert [m.offset for m in metas] == list(range(300))
        got = await read_partition(cluster, TopicPartition(topic, 0), 0, 300)
        assert [r.value for r in got] == [f"{i:04d}".encode() * 10 for i in range(300)]


async def test_flush_sends_lingering_records_now(bootstrap: str, topic: str) -> None:
    async with cluster_with_topic(bootstrap, topic, 2) as cluster:
        async with Producer(cluster, linger=3600.0, delivery_timeout=inf) as producer:
            done: list[int] = []

            async def one(i: int) -> None:
                done.append((await producer.send(topic, b"x", partition=i % 2)).offset)

            with anyio.fail_after(HANG_GUARD):
                async with anyio.create_task_group() as tg:
                    for i in range(10):
                        tg.start_soon(one, i)
                    # flush() sends what is queued when it is called: all ten
                    # first, however slowly a loaded machine queues them.
                    await until_queued(producer, 10)
                    await anyio.sleep(0.3)
                    assert done == []  # still lingering
                    await producer.flush()
                    assert len(done) == 10
            await producer.flush()  # nothing queued: returns at once


async def test_producer_errors_are_typed(
    bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = f"{topic}-small"
    to_small: list[int] = []
    original = BrokerConnection.request

    async def spy(self: BrokerConnection, request: Any, **kwargs: Any) -> Any:
        if type(request).__name__ == "ProduceRequest":
            to_small.extend(1 for t in request.topic_data if t.name == small)
        return await original(self, request, **kwargs)

    monkeypatch.setattr(BrokerConnection, "request", spy)
    topics = [NewTopic(topic, 2), NewTopic(small, 1, configs={"max.message.bytes": "2000"})]
    async with admin_with_topics(bootstrap, topics) as admin:
        async with Producer(
            admin.cluster, max_block=0.5, delivery_timeout=30, allow_auto_create_topics=False
        ) as producer:
            with pytest.raises(UnknownTopicOrPartition):
                await producer.send(f"{topic}-missing", b"x")
            with pytest.raises(UnknownTopicOrPartition, match="2 partitions"):
                await producer.send(topic, b"x", partition=2)
            with pytest.raises(TypeError):
                await producer.send(topic, "text")  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await producer.send(topic, b"x", headers=[("h", "text")])  # type: ignore[list-item]
            with anyio.fail_after(HANG_GUARD), pytest.raises(BrokerError) as too_big:
                await producer.send(small, b"z" * 10_000)
            assert to_small == [1]  # non-retriable: failed on its first answer, not retried
            assert too_big.value.name in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE")
            # The producer keeps working after a failure.
            assert (await producer.send(small, b"ok")).offset == 0
            mixed = await producer.send_many(
                small, [b"a", b"z" * 10_000, b"b"], return_exceptions=True
            )
            assert isinstance(mixed[1], BrokerError)
        with pytest.raises(ConfigError):
            Producer(bootstrap, acks=2)  # type: ignore[arg-type]


async def test_log_append_time_is_reported(bootstrap: str, topic: str) -> None:
    append_time = NewTopic(topic, 1, configs={"message.timestamp.type": "LogAppendTime"})
    async with admin_with_topics(bootstrap, [append_time]) as admin:
        async with Producer(admin.cluster) as producer:
            before = time.time_ns() // 1_000_000
            meta = await producer.send(topic, b"x", timestamp_ms=1_000)
        assert meta.timestamp >= before - 60_000  # the broker's clock, not ours
        (record,) = await read_partition(admin.cluster, TopicPartition(topic, 0), 0, 1)
        assert record.timestamp == meta.timestamp


async def test_leaving_with_an_exception_delivers_queued_records(
    bootstrap: str, topic: str
) -> None:
    await create_topic(bootstrap, topic)
    outcomes: list[object] = []

    class Boom(Exception):
        pass

    producer = Producer(bootstrap, linger=30.0, delivery_timeout=60.0)

    async def waiter() -> None:
        outcomes.append(await producer.send(topic, b"queued"))

    async with anyio.create_task_group() as outer:
        # The body's exception comes out of the producer as it is (no
        # ExceptionGroup), once the record queued was delivered.
        with pytest.raises(Boom):
            async with producer:
                outer.start_soon(waiter)
                # Its record queued (a loaded machine may take a while to
                # connect and look the topic up), then the exception.
                with anyio.fail_after(HANG_GUARD):
                    await until_queued(producer, 1)
                raise Boom
    assert [type(o).__name__ for o in outcomes] == ["RecordMetadata"], outcomes
    with pytest.raises(ConnectionClosed):
        await producer.send(topic, b"closed")


async def test_producer_lets_the_broker_auto_create_a_topic(bootstrap: str, topic: str) -> None:
    """As the Java producer: a topic sent to that does not exist is created by
    the broker (auto.create.topics.enable is Kafka's default)."""
    async with Producer(bootstrap, max_block=30.0) as producer:
        sent = await producer.send(f"{topic}-auto", b"x")
        assert sent.offset == 0
