"""Generation turnover: from the end of one generation to the first record of the next.

A single member consumes a topic that a producer keeps writing to. The
application ends each generation with ``gen.cancel()``; the member then waits
for its tasks, commits, rejoins and syncs, fetches its offsets, and hands out
the next generation's first batch. The time from ``cancel()`` to that first
batch is the turnover. It is printed with its parts from ``RebalanceTimings``:
teardown, coordinator lookup, join, sync, offset fetch, and first record.

It runs on a real Apache Kafka broker (the harness) unless ``--bootstrap`` is
given. ``--embedded`` runs it on the embedded broker instead. Nothing is
asserted; the issue's goal is under 50 ms on loopback.

Usage: python benchmarks/bench_turnover.py [--generations 30] [--embedded] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from contextlib import AsyncExitStack, ExitStack

import anyio
from broker import real_broker

from gengroup import Admin, ConsumerGroup, Generation, Producer, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.producer import ProducerRecord


async def keep_producing(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap, linger=0.001) as producer:
        n = 0
        while True:
            await producer.send_many(
                topic, [ProducerRecord(value=b"x" * 100, partition=p) for p in range(4)]
            )
            n += 1
            await anyio.sleep(0.002)


async def measure(bootstrap: str, generations: int) -> list[dict[str, float]]:
    topic, group_id = f"turn-{uuid.uuid4().hex[:8]}", f"turn-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: 4})
    rows: list[dict[str, float]] = []
    cancelled_at = first_at = 0.0
    first_seen = anyio.Event()

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        nonlocal first_at
        async for batch in gen.fetch(tp):
            if not first_seen.is_set():
                first_at = time.perf_counter()
                first_seen.set()
            gen.mark(tp, batch.next_offset)

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_producing, bootstrap, topic)
        async with ConsumerGroup(
            group_id, [topic], bootstrap, start_offset="latest", heartbeat_interval=1.0
        ) as group:
            async for gen in group:
                first_seen = anyio.Event()
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp)
                await first_seen.wait()
                if cancelled_at:
                    t = gen.timings
                    rows.append(
                        {
                            "turnover": first_at - cancelled_at,
                            "teardown": t.previous_teardown,
                            "join": t.find_coordinator + t.join,
                            "sync": t.sync,
                            "offsets": t.offset_fetch,
                            "first_record": t.first_record or 0.0,
                        }
                    )
                    if len(rows) >= generations:
                        break
                await anyio.sleep(0.05)  # let it run a little
                cancelled_at = time.perf_counter()
                gen.cancel("turnover benchmark")
        tg.cancel_scope.cancel()
    return rows


async def main_async(bootstrap: str | None, embedded: bool, generations: int) -> None:
    async with AsyncExitStack() as stack:
        if embedded:
            cluster = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
            bootstrap = cluster.bootstrap
        assert bootstrap is not None
        rows = await measure(bootstrap, generations)
    print(f"{len(rows)} generation turnovers (ms): median, p90, max")
    for key in ("turnover", "teardown", "join", "sync", "offsets", "first_record"):
        values = sorted(r[key] * 1000 for r in rows)
        p90 = values[int(len(values) * 0.9) - 1]
        print(f"  {key:<13} {statistics.median(values):7.1f} {p90:7.1f} {values[-1]:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=30)
    parser.add_argument("--bootstrap")
    parser.add_argument("--embedded", action="store_true")
    args = parser.parse_args()
    with ExitStack() as stack:
        if not args.embedded:
            args.bootstrap = real_broker(stack, args.bootstrap)
        anyio.run(main_async, args.bootstrap, args.embedded, args.generations, backend="trio")


if __name__ == "__main__":
    main()
