"""A group worker meets records damaged under a correct CRC as the Java consumer does.

Every Fetch answer for ``t[0]`` holds, from the offset asked for on, a sound
batch (offsets 0-2), a batch whose header and CRC are correct but whose
records are malformed (3-5), and a sound batch (6-8). The prefetcher checks
only the headers; the records are decoded by the worker, after the batch was
handed out. The worker must still get 0-2, the batch ending there
(``next_offset`` 3), then the damage from its next step, naming the partition
and the offset, and from every step after, until it seeks past it: nothing
after the damage is handed out, and nothing is committed past it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from gengroup import (
    ConsumerGroup,
    CorruptRecordError,
    DecompressionLimitExceeded,
    FetchedBatch,
    Generation,
    TopicPartition,
)
from gengroup._config import GroupConfig
from gengroup._types import GenerationIdentity
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Intercepted, Respond
from gengroup.consumer.columnar import fetched_to_arrow
from gengroup.consumer.generation import RebalanceTimings
from gengroup.consumer.ownership import Ownership
from gengroup.membership.member import Outcome
from gengroup.protocol.compression import Compression
from gengroup.protocol.versions import ApiKey

from ..embedded import damaged_batch, fetch_answer, sound_batch
from .helpers import EMBEDDED_SETTINGS

TP = TopicPartition("t", 0)
SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}
DAMAGE = r"^Fetch t\[0\]: record batch at offset 3: negative record length at byte 62$"


LOG = [sound_batch(0, b"x"), damaged_batch(3), sound_batch(6, b"z")]


def _answer(req: Intercepted) -> Respond:
    """The batches of LOG from the one holding the offset asked for on."""
    offset = req.request.topics[0].partitions[0].fetch_offset
    return fetch_answer(req, b"".join(LOG[offset // 3 :]), 9)


def _offsets(batch: FetchedBatch, read: str) -> list[int]:
    if read == "records":
        return [r.offset for r in batch]
    table = batch.to_arrow()
    return [int(o) for o in table.column("offset").to_pylist()]


@pytest.mark.parametrize("read", ["records", "arrow"])
async def test_records_before_damage_are_handed_out_then_the_damage_at_every_step(
    autojump_clock: trio.testing.MockClock, read: str
) -> None:
    """The worker gets 0-2 in a batch ending at 3, marks and commits 3; its
    next step raises the damage, naming partition, offset and the byte within
    the batch, and so does every step after (none hands out 6-8) until it
    seeks past the damage. The batch's first read used to raise, hiding 0-2
    (and the byte counted from the start of the answer)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, _answer)
        seen: list[int] = []
        ends: list[int] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            batches = gen.fetch(TP)
            with pytest.raises(CorruptRecordError, match=DAMAGE):
                async for batch in batches:
                    seen += _offsets(batch, read)
                    ends.append(batch.next_offset)
                    gen.mark(TP, batch.next_offset)
            assert (seen, ends) == ([0, 1, 2], [3])
            for _ in range(3):  # later steps, however long the worker waits
                await trio.sleep(5)
                with pytest.raises(CorruptRecordError, match=DAMAGE):
                    await anext(batches)
            await gen.commit()
            assert cluster.committed_offsets("g") == {TP: 3}
            gen.seek(TP, 6)  # past the damage: the worker goes on from there
            batch = await anext(batches)
            assert (_offsets(batch, read), batch.next_offset) == ([6, 7, 8], 9)
            gen.cancel("test over")


async def test_batches_handed_out_past_the_damage_hold_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cut into pieces of at most 3 records (one record batch each), the answer
    is three batches; a worker takes them all before reading any, then reads
    them into one table batch by batch. The damaged one has nothing to read
    and ends at 3; so does the one after it, handed out before the damage was
    known: its records (6-8) used to be read, and a mark of its
    ``next_offset`` (9) committed past the damage."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, _answer)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, max_batch_records=3, **SETTINGS
        ) as group:
            gen = await group.next()
            batches = gen.fetch(TP)
            pending = [await anext(batches) for _ in range(3)]
            assert [b.next_offset for b in pending] == [3, 6, 9]
            assert fetched_to_arrow(pending[:1]).column("offset").to_pylist() == [0, 1, 2]
            outcomes: list[Any] = []
            for batch in pending[1:]:
                with pytest.raises(CorruptRecordError, match=DAMAGE):
                    fetched_to_arrow([batch])
                with pytest.raises(CorruptRecordError, match=DAMAGE):
                    _ = batch.records
                outcomes.append(batch.next_offset)
            assert outcomes == [3, 3]
            for batch in pending:
                gen.mark(TP, batch.next_offset)
            with pytest.raises(CorruptRecordError, match=DAMAGE):
                await anext(batches)
            await gen.commit()
            assert cluster.committed_offsets("g") == {TP: 3}
            gen.cancel("test over")


class _Stopped:
    """A later generation's prefetcher, as far as damage goes: what it was told."""

    def __init__(self) -> None:
        self.told: list[tuple[TopicPartition, int, Exception]] = []

    def damaged(self, tp: TopicPartition, offset: int, error: Exception) -> None:
        self.told.append((tp, offset, error))


async def test_a_retained_span_goes_on_from_the_damage_found_after_its_batch_was_handed_out() -> (
    None
):
    """Under cooperative rebalancing a partition's span outlives its generation and
    records where its next batch starts (the next generation fetches a retained
    partition from there) as each batch is handed out: 9 here. A worker that
    reads the batch only after the next generation formed finds damage at 3:
    the span goes back to 3 and the holder's prefetcher stops there, or the
    worker would go on at 9, past the damage, silently."""
    prefetchers = [_Stopped(), _Stopped()]
    own = Ownership(GroupConfig.create("g", ["t"], "127.0.0.1:9092"))

    def generation(sequence: int, added: frozenset[TopicPartition]) -> Generation:
        gen = Generation(
            identity=GenerationIdentity("g", 3, "m", None, sequence),
            is_leader=False,
            protocol="cooperative-sticky",
            assignments={TP: 0},
            timings=RebalanceTimings(),
            _committer=None,  # type: ignore[arg-type]
            _prefetcher=prefetchers[sequence - 1],  # type: ignore[arg-type]
            added=added,
            retained=frozenset({TP}) - added,
            rebalance_protocol="cooperative",
        )
        gen._spans, gen._span_host = own.spans, own
        return gen

    error = CorruptRecordError("Fetch t[0]: record batch at offset 3: ...")
    async with own.hosting():
        first = generation(1, frozenset({TP}))
        own.adopt(first)
        first.start_soon(trio.sleep_forever, partition=TP)
        own.spans[TP].position = 9  # a batch ending at 9 was handed out
        first.end(Outcome.REJOIN, "assignment changed")
        first.set_ended()
        second = generation(2, frozenset())
        own.adopt(second)
        assert own.spans[TP].gen is second
        first.records_damaged(TP, 3, error)  # the first generation's prefetcher stopped
        assert own.spans[TP].position == 3
        assert prefetchers[1].told == [(TP, 3, error)]
        assert prefetchers[0].told == []
        second.end(Outcome.REJOIN, "the group is closing", release=True)


@pytest.mark.parametrize("read", ["records", "arrow"])
@pytest.mark.parametrize("limit", [65536, 1 << 20])
async def test_a_batch_decompressing_past_max_decompressed_bytes_is_a_typed_error(
    autojump_clock: trio.testing.MockClock, read: str, limit: int
) -> None:
    """A zstd batch of 200 KiB of records (a few hundred bytes on the wire)
    is read whole under a limit of 1 MiB; under 64 KiB the records before it
    are handed out, then every step raises DecompressionLimitExceeded, a
    CorruptRecordError naming the setting to raise. It used to be a plain
    ProtocolError with a limit no setting could change."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [b"a", b"b"])
        cluster.produce("t", [b"v" * 10_240] * 20, compression=Compression.ZSTD)
        seen: list[int] = []
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, max_decompressed_bytes=limit, **SETTINGS
        ) as group:
            gen = await group.next()
            batches = gen.fetch(TP)
            if limit > 20 * 10_240:
                while len(seen) < 22:
                    seen += _offsets(await anext(batches), read)
                assert seen == list(range(22))
            else:
                with pytest.raises(DecompressionLimitExceeded, match="max_decompressed_bytes"):
                    async for batch in batches:
                        seen += _offsets(batch, read)
                assert seen == [0, 1]
                with pytest.raises(CorruptRecordError, match=r"^Fetch t\[0\]: .*offset 2"):
                    await anext(batches)
            gen.cancel("test over")
