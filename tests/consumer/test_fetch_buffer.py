"""The prefetcher's buffers and fetch pipeline, on the embedded broker in virtual time.

A slow worker holds its partition's buffer: the buffer does not grow past its
bound and no Fetch is sent for the partition while it is full. The next Fetch
goes out while the worker is still busy with the previous answer. Under the
member's budget (``fetch_buffer_bytes``) a slow worker holds its partition's
share while the others go on, the whole buffer stays within the budget however
many partitions share it, and each Fetch still asks for whole batches of many
partitions. Records reach the worker undecoded and are
decoded on its first access, with the same typed errors for damaged data.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gengroup import Cluster, ConsumerGroup, CorruptRecordError, Generation, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.consumer.prefetch import _Partition
from gengroup.io.fetch import fetch_partition
from gengroup.protocol.records import NewRecord, encode_batch, with_base_offset
from gengroup.protocol.versions import ApiKey

from ..embedded import damaged_batch, fetch_answer
from .helpers import EMBEDDED_SETTINGS

SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}
TP = TopicPartition("t", 0)
BATCHES = 60
PER_BATCH = 10
VALUE = b"v" * 100


def _fill(cluster: FakeCluster, partitions: int = 1) -> int:
    """Produce ``BATCHES`` batches of ``PER_BATCH`` records per partition; one batch's size."""
    for p in range(partitions):
        for i in range(BATCHES):
            cluster.produce(
                "t", [NewRecord(None, VALUE, (), i) for _ in range(PER_BATCH)], partition=p
            )
    return len(encode_batch([(None, VALUE, (), 0)] * PER_BATCH))


class FetchLog:
    """Every Fetch the broker receives: when, and the byte limit per partition."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, dict[int, int]]] = []

    def __call__(self, req: Intercepted) -> None:
        limits = {
            int(p.partition): int(p.partition_max_bytes)
            for t in req.request.topics
            for p in t.partitions
        }
        self.requests.append((trio.current_time(), limits))

    def since(self, t: float) -> int:
        return sum(1 for when, _ in self.requests if when >= t)


def _holds(part: _Partition) -> int:
    """What counts against ``part``: its buffered batches and the one its worker holds."""
    return part.buffered + part.held


@pytest.mark.parametrize("bound", ["member", "partition"])
async def test_a_slow_worker_holds_its_buffer_and_it_does_not_grow(
    autojump_clock: trio.testing.MockClock, bound: str
) -> None:
    limit = 8192
    # The member's budget over its one partition, or (without a budget) the
    # partition's own bound.
    settings = (
        {"fetch_buffer_bytes": limit}
        if bound == "member"
        else {"fetch_buffer_bytes": None, "partition_buffer_bytes": limit}
    )
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        size = _fill(cluster)
        fetches = FetchLog()
        cluster.control(ApiKey.FETCH, fetches)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings, **SETTINGS) as group:
            gen = await group.next()
            part = gen._prefetcher._parts[TP]
            seen: list[int] = []
            samples: list[tuple[int, int, int]] = []
            async for batch in gen.fetch(TP):
                seen += [r.offset for r in batch.records]
                if len(samples) < 2:
                    # A worker stuck on its batch: the buffer fills up to
                    # its bound, then stays as it is.
                    await trio.sleep(10.0)
                    samples.append((_holds(part), len(part.queue), len(fetches.requests)))
                    await trio.sleep(100.0)
                    samples.append((_holds(part), len(part.queue), len(fetches.requests)))
                gen.mark(TP, batch.next_offset)
                if batch.next_offset >= BATCHES * PER_BATCH:
                    break
        (held, queued, sent), (held_later, queued_later, sent_later) = samples
        # Prefetched beside the batch in the worker's hands, within the bound.
        assert limit // 2 <= held <= limit, held
        assert queued >= 1
        assert (held_later, queued_later, sent_later) == (held, queued, sent)
        # Every request asked for half the bound at most (the room left for a
        # second step while one is buffered).
        assert all(limits[0] <= limit // 2 for _, limits in fetches.requests)
        assert size < limit // 2
        assert seen == list(range(BATCHES * PER_BATCH))


async def test_a_closed_prefetcher_drops_its_buffers_and_keeps_the_positions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A span task that outlives its generation keeps the generation, and so
    its prefetcher, alive: the prefetcher must not keep what it buffered
    (several rebalances would each keep a budget's worth)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        size = _fill(cluster)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, fetch_buffer_bytes=8192, **SETTINGS
        ) as group:
            gen = await group.next()
            prefetcher = gen._prefetcher
            part = prefetcher._parts[TP]
            async for batch in gen.fetch(TP):
                gen.mark(TP, batch.next_offset)
                await trio.sleep(10.0)  # the buffer fills behind the batch in hand
                break
            assert part.queue and part.buffered >= size
            position = gen.position(TP)
            assert position == batch.next_offset
            prefetcher.close()
            assert (len(part.queue), part.buffered, prefetcher._budget.buffered) == (0, 0, 0)
            assert gen.position(TP) == position


async def test_a_slow_worker_holds_its_share_while_the_others_go_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    partitions, share = 4, 8192
    budget = partitions * share
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        _fill(cluster, partitions)
        async with ConsumerGroup(
            "g",
            ["t"],
            cluster.bootstrap,
            fetch_buffer_bytes=budget,
            partition_buffer_bytes=2 * share,  # the budget is the tighter bound
            **SETTINGS,
        ) as group:
            gen = await group.next()
            prefetcher = gen._prefetcher
            slow = prefetcher._parts[TP]
            held: list[int] = []
            member: list[int] = []
            done: list[int] = []

            async def fast(tp: TopicPartition) -> None:
                async for batch in gen.fetch(tp):
                    member.append(sum(_holds(p) for p in prefetcher._parts.values()))
                    gen.mark(tp, batch.next_offset)
                    if batch.next_offset >= BATCHES * PER_BATCH:
                        done.append(tp.partition)
                        return

            async with trio.open_nursery() as nursery:
                for p in range(1, partitions):
                    nursery.start_soon(fast, TopicPartition("t", p))
                async for _batch in gen.fetch(TP):
                    # Stuck on its first batch while the others read
                    # everything: its buffer stays within its share.
                    for _ in range(20):
                        await trio.sleep(5.0)
                        held.append(_holds(slow))
                    break
            gen.cancel("test over")
        assert sorted(done) == list(range(1, partitions))
        assert share // 2 <= held[0] <= share, held
        assert set(held) == {held[0]}, held  # held, not grown
        assert max(member) <= budget, max(member)


@pytest.mark.parametrize("value_size", [200, 2000])
async def test_slow_workers_on_many_partitions_do_not_stop_the_others(
    autojump_clock: trio.testing.MockClock, value_size: int
) -> None:
    # More partitions than the budget holds steps of half of
    # partition_buffer_bytes: each partition's share (8 KiB) is a quarter
    # of that. Half the workers are stuck on their first batch. Batches of
    # 2 KiB, or of 20 KiB: larger than a share, so that the slow workers'
    # batches take more than the whole budget.
    partitions, bound, budget = 32, 65536, 262144
    share = budget // partitions
    value, count = b"v" * value_size, 20_000 // value_size
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        for p in range(partitions):
            for i in range(count):
                cluster.produce("t", [NewRecord(None, value, (), i)] * 10, partition=p)
        size = len(encode_batch([(None, value, (), 0)] * 10))
        end = count * 10
        async with ConsumerGroup(
            "g",
            ["t"],
            cluster.bootstrap,
            fetch_buffer_bytes=budget,
            partition_buffer_bytes=bound,
            **SETTINGS,
        ) as group:
            gen = await group.next()
            parts = gen._prefetcher._parts
            held: list[int] = []
            slow_held: list[int] = []
            done: dict[int, float] = {}
            start = trio.current_time()

            async def worker(tp: TopicPartition) -> None:
                async for batch in gen.fetch(tp):
                    held.append(_member_holds(gen))
                    if tp.partition % 2 == 0:
                        await trio.sleep(10_000.0)  # a stuck downstream
                    elif batch.next_offset >= end:
                        done[tp.partition] = trio.current_time() - start
                        return

            async with trio.open_nursery() as nursery:
                for p in range(partitions):
                    nursery.start_soon(worker, TopicPartition("t", p))
                for _ in range(60):
                    await trio.sleep(1.0)
                    held.append(_member_holds(gen))
                    slow_held.extend(
                        _holds(part) for tp, part in parts.items() if tp.partition % 2 == 0
                    )
                nursery.cancel_scope.cancel()
            gen.cancel("test over")
        # Every fast partition was read to the end, within seconds.
        assert sorted(done) == list(range(1, partitions, 2)), sorted(done)
        assert max(done.values()) < 10.0, done
        # A slow worker's partition holds its share, or one batch more than
        # it held when it was fetched; the member, the budget plus at most a
        # batch per partition.
        assert max(slow_held) <= share + size, (max(slow_held), share)
        assert max(held) <= budget + partitions * size, max(held)


async def test_with_eight_partitions_each_next_batch_is_fetched_while_its_worker_processes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Default buffer settings; batches of 1 MiB as librdkafka's default.
    partitions = 8
    value = b"v" * 100_000
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        for p in range(partitions):
            for i in range(8):
                cluster.produce(
                    "t", [NewRecord(None, value, (), i) for _ in range(10)], partition=p
                )
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            waited: dict[int, list[float]] = {p: [] for p in range(partitions)}

            async def worker(tp: TopicPartition) -> None:
                t = trio.current_time()
                async for batch in gen.fetch(tp):
                    waited[tp.partition].append(trio.current_time() - t)
                    await trio.sleep(5.0)  # processing the batch
                    t = trio.current_time()
                    if batch.next_offset >= 80:
                        return

            async with trio.open_nursery() as nursery:
                for p in range(partitions):
                    nursery.start_soon(worker, TopicPartition("t", p))
        # After its first batch no worker waited for the broker.
        for p, times in waited.items():
            assert len(times) >= 3, (p, times)
            assert times[1:] == [0.0] * (len(times) - 1), (p, times)


async def test_the_next_fetch_goes_out_while_the_worker_processes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        _fill(cluster)
        fetches = FetchLog()
        cluster.control(ApiKey.FETCH, fetches)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, fetch_buffer_bytes=16384, **SETTINGS
        ) as group:
            gen = await group.next()
            waited: list[float] = []
            during: list[int] = []
            t = trio.current_time()
            async for batch in gen.fetch(TP):
                now = trio.current_time()
                waited.append(now - t)
                await trio.sleep(5.0)  # processing the batch
                during.append(fetches.since(now))
                t = trio.current_time()
                gen.mark(TP, batch.next_offset)
                if len(waited) == 4:
                    break
        # While each batch was processed the next one was fetched, so the
        # worker never waited for the broker after its first batch.
        assert all(n >= 1 for n in during), during
        assert waited[1:] == [0.0, 0.0, 0.0], waited


def _member_holds(gen: Generation) -> int:
    """What the member holds: bytes buffered and in workers' hands."""
    budget = gen._prefetcher._budget
    return budget.buffered + budget.held


def _limits_by_partition(fetches: FetchLog) -> set[int]:
    return {limit for _, limits in fetches.requests for limit in limits.values()}


@pytest.mark.parametrize("partitions", [1, 4, 16])
async def test_the_member_budget_is_shared_by_the_assigned_partitions(
    autojump_clock: trio.testing.MockClock, partitions: int
) -> None:
    budget = 32768
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        _fill(cluster, partitions)
        fetches = FetchLog()
        cluster.control(ApiKey.FETCH, fetches)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, fetch_buffer_bytes=budget, **SETTINGS
        ) as group:
            gen: Generation = await group.next()
            await trio.sleep(30.0)  # no worker: the buffers fill up and stay
            held = sum(p.buffered for p in gen._prefetcher._parts.values())
        # A partition is asked for half its share, or for its next batch if
        # that is larger (with 16 partitions a batch is more than half the
        # share): never more than its share, so that slow workers on some
        # partitions cannot take the budget from the others.
        share = budget // partitions
        limits = _limits_by_partition(fetches)
        assert share // 2 in limits
        assert max(limits) <= share, (limits, share)
        # Memory stays flat as partitions are added: the requests' response
        # limits keep the whole member within the budget.
        assert budget // 2 <= held <= budget, held


@pytest.mark.parametrize("partitions", [1, 16])
async def test_many_partitions_under_a_small_budget_are_fetched_in_few_requests(
    autojump_clock: trio.testing.MockClock, partitions: int
) -> None:
    budget = 16384  # a share (1 KiB with 16 partitions) below one batch (1.1 KiB)
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        size = _fill(cluster, partitions)
        fetches = FetchLog()
        cluster.control(ApiKey.FETCH, fetches)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, fetch_buffer_bytes=budget, **SETTINGS
        ) as group:
            gen = await group.next()
            member: list[int] = []
            done: list[int] = []

            async def worker(tp: TopicPartition) -> None:
                async for batch in gen.fetch(tp):
                    member.append(_member_holds(gen))
                    await trio.sleep(0.01 * (1 + tp.partition))  # room frees batch by batch
                    gen.mark(tp, batch.next_offset)
                    if batch.next_offset >= BATCHES * PER_BATCH:
                        done.append(tp.partition)
                        return

            async with trio.open_nursery() as nursery:
                for p in range(partitions):
                    nursery.start_soon(worker, TopicPartition("t", p))
        total = partitions * BATCHES * size
        assert sorted(done) == list(range(partitions))
        # Buffered and handed-out bytes never exceeded the budget, but for
        # a batch per partition (with 16 partitions a batch is more than a
        # partition's share: each holds one; and Kafka sends a request's
        # first batch whole).
        assert max(member) <= budget + partitions * size, max(member)
        if partitions == 1:
            # Requests do not trickle out as single batches are consumed:
            # their count stays within a quarter of the least possible
            # (every request bringing half the budget).
            least = total // (budget // 2)
            assert len(fetches.requests) <= least * 5 // 4 + 4, (len(fetches.requests), least)
        else:
            # A partition whose share is less than a batch holds one batch at
            # a time and is fetched again once its worker is done with it
            # (at once: its worker waits); no request goes out for nothing.
            assert len(fetches.requests) <= total // size + 8, len(fetches.requests)


async def test_batches_larger_than_the_shares_are_fetched_many_per_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 32 partitions share 256 KiB (8 KiB each); batches of 16 KiB, so each
    # worker holds a batch twice its share, and the batches held add up to
    # twice the budget. A broker 2 ms away.
    partitions, budget, count = 32, 262144, 8
    value = b"v" * 1600
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        for p in range(partitions):
            for i in range(count):
                cluster.produce("t", [NewRecord(None, value, (), i)] * 10, partition=p)
        size = len(encode_batch([(None, value, (), 0)] * 10))
        fetches = FetchLog()

        def delayed(req: Intercepted) -> Delay:
            fetches(req)
            return Delay(0.002)

        cluster.control(ApiKey.FETCH, delayed)
        async with ConsumerGroup(
            "g",
            ["t"],
            cluster.bootstrap,
            fetch_buffer_bytes=budget,
            partition_buffer_bytes=budget // 8,
            **SETTINGS,
        ) as group:
            gen = await group.next()
            member: list[int] = []
            done: list[int] = []

            async def worker(tp: TopicPartition) -> None:
                async for batch in gen.fetch(tp):
                    member.append(_member_holds(gen))
                    await trio.sleep(0.05)  # processing the batch
                    if batch.next_offset >= count * 10:
                        done.append(tp.partition)
                        return

            async with trio.open_nursery() as nursery:
                for p in range(partitions):
                    nursery.start_soon(worker, TopicPartition("t", p))
            gen.cancel("test over")
        assert sorted(done) == list(range(partitions))
        # The batches workers hold count against their partitions' shares,
        # not against the room for new requests: each request still brings
        # as many batches as half the budget takes (not one batch per round
        # trip, as when held batches had taken the whole room).
        per_request = (budget // 2) // size
        least = partitions * count // per_request
        assert len(fetches.requests) <= 2 * least, (len(fetches.requests), least)
        # And the member holds the budget plus a batch per partition at most.
        assert max(member) <= budget + partitions * size, max(member)


@pytest.mark.parametrize("damage", ["crc", "contents"])
async def test_damaged_records_raise_typed_errors_in_the_worker(
    autojump_clock: trio.testing.MockClock, damage: str
) -> None:
    data = damaged_batch(0)
    if damage == "crc":
        data = data[:-1] + bytes([data[-1] ^ 0xFF])
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, lambda req: fetch_answer(req, data, 3))
        where: list[str] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            with pytest.raises(CorruptRecordError):
                async for batch in gen.fetch(TP):
                    where.append("handed out")
                    assert len(batch) == 3  # decoding here raises
            gen.cancel("test over")
    # A damaged header never reaches the worker; damaged contents under a
    # correct CRC raise from the worker's first access to the records.
    assert where == ([] if damage == "crc" else ["handed out"])


async def test_records_before_a_damaged_batch_are_handed_out_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Offsets 0-2 in a sound batch, 3-5 in one that fails its CRC, in one
    answer: the worker gets 0-2 (and may commit them), then the damage, naming
    the partition. (The whole answer used to be the error: nothing handed out.)"""
    sound = with_base_offset(encode_batch([(None, b"x", (), 0)] * 3), 0)
    damaged = bytearray(with_base_offset(encode_batch([(None, b"y", (), 0)] * 3), 3))
    damaged[-1] ^= 0xFF
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        # Every Fetch gets both batches, whatever its offset (the second one
        # too: the sound batch below its position must not hide the damage).
        cluster.control(ApiKey.FETCH, lambda req: fetch_answer(req, bytes(sound + damaged), 3))
        seen: list[int] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            with pytest.raises(
                CorruptRecordError, match=r"Fetch t\[0\]: .*offset 3 failed its CRC"
            ):
                async for batch in gen.fetch(TP):
                    seen.extend(r.offset for r in batch)
                    gen.mark(TP, batch.next_offset)
            await gen.commit()
            gen.cancel("test over")
        assert seen == [0, 1, 2]
        assert cluster.committed_offsets("g") == {TP: 3}


async def test_fetch_partition_hands_out_records_before_damaged_contents_then_the_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The decoding path (``fetch_partition``, which ``gengroup consume``
    reads with): offsets 0-2 sound, 3-5 with a malformed record under a
    correct CRC, 6-8 sound, in every answer. The first Fetch hands out 0-2
    and nothing past them; the next, from 3, raises the damage naming the
    partition and the offset. (The first used to raise, hiding 0-2.)"""
    sound = with_base_offset(encode_batch([(None, b"x", (), 0)] * 3), 0)
    damaged = damaged_batch(3)
    after = with_base_offset(encode_batch([(None, b"z", (), 0)] * 3), 6)
    async with FakeCluster(topics={"t": 1}) as broker:
        broker.control(ApiKey.FETCH, lambda req: fetch_answer(req, sound + damaged + after, 3))
        async with Cluster(broker.bootstrap) as cluster:
            first = await fetch_partition(cluster, TP, 0)
            assert [r.offset for r in first.records] == [0, 1, 2]
            assert first.next_offset == 3
            with pytest.raises(
                CorruptRecordError, match=r"^Fetch t\[0\]: record batch at offset 3: negative"
            ):
                await fetch_partition(cluster, TP, first.next_offset)
