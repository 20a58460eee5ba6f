"""Repositioning within a generation, member lag, and per-record iteration."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from gengroup import (
    ConfigError,
    ConsumerGroup,
    DeserializationError,
    GenerationEnded,
    TopicPartition,
)
from gengroup.broker import FakeCluster
from gengroup.protocol.records import NewRecord

TP = TopicPartition("t", 0)
SETTINGS = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "commit_interval": 0.0}


def produce(cluster: FakeCluster, first: int, count: int) -> None:
    cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0) for i in range(first, count)])


async def test_seek_back_replays_and_seek_ahead_skips_without_moving_marks_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 0, 10)
        seen: list[int] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            it = gen.fetch(TP)
            batch = await it.__anext__()
            assert len(batch) == 10 and [r.value for r in batch] == [
                str(i).encode() for i in range(10)
            ]
            gen.mark(TP, batch.next_offset)
            gen.seek(TP, 4)  # replay from 4
            batch = await it.__anext__()
            seen.extend(r.offset for r in batch)
            assert seen[0] == 4 and seen[-1] == 9
            produce(cluster, 10, 30)
            gen.seek(TP, 25)  # skip ahead
            batch = await it.__anext__()
            assert batch.records[0].offset == 25 and batch.next_offset == 30
            with pytest.raises(KeyError):
                gen.seek(TopicPartition("t", 7), 0)
            with pytest.raises(ValueError):
                gen.seek(TP, -1)
            gen.cancel()
            await gen.wait_ended()
            with pytest.raises(GenerationEnded):
                gen.seek(TP, 0)
        # The replay did not move the committed offset back.
        assert cluster.committed_offsets("g")[TP] == 10


async def test_lag_is_high_watermark_minus_mark(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 0, 10)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            it = gen.fetch(TP)
            batch = await it.__anext__()
            assert gen.lag() == {TP: 10}
            gen.mark(TP, batch.next_offset - 3)
            assert gen.lag() == {TP: 3}
            gen.mark(TP, batch.next_offset)
            assert gen.lag() == {TP: 0}
            produce(cluster, 10, 15)
            await it.__anext__()
            assert gen.lag() == {TP: 5}
            gen.cancel()


async def test_deserializers_apply_when_decoded_and_fail_typed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce(
            "t",
            [
                NewRecord(b"k1", b'{"n": 1}', (), 0),
                NewRecord(None, b'{"n": 2}', (), 0),
                NewRecord(b"k3", b"not json", (), 0),
            ],
        )
        settings = {
            **SETTINGS,
            "key_deserializer": lambda b: None if b is None else b.decode(),
            "value_deserializer": json.loads,
        }
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            batch = await gen.fetch(TP).__anext__()
            assert [r.value for r in batch] == [b'{"n": 1}', b'{"n": 2}', b"not json"]
            with pytest.raises(DeserializationError, match=r"value of t\[0\] offset 2") as info:
                batch.decoded()
            assert isinstance(info.value.__cause__, json.JSONDecodeError)
            batch.records.pop()
            decoded = batch.decoded()
            assert [(d.key, d.value) for d in decoded] == [("k1", {"n": 1}), (None, {"n": 2})]
            gen.cancel()
    with pytest.raises(ConfigError, match="value_deserializer"):
        ConsumerGroup("g", ["t"], "127.0.0.1:1", value_deserializer="json")  # type: ignore[arg-type]
