"""librdkafka (confluent-kafka) producer and consumer group against the embedded broker.

These run in real time: librdkafka has its own threads and clock. The
broker runs on the test's trio loop; each librdkafka client runs in a worker
thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest

from gengroup._types import TopicPartition
from gengroup.broker import FakeCluster

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "orders"
PARTITIONS = 4


def produce_all(bootstrap: str, values: list[bytes], compression: str = "none") -> list[Any]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression}
    )
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i, value in enumerate(values):
        producer.produce(TOPIC, key=str(i).encode(), value=value, on_delivery=report)
    remaining = producer.flush(20)
    assert remaining == 0
    return errors


class Member:
    """A librdkafka group member polling in a worker thread until stopped."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "billing",
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.assigned: set[int] = set()
        self.values: list[bytes] = []
        self.commit_errors: list[Any] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        with self._lock:
            self.assigned = {p.partition for p in partitions}

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        with self._lock:
            self.assigned = set()

    def run(self) -> None:
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        try:
            while not self.stop.is_set():
                msgs = self.consumer.consume(100, 0.05)
                good = [m for m in msgs if m.error() is None]
                if not good:
                    continue
                with self._lock:
                    self.values.extend(m.value() for m in good)
                try:
                    self.consumer.commit(asynchronous=False)
                except confluent_kafka.KafkaException as exc:  # rebalance races
                    self.commit_errors.append(exc)
        finally:
            self.consumer.close()


async def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.05)


@pytest.mark.parametrize("compression", ["none", "lz4"])
async def test_producer_and_consumer_group_with_rebalance(compression: str) -> None:
    async with FakeCluster(
        brokers=3, topics={TOPIC: PARTITIONS}, initial_rebalance_delay_ms=0
    ) as cluster:
        values = [f"value-{i}".encode() for i in range(200)]
        errors = await anyio.to_thread.run_sync(produce_all, cluster.bootstrap, values, compression)
        assert errors == []
        assert sum(cluster.high_watermark(TOPIC, p) for p in range(PARTITIONS)) == 200

        a = Member(cluster.bootstrap, "member-a")
        b = Member(cluster.bootstrap, "member-b")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, a.run)
                await wait_for(lambda: a.assigned == set(range(PARTITIONS)))
                await wait_for(lambda: len(a.values) == 200)
                assert sorted(a.values) == sorted(values)
                await wait_for(lambda: sum(cluster.committed_offsets("billing").values()) == 200)
                first_generation = cluster.state.coordinator.group("billing")
                assert first_generation is not None
                generation = first_generation.generation_id

                # a second member joins: the group rebalances and splits the partitions
                tg.start_soon(anyio.to_thread.run_sync, b.run)
                await wait_for(
                    lambda: (
                        bool(a.assigned)
                        and bool(b.assigned)
                        and a.assigned | b.assigned == set(range(PARTITIONS))
                        and not a.assigned & b.assigned
                    )
                )
                described = cluster.describe_group("billing")
                assert described.group_state == "Stable"
                assert sorted(m.client_id for m in described.members) == ["member-a", "member-b"]
                group = cluster.state.coordinator.group("billing")
                assert group is not None
                assert group.generation_id > generation

                # new records are shared between the two members
                more = [f"more-{i}".encode() for i in range(40)]
                errors = await anyio.to_thread.run_sync(produce_all, cluster.bootstrap, more)
                assert errors == []
                await wait_for(lambda: len(a.values) + len(b.values) == 240)
                assert sorted(a.values[200:] + b.values) == sorted(more)
                await wait_for(lambda: sum(cluster.committed_offsets("billing").values()) == 240)
                committed = cluster.committed_offsets("billing")
                assert set(committed) == {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
                a.stop.set()
                b.stop.set()
        finally:
            a.stop.set()
            b.stop.set()
        # both members left the group when they closed
        assert cluster.describe_group("billing").group_state == "Empty"
        assert not cluster.errors


async def test_admin_client_creates_and_lists_topics() -> None:
    admin_mod = pytest.importorskip("confluent_kafka.admin")

    def admin_ops(bootstrap: str) -> tuple[set[str], int]:
        admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([admin_mod.NewTopic("created", 5, 1)])
        futures["created"].result(10)
        listed = admin.list_topics(timeout=10)
        return set(listed.topics), len(listed.topics["created"].partitions)

    async with FakeCluster(brokers=2) as cluster:
        names, partitions = await anyio.to_thread.run_sync(admin_ops, cluster.bootstrap)
        assert "created" in names
        assert partitions == 5
        assert not cluster.errors
