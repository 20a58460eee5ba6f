"""A record sent just after its partition's leader moved: with and without leader hints.

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

Usage: python benchmarks/bench_leader_move.py [--repeat 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from typing import Literal

import anyio

from gengroup import Admin, Producer
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


async def main(repeat: int) -> None:
    with KafkaCluster(3) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics([NewTopic(TOPIC, 1, replication_factor=3)])
        cluster.node_of_leader(TOPIC, 0)
        acks_values: tuple[Literal["all", 1], ...] = (1, "all")
        for acks in acks_values:
            took: dict[bool, list[float]] = {True: [], False: []}
            for run in range(repeat):
                for hints in (True, False) if run % 2 else (False, True):
                    took[hints].append(await one_send(cluster, hints, acks))
            for hints in (True, False):
                runs = ", ".join(f"{ms:.0f}" for ms in took[hints])
                print(
                    f"acks={acks!s:3} hints={'on ' if hints else 'off'}: "
                    f"median {statistics.median(took[hints]):6.1f} ms  (runs: {runs})"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8)
    anyio.run(main, parser.parse_args().repeat)
