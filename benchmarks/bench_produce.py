"""Producer throughput: gengroup vs aiokafka vs confluent-kafka (librdkafka), acks=all.

Starts a real Apache Kafka broker (the test harness) unless ``--bootstrap``
names one. For each run every client produces ``--records`` records of
``--value-size`` bytes (null keys, so each client's default partitioner for
null keys spreads them) into a fresh topic of ``--partitions`` partitions and
waits until the broker acknowledged every one of them; the time measured runs
from the first send to the last acknowledgement. Equal settings for every
client: ``acks=all``, the codec of ``--codec``, a linger of 5 ms and batches
of up to 1 MB. Clients run in rounds (each once per round) so that load from
other processes hits every client alike; the table shows the median of the
rounds and each client's ratio to aiokafka and to confluent-kafka. A record
that fails makes the run fail. Nothing is asserted about time (the machines
are shared and noisy).

Usage: python benchmarks/bench_produce.py [--records 300000] [--value-size 100]
       [--partitions 8] [--repeat 3] [--codec lz4] [--clients ...]
       [--bootstrap HOST:PORT] [--json FILE]
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
from broker import real_broker
from options import benchmark_parser
from run_all import confluent_produce, values

from gengroup import Admin, Compression, Producer

LINGER_S = 0.005
BATCH_BYTES = 1_000_000


async def create_topic(bootstrap: str, partitions: int) -> str:
    topic = "produce-" + uuid.uuid4().hex[:8]
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: partitions})
    return topic


async def produce_gengroup(
    bootstrap: str, topic: str, pool: list[bytes], n: int, codec: str
) -> None:
    async with Producer(
        bootstrap,
        acks="all",
        compression=Compression[codec.upper()],
        linger=LINGER_S,
        max_batch_bytes=BATCH_BYTES,
    ) as producer:
        results = await producer.send_many(topic, (pool[i % len(pool)] for i in range(n)))
    if len(results) != n:
        raise SystemExit(f"gengroup: {len(results)} of {n} records acknowledged")


async def produce_aiokafka(
    bootstrap: str, topic: str, pool: list[bytes], n: int, codec: str
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        compression_type=None if codec == "none" else codec,
        linger_ms=int(LINGER_S * 1000),
        max_batch_size=BATCH_BYTES,
        max_request_size=BATCH_BYTES * 2,
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, pool[i % len(pool)]) for i in range(n)]
        await producer.flush()
        failed = [f for f in futures if f.exception() is not None]
    finally:
        await producer.stop()
    if failed:
        raise SystemExit(f"aiokafka: {len(failed)} records failed: {failed[0].exception()!r}")


def produce_confluent(bootstrap: str, topic: str, pool: list[bytes], n: int, codec: str) -> None:
    import confluent_kafka

    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": LINGER_S * 1000,
            "batch.size": BATCH_BYTES,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    confluent_produce(producer, topic, pool, n, on_delivery=report)
    if producer.flush(120.0):
        raise SystemExit("confluent-kafka: records left unsent")
    if errors:
        raise SystemExit(f"confluent-kafka: {len(errors)} records failed: {errors[0]}")


Client = Callable[[str, str, list[bytes], int, str], None]

CLIENTS: dict[str, Client] = {
    "gengroup-trio": lambda *a: anyio.run(produce_gengroup, *a, backend="trio"),
    "gengroup-asyncio": lambda *a: anyio.run(produce_gengroup, *a, backend="asyncio"),
    "aiokafka": lambda *a: asyncio.run(produce_aiokafka(*a)),
    "confluent-kafka": produce_confluent,
}


def main() -> None:
    parser = benchmark_parser(__doc__, records=300_000, repeat=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--codec", default="lz4", help="none, gzip, snappy, lz4 or zstd")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    names = args.clients.split(",")
    unknown = set(names) - set(CLIENTS)
    if unknown:
        raise SystemExit(f"unknown clients: {sorted(unknown)}; choose from {sorted(CLIENTS)}")
    n, size = args.records, args.value_size
    pool = values(size)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    with ExitStack() as stack:
        bootstrap = real_broker(stack, args.bootstrap)
        for round_ in range(args.repeat):
            for name in names:
                topic = anyio.run(create_topic, bootstrap, args.partitions)
                t0 = time.perf_counter()
                CLIENTS[name](bootstrap, topic, pool, n, args.codec)
                took = time.perf_counter() - t0
                seconds[name].append(took)
                print(f"  round {round_ + 1} {name}: {n / took:,.0f} records/s", flush=True)
    rates = {name: n / statistics.median(s) for name, s in seconds.items()}
    print(
        f"\n{n:,} records of {size} B, codec {args.codec}, acks=all, "
        f"{args.partitions} partitions, median of {args.repeat}"
    )
    print(f"{'client':<18} {'records/s':>11} {'MB/s':>7} {'vs aiokafka':>12} {'vs confluent':>13}")
    for name, rate in rates.items():
        ratios = [
            f"{rate / rates[peer]:.2f}" if peer in rates else "-"
            for peer in ("aiokafka", "confluent-kafka")
        ]
        print(
            f"{name:<18} {rate:>11,.0f} {rate * size / 1e6:>7.1f} {ratios[0]:>12} {ratios[1]:>13}"
        )
    if args.json is not None:
        meta = {
            "records": n,
            "value_size": size,
            "codec": args.codec,
            "partitions": args.partitions,
            "repeat": args.repeat,
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {platform.system()}",
        }
        args.json.write_text(
            json.dumps({"meta": meta, "seconds": seconds, "rates": rates}, indent=2)
        )


if __name__ == "__main__":
    main()
