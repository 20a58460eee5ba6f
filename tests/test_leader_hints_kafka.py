"""Leader hints (KIP-951) from real Apache Kafka: the producer retries on the
leader a NOT_LEADER_OR_FOLLOWER names, and the consumer fetches from it.

The partition's leadership is moved while every node stays up (the replicas
reordered, then a preferred-leader election), so the only way the producer
learns of the move before its metadata is refreshed is the hint in the old
leader's refusal.
"""

from __future__ import annotations

import datetime
from functools import partial
from typing import Any

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, Generation, Producer, TopicPartition
from gengroup.admin import NewTopic
from gengroup.io.cluster import Cluster
from gengroup.protocol.fetch import build_fetch_request
from gengroup.protocol.framing import build
from gengroup.protocol.records import encode_batch
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaCluster
from gengroup.testing.pytest_plugin import make_unique_name

pytestmark = pytest.mark.kafka


async def refusal_from_a_follower(bootstrap: str, topic: str) -> None:
    """A Produce v11 sent to a follower of ``topic[0]`` is refused
    NOT_LEADER_OR_FOLLOWER naming the leader, its epoch and its address."""
    async with Cluster(bootstrap) as client:
        part = (await client.refresh_metadata([topic]))[topic].partitions[0]
        follower = next(b for b in part.replicas if b != part.leader)

        def request(mod: Any) -> Any:
            data = build(
                mod.PartitionProduceData, index=0, records=encode_batch([(None, b"x", (), 1)])
            )
            return build(
                mod.ProduceRequest,
                transactional_id=None,
                acks=-1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(data,)),),
            )

        resp = await client.call(follower, ApiKey.PRODUCE, request)
        ((answer,),) = (t.partition_responses for t in resp.responses)
        assert int(answer.error_code) == 6  # NOT_LEADER_OR_FOLLOWER
        hint = answer.current_leader
        assert (int(hint.leader_id), int(hint.leader_epoch)) == (part.leader, part.leader_epoch)
        leader = client.brokers[part.leader]
        assert [(int(e.node_id), e.host, int(e.port)) for e in resp.node_endpoints] == [
            (leader.node_id, leader.host, leader.port)
        ]


async def fenced_fetch_at_a_follower(bootstrap: str, topic: str) -> None:
    """A Fetch v16 (by topic id) sent to a follower of ``topic[0]`` with a leader
    epoch older than the leader's is refused FENCED_LEADER_EPOCH naming the
    leader, its epoch and its address (the partition's leader moved once, so
    its epoch is at least 1)."""
    tp = TopicPartition(topic, 0)
    async with Cluster(bootstrap) as client:
        info = (await client.refresh_metadata([topic]))[topic]
        part = info.partitions[0]
        assert part.leader_epoch >= 1 and info.topic_id is not None
        follower = next(b for b in part.replicas if b != part.leader)

        def request(mod: Any) -> Any:
            assert mod.FetchRequest.__version__ == 16
            return build_fetch_request(
                16,
                {tp: 0},
                max_wait=0.1,
                min_bytes=1,
                max_bytes=1 << 20,
                partition_max_bytes=1 << 20,
                isolation_level=0,
                leader_epochs={tp: part.leader_epoch - 1},
                topic_ids={topic: info.topic_id},
            )

        resp = await client.call(follower, ApiKey.FETCH, request)
        ((answer,),) = (t.partitions for t in resp.responses)
        assert resp.responses[0].topic_id == info.topic_id
        assert int(answer.error_code) == 74  # FENCED_LEADER_EPOCH
        hint = answer.current_leader
        assert (int(hint.leader_id), int(hint.leader_epoch)) == (part.leader, part.leader_epoch)
        leader = client.brokers[part.leader]
        assert [(int(e.node_id), e.host, int(e.port)) for e in resp.node_endpoints] == [
            (leader.node_id, leader.host, leader.port)
        ]


async def test_kafka_names_the_leader_in_a_fenced_fetch(healed_cluster: KafkaCluster) -> None:
    topic = make_unique_name("fenced")
    async with Admin(healed_cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, replication_factor=3)])
    old = healed_cluster.node_of_leader(topic, 0)
    new = next(n for n in healed_cluster.running if n != old)
    await anyio.to_thread.run_sync(partial(healed_cluster.move_leader, topic, 0, new))
    await fenced_fetch_at_a_follower(healed_cluster.bootstrap, topic)


async def test_kafka_names_the_leader_in_a_followers_refusal(healed_cluster: KafkaCluster) -> None:
    topic = make_unique_name("refusal")
    async with Admin(healed_cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, replication_factor=3)])
    healed_cluster.node_of_leader(topic, 0)
    await refusal_from_a_follower(healed_cluster.bootstrap, topic)


async def test_the_producer_takes_the_new_leader_from_the_old_ones_refusal(
    healed_cluster: KafkaCluster,
) -> None:
    cluster = healed_cluster
    topic = make_unique_name("hints")
    tp = TopicPartition(topic, 0)
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, replication_factor=3)])
    old = cluster.node_of_leader(topic, 0)
    new = next(n for n in cluster.running if n != old)
    taken: list[bool] = []
    with anyio.fail_after(120):
        async with Producer(cluster.bootstrap, linger=0) as producer:
            await producer.send(topic, b"before", partition=0)
            assert producer.cluster.leader_for(tp) == old
            take = producer.cluster.take_leader_hint

            def spy(tp: TopicPartition, part: Any, response: Any) -> bool:
                taken.append(took := take(tp, part, response))
                return took

            producer.cluster.take_leader_hint = spy  # type: ignore[method-assign]
            await anyio.to_thread.run_sync(partial(cluster.move_leader, topic, 0, new))
            written = await producer.send(topic, b"after", partition=0)
            assert written.offset == 1
            assert producer.cluster.leader_for(tp) == new
    assert taken[:1] == [True], "the old leader's refusal named the new one, and it was taken"


async def test_the_consumer_takes_the_new_leader_from_the_old_ones_refusal(
    healed_cluster: KafkaCluster,
) -> None:
    """A consumer fetching from the old leader is refused (Fetch v16) with the
    new leader named: it takes the hint, and the record written after the move
    is read from the new leader."""
    cluster = healed_cluster
    topic = make_unique_name("fetch-hints")
    tp = TopicPartition(topic, 0)
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, replication_factor=3)])
    old = cluster.node_of_leader(topic, 0)
    new = next(n for n in cluster.running if n != old)
    taken: list[bool] = []
    values: list[bytes | None] = []
    with anyio.fail_after(120):
        async with (
            Producer(cluster.bootstrap, linger=0) as producer,
            ConsumerGroup(make_unique_name("g"), [topic], cluster.bootstrap) as group,
        ):
            await producer.send(topic, b"before", partition=0)
            moved = anyio.Event()

            async def member() -> None:
                async for gen in group:
                    for part in gen.added:
                        gen.start_soon(work, gen, part, partition=part)

            async def work(gen: Generation, part: TopicPartition) -> None:
                async for batch in gen.fetch(part):
                    values.extend(r.value for r in batch.records)
                    if len(values) == 1:
                        moved.set()

            take = group.cluster.take_leader_hint

            def spy(tp: TopicPartition, part: Any, response: Any) -> bool:
                taken.append(took := take(tp, part, response))
                return took

            group.cluster.take_leader_hint = spy  # type: ignore[method-assign]
            async with anyio.create_task_group() as tg:
                tg.start_soon(member)
                await moved.wait()
                assert group.cluster.leader_for(tp) == old
                await anyio.to_thread.run_sync(partial(cluster.move_leader, topic, 0, new))
                await producer.send(topic, b"after", partition=0)
                while len(values) < 2:
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
    assert values == [b"before", b"after"]
    assert taken[:1] == [True], "the old leader's refusal named the new one, and it was taken"
