"""Long-poll Fetch in virtual time, over TCP and over an injected in-memory transport."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gengroup.broker import FakeCluster
from gengroup.protocol.records import decode_batches

from . import batch, connect, fetch, produce, raw_roundtrip


async def test_long_poll_waits_max_wait_when_no_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        start = trio.current_time()
        resp = await conn.request(fetch(12, "t", 0, 0, max_wait=5_000))
        assert trio.current_time() - start == pytest.approx(5.0)
        part = resp.responses[0].partitions[0]
        assert (part.error_code, part.records, part.high_watermark) == (0, b"", 0)


async def test_long_poll_returns_as_soon_as_data_is_produced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        FakeCluster(topics={"t": 1}) as cluster,
        connect(cluster) as consumer,
        connect(cluster) as producer,
    ):
        start = trio.current_time()
        done: list[float] = []

        async def poll() -> None:
            resp = await consumer.request(fetch(12, "t", 0, 0, max_wait=30_000))
            done.append(trio.current_time() - start)
            values = [
                r.value
                for b in decode_batches(resp.responses[0].partitions[0].records)
                for r in b.records
            ]
            assert values == [b"hello"]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(2.5)
            assert not done
            resp = await producer.request(produce(9, "t", 0, batch(b"hello")))
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert done == [pytest.approx(2.5)]


async def test_min_bytes_accumulates_across_produces(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        one = len(batch(b"x" * 100))
        start = trio.current_time()
        elapsed: list[float] = []

        async def poll() -> None:
            resp = await conn.request(fetch(12, "t", 0, 0, max_wait=60_000, min_bytes=one * 3))
            elapsed.append(trio.current_time() - start)
            assert len(decode_batches(resp.responses[0].partitions[0].records)) == 3

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            for _ in range(3):
                await trio.sleep(1)
                cluster.produce("t", [b"x" * 100])
        assert elapsed == [pytest.approx(3.0)]


async def test_min_bytes_counts_what_the_log_holds_up_to_the_partition_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As Kafka's DelayedFetch: the wait ends once the log holds ``min_bytes``
    past the position (up to the partition's limit), although the answer then
    carries less, whole batches only."""
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        one = len(batch(b"x" * 100))
        start = trio.current_time()
        elapsed: list[float] = []

        async def poll() -> None:
            limit = one + one // 2
            resp = await conn.request(
                fetch(12, "t", 0, 0, max_wait=60_000, min_bytes=limit, partition_max_bytes=limit)
            )
            elapsed.append(trio.current_time() - start)
            assert len(decode_batches(resp.responses[0].partitions[0].records)) == 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            for _ in range(2):
                await trio.sleep(1)
                cluster.produce("t", [b"x" * 100])
        assert elapsed == [pytest.approx(2.0)]


async def test_min_bytes_counts_as_at_most_the_request_max_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As Kafka's KafkaApis: a request waits for no more than it may carry."""
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        one = len(batch(b"x" * 100))
        start = trio.current_time()
        elapsed: list[float] = []

        async def poll() -> None:
            resp = await conn.request(
                fetch(12, "t", 0, 0, max_wait=60_000, min_bytes=one * 10, max_bytes=one * 2)
            )
            elapsed.append(trio.current_time() - start)
            assert len(decode_batches(resp.responses[0].partitions[0].records)) == 2

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            for _ in range(3):
                await trio.sleep(1)
                cluster.produce("t", [b"x" * 100])
        assert elapsed == [pytest.approx(2.0)]


async def test_long_poll_ends_early_on_partition_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=2, topics={"t": 1}) as cluster, connect(cluster) as conn:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def poll() -> None:
                resp = await conn.request(fetch(12, "t", 0, 0, max_wait=30_000))
                assert resp.responses[0].partitions[0].error_code == 6
                assert trio.current_time() - start == pytest.approx(1.0)

            nursery.start_soon(poll)
            await trio.sleep(1)
            cluster.move_partition_leader("t", 0, 1)


async def test_memory_transport_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    """The server serves any anyio ByteStream: no socket at all."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        stream = cluster.connect_memory()
        start = trio.current_time()
        resp = await raw_roundtrip(stream, fetch(11, "t", 0, 0, max_wait=1_500))
        assert trio.current_time() - start == pytest.approx(1.5)
        assert resp.responses[0].partitions[0].records == b""
        resp = await raw_roundtrip(stream, produce(8, "t", 0, batch(b"m")))
        assert resp.responses[0].partition_responses[0].base_offset == 0
        resp = await raw_roundtrip(stream, fetch(11, "t", 0, 0, max_wait=1_500))
        assert trio.current_time() - start == pytest.approx(1.5)
        assert resp.responses[0].partitions[0].high_watermark == 1
        await stream.aclose()
        assert not cluster.errors


async def test_many_concurrent_long_polls_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 4}) as cluster:
        start = trio.current_time()
        finished: dict[int, float] = {}

        async def poll(partition: int) -> None:
            async with connect(cluster) as conn:
                await conn.request(fetch(12, "t", partition, 0, max_wait=10_000))
                finished[partition] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            for p in range(4):
                nursery.start_soon(poll, p)
            await trio.sleep(3)
            cluster.produce("t", [b"a"], partition=2)
        assert finished == {
            0: pytest.approx(10),
            1: pytest.approx(10),
            2: pytest.approx(3),
            3: pytest.approx(10),
        }
