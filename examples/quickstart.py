"""Quickstart: one consumer group on the embedded broker, with run_workers.

Run: python examples/quickstart.py [--bootstrap HOST:PORT]
Without --bootstrap it starts an embedded broker in this process.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command

import gengroup
from gengroup import ProducerRecord

TOPIC = "orders"


async def main(bootstrap: str | None, count: int) -> int:
    async with AsyncExitStack() as stack:
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        async with gengroup.Admin(bootstrap) as admin:
            await admin.create_topics({TOPIC: 4}, exist_ok=True)
        async with gengroup.Producer(bootstrap) as producer:
            await producer.send_many(
                TOPIC,
                [
                    ProducerRecord(key=f"user-{i % 10}".encode(), value=f"order {i}".encode())
                    for i in range(count)
                ],
            )
        seen = 0
        done = anyio.Event()

        async def handler(
            gen: gengroup.Generation, tp: gengroup.TopicPartition, batch: gengroup.FetchedBatch
        ) -> None:
            nonlocal seen
            seen += len(batch.records)
            n = len(batch.records)
            print(f"generation {gen.id}: {tp} got {n} records, next offset {batch.next_offset}")
            if seen >= count:
                done.set()

        async with gengroup.ConsumerGroup("quickstart", [TOPIC], bootstrap) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(gengroup.run_workers, group, handler)
                with anyio.fail_after(60):
                    await done.wait()
                tg.cancel_scope.cancel()
        print(f"consumed {seen} records")
        return seen


if __name__ == "__main__":
    parser = command(__doc__, count=1000)
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.count)
