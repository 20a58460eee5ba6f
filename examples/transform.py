"""Consume, transform, produce: each order becomes a shipping label on another topic.

A worker per partition reads a batch, sends the transformed records to the
output topic, waits until the broker acknowledged them, and only then marks
the batch: a crash before the acknowledgement means the batch is read (and
sent) again, never lost. That is at-least-once; keys are kept, so a label
lands in the partition its order's key chooses.

Run: python examples/transform.py [--bootstrap HOST:PORT] [--count 500]
Without --bootstrap it starts an embedded broker in this process.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command, consuming, until

import gengroup
from gengroup import ProducerRecord

SOURCE = "label-orders"
TARGET = "shipping-labels"
GROUP = "label-maker"


def transform(record: gengroup.Record) -> ProducerRecord:
    """One order (JSON) to its label (JSON), with the order's key."""
    order = json.loads(record.value or b"{}")
    label = {"order": order["id"], "to": order["city"].upper(), "source_offset": record.offset}
    return ProducerRecord(json.dumps(label).encode(), key=record.key)


async def worker(
    gen: gengroup.Generation,
    tp: gengroup.TopicPartition,
    producer: gengroup.Producer,
    done: list[int],
) -> None:
    async for batch in gen.fetch(tp):
        await producer.send_many(TARGET, [transform(r) for r in batch])  # acknowledged
        gen.mark(tp, batch.next_offset)
        done.append(len(batch))


async def main(bootstrap: str | None, count: int) -> int:
    """Produce ``count`` orders, turn each into a label; returns the labels sent."""
    async with AsyncExitStack() as stack:
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        admin = await stack.enter_async_context(gengroup.Admin(bootstrap))
        await admin.create_topics({SOURCE: 3, TARGET: 3}, exist_ok=True)
        producer = await stack.enter_async_context(gengroup.Producer(admin.cluster))
        cities = ["lyon", "oslo", "kyoto", "lima"]
        await producer.send_many(
            SOURCE,
            [
                ProducerRecord(
                    json.dumps({"id": i, "city": cities[i % 4]}).encode(),
                    key=f"customer-{i % 9}".encode(),
                )
                for i in range(count)
            ],
        )
        done: list[int] = []
        async with gengroup.ConsumerGroup(GROUP, [SOURCE], bootstrap) as group:
            async with consuming(group, worker, producer, done):  # a worker per partition
                await until(lambda: sum(done) >= count)
        print(f"sent {sum(done)} labels to {TARGET}")
        return sum(done)


if __name__ == "__main__":
    parser = command(__doc__, count=500, records="orders")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.count)
