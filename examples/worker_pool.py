"""A pool of workers per partition, committing only what is contiguously done.

Each assigned partition gets a dispatcher task that hands records to a pool of
``--pool`` concurrent handlers (records with the same key go to the same
handler, so per-key order holds). Handlers finish out of order, so the
partition's committable offset is the end of the longest run of finished
records from the start: :class:`ContiguousTracker` keeps that, and only that
is marked. A record that was not processed is never committed, even when later
ones were.

Some offsets hold no record: a transaction's marker (a transactional producer
writes one per partition at each commit), a record compaction removed. So
each record stands for the offsets from where the record before it ended up
to its successor -- the next record of its batch, or the batch's
``next_offset`` for the last one -- not for ``offset + 1``: finishing it
passes the offsets without a record after it, as the library's own marks do.

Run: python examples/worker_pool.py [--bootstrap HOST:PORT] [--pool 4]
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command, consuming, until
from anyio.streams.memory import MemoryObjectReceiveStream

import gengroup
from gengroup import ProducerRecord

TOPIC = "events"

#: A record for a handler, with the offsets it covers: ``(record, start, end)``.
Job = tuple[gengroup.Record, int, int]


class ContiguousTracker:
    """A partition's records as they are handed out and finished.

    :attr:`committable` only moves over a gap-free run of finished records.
    Each record covers the offsets from where the one handed out before it
    ended (the first: its own offset) to its successor, so the runs have no
    holes where offsets hold no record.
    """

    def __init__(self) -> None:
        #: The offset every offset before which is processed (None before a record).
        self.committable: int | None = None
        self._handed: int | None = None  # where the next record's offsets start
        self._done: dict[int, int] = {}  # a finished record's offsets: first -> end

    def hand_out(self, batch: gengroup.FetchedBatch) -> Iterator[tuple[gengroup.Record, int, int]]:
        """The batch's records, in order, each with its offsets ``[start, end)``."""
        records = batch.records
        for i, record in enumerate(records):
            start = record.offset if self._handed is None else self._handed
            if self.committable is None:
                self.committable = start
            end = records[i + 1].offset if i + 1 < len(records) else batch.next_offset
            self._handed = end
            yield record, start, end

    def finish(self, start: int, end: int) -> int:
        """The record covering ``[start, end)`` is processed: the new committable offset."""
        if self.committable is None:
            raise RuntimeError("finish() of a record that hand_out() did not hand out")
        self._done[start] = end
        while self.committable in self._done:
            self.committable = self._done.pop(self.committable)
        return self.committable


async def handle(record: gengroup.Record) -> None:
    await anyio.sleep(random.uniform(0, 0.002))  # the real work goes here


async def partition_worker(
    gen: gengroup.Generation, tp: gengroup.TopicPartition, pool: int, processed: list[int]
) -> None:
    tracker = ContiguousTracker()
    senders = []
    async with anyio.create_task_group() as tg:
        for _ in range(pool):
            send, receive = anyio.create_memory_object_stream[Job](64)
            senders.append(send)
            tg.start_soon(pool_worker, gen, tp, receive, tracker, processed)
        async with AsyncExitStack() as stack:
            for send in senders:
                stack.enter_context(send)
            async for batch in gen.fetch(tp):
                for record, start, end in tracker.hand_out(batch):
                    slot = zlib.crc32(record.key or b"") % pool
                    await senders[slot].send((record, start, end))


async def pool_worker(
    gen: gengroup.Generation,
    tp: gengroup.TopicPartition,
    receive: MemoryObjectReceiveStream[Job],
    tracker: ContiguousTracker,
    processed: list[int],
) -> None:
    async with receive:
        async for record, start, end in receive:
            await handle(record)
            processed.append(record.offset)
            gen.mark(tp, tracker.finish(start, end))


async def main(bootstrap: str | None, pool: int, count: int) -> int:
    async with AsyncExitStack() as stack:
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        # One Cluster (the broker connections) serves the admin client and the
        # producer; the admin client reads back what the group committed at the end.
        shared = await stack.enter_async_context(gengroup.Cluster(bootstrap))
        admin = gengroup.Admin(shared)
        await admin.create_topics({TOPIC: 3}, exist_ok=True)
        async with gengroup.Producer(shared) as producer:
            records = [
                ProducerRecord(key=f"k{i % 50}".encode(), value=b"%d" % i) for i in range(count)
            ]
            await producer.send_many(TOPIC, records)
        processed: list[int] = []
        async with gengroup.ConsumerGroup(
            "pool-example", [TOPIC], bootstrap, commit_interval=0.2
        ) as group:
            async with consuming(group, partition_worker, pool, processed):
                await until(lambda: len(processed) >= count)
        committed = await admin.fetch_offsets("pool-example")
        print(f"processed {len(processed)} records with {pool} workers per partition")
        print("committed:", {str(tp): off for tp, off in sorted(committed.items())})
        return sum(committed.values())


if __name__ == "__main__":
    parser = command(__doc__, count=3000)
    parser.add_argument("--pool", type=int, default=4, help="workers per partition")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.pool, args.count)
