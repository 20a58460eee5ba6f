"""A record sent, and one consumed, just after its partition's leader moved: with
and without leader hints.

On three real Kafka nodes (the test harness's ``KafkaCluster``), a producer
writes one record to a partition with three replicas, the partition's
leadership moves to another node by a preferred-leader election (every node
stays up), and the producer sends one more record: its send is timed. The
producer still has the old leader cached, so the Produce goes there and is
refused NOT_LEADER_OR_FOLLOWER. With leader hints (KIP-951, the default) the
refusal names the new leader and the retry goes there at once; without them
(``Cluster.take_leader_hint`` made to take none) the retry waits for its
backoff and the Metadata refresh. Runs alternate the two, for ``acks=1`` and
``acks="all"``; medians are printed. Nothing is asserted.

The consume case: a group member reads the partition (its Fetch long-polls
the old leader) when the leadership moves; a record is written at once (to
the new leader) and the time from the election's end to the member's worker
holding that record is taken. The old leader's refusal (Fetch v16) names the
new leader: with hints the prefetcher fetches from it at once; without them
(the member's ``Cluster.take_leader_hint`` made to take none) after its
backoff and a Metadata refresh.

The record is written after the election (acks="all": a record the old
leader took with acks=1 just before it stepped down can be truncated away
there and never read), so the figure also holds the write and its
replication to the followers (a consumer reads up to the high watermark);
the hint saves the member's backoff and Metadata round trip.
The first group on a fresh cluster waits for Kafka to create its offsets
topic: one group's run before the measured ones is not counted.

Usage: python benchmarks/bench_leader_move.py [--repeat 8] [--only send|consume]
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from typing import Literal

import anyio

from gengroup import Admin, ConsumerGroup, Generation, Producer, TopicPartition
from gengroup.admin import NewTopic
from gengroup.testing.kafka import KafkaCluster

TOPIC = "moving"


async def one_send(cluster: KafkaCluster, hints: bool, acks: Literal["all", 1]) -> float:
    """Milliseconds of the first send after the partition's leader moved."""
    async with Producer(cluster.bootstrap, linger=0, acks=acks) as producer:
        if not hints:
            producer.cluster.take_leader_hint = lambda *args: False  # type: ignore[method-assign]
        await producer.send(TOPIC, b"before", partition=0)
        old = cluster.node_of_leader(TOPIC, 0)
        new = next(n for n in cluster.running if n != old)
        await anyio.to_thread.run_sync(partial(cluster.move_leader, TOPIC, 0, new))
        start = time.perf_counter()
        await producer.send(TOPIC, b"after", partition=0)
        return (time.perf_counter() - start) * 1000


async def one_consume(cluster: KafkaCluster, hints: bool, run: int) -> float:
    """Milliseconds from the end of the leader's move to the first record
    written after it in a worker's hands."""
    seen: dict[bytes, float] = {}
    got = anyio.Event()
    before, after = f"before-{run}-{hints}".encode(), f"after-{run}-{hints}".encode()

    async def work(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            for record in batch.records:
                if record.value is not None:
                    seen.setdefault(record.value, time.perf_counter())
            if after in seen or before in seen:
                got.set()

    group = ConsumerGroup(f"bench-move-{run}-{hints}", [TOPIC], cluster.bootstrap)
    async with Producer(cluster.bootstrap, linger=0, acks="all") as producer, group:
        if not hints:
            group.cluster.take_leader_hint = lambda *args: False  # type: ignore[method-assign]
        await producer.send(TOPIC, before, partition=0)

        async def member() -> None:
            async for gen in group:
                for tp in gen.added:
                    gen.start_soon(work, gen, tp, partition=tp)

        async with anyio.create_task_group() as tg:
            tg.start_soon(member)
            await got.wait()
            got = anyio.Event()
            await anyio.sleep(0.5)  # the member's Fetch long-polls the old leader
            old = cluster.node_of_leader(TOPIC, 0)
            new = next(n for n in cluster.running if n != old)
            await anyio.to_thread.run_sync(partial(cluster.move_leader, TOPIC, 0, new))
            start = time.perf_counter()
            await producer.send(TOPIC, after, partition=0)
            with anyio.fail_after(60):
                while after not in seen:
                    await got.wait()
                    got = anyio.Event()
            tg.cancel_scope.cancel()
    return (seen[after] - start) * 1000


def _print(case: str, took: dict[bool, list[float]]) -> None:
    for hints in (True, False):
        runs = ", ".join(f"{ms:.0f}" for ms in took[hints])
        print(
            f"{case:8} hints={'on ' if hints else 'off'}: "
            f"median {statistics.median(took[hints]):6.1f} ms  (runs: {runs})"
        )


async def main(repeat: int, only: str | None) -> None:
    with KafkaCluster(3) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics([NewTopic(TOPIC, 1, replication_factor=3)])
        cluster.node_of_leader(TOPIC, 0)
        acks_values: tuple[Literal["all", 1], ...] = (1, "all") if only != "consume" else ()
        for acks in acks_values:
            took: dict[bool, list[float]] = {True: [], False: []}
            for run in range(repeat):
                for hints in (True, False) if run % 2 else (False, True):
                    took[hints].append(await one_send(cluster, hints, acks))
            _print(f"acks={acks!s:3}", took)
        if only == "send":
            return
        await one_consume(cluster, True, -1)  # the offsets topic is created: not counted
        took = {True: [], False: []}
        for run in range(repeat):
            for hints in (True, False) if run % 2 else (False, True):
                took[hints].append(await one_consume(cluster, hints, run))
        _print("consume", took)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--only", choices=["send", "consume"])
    args = parser.parse_args()
    anyio.run(main, args.repeat, args.only)
