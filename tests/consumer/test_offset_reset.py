"""Commits after an OFFSET_OUT_OF_RANGE reset.

A committed offset past the log end (a topic deleted and created again, a
log truncated) makes the member reset the partition as ``start_offset``
says. The old committed offset no longer points into the log, so the reset
lowers the generation's committed baseline: the marks of the records
processed from the reset position are committed, and a restart resumes
there instead of resetting and processing the same records again. A reset
alone commits nothing. The reset is logged once.
"""

from __future__ import annotations

import logging

import anyio
import pytest
import trio.testing

from gengroup import ConsumerGroup, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.consumer.generation import Span
from gengroup.protocol.records import NewRecord

from .helpers import EMBEDDED_SETTINGS, wait_until
from .test_span_commits import TP, Recorder, generation

SETTINGS = {**EMBEDDED_SETTINGS, "start_offset": "earliest"}


async def run_once(cluster: FakeCluster, processed: list[int]) -> None:
    """One member: a generation-scoped worker processes and marks what it is handed."""
    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
        gen = await group.next()

        async def work() -> None:
            async for batch in gen.fetch(TP):
                processed.extend(r.offset for r in batch)
                gen.mark(TP, batch.next_offset)

        gen.start_soon(work)
        await wait_until(lambda: gen.marks.get(TP) == 50, "the records marked", 60)


async def test_a_reset_partition_commits_its_new_position(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 50)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            await gen.commit({TP: 150})  # past the log end: the log it named is gone
        assert cluster.committed_offsets("g") == {TP: 150}
        first: list[int] = []
        with caplog.at_level(logging.WARNING, logger="gengroup"):
            await run_once(cluster, first)
        assert first == list(range(50))
        assert cluster.committed_offsets("g") == {TP: 50}
        resets = [r for r in caplog.records if "out of range" in r.getMessage()]
        assert len(resets) == 1, resets
        cluster.produce("t", [NewRecord(None, b"y", (), 0)] * 10)
        again: list[int] = []
        with anyio.fail_after(120):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                gen = await group.next()
                async for batch in gen.fetch(TP):
                    again.extend(r.offset for r in batch)
                    if batch.next_offset == 60:
                        break
        assert again == list(range(50, 60))  # resumed, nothing processed twice


async def test_a_reset_alone_commits_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """An application that refuses to follow a reset (the lake sink) marks nothing:
    the committed offset stays where it was, not moved back to the reset position."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 50)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            await gen.commit({TP: 150})
        seen: list[int] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            async for batch in gen.fetch(TP):
                seen.extend(r.offset for r in batch)  # handed out from the reset position
                break
        assert seen[0] == 0
        assert cluster.committed_offsets("g") == {TP: 150}


async def test_a_reset_between_generations_lowers_the_next_holders_baseline() -> None:
    """Under a cooperative protocol a retained partition's next generation reads the
    stale committed offset again: the span carries the reset until a commit is stored."""
    recorder = Recorder()
    spans: dict[TopicPartition, Span] = {}
    first = generation(1, spans, recorder, _committed={TP: 150})
    span = spans[TP] = Span(TP, first, position=150)
    first.set_ended()
    first.offset_reset(TP, 0)  # the ended generation's prefetcher fetches on
    first.mark(TP, 20)
    second = generation(2, spans, recorder, retained=frozenset({TP}), _committed={TP: 150})
    span.hand_to(second)
    assert second.marks == {TP: 20}
    await second.commit()
    assert recorder.commits == [(second.identity, {TP: 20})]
    # Stored: a later generation's baseline is what it reads, and a late commit
    # below it is left out again.
    third = generation(3, spans, recorder, retained=frozenset({TP}), _committed={TP: 20})
    second.set_ended()
    span.hand_to(third)
    await third.commit({TP: 10})
    assert len(recorder.commits) == 1
