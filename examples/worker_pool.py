"""A pool of workers per partition, committing only what is contiguously done.

Each assigned partition gets a dispatcher task that hands records to a pool of
``--pool`` concurrent handlers (records with the same key go to the same
handler, so per-key order holds). Handlers finish out of order, so the
partition's committable offset is the end of the longest run of finished
offsets from the start: :class:`ContiguousTracker` keeps that, and only that
is marked. A record that was not processed is never committed, even when later
ones were.

Run: python examples/worker_pool.py [--bootstrap HOST:PORT] [--pool 4]
"""

from __future__ import annotations

import random
import zlib
from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command, consuming, until
from anyio.streams.memory import MemoryObjectReceiveStream

import gengroup
from gengroup import ProducerRecord

TOPIC = "events"


class ContiguousTracker:
    """Tracks finished offsets; :attr:`committable` only moves over gap-free runs."""

    def __init__(self, start: int) -> None:
        self.committable = start
        self._done: set[int] = set()

    def finish(self, offset: int) -> int:
        self._done.add(offset)
        while self.committable in self._done:
            self._done.remove(self.committable)
            self.committable += 1
        return self.committable


async def handle(record: gengroup.Record) -> None:
    await anyio.sleep(random.uniform(0, 0.002))  # the real work goes here


async def partition_worker(
    gen: gengroup.Generation, tp: gengroup.TopicPartition, pool: int, processed: list[int]
) -> None:
    tracker = ContiguousTracker(gen.assignments[tp])
    senders = []
    async with anyio.create_task_group() as tg:
        for _ in range(pool):
            send, receive = anyio.create_memory_object_stream[gengroup.Record](64)
            senders.append(send)
            tg.start_soon(pool_worker, gen, tp, receive, tracker, processed)
        async with AsyncExitStack() as stack:
            for send in senders:
                stack.enter_context(send)
            async for batch in gen.fetch(tp):
                for record in batch.records:
                    slot = zlib.crc32(record.key or b"") % pool
                    await senders[slot].send(record)


async def pool_worker(
    gen: gengroup.Generation,
    tp: gengroup.TopicPartition,
    receive: MemoryObjectReceiveStream[gengroup.Record],
    tracker: ContiguousTracker,
    processed: list[int],
) -> None:
    async with receive:
        async for record in receive:
            await handle(record)
            processed.append(record.offset)
            gen.mark(tp, tracker.finish(record.offset))


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
