"""InitProducerId and idempotent Produce on the embedded broker, beyond the conformance suite.

What Kafka answers is checked by
``tests/conformance/test_idempotent_produce_conformance.py``; these tests
cover what only the embedded broker decides (transactional ids, ids unique
over the brokers, every version, leader changes).
"""

from __future__ import annotations

import trio.testing

from gengroup.broker import FakeCluster
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
