"""The data pipeline end to end: produce, land in a Parquet lake, verify and analyse on Spark.

1. Produces ``--records`` records (keys from a skewed set, event times spread
   over ``--minutes`` minutes) to a topic of 6 partitions.
2. Lands them with two lake-sink members of one consumer group (a second
   member joins halfway, so the landing crosses a rebalance).
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
from gengroup.broker import FakeCluster
from gengroup.lake import LakeConfig, LakeSink, spark as lake_spark
from gengroup.producer import ProducerRecord

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


async def land(bootstrap: str, lake: str, count: int) -> LakeSink:
    """Two sink members land the topic; returns once the group committed every record."""
    config = LakeConfig(lake, file_max_bytes=256 * 1024, file_max_age=1.0, progress_interval=5)
    sinks = [LakeSink(config), LakeSink(config)]
    stop = anyio.Event()

    async def member(sink: LakeSink) -> None:
        async with gengroup.ConsumerGroup(
            GROUP, [TOPIC], bootstrap, start_offset="earliest", fetch_max_wait=0.2
        ) as group:
            await sink.run(group, stop)

    async with gengroup.Admin(bootstrap) as admin, anyio.create_task_group() as tg:
        tg.start_soon(member, sinks[0])
        joined = False
        with anyio.fail_after(300):
            while True:
                lag = await admin.group_lag(GROUP, [TOPIC])
                landed = sum(p.committed or 0 for p in lag.values())
                if not joined and landed >= count // 2:
                    tg.start_soon(member, sinks[1])  # a rebalance in the middle of landing
                    joined = True
                if landed >= count:
                    break
                await anyio.sleep(0.2)
        stop.set()
    return sinks[0]


async def main(bootstrap: str | None, count: int, lake: str, out: str, master: str) -> int:
    async with AsyncExitStack() as stack:
        if bootstrap is None:
            cluster = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
            bootstrap = cluster.bootstrap
        async with gengroup.Admin(bootstrap) as admin:
            await admin.create_topics({TOPIC: 6}, exist_ok=True)
        async with gengroup.Producer(bootstrap) as producer:
            await producer.send_many(TOPIC, clicks(count, minutes=10))
        started = time.monotonic()
        await land(bootstrap, lake, count)
        print(f"landed {count} records in {time.monotonic() - started:.1f} s into {lake}")

        def spark_jobs() -> bool:
            with lake_spark.session(master, "gengroup pipeline") as spark:
                report = lake_spark.verify(spark, lake, bootstrap, [TOPIC])
                print(report.text())
                summary = lake_spark.analytics(spark, lake, out)
            delay = summary["landing_delay_s"]
            print(
                f"analytics in {out}: {summary['records']} records, {summary['bytes']} bytes, "
                f"landing delay p50 {delay['p50']:.1f} s p99 {delay['p99']:.1f} s, "
                f"partition skew {summary['partition_skew']}"
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
