"""Landing throughput: gengroup's lake sink vs Spark Structured Streaming's Kafka source.

Starts a real Apache Kafka broker (the test harness) unless ``--bootstrap`` is
given, produces N records of V bytes into a topic of P partitions once, then
lands the whole topic as Parquet twice per round, on the same machine:

* gengroup: one ``LakeSink`` member (trio), 16 MiB files rolled after 0.5 s, from joining the
  group to the group's committed offsets reaching the topic's end;
* Spark: ``readStream.format("kafka")`` -> ``writeStream.format("parquet")``
  with ``trigger(availableNow=True)`` on ``local[2]``, from ``start()`` to the
  query's end (the session is started before the clock, so JVM start-up is
  not counted against Spark).

Both write every key and value into Parquet (zstd for gengroup, Spark's
default snappy). Prints records/s and MB/s per round and the median; asserts
nothing about time (machines are shared and noisy).

Usage: python benchmarks/bench_lake.py [--records 500000] [--value-size 100]
       [--partitions 8] [--repeat 3] [--bootstrap HOST:PORT] [--no-spark]

``--no-spark`` times the gengroup sink alone (to compare two versions of it).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
from broker import real_broker
from options import benchmark_parser

from gengroup import Admin, ConsumerGroup, Producer
from gengroup.lake import LakeConfig, LakeSink
from gengroup.lake.spark import session
from gengroup.producer import ProducerRecord


async def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: partitions})
    async with Producer(bootstrap, linger=0.01) as producer:
        for start in range(0, n, 10_000):
            await producer.send_many(
                topic,
                [
                    ProducerRecord(
                        key=f"key-{i % 1000}".encode(),
                        value=f"{i:012d}".encode().ljust(size, b"v"),
                        partition=i % partitions,
                    )
                    for i in range(start, min(n, start + 10_000))
                ],
            )


async def land_gengroup(bootstrap: str, topic: str, n: int, lake: Path) -> float:
    """Seconds from joining to every record committed."""
    group = f"bench-lake-{uuid.uuid4().hex[:8]}"
    config = LakeConfig(str(lake), file_max_bytes=16 << 20, file_max_age=0.5, progress_interval=0)
    sink = LakeSink(config)
    stop = anyio.Event()
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            async with ConsumerGroup(group, [topic], bootstrap, start_offset="earliest") as g:
                await sink.run(g, stop)

        tg.start_soon(run)
        async with Admin(bootstrap) as admin:
            while True:
                lag = await admin.group_lag(group, [topic])
                if sum(p.committed or 0 for p in lag.values()) >= n:
                    break
                await anyio.sleep(0.05)
        elapsed = time.perf_counter() - start
        stop.set()
    return elapsed


def land_spark(spark: Any, bootstrap: str, topic: str, lake: Path) -> float:
    """Seconds for an availableNow query to land the topic."""
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("topic", "partition", "offset", "timestamp", "key", "value")
    )
    start = time.perf_counter()
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(lake / "data"))
        .option("checkpointLocation", str(lake / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - start


def main() -> None:
    parser = benchmark_parser(__doc__, records=500_000, repeat=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--bootstrap")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--no-spark", action="store_true", help="time the gengroup sink only")
    args = parser.parse_args()
    n, size = args.records, args.value_size
    mb = n * (size + 8) / 1e6
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        bootstrap = real_broker(stack, args.bootstrap)
        topic = f"bench-lake-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        anyio.run(produce, bootstrap, topic, args.partitions, n, size)
        print(f"produced {n} records of {size} B in {time.perf_counter() - t0:.1f} s")
        times: dict[str, list[float]] = {"gengroup sink": []}
        if not args.no_spark:
            spark = stack.enter_context(session("local[2]", "bench lake"))
            times["spark structured streaming"] = []
        for r in range(args.repeat):
            lake = Path(tmp) / f"g{r}"
            times["gengroup sink"].append(anyio.run(land_gengroup, bootstrap, topic, n, lake))
            if not args.no_spark:
                lake = Path(tmp) / f"s{r}"
                times["spark structured streaming"].append(
                    land_spark(spark, bootstrap, topic, lake)
                )
            print(
                f"round {r + 1}: "
                + ", ".join(f"{name} {ts[-1]:.2f} s" for name, ts in times.items())
            )
    print(f"\n{n} records of {size} B, {args.partitions} partitions, median of {args.repeat}:")
    results = {}
    spark_times = times.get("spark structured streaming")
    for name, ts in times.items():
        med = statistics.median(ts)
        results[name] = {"seconds": ts, "records_per_s": n / med, "mb_per_s": mb / med}
        versus = f" {statistics.median(spark_times) / med:>5.2f}x Spark" if spark_times else ""
        print(f"  {name:<28} {n / med:>10,.0f} records/s {mb / med:>7.1f} MB/s{versus}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
