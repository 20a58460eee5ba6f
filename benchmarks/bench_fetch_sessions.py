"""Fetch request bytes with and without incremental fetch sessions (KIP-227).

One member is assigned every partition of a topic (200 by default) while a
producer writes a steady trickle of records to a few of them (10 by
default); the others stay idle, as in a large assignment where most
partitions are quiet. For ``fetch_sessions`` off and on, in turn, the member
consumes for a while and the script prints, per second: Fetch requests,
their bytes as encoded on the wire, the partitions they named, and the
process CPU time. Every record produced while measuring must be consumed.

It runs on a real Apache Kafka broker (the harness) unless ``--bootstrap`` is
given (the embedded broker declines fetch sessions). Nothing is asserted.

Usage: python benchmarks/bench_fetch_sessions.py [--partitions 200] [--busy 10] [--seconds 10]
"""

from __future__ import annotations

import argparse
import time
import uuid
from contextlib import ExitStack
from typing import Any

import anyio
from broker import real_broker

import gengroup.io.connection as connection
from gengroup import Admin, ConsumerGroup, Generation, Producer, TopicPartition
from gengroup.producer import ProducerRecord
from gengroup.protocol.framing import request_identity
from gengroup.protocol.versions import ApiKey


class FetchBytes:
    """Counts the bytes of the Fetch requests this process encodes."""

    def __init__(self) -> None:
        self.bytes = 0
        self.requests = 0
        encode = connection.encode_request

        def counting(request: Any, **kw: Any) -> Any:
            frame = encode(request, **kw)
            if request_identity(request)[0] == ApiKey.FETCH:
                self.bytes += len(frame)
                self.requests += 1
            return frame

        connection.encode_request = counting  # type: ignore[assignment]


async def produce(bootstrap: str, topic: str, busy: int, stop: anyio.Event) -> int:
    """A batch to each busy partition every 20 ms until ``stop``; the records sent."""
    sent = 0
    async with Producer(bootstrap, linger=0.001) as producer:
        while not stop.is_set():
            await producer.send_many(
                topic, [ProducerRecord(value=b"x" * 100, partition=p) for p in range(busy)]
            )
            sent += busy
            await anyio.sleep(0.02)
    return sent


async def run(bootstrap: str, partitions: int, busy: int, seconds: float, sessions: bool) -> None:
    topic = f"fsess-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: partitions})
    counter = COUNTER
    got = 0
    first = anyio.Event()

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        nonlocal got
        async for batch in gen.fetch(tp):
            got += len(batch.records)
            first.set()
            gen.mark(tp, batch.next_offset)

    async def member(group: ConsumerGroup) -> None:
        async for gen in group:
            for tp in gen.assignments:
                gen.start_soon(worker, gen, tp)

    stop = anyio.Event()
    result: dict[str, int] = {}

    async def producing() -> None:
        result["sent"] = await produce(bootstrap, topic, busy, stop)

    async with (
        ConsumerGroup(
            f"g-{uuid.uuid4().hex[:8]}",
            [topic],
            bootstrap,
            fetch_sessions=sessions,
            fetch_max_wait=0.5,
            start_offset="earliest",
        ) as group,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(member, group)
        tg.start_soon(producing)
        await first.wait()
        m0, b0, r0 = group.metrics(), counter.bytes, counter.requests
        c0, t0 = time.process_time(), time.monotonic()
        await anyio.sleep(seconds)
        m1, b1, r1 = group.metrics(), counter.bytes, counter.requests
        c1, t1 = time.process_time(), time.monotonic()
        stop.set()
        with anyio.fail_after(30):
            while "sent" not in result or got < result["sent"]:
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    dt = t1 - t0
    requests = r1 - r0
    sent = m1.fetch_partitions_sent - m0.fetch_partitions_sent
    incremental = m1.fetch_requests_incremental - m0.fetch_requests_incremental
    print(
        f"fetch_sessions={sessions!s:5}  {requests / dt:6.1f} requests/s  "
        f"{(b1 - b0) / dt:9.0f} request bytes/s  "
        f"{(b1 - b0) / max(1, requests):7.0f} bytes/request  "
        f"{sent / max(1, requests):5.1f} partitions/request  "
        f"{incremental}/{requests} incremental  "
        f"{m1.fetch_partitions_forgotten - m0.fetch_partitions_forgotten} forgotten  "
        f"CPU {100 * (c1 - c0) / dt:4.1f} %  records {m1.records - m0.records}  "
        f"(all {got} consumed)"
    )


COUNTER = FetchBytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--busy", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    with ExitStack() as stack:
        bootstrap = real_broker(stack, args.bootstrap)
        for sessions in (False, True):
            anyio.run(
                run,
                bootstrap,
                args.partitions,
                args.busy,
                args.seconds,
                sessions,
                backend="trio",
            )


if __name__ == "__main__":
    main()
