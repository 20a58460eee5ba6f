"""``max_batch_records``: a backlog is handed to a worker in pieces of at most N records.

Ten producer batches of 100 records wait in one partition; a member with
``max_batch_records=150`` hands them out in pieces that end between record
batches (so of 100 records each here), every record once and in order, and
each piece's ``next_offset`` is where the next one starts; the marks the
worker sets after each piece are committed as the fetch's end. Without the
setting the worker gets whole fetch answers, far larger. On Apache Kafka and
on the embedded broker.
"""

from __future__ import annotations

import itertools

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, Generation, Producer, TopicPartition
from gengroup.broker import BrokerSettings
from gengroup.producer import ProducerRecord
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, broker_under_test, create_topic

BATCHES, PER_BATCH = 10, 100


@pytest.mark.parametrize("which", [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
@pytest.mark.parametrize("most", [150, None])
async def test_a_backlog_is_handed_out_in_pieces(
    request: pytest.FixtureRequest, which: str, most: int | None
) -> None:
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    async with broker_under_test(request, which, settings) as bootstrap:
        topic, group_id = make_unique_name("pieces"), make_unique_name("g")
        await create_topic(bootstrap, topic, 1)
        tp = TopicPartition(topic, 0)
        async with Producer(bootstrap) as producer:
            for b in range(BATCHES):  # one call, one record batch
                ids = range(b * PER_BATCH, (b + 1) * PER_BATCH)
                await producer.send_many(
                    topic, [ProducerRecord(f"id-{i}".encode(), partition=0) for i in ids]
                )
        handed: list[tuple[list[int], int]] = []
        done = anyio.Event()

        async def worker(gen: Generation) -> None:
            async for batch in gen.fetch(tp):
                handed.append(([r.offset for r in batch], batch.next_offset))
                gen.mark(tp, batch.next_offset)
                if batch.next_offset == BATCHES * PER_BATCH:
                    await gen.commit()
                    done.set()

        async with ConsumerGroup(
            group_id, [topic], bootstrap, start_offset="earliest", max_batch_records=most, **FAST
        ) as group:
            gen = await group.next()
            gen.start_soon(worker, gen)
            with anyio.fail_after(60):  # a hang guard
                await done.wait()
            gen.cancel()
        offsets = [o for piece, _ in handed for o in piece]
        assert offsets == list(range(BATCHES * PER_BATCH))
        for (_, next_offset), (piece, _) in itertools.pairwise(handed):
            assert next_offset == piece[0]
        sizes = [len(piece) for piece, _ in handed]
        if most is None:  # whole answers: more than one record batch each
            assert max(sizes) > PER_BATCH, sizes
        else:
            assert sizes == [PER_BATCH] * BATCHES
        async with Admin(bootstrap) as admin:
            assert await admin.fetch_offsets(group_id) == {tp: BATCHES * PER_BATCH}


@pytest.mark.parametrize("which", [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
async def test_workers_catching_up_take_turns(request: pytest.FixtureRequest, which: str) -> None:
    """Two partitions' backlogs, in pieces of one record batch: workers whose loop
    awaits nothing but the next batch still take turns, as handing out a batch
    is a checkpoint even when one is buffered already."""
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    async with broker_under_test(request, which, settings) as bootstrap:
        topic, group_id = make_unique_name("turns"), make_unique_name("g")
        await create_topic(bootstrap, topic, 2)
        async with Producer(bootstrap) as producer:
            for b in range(BATCHES):
                for p in (0, 1):
                    ids = range(b * PER_BATCH, (b + 1) * PER_BATCH)
                    await producer.send_many(
                        topic, [ProducerRecord(f"id-{i}".encode(), partition=p) for i in ids]
                    )
        order: list[int] = []
        done = anyio.Event()

        async def worker(gen: Generation, tp: TopicPartition) -> None:
            async for _ in gen.fetch(tp):
                order.append(tp.partition)  # nothing awaited here
                if order.count(0) == order.count(1) == BATCHES:
                    done.set()

        async with ConsumerGroup(
            group_id, [topic], bootstrap, start_offset="earliest", max_batch_records=PER_BATCH
        ) as group:
            gen = await group.next()
            for tp in sorted(gen.assignments):
                gen.start_soon(worker, gen, tp)
            with anyio.fail_after(60):  # a hang guard
                await done.wait()
            gen.cancel()
        # Neither worker got through its whole backlog before the other's first piece.
        last = {p: len(order) - 1 - order[::-1].index(p) for p in (0, 1)}
        assert order.index(1) < last[0] and order.index(0) < last[1], order
