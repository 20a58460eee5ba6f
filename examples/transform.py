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

import argparse
import json
from contextlib import AsyncExitStack

import anyio

import gengroup
from gengroup.broker import FakeCluster
from gengroup.producer import ProducerRecord

SOURCE = "orders"
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
        if bootstrap is None:
            cluster = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
            bootstrap = cluster.bootstrap
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
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    async for gen in group:
                        for tp in gen.assignments:
                            gen.start_soon(worker, gen, tp, producer, done)

                tg.start_soon(run)
                with anyio.fail_after(60):
                    while sum(done) < count:  # noqa: ASYNC110 (a short progress poll)
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
        print(f"sent {sum(done)} labels to {TARGET}")
        return sum(done)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    parser.add_argument("--count", type=int, default=500, help="orders to produce")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.count)
