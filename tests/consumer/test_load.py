"""Load: 50 members of one group over 400 partitions converge to one generation in which
every partition is owned exactly once; the time to converge and the memory per member
are printed (numbers to watch, not asserted). On the embedded broker and real Kafka."""

from __future__ import annotations

import resource
import time
from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, Producer
from gengroup.broker import FakeCluster
from gengroup.producer import ProducerRecord
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import Ledger, all_partitions, covers_exactly_once, create_topic

MEMBERS = 50
PARTITIONS = 400
SETTINGS: dict[str, Any] = {
    "session_timeout": 30.0,
    "rebalance_timeout": 60.0,
    "heartbeat_interval": 1.0,
    "partition_watch_interval": 5.0,
    "fetch_max_wait": 0.5,
}


def _rss_mb() -> float:
    """This process's current resident memory, in MB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6


async def _converge(bootstrap: str, label: str) -> None:
    topic, group_id = make_unique_name("load"), make_unique_name("g")
    await create_topic(bootstrap, topic, PARTITIONS)
    async with Producer(bootstrap) as producer:  # one record per partition: every worker fetches
        await producer.send_many(
            topic, [ProducerRecord(value=b"x", partition=p) for p in range(PARTITIONS)]
        )
    rss_before = _rss_mb()
    ledger = Ledger()
    wanted = all_partitions(topic, PARTITIONS)
    started = time.monotonic()

    def converged() -> bool:
        current = ledger.current()
        return (
            len(current) == MEMBERS
            and len({gen.id for gen in current.values()}) == 1
            and covers_exactly_once(current.values(), wanted)
        )

    async with anyio.create_task_group() as tg:
        for i in range(MEMBERS):

            async def member(name: str = f"m{i}") -> None:
                async with ConsumerGroup(
                    group_id, [topic], bootstrap, client_id=name, **SETTINGS
                ) as group:
                    await ledger.member(name, group)

            tg.start_soon(member)
        await ledger.wait_for(converged, "50 members in one generation", timeout=240)
        took = time.monotonic() - started
        gen_id = next(iter(ledger.current().values())).id
        assert not ledger.overlaps, ledger.overlaps[:5]
        print(
            f"\n{label}: {MEMBERS} members x {PARTITIONS} partitions converged to generation "
            f"{gen_id} in {took:.1f} s; the test process (all {MEMBERS} members, their "
            f"buffers and the embedded broker if any) holds {_rss_mb():.0f} MB, "
            f"{_rss_mb() - rss_before:+.0f} MB since the members started"
        )
        tg.cancel_scope.cancel()


async def test_fifty_members_converge_on_the_embedded_broker() -> None:
    async with FakeCluster(initial_rebalance_delay_ms=3000) as cluster:
        await _converge(cluster.bootstrap, "embedded broker")


@pytest.mark.kafka
async def test_fifty_members_converge_on_kafka(kafka: KafkaBroker) -> None:
    await _converge(kafka.bootstrap, "Apache Kafka")
