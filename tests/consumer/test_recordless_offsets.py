"""Offsets holding no record for the worker are committed past once its mark reaches them.

The partition ``t[0]`` holds, as a transactional producer leaves it:

* 0-2: three plain records;
* 3: the COMMIT marker of producer 7's transaction (a control batch);
* 4-6: three records of producer 8's transaction, which is aborted;
* 7: the ABORT marker of producer 8.

Every Fetch answer holds the one batch at the offset asked for, so the
answers for 3 and 7 hold only a marker, and under ``read_committed`` the one
for 4 only aborted records: such an answer moves the fetch position without
handing anything out. The Java consumer's position and commits move past
them; a worker marking ``batch.next_offset`` used to stay at 3 (or 7) for
good, with a lag of 5 (or 1) that never cleared.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import ConsumerGroup, CooperativeStickyBalancer, Generation, TopicPartition
from gengroup._config import GroupConfig
from gengroup._errors import OffsetOutOfRange
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted, Respond
from gengroup.consumer.prefetch import Prefetcher
from gengroup.io.cluster import Cluster
from gengroup.protocol.fetch import PartitionFetch
from gengroup.protocol.records import (
    ControlType,
    encode_batch,
    encode_control_batch,
    scan_batches,
    with_base_offset,
)
from gengroup.protocol.versions import ApiKey

from ..embedded import fetch_answer as answer_with
from .helpers import EMBEDDED_SETTINGS, wait_until

TP = TopicPartition("t", 0)
SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}
END = 8


def _marker(kind: ControlType, producer: int, offset: int) -> bytes:
    return encode_control_batch(
        kind, producer_id=producer, producer_epoch=0, timestamp=0, base_offset=offset
    )


#: Each batch of the log, by its first offset, and the offsets it covers.
LOG = {
    0: (encode_batch([(None, b"x", (), 0)] * 3, base_offset=0), 3),
    3: (_marker(ControlType.COMMIT, 7, 3), 1),
    4: (
        encode_batch(
            [(None, b"aborted", (), 0)] * 3,
            base_offset=4,
            producer_id=8,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        3,
    ),
    7: (_marker(ControlType.ABORT, 8, 7), 1),
}


def fetch_answer(req: Intercepted) -> Delay | Respond:
    """The batch holding the offset asked for; nothing (after a long poll's wait) at the end."""
    offset = req.request.topics[0].partitions[0].fetch_offset
    first = max((o for o in LOG if o <= offset), default=0)
    batch, count = LOG[first]
    held = offset < END and offset < first + count
    aborted = [(8, 4)] if first == 4 else []
    response = answer_with(req, batch if held else b"", END, aborted=aborted)
    return response if held else Delay(0.5, response)


async def _consume(gen: Generation, seen: list[int]) -> None:
    async for batch in gen.fetch(TP):
        seen.extend(r.offset for r in batch)
        gen.mark(TP, batch.next_offset)


@pytest.mark.parametrize(
    ("isolation", "records"),
    [("read_committed", [0, 1, 2]), ("read_uncommitted", [0, 1, 2, 4, 5, 6])],
)
async def test_a_worker_marking_its_batches_commits_past_markers_and_aborted_records(
    autojump_clock: trio.testing.MockClock, isolation: Any, records: list[int]
) -> None:
    """The worker gets only the records; its mark, its lag and the group's
    committed offset reach the end of the log (8), as the Java consumer's
    position does: it used to stay at 3 (read_committed) or 7."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, fetch_answer)
        seen: list[int] = []
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, isolation_level=isolation, **SETTINGS
        ) as group:
            gen = await group.next()
            gen.start_soon(_consume, gen, seen)
            await trio.sleep(10)
            assert seen == records
            assert (gen.marks, gen.lag()) == ({TP: END}, {TP: 0})
            assert gen.position(TP) == END
            await gen.commit()
            assert cluster.committed_offsets("g") == {TP: END}
            gen.cancel("test over")


async def test_a_partition_task_under_a_cooperative_protocol_commits_past_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A span-scoped worker (its partition's span may outlive the generation)
    marks through the span: the same, its mark reaches the end."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, fetch_answer)
        seen: list[int] = []
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, balancers=[CooperativeStickyBalancer()], **SETTINGS
        ) as group:
            gen = await group.next()
            gen.start_soon(_consume, gen, seen, partition=TP)
            await trio.sleep(10)
            assert (seen, gen.marks, gen.lag()) == ([0, 1, 2], {TP: END}, {TP: 0})
            await gen.commit()
            assert cluster.committed_offsets("g") == {TP: END}
            gen.cancel("test over")


async def test_offsets_without_records_wait_for_the_mark_of_the_batch_before_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While the batch before them is not marked, nothing passes them: the
    position (what was read) is at the end, the mark is not. Marking the batch
    takes the mark to the end at once. Marking short of them (an application
    that marks only some of the records) moves nothing past them; and a
    partition never marked is never moved (nothing to commit for it)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, fetch_answer)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            batches = gen.fetch(TP)
            batch = await anext(batches)
            assert batch.next_offset == 3
            await wait_until(lambda: gen.position(TP) == END, "the end read", 10)
            await trio.sleep(5)
            assert (gen.marks, gen.lag()) == ({}, {TP: END})
            await gen.commit()
            assert cluster.committed_offsets("g") == {}
            gen.mark(TP, 2)
            assert gen.marks == {TP: 2}
            gen.mark(TP, batch.next_offset)
            assert (gen.marks, gen.lag()) == ({TP: END}, {TP: 0})
            await gen.commit()
            assert cluster.committed_offsets("g") == {TP: END}
            gen.cancel("test over")


async def test_a_seek_forgets_the_offsets_without_records_it_moves_from(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After a seek back to 0 the position is 0 again, the batch at 0 is
    handed out again, and the offsets without records found before the seek
    are forgotten: its mark (3) stays at 3 until they are fetched again (held
    for 5 s here), then passes them."""
    held = False

    def answer(call: Intercepted) -> Delay | Respond:
        first = fetch_answer(call)
        offset = call.request.topics[0].partitions[0].fetch_offset
        # Held from the seek on: a Fetch from 3 may go out as soon as the
        # batch at 0 came (two Fetches in flight), before the test sees it.
        return Delay(5.0, first) if held and offset >= 3 and not isinstance(first, Delay) else first

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, answer)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            batches = gen.fetch(TP)
            await anext(batches)
            await wait_until(lambda: gen.position(TP) == END, "the end read", 10)
            held = True  # the offsets from 3 on are not fetched again for 5 s
            gen.seek(TP, 0)
            assert gen.position(TP) == 0
            batch = await anext(batches)
            assert batch.next_offset == 3
            gen.mark(TP, batch.next_offset)
            await trio.sleep(2.0)
            assert gen.marks == {TP: 3}
            await wait_until(lambda: gen.marks == {TP: END}, "the mark at the end", 60)
            gen.cancel("test over")


async def test_the_position_after_an_offset_reset_is_the_reset_offset() -> None:
    """Fetching from 100 is answered OFFSET_OUT_OF_RANGE and the position is
    reset to 500; once the batch at 500 is buffered, ``position()`` still says
    500, where the next batch handed out starts (it went back to 100)."""

    async def reset(tp: TopicPartition) -> int:
        return 500

    address = "127.0.0.1:9092"
    prefetcher = Prefetcher(
        Cluster(address), GroupConfig.create("g", ["t"], address), {TP: 100}, reset
    )
    part = prefetcher._parts[TP]
    out_of_range = OffsetOutOfRange(int(ErrorCode.offset_out_of_range), "t[0]")
    await prefetcher._deliver(0, part, PartitionFetch(error=out_of_range))
    assert prefetcher.position(TP) == 500
    raws, _ = scan_batches(with_base_offset(encode_batch([(None, b"v", (), 0)] * 3), 500))
    await prefetcher._deliver(
        0, part, PartitionFetch(error=None, high_watermark=503, next_offset=503, raw=raws, size=100)
    )
    assert prefetcher.position(TP) == 500
