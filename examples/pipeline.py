"""The data pipeline end to end: produce, land in a Parquet lake, verify and analyse on Spark.

1. Produces ``--records`` records (keys from a skewed set, event times spread
   over ``--minutes`` minutes) to a topic of 6 partitions.
2. Lands them, while they are produced, with three lake-sink members of one
   consumer group: two start, a third joins at a third of the stream and the
   first leaves at two thirds, so the landing crosses rebalances.
3. Verifies the lake against the topic on Spark, read by Spark's own Kafka
   source, and computes the analytics (Parquet tables, summary.json,
   analytics.png in ``--out``).

Run: python examples/pipeline.py [--bootstrap HOST:PORT] [--records N] [--lake DIR] [--out DIR]
Without --bootstrap it starts an embedded broker in this process. Exit status
1 if verify found any missing, duplicated or differing record.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from contextlib import AsyncExitStack

import anyio

import gengroup
from gengroup import ProducerRecord
from gengroup.broker import FakeCluster
from gengroup.lake import LakeConfig, LakeSink, spark as lake_spark

TOPIC = "clicks"
GROUP = "lake-pipeline"


def clicks(count: int, minutes: int, seed: int = 1) -> list[ProducerRecord]:
    """Click events: a few busy users and many quiet ones, over the last ``minutes``."""
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    out = []
    for i in range(count):
        user = int(rng.paretovariate(1.2)) % 500
        at = now - minutes * 60_000 + i * minutes * 60_000 // count
        value = json.dumps({"user": user, "page": f"/p/{rng.randrange(50)}", "n": i}).encode()
        out.append(ProducerRecord(value=value, key=f"user-{user}".encode(), timestamp_ms=at))
    return out


async def land(bootstrap: str, lake: str, events: list[ProducerRecord]) -> list[LakeSink]:
    """Three sink members land the stream while it is produced, through rebalances.

    Two members start; the stream is produced in chunks while they land it; a
    third member joins once a third of it landed, and the first one leaves
    (gracefully) at two thirds. Returns once the group committed every record.
    """
    config = LakeConfig(lake, file_max_bytes=256 * 1024, file_max_age=1.0, progress_interval=5)
    sinks = [LakeSink(config) for _ in range(3)]
    stops = [anyio.Event() for _ in sinks]

    async def member(i: int) -> None:
        async with gengroup.ConsumerGroup(
            GROUP, [TOPIC], bootstrap, start_offset="earliest", fetch_max_wait=0.2
        ) as group:
            await sinks[i].run(group, stops[i])

    async def produce() -> None:
        async with gengroup.Producer(bootstrap) as producer:
            for start in range(0, len(events), 1000):
                await producer.send_many(TOPIC, events[start : start + 1000])
                await anyio.sleep(0.05)

    async with gengroup.Admin(bootstrap) as admin, anyio.create_task_group() as tg:
        tg.start_soon(member, 0)
        tg.start_soon(member, 1)
        tg.start_soon(produce)
        steps = [(len(events) // 3, "member 3 joins"), (2 * len(events) // 3, "member 1 leaves")]
        with anyio.fail_after(300):
            while True:
                lag = await admin.group_lag(GROUP, [TOPIC])
                landed = sum(p.committed or 0 for p in lag.values())
                if steps and landed >= steps[0][0]:
                    print(f"{landed} records landed: {steps[0][1]}")
                    if len(steps) == 2:
                        tg.start_soon(member, 2)
                    else:
                        stops[0].set()
                    steps.pop(0)
                if landed >= len(events) and not steps:
                    break
                await anyio.sleep(0.1)
        for stop in stops:
            stop.set()
    return sinks


async def main(bootstrap: str | None, count: int, lake: str, out: str, master: str) -> int:
    async with AsyncExitStack() as stack:
        if bootstrap is None:
            cluster = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
            bootstrap = cluster.bootstrap
        async with gengroup.Admin(bootstrap) as admin:
            await admin.create_topics({TOPIC: 6}, exist_ok=True)
        started = time.monotonic()
        sinks = await land(bootstrap, lake, clicks(count, minutes=10))
        files = sum(p.files for sink in sinks for p in sink.progress())
        generations = sum(sink.generations for sink in sinks)
        print(
            f"landed {count} records in {time.monotonic() - started:.1f} s into {lake}: "
            f"{files} files, {generations} generations across 3 members"
        )

        def spark_jobs() -> bool:
            with lake_spark.session(master, "gengroup pipeline") as spark:
                report = lake_spark.verify(spark, lake, bootstrap, [TOPIC])
                print(report.text())
                summary = lake_spark.analytics(spark, lake, out)
            delay = summary["landing_delay_s"]
            print(
                f"analytics in {out}: {summary['records']} records, {summary['bytes']} bytes, "
                f"landing delay p50 {delay['p50']:.1f} s p99 {delay['p99']:.1f} s, "
                f"partition skew {summary['partition_skew']}; chart: {out}/analytics.png"
            )
            return report.ok

        ok = await anyio.to_thread.run_sync(spark_jobs)  # the embedded broker keeps serving
        return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--lake", help="lake folder or URI (default: a new temporary folder)")
    parser.add_argument("--out", help="analytics folder (default: <lake>-analytics)")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    args = parser.parse_args()
    lake = args.lake or tempfile.mkdtemp(prefix="gengroup-lake-")
    out = args.out or f"{lake.rstrip('/')}-analytics"
    raise SystemExit(anyio.run(main, args.bootstrap, args.records, lake, out, args.master))
