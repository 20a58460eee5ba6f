"""Leader hints (KIP-951): a broker refusing a Produce NOT_LEADER_OR_FOLLOWER
names the partition's leader, and the producer retries there at once.

What Apache Kafka answers is checked against it in
``tests/conformance/test_leader_hints_conformance.py``.
"""

from __future__ import annotations

import uuid

import anyio
import trio.testing

from gengroup._types import TopicPartition
from gengroup.broker import Delay, FakeCluster, Intercepted
from gengroup.io.cluster import Cluster
from gengroup.io.metadata import (
    BrokerInfo,
    PartitionInfo,
    TopicInfo,
    apply_leader_hint,
    keep_newer,
)
from gengroup.producer import Producer
from gengroup.protocol.versions import ApiKey

from . import batch, connect, produce

NOT_LEADER = 6
TP = TopicPartition("t", 0)


class _Hint:
    def __init__(self, leader_id: int, leader_epoch: int) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch


class _Endpoint:
    def __init__(self, node_id: int, host: str, port: int) -> None:
        self.node_id, self.host, self.port, self.rack = node_id, host, port, None


async def test_a_produce_refused_by_a_former_leader_names_the_new_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 1)
        epoch = cluster.state.topics.partition("t", 0).leader_epoch  # type: ignore[union-attr]
        async with connect(cluster, 0) as conn:
            for v in (9, 10, 11, 12):
                resp = await conn.request(produce(v, "t", 0, batch(b"a")))
                ((part,),) = (t.partition_responses for t in resp.responses)
                assert int(part.error_code) == NOT_LEADER
                if v < 10:  # no hints before v10
                    assert not hasattr(part, "current_leader")
                    assert not hasattr(resp, "node_endpoints")
                    continue
                assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
                    1,
                    epoch,
                )
                (node,) = resp.node_endpoints
                assert (int(node.node_id), node.host, int(node.port)) == (1, *cluster.address(1))
        assert cluster.records("t") == []
        assert not cluster.errors


async def test_a_leader_that_is_down_is_named_without_an_address(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        part = cluster.state.topics.partition("t", 0)
        assert part is not None
        other = next(b for b in range(3) if b != part.leader)
        leader = part.leader
        cluster.move_partition_leader("t", 0, leader)  # a newer epoch, same leader
        cluster.state.online.discard(leader)  # down as seen by the others' metadata
        async with connect(cluster, other) as conn:
            resp = await conn.request(produce(11, "t", 0, batch(b"a")))
        ((answer,),) = (t.partition_responses for t in resp.responses)
        assert int(answer.error_code) == NOT_LEADER
        assert answer.current_leader.leader_id == leader
        assert resp.node_endpoints == ()
        cluster.state.online.add(leader)


async def test_the_producer_retries_at_once_on_the_leader_a_refusal_names(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The partition's leader moves; the producer's next batch goes to the old
    leader, which names the new one: the retry goes there at once, neither
    after the retry backoff nor after the metadata refresh (held up here for
    20 s), and the cached leader is the new one."""
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 0)
        async with Producer(cluster.bootstrap, linger=0, retry_backoff=1.0) as producer:
            await producer.send("t", b"before", partition=0)
            assert producer.cluster.leader_for(TP) == 0
            metadata_asked: list[float] = []

            def slow_metadata(call: Intercepted) -> Delay:
                metadata_asked.append(anyio.current_time())
                return Delay(20.0)

            cluster.control(ApiKey.METADATA, slow_metadata)
            cluster.move_partition_leader("t", 0, 1)
            start = anyio.current_time()
            written = await producer.send("t", b"after", partition=0)
            took = anyio.current_time() - start
            assert took < 0.01, took  # not the 1 s backoff, nor the 20 s refresh
            assert written.offset == 1
            assert producer.cluster.leader_for(TP) == 1
            assert metadata_asked, "the refresh is still asked for, beside the retry"
            cluster.clear_controls()
        assert [r.value for r in cluster.records("t")] == [b"before", b"after"]
        assert not cluster.errors


async def test_a_stale_metadata_answer_does_not_take_the_leader_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A refresh answered by a broker that has not heard of the move yet (older
    leader epoch) leaves the newer leader in the cache."""
    async with FakeCluster(brokers=2) as cluster, Cluster(cluster.bootstrap) as client:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 0)
        await client.refresh_metadata(["t"])
        part = cluster.state.topics.partition("t", 0)
        assert part is not None
        old_epoch = part.leader_epoch
        cluster.move_partition_leader("t", 0, 1)
        await client.refresh_metadata(["t"])
        assert client.leader_for(TP) == 1
        # The broker's state goes back (as a lagging broker would answer).
        part.leader, part.leader_epoch = 0, old_epoch
        info = await client.refresh_metadata(["t"])
        assert client.leader_for(TP) == 1
        assert info["t"].partitions[0].leader == 1  # what the caller is given, too


def test_keep_newer_takes_a_recreated_topic_as_answered() -> None:
    old, new = uuid.uuid4(), uuid.uuid4()
    cached = TopicInfo("t", old, {0: PartitionInfo(0, 1, 7), 1: PartitionInfo(1, 0, 3)})
    answered = TopicInfo("t", old, {0: PartitionInfo(0, 0, 5), 1: PartitionInfo(1, 1, 4)})
    merged = keep_newer(cached, answered)
    assert merged.partitions == {0: PartitionInfo(0, 1, 7), 1: PartitionInfo(1, 1, 4)}
    recreated = TopicInfo("t", new, {0: PartitionInfo(0, 0, 0)})
    assert keep_newer(cached, recreated) is recreated
    no_id = TopicInfo("t", None, {0: PartitionInfo(0, 0, 0)})
    assert keep_newer(cached, no_id) is no_id


def test_a_hint_is_taken_only_when_newer_and_reachable() -> None:
    topics = {"t": TopicInfo("t", None, {0: PartitionInfo(0, 0, 5)})}
    before = topics["t"]
    brokers = {0: BrokerInfo(0, "h0", 1)}
    assert not apply_leader_hint(topics, brokers, TP, _Hint(1, 5), ())  # not newer
    assert not apply_leader_hint(topics, brokers, TP, _Hint(-1, 6), ())  # no leader
    assert not apply_leader_hint(topics, brokers, TP, _Hint(1, 6), ())  # no address for 1
    assert not apply_leader_hint(topics, brokers, TopicPartition("u", 0), _Hint(0, 9), ())
    assert topics["t"] is before
    assert apply_leader_hint(topics, brokers, TP, _Hint(1, 6), [_Endpoint(1, "h1", 2)])
    assert topics["t"].partitions[0] == PartitionInfo(0, 1, 6)
    assert brokers[1] == BrokerInfo(1, "h1", 2)
    assert before.partitions[0] == PartitionInfo(0, 0, 5)  # what a caller held is left alone
