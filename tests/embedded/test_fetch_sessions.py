"""Incremental fetch sessions (KIP-227): the sans-IO cache, then the broker in virtual time.

The rules tested here are Apache Kafka's (``FetchSession.scala``); the same
sequences run against real Kafka in ``tests/conformance/test_fetch_session_conformance.py``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.broker.fetch_sessions import (
    ContextKind,
    FetchAnswer,
    FetchContext,
    FetchSessionCache,
    PartitionOutcome,
    PartitionRequest,
    next_epoch,
)

from . import batch, connect, fetch, produce

NOT_FOUND = 70
INVALID_EPOCH = 71
UNKNOWN_PARTITION = 3


def req(topic: str, partition: int, offset: int = 0, max_bytes: int = 1000) -> PartitionRequest:
    return PartitionRequest(topic, partition, offset, max_bytes)


def ok(hw: int = 0, size: int = 0, start: int = 0) -> PartitionOutcome:
    return PartitionOutcome(0, hw, start, size)


def keys(ctx: FetchContext) -> list[tuple[str, int]]:
    return [p.key for p in ctx.partitions]


def answer(
    cache: FetchSessionCache,
    ctx: FetchContext,
    outcomes: dict[tuple[str, int], PartitionOutcome] | None = None,
    now_ms: int = 0,
) -> FetchAnswer[tuple[str, int]]:
    """Respond to ``ctx`` as if every partition read gave its outcome (default: nothing new)."""
    outcomes = outcomes or {}
    results = [(p, outcomes.get(p.key, ok()), p.key) for p in ctx.partitions]
    return cache.respond(ctx, results, now_ms)


def open_session(
    cache: FetchSessionCache, parts: Sequence[PartitionRequest], now_ms: int = 0
) -> int:
    ctx = cache.new_context(0, 0, parts, (), now_ms)
    assert ctx.kind is ContextKind.FULL
    result = answer(cache, ctx, now_ms=now_ms)
    assert result.session_id != 0
    return result.session_id


# --------------------------------------------------------------------------- the cache


def test_full_request_with_epoch_0_creates_a_session_answering_everything() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, 0, [req("t", 0), req("t", 1)], (), 0)
    result = answer(cache, ctx)
    assert result.error_code == 0
    assert result.partitions == (("t", 0), ("t", 1))
    session = cache.get(result.session_id)
    assert session is not None
    assert (session.epoch, list(session.partitions)) == (1, [("t", 0), ("t", 1)])


def test_epoch_minus_one_is_sessionless_and_closes_the_named_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0)])
    ctx = cache.new_context(sid, -1, [req("t", 0)], (), 0)
    assert ctx.kind is ContextKind.SESSIONLESS
    assert answer(cache, ctx) == FetchAnswer(0, 0, (("t", 0),))
    assert cache.get(sid) is None


def test_a_full_request_naming_a_session_replaces_it() -> None:
    cache = FetchSessionCache()
    first = open_session(cache, [req("t", 0)])
    second = answer(cache, cache.new_context(first, 0, [req("t", 1)], (), 0)).session_id
    assert second not in (0, first)
    assert (cache.get(first), len(cache)) == (None, 1)
    session = cache.get(second)
    assert session is not None and list(session.partitions) == [("t", 1)]


def test_session_ids_are_non_zero_and_unique() -> None:
    class Repeating(random.Random):
        def __init__(self) -> None:
            super().__init__()
            self.values = [5, 5, 5, 9]

        def randrange(self, *args: object, **kwargs: object) -> int:
            return self.values.pop(0)

    cache = FetchSessionCache(rng=Repeating())
    assert open_session(cache, [req("t", 0)]) == 5
    assert open_session(cache, [req("t", 0)]) == 9


def test_incremental_answers_only_changed_partitions() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0), req("t", 1), req("t", 2)])
    ctx = cache.new_context(sid, 1, (), (), 1)
    assert ctx.kind is ContextKind.INCREMENTAL
    assert keys(ctx) == [("t", 0), ("t", 1), ("t", 2)]
    assert answer(cache, ctx) == FetchAnswer(0, sid, ())
    # records; a new high watermark; a new log start offset
    ctx = cache.new_context(sid, 2, (), (), 2)
    changed = {("t", 0): ok(hw=1, size=70), ("t", 1): ok(hw=3), ("t", 2): ok(start=2)}
    assert answer(cache, ctx, changed).partitions == (("t", 0), ("t", 1), ("t", 2))
    # The same values again: nothing to say. (t[0] moved to the end: it had records.)
    ctx = cache.new_context(sid, 3, (), (), 3)
    assert keys(ctx) == [("t", 1), ("t", 2), ("t", 0)]
    same = {("t", 0): ok(hw=1), ("t", 1): ok(hw=3), ("t", 2): ok(start=2)}
    assert answer(cache, ctx, same).partitions == ()


def test_an_error_is_always_answered_and_the_recovery_too() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0)])
    failing = {("t", 0): PartitionOutcome(6, -1, -1, 0)}
    for epoch in (1, 2):
        ctx = cache.new_context(sid, epoch, (), (), 0)
        assert answer(cache, ctx, failing).partitions == (("t", 0),)
    # back with the offsets it had before the error: sent again (the high watermark was reset)
    ctx = cache.new_context(sid, 3, (), (), 0)
    assert answer(cache, ctx).partitions == (("t", 0),)
    ctx = cache.new_context(sid, 4, (), (), 0)
    assert answer(cache, ctx).partitions == ()


def test_added_partitions_go_last_and_updates_keep_their_place() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0), req("t", 1)])
    ctx = cache.new_context(sid, 1, [req("u", 0), req("t", 0, offset=5)], (), 0)
    assert keys(ctx) == [("t", 0), ("t", 1), ("u", 0)]
    assert ctx.partitions[0].fetch_offset == 5
    # u[0] is new to the session: its high watermark was never sent
    assert answer(cache, ctx).partitions == (("u", 0),)


def test_forgotten_partitions_are_dropped_and_an_empty_session_closes() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0), req("t", 1)])
    ctx = cache.new_context(sid, 1, (), [("t", 0), ("x", 9)], 0)
    assert keys(ctx) == [("t", 1)]
    answer(cache, ctx)
    ctx = cache.new_context(sid, 2, (), [("t", 1)], 0)
    assert ctx.kind is ContextKind.SESSIONLESS
    assert answer(cache, ctx) == FetchAnswer(0, 0, ())
    assert cache.get(sid) is None


def test_partitions_with_records_rotate_to_the_end() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0), req("t", 1), req("t", 2)])
    ctx = cache.new_context(sid, 1, (), (), 0)
    answer(cache, ctx, {("t", 0): ok(size=10), ("t", 1): ok(size=10)})
    ctx = cache.new_context(sid, 2, (), (), 0)
    assert keys(ctx) == [("t", 2), ("t", 0), ("t", 1)]


def test_session_errors_keep_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0)])
    for session_id, epoch, code in [
        (sid, 5, INVALID_EPOCH),
        (sid + 1, 1, NOT_FOUND),
        (0, 1, NOT_FOUND),
    ]:
        ctx = cache.new_context(session_id, epoch, [req("t", 0)], (), 0)
        assert (ctx.kind, ctx.partitions) == (ContextKind.ERROR, ())
        assert answer(cache, ctx) == FetchAnswer(code, 0, ())
    ctx = cache.new_context(sid, 1, (), (), 0)
    assert answer(cache, ctx) == FetchAnswer(0, sid, ())
    session = cache.get(sid)
    assert session is not None and session.epoch == 2


def test_an_epoch_that_moved_on_during_the_long_poll_is_refused() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0)])
    slow = cache.new_context(sid, 1, (), (), 0)
    fast = cache.new_context(sid, 2, (), (), 0)
    assert answer(cache, fast) == FetchAnswer(0, sid, ())
    assert answer(cache, slow, {("t", 0): ok(size=5)}) == FetchAnswer(INVALID_EPOCH, sid, ())


def test_a_partition_named_twice_is_read_once() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, -1, [req("t", 0), req("t", 1), req("t", 0, offset=4)], (), 0)
    assert keys(ctx) == [("t", 0), ("t", 1)]
    assert ctx.partitions[0].fetch_offset == 4


def test_epochs_wrap_to_one() -> None:
    assert [next_epoch(e) for e in (-1, 0, 1, 2**31 - 1)] == [-1, 1, 2, 1]


# --------------------------------------------------------------------------- eviction


def test_a_full_cache_answers_without_a_session() -> None:
    cache = FetchSessionCache(max_slots=1, eviction_ms=100)
    first = open_session(cache, [req("t", 0)], now_ms=0)
    ctx = cache.new_context(0, 0, [req("t", 0)], (), 50)
    assert answer(cache, ctx, now_ms=50) == FetchAnswer(0, 0, (("t", 0),))
    assert cache.get(first) is not None
    assert FetchSessionCache(max_slots=0).new_context(0, 0, [], (), 0).kind is ContextKind.FULL
    empty = FetchSessionCache(max_slots=0)
    assert answer(empty, empty.new_context(0, 0, [req("t", 0)], (), 0)).session_id == 0


def test_a_session_idle_past_the_eviction_time_makes_room() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=100)
    old = open_session(cache, [req("t", 0)], now_ms=0)
    used = open_session(cache, [req("t", 0)], now_ms=0)
    answer(cache, cache.new_context(used, 1, (), (), 90), now_ms=90)
    # at 100 nothing has been idle for more than 100 ms
    assert (
        answer(cache, cache.new_context(0, 0, [req("t", 0)], (), 100), now_ms=100).session_id == 0
    )
    new = answer(cache, cache.new_context(0, 0, [req("t", 0)], (), 101), now_ms=101).session_id
    assert new != 0 and cache.get(old) is None and cache.get(used) is not None
    assert cache.evictions == 1


def test_a_bigger_session_evicts_a_smaller_one_old_enough() -> None:
    cache = FetchSessionCache(max_slots=1, eviction_ms=100)
    small = open_session(cache, [req("t", 0)], now_ms=0)
    # used at 150: older than the eviction time then, but not idle
    answer(cache, cache.new_context(small, 1, (), (), 150), now_ms=150)
    same_size = cache.new_context(0, 0, [req("u", 0)], (), 200)
    assert answer(cache, same_size, now_ms=200).session_id == 0
    bigger = cache.new_context(0, 0, [req("u", 0), req("u", 1)], (), 200)
    assert answer(cache, bigger, now_ms=200).session_id not in (0, small)
    assert cache.get(small) is None


def test_a_young_session_is_not_evicted_by_a_bigger_one() -> None:
    cache = FetchSessionCache(max_slots=1, eviction_ms=100)
    open_session(cache, [req("t", 0)], now_ms=0)
    bigger = cache.new_context(0, 0, [req("u", 0), req("u", 1)], (), 50)
    assert answer(cache, bigger, now_ms=50).session_id == 0


def test_evict_all() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [req("t", 0)])
    open_session(cache, [req("t", 0)])
    assert (cache.evict_all(), len(cache)) == (2, 0)
    assert answer(cache, cache.new_context(sid, 1, (), (), 0)).error_code == NOT_FOUND


# --------------------------------------------------------------------------- the broker


async def test_broker_incremental_long_poll_answers_the_produced_partition(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        FakeCluster(topics={"t": 2}) as cluster,
        connect(cluster) as consumer,
        connect(cluster) as producer,
    ):
        resp = await consumer.request(
            fetch(12, "t", 0, 0, session_epoch=0, extra_partitions=[("t", 1, 0)])
        )
        sid = int(resp.session_id)
        assert sid != 0 and len(resp.responses[0].partitions) == 2
        start = trio.current_time()
        resp = await consumer.request(
            fetch(12, "t", 0, 0, session_id=sid, session_epoch=1, max_wait=5_000)
        )
        assert trio.current_time() - start == pytest.approx(5.0)
        assert (resp.error_code, resp.session_id, resp.responses) == (0, sid, ())

        async def produce_later() -> None:
            await trio.sleep(1)
            await producer.request(produce(9, "t", 1, batch(b"x")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_later)
            start = trio.current_time()
            resp = await consumer.request(
                fetch(12, "t", 0, 0, session_id=sid, session_epoch=2, max_wait=30_000)
            )
        assert trio.current_time() - start == pytest.approx(1.0)
        ((topic,),) = [resp.responses]
        assert [(p.partition_index, p.high_watermark) for p in topic.partitions] == [(1, 1)]
        assert topic.partitions[0].records


async def test_evict_fetch_sessions_provokes_session_id_not_found(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=2, topics={"t": 2}) as cluster:
        leader = cluster.state.topics.partition("t", 0)
        assert leader is not None
        async with (
            connect(cluster, leader.leader) as conn,
            connect(cluster, 1 - leader.leader) as other,
        ):
            resp = await conn.request(fetch(12, "t", 0, 0, session_epoch=0))
            sid = int(resp.session_id)
            assert sid != 0
            # sessions belong to a broker: the other one does not know it
            resp = await other.request(fetch(12, "t", 0, 0, session_id=sid, session_epoch=1))
            assert (resp.error_code, resp.session_id) == (NOT_FOUND, 0)
            assert cluster.evict_fetch_sessions() == 1
            resp = await conn.request(fetch(12, "t", 0, 0, session_id=sid, session_epoch=1))
            assert (resp.error_code, resp.session_id, resp.responses) == (NOT_FOUND, 0, ())


async def test_a_restarted_broker_has_no_sessions(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with connect(cluster) as conn:
            sid = int((await conn.request(fetch(12, "t", 0, 0, session_epoch=0))).session_id)
        await cluster.restart_broker(0)
        async with connect(cluster) as conn:
            resp = await conn.request(fetch(12, "t", 0, 0, session_id=sid, session_epoch=1))
            assert resp.error_code == NOT_FOUND


async def test_no_cache_slots_means_no_sessions(autojump_clock: trio.testing.MockClock) -> None:
    settings = BrokerSettings(max_incremental_fetch_session_cache_slots=0)
    async with FakeCluster(topics={"t": 1}, settings=settings) as cluster, connect(cluster) as conn:
        resp = await conn.request(fetch(12, "t", 0, 0, session_epoch=0))
        assert (resp.error_code, resp.session_id) == (0, 0)
        assert resp.responses[0].partitions[0].partition_index == 0


async def test_sessionless_fetch_before_v7(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        resp = await conn.request(fetch(6, "t", 0, 0))
        assert resp.responses[0].partitions[0].error_code == 0
        assert len(cluster.servers[0].fetch_sessions) == 0
