"""InitProducerId and idempotent Produce on the embedded broker, beyond the conformance suite.

What Kafka answers is checked by
``tests/conformance/test_idempotent_produce_conformance.py``; these tests
cover what only the embedded broker decides (transactional ids, ids unique
over the brokers, every version, leader changes).
"""

from __future__ import annotations

import trio.testing

from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.protocol.framing import build, request_module
from gengroup.protocol.records import encode_batch
from gengroup.protocol.versions import ApiKey

from . import connect, ms, produce

INVALID_REQUEST = 42
INVALID_TXN_STATE = 48
OUT_OF_ORDER = 45


def _init(v: int, transactional_id: str | None = None, pid: int = -1, epoch: int = -1) -> object:
    mod = request_module(ApiKey.INIT_PRODUCER_ID, v)
    return build(
        mod.InitProducerIdRequest,
        transactional_id=transactional_id,
        transaction_timeout=ms(60_000),
        producer_id=pid,
        producer_epoch=epoch,
    )


def _batch(pid: int, epoch: int, seq: int) -> bytes:
    return encode_batch(
        [(None, b"a", (), 1_000), (None, b"b", (), 1_000)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


async def test_init_producer_id_every_version_unique_over_brokers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        got: list[int] = []
        for broker in range(3):
            async with connect(cluster, broker) as conn:
                for v in range(6):
                    resp = await conn.request(_init(v))
                    assert (int(resp.error_code), int(resp.producer_epoch)) == (0, 0)
                    got.append(int(resp.producer_id))
        assert got == list(range(18))
        assert not cluster.errors


async def test_init_producer_id_with_a_transactional_id_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster() as cluster, connect(cluster) as conn:
        for txn, code in (("txn", INVALID_TXN_STATE), ("", INVALID_REQUEST)):
            resp = await conn.request(_init(5, txn))
            answer = (int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch))
            assert answer == (code, -1, -1)
        resp = await conn.request(_init(3, None, pid=0, epoch=-1))
        assert int(resp.error_code) == INVALID_REQUEST
        assert not cluster.errors


async def test_producer_state_survives_a_leader_change(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=2, topics={"t": 1}) as cluster:
        leader = cluster.state.topics.partition("t", 0)
        assert leader is not None
        first = leader.leader
        async with connect(cluster, first) as conn:
            resp = await conn.request(produce(11, "t", 0, _batch(3, 0, 0)))
            assert int(resp.responses[0].partition_responses[0].error_code) == 0
        other = 1 - first
        cluster.state.topics.move_leader("t", 0, other)
        async with connect(cluster, other) as conn:
            retry = await conn.request(produce(11, "t", 0, _batch(3, 0, 0)))
            gap = await conn.request(produce(11, "t", 0, _batch(3, 0, 9)))
        ((r,),) = (t.partition_responses for t in retry.responses)
        ((g,),) = (t.partition_responses for t in gap.responses)
        assert (int(r.error_code), int(r.base_offset)) == (0, 0)
        assert (int(g.error_code), int(g.base_offset), g.error_message) == (OUT_OF_ORDER, -1, None)
        assert leader.log.high_watermark == 2
        assert not cluster.errors


def _now_batch(cluster: FakeCluster, pid: int, seq: int) -> bytes:
    """A batch of two records stamped with the cluster's wall clock."""
    now = cluster.state.wall_ms()
    return encode_batch(
        [(None, b"a", (), now), (None, b"b", (), now)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )


async def _send(cluster: FakeCluster, broker: int, topic: str, data: bytes) -> tuple[int, int]:
    async with connect(cluster, broker) as conn:
        resp = await conn.request(produce(11, topic, 0, data))
    ((part,),) = (t.partition_responses for t in resp.responses)
    return int(part.error_code), int(part.base_offset)


async def test_restart_keeps_the_last_batch_of_the_partitions_it_leads_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Kafka 4.3.1 after a restart (its snapshot holds each producer's last
    # batch): a retry of the last batch is a duplicate, of an older one
    # OUT_OF_ORDER_SEQUENCE_NUMBER. A partition another replica kept leading
    # keeps its leader's full state.
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("alone", 1)  # led by broker 0, its only replica
        cluster.create_topic("shared", 1, replication_factor=2)
        cluster.move_partition_leader("shared", 0, 0)
        for topic in ("alone", "shared"):
            for seq in (0, 2, 4):
                assert await _send(cluster, 0, topic, _now_batch(cluster, 3, seq)) == (0, seq)
        await cluster.restart_broker(0)
        shared = cluster.state.topics.partition("shared", 0)
        assert shared is not None and shared.leader == 1
        assert await _send(cluster, 0, "alone", _now_batch(cluster, 3, 2)) == (OUT_OF_ORDER, -1)
        assert await _send(cluster, 0, "alone", _now_batch(cluster, 3, 4)) == (0, 4)
        assert await _send(cluster, 0, "alone", _now_batch(cluster, 3, 0)) == (OUT_OF_ORDER, -1)
        assert await _send(cluster, 1, "shared", _now_batch(cluster, 3, 0)) == (0, 0)
        assert await _send(cluster, 0, "alone", _now_batch(cluster, 3, 6)) == (0, 6)
        assert (cluster.high_watermark("alone"), cluster.high_watermark("shared")) == (8, 6)
        assert not cluster.errors


async def test_restart_drops_producers_expired_by_their_last_timestamp(
    autojump_clock: trio.testing.MockClock,
) -> None:
    settings = BrokerSettings(producer_id_expiration_ms=60_000)
    async with FakeCluster(settings=settings, topics={"t": 1}) as cluster:
        assert await _send(cluster, 0, "t", _now_batch(cluster, 3, 0)) == (0, 0)
        await cluster.restart_broker(0, downtime=59.9)
        # Not expired yet: a retry of the last batch is a duplicate.
        assert await _send(cluster, 0, "t", _now_batch(cluster, 3, 0)) == (0, 0)
        await cluster.restart_broker(0, downtime=0.1)
        # 60 s after the batch's timestamp: forgotten, so the retry is appended again.
        assert await _send(cluster, 0, "t", _now_batch(cluster, 3, 0)) == (0, 2)
        assert not cluster.errors


async def test_negative_sequence_is_answered_without_message_and_with_log_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Kafka 4.3.1: INVALID_RECORD, base -1, the log start offset, no message.
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        await conn.request(produce(11, "t", 0, _batch(3, 0, 0)))
        part = cluster.state.topics.partition("t", 0)
        assert part is not None
        part.log.delete_records(2)
        resp = await conn.request(produce(11, "t", 0, _batch(3, 0, -1)))
        ((p,),) = (t.partition_responses for t in resp.responses)
        answer = (int(p.error_code), int(p.base_offset), int(p.log_start_offset), p.error_message)
        assert answer == (87, -1, 2, None)
        assert not cluster.errors
