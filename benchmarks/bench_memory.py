"""Peak memory of one group member over many partitions: gengroup vs aiokafka vs confluent-kafka.

Starts a real Apache Kafka broker (the test harness) unless ``--bootstrap`` is
given, produces ``--records`` records of ``--value-size`` bytes spread over
``--partitions`` partitions (default 200,000 x 1 KB over 200), then runs each
client in its own process as the single member of a fresh group, with its
default settings. Each client consumes every record, touching every value
(``total += len(value)``). The process reports its peak RSS (``VmHWM``), how
long it ran (start-up included) and how long consuming took (from subscribing,
joining included, to having seen every record). Prints one line per client
with the ratios to aiokafka. Nothing is asserted (machines are shared and
noisy); this is issue P4 of the benchmark suite. ``gengroup-unbounded`` is
gengroup without its member-wide budget (``fetch_buffer_bytes=None``: 1 MiB
per partition), for comparison.

Usage: python benchmarks/bench_memory.py [--records 200000] [--value-size 1000]
       [--partitions 200] [--repeat 1] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from typing import Any

import anyio
from broker import real_broker

CLIENTS = (
    "gengroup-trio",
    "gengroup-asyncio",
    "gengroup-unbounded",
    "aiokafka",
    "confluent-kafka",
)
#: When the client subscribed and when it had seen every record: its consuming time.
marks: dict[str, float] = {}


def _mark(what: str) -> None:
    marks.setdefault(what, time.perf_counter())


def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"v" * size
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()


# ---------------------------------------------------------------------- the clients


async def run_gengroup(bootstrap: str, topic: str, n: int, unbounded: bool = False) -> int:
    from gengroup import ConsumerGroup, FetchedBatch, Generation, TopicPartition, run_workers

    total = seen = 0
    done = anyio.Event()

    async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        nonlocal total, seen
        for record in batch:
            total += len(record.value or b"")
        seen += len(batch)
        if seen >= n:
            _mark("done")
            done.set()

    group_id = f"mem-{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = {"fetch_buffer_bytes": None} if unbounded else {}
    _mark("subscribed")
    async with ConsumerGroup(
        group_id, [topic], bootstrap, start_offset="earliest", **settings
    ) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_workers, group, handler)
            await done.wait()
            tg.cancel_scope.cancel()
    return total


async def run_aiokafka(bootstrap: str, topic: str, n: int) -> int:
    from aiokafka import AIOKafkaConsumer

    _mark("subscribed")
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"mem-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    total = seen = 0
    try:
        while seen < n:
            batches = await consumer.getmany(timeout_ms=100)
            for records in batches.values():
                for record in records:
                    total += len(record.value or b"")
                seen += len(records)
        _mark("done")
    finally:
        await consumer.stop()
    return total


def run_confluent(bootstrap: str, topic: str, n: int) -> int:
    from confluent_kafka import Consumer

    _mark("subscribed")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"mem-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    total = seen = 0
    try:
        while seen < n:
            for message in consumer.consume(1000, 0.05):
                if message.error() is None:
                    total += len(message.value() or b"")
                    seen += 1
        _mark("done")
    finally:
        consumer.close()
    return total


def peak_rss_kib() -> int:
    """This process's peak resident set size in KiB.

    ``VmHWM`` of ``/proc/self/status`` where there is one: ``ru_maxrss``
    carries over the parent's peak through fork and exec on Linux, so a child
    started by a parent that had produced the records would report at least
    the parent's size.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(client: str, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    """Run one client in this process; its peak RSS and time."""
    started = time.perf_counter()
    marks.clear()
    if client == "gengroup-trio":
        total = anyio.run(run_gengroup, bootstrap, topic, n, backend="trio")
    elif client == "gengroup-unbounded":
        total = anyio.run(run_gengroup, bootstrap, topic, n, True, backend="trio")
    elif client == "gengroup-asyncio":
        total = anyio.run(run_gengroup, bootstrap, topic, n, backend="asyncio")
    elif client == "aiokafka":
        total = asyncio.run(run_aiokafka(bootstrap, topic, n))
    else:
        total = run_confluent(bootstrap, topic, n)
    return {
        "client": client,
        "seconds": time.perf_counter() - started,
        "consume_seconds": marks["done"] - marks["subscribed"],
        "peak_rss_mb": peak_rss_kib() / 1024,
        "bytes": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-size", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--bootstrap")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.bootstrap, args.topic, args.records)))
        return
    with ExitStack() as stack:
        bootstrap = real_broker(stack, args.bootstrap)
        topic = f"bench-mem-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        produce(bootstrap, topic, args.partitions, args.records, args.value_size)
        print(
            f"produced {args.records} records of {args.value_size} B over {args.partitions} "
            f"partitions in {time.perf_counter() - t0:.1f} s"
        )
        results: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.repeat):
            for client in args.clients.split(","):
                cmd = [sys.executable, __file__, "--child", client, "--bootstrap", bootstrap]
                cmd += ["--topic", topic, "--records", str(args.records)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                assert result["bytes"] >= args.records * args.value_size, result
                results.setdefault(client, []).append(result)
                print(
                    f"  {client:<18} {result['peak_rss_mb']:7.0f} MB {result['seconds']:6.1f} s "
                    f"(consuming {result['consume_seconds']:.2f} s)"
                )

    def median(client: str, key: str) -> float:
        return statistics.median(r[key] for r in results.get(client, [{key: 0}]))

    base, base_time = median("aiokafka", "peak_rss_mb"), median("aiokafka", "consume_seconds")
    print(
        f"\npeak RSS and consuming time, one member, {args.partitions} partitions "
        f"(median of {args.repeat}):"
    )
    for client in results:
        rss, secs = median(client, "peak_rss_mb"), median(client, "consume_seconds")
        ratio = f"{rss / base:.2f}x aiokafka" if base else ""
        time_ratio = f"{secs / base_time:.2f}x aiokafka" if base_time else ""
        print(f"  {client:<18} {rss:7.0f} MB  {ratio}   {secs:5.2f} s  {time_ratio}")


if __name__ == "__main__":
    main()
