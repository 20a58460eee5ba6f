"""Consumer throughput: gengroup vs confluent-kafka (librdkafka) vs aiokafka.

Starts a real Apache Kafka broker (the test harness), produces N records of V
bytes into a topic of P partitions once, then has each client consume all of
them as a single-member consumer group. Two times per client: from subscribing
to the first record (the join), and from the first record to the last (the
steady-state throughput printed as records/s). Prints records/s and MB/s per client; asserts nothing
about time (the machines are shared and noisy).

Usage: python benchmarks/bench_consume.py [--records 500000] [--value-size 100]
       [--partitions 8] [--repeat 2] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack

import anyio
from options import benchmark_parser

from gengroup import Admin, ConsumerGroup, Producer, run_workers
from gengroup.producer import ProducerRecord
from gengroup.testing.kafka import KafkaBroker


async def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: partitions})
    value = b"v" * size
    async with Producer(bootstrap, linger=0.01) as producer:
        chunk = 10_000
        for start in range(0, n, chunk):
            await producer.send_many(
                topic,
                [
                    ProducerRecord(value=value, key=None, partition=i % partitions)
                    for i in range(start, min(n, start + chunk))
                ],
            )


async def consume_gengroup(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    count = 0
    done = anyio.Event()
    first = 0.0

    async def handler(gen: object, tp: object, batch: object) -> None:
        nonlocal count, first
        if not count:
            first = time.perf_counter()
        count += len(batch.records)  # type: ignore[attr-defined]
        if count >= n:
            done.set()

    start = time.perf_counter()
    async with ConsumerGroup(
        "bench-" + uuid.uuid4().hex, [topic], bootstrap, commit_interval=5.0
    ) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_workers, group, handler)
            await done.wait()
            end = time.perf_counter()
            tg.cancel_scope.cancel()
    return first - start, end - first


def consume_confluent(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    start = time.perf_counter()
    consumer.subscribe([topic])
    count = 0
    first = 0.0
    try:
        while count < n:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    if not count:
                        first = time.perf_counter()
                    _ = msg.value()
                    count += 1
        return first - start, time.perf_counter() - first
    finally:
        consumer.close()


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id="bench-" + uuid.uuid4().hex,
            auto_offset_reset="earliest",
        )
        start = time.perf_counter()
        await consumer.start()
        count = 0
        first = 0.0
        try:
            while count < n:
                batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                for records in batches.values():
                    if not count and records:
                        first = time.perf_counter()
                    count += len(records)
            return first - start, time.perf_counter() - first
        finally:
            await consumer.stop()

    return asyncio.run(run())


def main() -> None:
    parser = benchmark_parser(__doc__, records=500_000, repeat=2)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args()
    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker = stack.enter_context(KafkaBroker())
            bootstrap = broker.bootstrap
        topic = "bench-" + uuid.uuid4().hex[:8]
        n, size = args.records, args.value_size
        t0 = time.perf_counter()
        anyio.run(produce, bootstrap, topic, args.partitions, n, size)
        print(f"produced {n:,} records of {size} B in {time.perf_counter() - t0:.1f} s")
        clients: dict[str, Callable[[], tuple[float, float]]] = {
            "gengroup (trio)": lambda: anyio.run(consume_gengroup, bootstrap, topic, n),
            "gengroup (asyncio)": lambda: anyio.run(
                consume_gengroup, bootstrap, topic, n, backend="asyncio"
            ),
            "confluent-kafka": lambda: consume_confluent(bootstrap, topic, n),
        }
        try:
            import aiokafka  # noqa: F401

            clients["aiokafka"] = lambda: consume_aiokafka(bootstrap, topic, n)
        except ImportError:
            print("aiokafka is not installed (pip install -e '.[bench]'): skipped")
        print(f"{'client':<20} {'join s':>7} {'best records/s':>16} {'MB/s':>8}")
        for name, run in clients.items():
            runs = [run() for _ in range(args.repeat)]
            join = min(j for j, _ in runs)
            rate = n / min(t for _, t in runs)
            print(f"{name:<20} {join:>7.2f} {rate:>16,.0f} {rate * size / 1e6:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
