"""group_protocol="consumer" (KIP-848) on real Apache Kafka 4.3.1.

The module runs its own broker with short consumer-group timings
(``group.consumer.heartbeat.interval.ms`` 500, ``session.timeout.ms`` 6000):
the shared one keeps Kafka's 5 s / 45 s defaults, whose minimums only the
broker's configuration can lower.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import anyio.abc
import pytest

from gengroup import Admin, ConsumerGroup, TopicPartition
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, all_partitions, covers_exactly_once, create_topic, produce_ids

pytestmark = pytest.mark.kafka
log = logging.getLogger("gengroup.tests")

#: The broker's consumer-group timings for these tests.
BROKER_PROPERTIES = {
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 6000,
}

#: The members' settings: the consumer protocol, timings to match the broker's.
KIP848 = {**FAST, "group_protocol": "consumer", "session_timeout": 6.0}


@pytest.fixture(scope="module")
def kip848_kafka() -> Iterator[KafkaBroker]:
    """A broker of this module's own, with short consumer-group timings."""
    broker = KafkaBroker(properties=BROKER_PROPERTIES)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


async def test_one_then_three_then_two_members(kip848_kafka: KafkaBroker) -> None:
    """Every partition has one owner at every instant; every record is processed;
    commits are accepted and never move backwards."""
    bootstrap = kip848_kafka.bootstrap
    topic, group_id = make_unique_name("kip848"), make_unique_name("g")
    partitions = 6
    await create_topic(bootstrap, topic, partitions)
    await produce_ids(bootstrap, topic, range(0, 600))
    every = all_partitions(topic, partitions)
    ledger = Ledger()
    committed_history: dict[TopicPartition, list[int]] = {}
    groups: dict[str, ConsumerGroup] = {}
    scopes: dict[str, anyio.CancelScope] = {}

    async def run_member(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.CancelScope() as scope:
            scopes[name] = scope
            async with ConsumerGroup(group_id, [topic], bootstrap, client_id=name, **KIP848) as g:
                groups[name] = g
                task_status.started()
                await ledger.member(name, g)

    async def watch_commits() -> None:
        async with Admin(bootstrap) as admin:
            while True:
                offsets = await admin.fetch_offsets(group_id)
                for tp, off in offsets.items():
                    committed_history.setdefault(tp, []).append(off)
                await anyio.sleep(0.1)

    def stable(names: set[str]) -> bool:
        """Each of ``names`` runs a generation; they cover every partition, evenly."""
        cur = ledger.current()
        share = partitions // len(names)
        return (
            set(cur) == names
            and covers_exactly_once(cur.values(), every)
            and all(len(g.assignments) == share for g in cur.values())
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_commits)
        await tg.start(run_member, "m1")
        await ledger.wait_for(lambda: stable({"m1"}), "m1 to own every partition")
        await ledger.wait_for(
            lambda: set(ledger.processed) >= {f"id-{i}".encode() for i in range(600)},
            "the first records processed",
        )
        await tg.start(run_member, "m2")
        await tg.start(run_member, "m3")
        await produce_ids(bootstrap, topic, range(600, 1200))
        await ledger.wait_for(lambda: stable({"m1", "m2", "m3"}), "3 members to share them")
        await produce_ids(bootstrap, topic, range(1200, 1800))
        scopes["m2"].cancel()  # m2 closes: it leaves with epoch -1
        await ledger.wait_for(lambda: stable({"m1", "m3"}), "2 members to share them")
        await produce_ids(bootstrap, topic, range(1800, 2400))
        expected = {f"id-{i}".encode() for i in range(2400)}
        await ledger.wait_for(lambda: set(ledger.processed) >= expected, "every record processed")
        tg.cancel_scope.cancel()

    assert not ledger.overlaps, ledger.overlaps
    assert set(ledger.processed) == expected
    assert not ledger.handover_gaps, ledger.handover_gaps
    duplicates = {v: n for v, n in ledger.processed.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records processed twice"
    for tp, seq in committed_history.items():
        assert seq == sorted(seq), f"committed offset of {tp} went backwards: {seq}"
    assert {tp for tp, seq in committed_history.items() if seq} == every
    for name, gens in ledger.generations.items():
        assert all(g.commit_error is None for g in gens), name
        assert sum(g.commits_ok for g in gens) > 0, name
        ids = [g.id for g in gens]
        assert ids == sorted(ids) and ids[0] > 0, (name, ids)
    log.info("kip848 timings: %s", {n: list(g.history) for n, g in groups.items()})
