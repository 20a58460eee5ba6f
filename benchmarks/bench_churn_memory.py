"""Memory of a long-running member through many rebalances: RSS per generation, per client.

Each client runs a group of its own on one topic that a producer keeps
writing to: a steady member consuming every record (touching each value)
and a churning member that joins, holds its partitions for a moment and
leaves, over and over, so that the steady member goes through a rebalance
every few seconds. The steady member reports its resident set size (RSS)
at each new assignment. What grows with each rebalance, and is not freed
by reference counting, shows as a slope: KB of RSS per generation (least
squares over the run, the first generations left out as warm-up). Python's
garbage collector is left as it is, as in a service.

    python benchmarks/bench_churn_memory.py [--seconds 240] [--clients gengroup-trio,...]
        [--broker-idle-ms 3000]

Clients: gengroup-trio, gengroup-asyncio (the same member under
``anyio.run(..., backend="asyncio")``) and aiokafka, all with the range
assignor (set for aiokafka, whose default is round-robin), a 10 s session
and a 1 s heartbeat. The groups run side by side, on one broker (Apache
Kafka from the test harness, or ``--bootstrap``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from typing import Any

from broker import real_broker

from gengroup.testing.kafka import KafkaBroker

CLIENTS = ("gengroup-trio", "gengroup-asyncio", "aiokafka")
TOPIC, PARTITIONS = "churn-memory", 6
#: Generations left out of the slope: imports, caches and buffers filling up.
WARM_UP = 5


def rss_kb() -> int:
    """This process's resident set size in KB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------ members


def gengroup_member(bootstrap: str, group_id: str, backend: str, churn: bool) -> None:
    """A gengroup member: steady (reports RSS per generation) or churning."""
    import anyio

    from gengroup import ConsumerGroup, Generation, TopicPartition

    settings: dict[str, Any] = {
        "start_offset": "latest",
        "session_timeout": 10.0,
        "heartbeat_interval": 1.0,
    }

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            sum(len(r.value) for r in batch.records if r.value is not None)
            gen.mark(tp, batch.next_offset)

    async def steady() -> None:
        async with ConsumerGroup(group_id, [TOPIC], bootstrap, **settings) as group:
            async for gen in group:
                say(f"G {time.time():.3f} {rss_kb()}")
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp)

    async def churning() -> None:
        while True:
            async with ConsumerGroup(group_id, [TOPIC], bootstrap, **settings) as group:
                gen = await group.next()
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp)
                await anyio.sleep(2.0)
            await anyio.sleep(2.0)

    anyio.run(churning if churn else steady, backend=backend)


def aiokafka_member(bootstrap: str, group_id: str, churn: bool) -> None:
    """An aiokafka member (getmany): steady (reports RSS per assignment) or churning."""
    import asyncio
    import logging

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # a line per rebalance otherwise

    class Report(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        async def on_partitions_assigned(self, assigned: Any) -> None:
            say(f"G {time.time():.3f} {rss_kb()}")

    def consumer() -> Any:
        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            auto_offset_reset="latest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            partition_assignment_strategy=(RangePartitionAssignor,),
        )

    async def steady() -> None:
        c = consumer()
        c.subscribe([TOPIC], listener=Report())
        await c.start()
        try:
            while True:
                for records in (await c.getmany(timeout_ms=500, max_records=500)).values():
                    sum(len(r.value) for r in records if r.value is not None)
        finally:
            await c.stop()

    async def churning() -> None:
        while True:
            c = consumer()
            c.subscribe([TOPIC])
            await c.start()
            try:
                end = time.monotonic() + 2.0
                while not c.assignment() or time.monotonic() < end:
                    await c.getmany(timeout_ms=200)
            finally:
                await c.stop()
            await asyncio.sleep(2.0)

    asyncio.run(churning() if churn else steady())


def producer(bootstrap: str, rate: int) -> None:
    """Write ``rate`` records of 100 B a second to the topic, until killed."""
    import anyio

    from gengroup import Admin, Producer, ProducerRecord

    async def main() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics({TOPIC: PARTITIONS}, exist_ok=True)
        async with Producer(bootstrap) as p:
            say("ready")
            n = 0
            while True:
                batch = [ProducerRecord(b"%099d" % (n + i)) for i in range(rate // 10)]
                n += len(batch)
                await p.send_many(TOPIC, batch)
                await anyio.sleep(0.1)

    anyio.run(main, backend="trio")


# ------------------------------------------------------------------ the run


def slope(points: list[tuple[int, int]]) -> float | None:
    """Least-squares KB per generation over ``points`` (generation, rss)."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def spawn(role: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--role", role, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def run(bootstrap: str, clients: list[str], seconds: float, rate: int) -> None:
    prod = spawn("producer", bootstrap, str(rate))
    procs: list[subprocess.Popen[str]] = [prod]
    steady: dict[str, subprocess.Popen[str]] = {}
    lines: dict[str, list[str]] = {}
    readers: list[threading.Thread] = []
    try:
        assert prod.stdout is not None
        if prod.stdout.readline().strip() != "ready":
            raise SystemExit("the producer did not start")
        for client in clients:
            group = f"churn-{client}-{os.getpid()}"
            steady[client] = spawn(client, bootstrap, group, "steady")
            procs.append(steady[client])
            # Read as it comes: a full pipe would block the member's event loop.
            out = steady[client].stdout
            assert out is not None
            lines[client] = []
            readers.append(
                threading.Thread(target=lambda o=out, kept=lines[client]: kept.extend(o))
            )
            readers[-1].start()
        time.sleep(5.0)  # the steady members form their groups alone first
        for client in clients:
            procs.append(spawn(client, bootstrap, f"churn-{client}-{os.getpid()}", "churn"))
        time.sleep(seconds)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for reader in readers:
            reader.join(timeout=20)
    print(f"{'client':18} {'generations':>11} {'first MB':>9} {'last MB':>8} {'KB/generation':>14}")
    for client in steady:
        rss = [int(line.split()[2]) for line in lines[client] if line.startswith("G ")]
        points = list(enumerate(rss))[WARM_UP:]
        s = slope(points)
        first = f"{rss[0] / 1024:.1f}" if rss else "-"
        last = f"{rss[-1] / 1024:.1f}" if rss else "-"
        shown = "-" if s is None else f"{s:+.1f}"
        print(f"{client:18} {len(rss):>11} {first:>9} {last:>8} {shown:>14}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--rate", type=int, default=200, help="records a second")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--bootstrap", help="a broker of your own (default: start Kafka)")
    parser.add_argument(
        "--broker-idle-ms",
        type=int,
        help="the started broker's connections.max.idle.ms (Kafka's default: 600000): "
        "lower, it closes the members' idle connections often",
    )
    args = parser.parse_args()
    if args.role == "producer":
        producer(args.rest[0], int(args.rest[1]))
    elif args.role in ("gengroup-trio", "gengroup-asyncio"):
        backend = args.role.split("-")[1]
        gengroup_member(args.rest[0], args.rest[1], backend, args.rest[2] == "churn")
    elif args.role == "aiokafka":
        aiokafka_member(args.rest[0], args.rest[1], args.rest[2] == "churn")
    else:
        clients = [c for c in args.clients.split(",") if c]
        unknown = set(clients) - set(CLIENTS)
        if unknown:
            parser.error(f"unknown client(s): {', '.join(sorted(unknown))}")
        with ExitStack() as stack:
            if args.broker_idle_ms is not None and args.bootstrap is not None:
                parser.error(
                    "--broker-idle-ms sets the broker this script starts: not with --bootstrap"
                )
            if args.broker_idle_ms is not None:
                broker = KafkaBroker(properties={"connections.max.idle.ms": args.broker_idle_ms})
                broker.start()
                stack.callback(broker.stop)
                bootstrap = broker.bootstrap
            else:
                bootstrap = real_broker(stack, args.bootstrap)
            run(bootstrap, clients, args.seconds, args.rate)


if __name__ == "__main__":
    main()
