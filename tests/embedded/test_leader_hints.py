"""Leader hints (KIP-951): a broker refusing a Produce NOT_LEADER_OR_FOLLOWER
names the partition's leader, and the producer retries there at once.

``tests/test_leader_hints_kafka.py`` checks the same against Apache Kafka:
its answer to a Produce sent to a follower, and the producer following it.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
import trio.testing

from gengroup._errors import RequestTimedOut
from gengroup._types import TopicPartition
from gengroup.broker import Delay, FakeCluster, Intercepted, Respond
from gengroup.broker.apis import produce as produce_api
from gengroup.broker.state import ClusterState
from gengroup.io.cluster import Cluster
from gengroup.io.metadata import (
    BrokerInfo,
    PartitionInfo,
    TopicInfo,
    apply_leader_hint,
    keep_newer,
)
from gengroup.producer import Producer
from gengroup.protocol.framing import response_module
from gengroup.protocol.versions import ApiKey

from ..test_leader_hints_kafka import fenced_fetch_at_a_follower, refusal_from_a_follower
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


def _refusal(call: Intercepted, state: ClusterState, leader: int, epoch: int) -> Respond:
    """NOT_LEADER_OR_FOLLOWER for every partition of ``call``, naming ``leader`` at ``epoch``."""
    mod = response_module(ApiKey.PRODUCE, call.api_version)
    return Respond(
        produce_api._response(
            mod,
            call.request,
            lambda t, p: produce_api._partition(
                mod, int(p.index), NOT_LEADER, None, (-1, -1, -1), (leader, epoch)
            ),
            state,
            {leader},
        )
    )


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


def test_keep_newer_takes_a_recreated_topic_and_hinted_partitions_as_answered() -> None:
    old, new = uuid.uuid4(), uuid.uuid4()
    cached = TopicInfo("t", old, {0: PartitionInfo(0, 1, 7), 1: PartitionInfo(1, 0, 3)})
    answered = TopicInfo("t", old, {0: PartitionInfo(0, 0, 5), 1: PartitionInfo(1, 1, 4)})
    merged = keep_newer(cached, answered)
    assert merged.partitions == {0: PartitionInfo(0, 1, 7), 1: PartitionInfo(1, 1, 4)}
    assert keep_newer(cached, answered, hinted={0}) is answered
    recreated = TopicInfo("t", new, {0: PartitionInfo(0, 0, 0)})
    assert keep_newer(cached, recreated) is recreated
    no_id = TopicInfo("t", None, {0: PartitionInfo(0, 0, 0)})
    assert keep_newer(cached, no_id) is no_id


def test_a_hint_is_taken_only_when_newer_and_reachable() -> None:
    topics = {"t": TopicInfo("t", None, {0: PartitionInfo(0, 0, 5)})}
    before = topics["t"]
    brokers = {0: BrokerInfo(0, "h0", 1)}
    hinted: dict[str, set[int]] = {}
    assert not apply_leader_hint(topics, brokers, hinted, TP, _Hint(1, 5), ())  # not newer
    assert not apply_leader_hint(topics, brokers, hinted, TP, _Hint(-1, 6), ())  # no leader
    assert not apply_leader_hint(topics, brokers, hinted, TP, _Hint(1, 6), ())  # no address
    other = TopicPartition("u", 0)
    assert not apply_leader_hint(topics, brokers, hinted, other, _Hint(0, 9), ())
    assert topics["t"] is before and not hinted
    assert apply_leader_hint(topics, brokers, hinted, TP, _Hint(1, 6), [_Endpoint(1, "h1", 2)])
    assert topics["t"].partitions[0] == PartitionInfo(0, 1, 6)
    assert brokers[1] == BrokerInfo(1, "h1", 2)
    assert hinted == {"t": {0}}
    assert before.partitions[0] == PartitionInfo(0, 0, 5)  # what a caller held is left alone


async def test_brokers_naming_each_other_are_not_a_retry_loop_without_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two brokers each refusing, naming the other with an ever newer epoch:
    only the first retry after a move goes at once, the others back off."""
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 0)
        producer = Producer(cluster.bootstrap, linger=0, retry_backoff=1.0, delivery_timeout=3.0)
        async with producer:
            await producer.send("t", b"a", partition=0)
            part = cluster.state.topics.partition("t", 0)
            assert part is not None
            asked: list[int] = []

            def refuse(call: Intercepted) -> Respond:
                asked.append(call.broker_id)
                return _refusal(
                    call, cluster.state, 1 - call.broker_id, part.leader_epoch + len(asked)
                )

            cluster.control(ApiKey.PRODUCE, refuse)
            with pytest.raises(RequestTimedOut):
                await producer.send("t", b"b", partition=0)
            cluster.clear_controls()
        # 3 s of backoffs from 1 s (jittered, doubling): a handful, not thousands.
        assert 2 <= len(asked) <= 6, asked
        assert asked[:2] == [0, 1]  # the first retry went at once to the leader named


async def test_a_stale_hint_about_a_recreated_topic_does_not_outlive_the_next_metadata(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A hint from a broker that has not heard the topic was deleted and created
    again names the old topic's leader at its (higher) epoch: the next
    Metadata answer replaces it, and records are written."""
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("t", 1, replication_factor=3)
        for b in (1, 2, 1, 2, 1, 2):  # the old topic's epoch grows
            cluster.move_partition_leader("t", 0, b)
        old = cluster.state.topics.partition("t", 0)
        assert old is not None
        old_leader, old_epoch = old.leader, old.leader_epoch
        cluster.delete_topic("t")
        cluster.create_topic("t", 1, replication_factor=3)
        cluster.move_partition_leader("t", 0, 0)
        async with Producer(cluster.bootstrap, linger=0, retry_backoff=0.1) as producer:
            await producer.send("t", b"a", partition=0)
            lagging = [True]

            def stale(call: Intercepted) -> Respond | None:
                if call.broker_id != 0 or not lagging:
                    return None
                lagging.clear()  # once: broker 0 then hears of the new topic
                return _refusal(call, cluster.state, old_leader, old_epoch)

            cluster.control(ApiKey.PRODUCE, stale)
            with anyio.fail_after(5):
                for value in (b"b", b"c"):
                    await producer.send("t", value, partition=0)
            assert producer.cluster.leader_for(TP) == 0
            info = await producer.cluster.refresh_metadata(["t"])
            assert info["t"].partitions[0].leader_epoch < old_epoch
        assert [r.value for r in cluster.records("t")] == [b"a", b"b", b"c"]


async def test_the_embedded_broker_names_the_leader_in_a_followers_refusal_as_kafka_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("t", 1, replication_factor=3)
        cluster.move_partition_leader("t", 0, 2)
        await refusal_from_a_follower(cluster.bootstrap, "t")


async def test_the_embedded_broker_names_the_leader_in_a_fenced_fetch_as_kafka_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("t", 1, replication_factor=3)
        part = cluster.state.topics.partition("t", 0)
        assert part is not None
        cluster.move_partition_leader("t", 0, (part.leader + 1) % 3)
        await fenced_fetch_at_a_follower(cluster.bootstrap, "t")
