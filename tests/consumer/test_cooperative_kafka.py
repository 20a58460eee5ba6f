"""Cooperative rebalancing against the real Apache Kafka broker, under trio and asyncio."""

from __future__ import annotations

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, CooperativeStickyBalancer, TopicPartition
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .cooperative import revoked_unseen, three_four_three
from .helpers import FAST, all_partitions, create_topic, produce_ids

pytestmark = pytest.mark.kafka

PARTITIONS = 12
PER_STEP = 600


async def scenario(kafka: KafkaBroker) -> None:
    topic, group_id = make_unique_name("coop"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    produced: set[bytes] = set()

    def open_group(name: str) -> ConsumerGroup:
        return ConsumerGroup(
            group_id,
            [topic],
            kafka.bootstrap,
            client_id=name,
            balancers=[CooperativeStickyBalancer()],
            **FAST,
        )

    async def produce(step: int) -> None:
        ids = range(step * PER_STEP, (step + 1) * PER_STEP)
        await produce_ids(kafka.bootstrap, topic, ids)
        produced.update(f"id-{i}".encode() for i in ids)

    async with Admin(kafka.bootstrap) as admin:

        async def committed() -> dict[TopicPartition, int]:
            return await admin.fetch_offsets(group_id)

        ledger = await three_four_three(
            open_group, every, produce, committed, lambda: produced, timeout=120
        )
    for name in ("m1", "m2", "m3"):
        gens = ledger.generations[name]
        assert all(g.rebalance_protocol == "cooperative" for g in gens)
        # A partition was revoked: in a generation the member saw, or in one
        # that ended before its loop took it (a busy machine), between two
        # it saw. Compact, so that a failure's message is not cut: per
        # generation, the partition numbers added, retained and revoked, and
        # why it ended.
        assert any(g.revoked for g in gens) or revoked_unseen(gens), (
            name,
            [
                (
                    g.label,
                    sorted(tp.partition for tp in g.added),
                    sorted(tp.partition for tp in g.retained),
                    sorted(tp.partition for tp in g.revoked),
                    g.end_reason,
                )
                for g in gens
            ],
        )


async def test_three_four_three_members_keep_retained_workers_running_trio(
    kafka: KafkaBroker,
) -> None:
    await scenario(kafka)


def test_three_four_three_members_keep_retained_workers_running_asyncio(
    kafka: KafkaBroker,
) -> None:
    anyio.run(scenario, kafka, backend="asyncio")
