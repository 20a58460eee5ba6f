"""A cooperative-sticky group (classic protocol) mixing gengroup and librdkafka.

librdkafka (confluent-kafka) runs ``partition.assignment.strategy =
cooperative-sticky``; gengroup offers ``CooperativeStickyBalancer``. Each
leads in turn (the member that joins first leads). Once a member of the
other client joins, the two share the partitions, none owned twice; the
partitions gengroup kept through the two-phase rebalance keep their workers;
every record is read. On Apache Kafka and on the embedded broker (listening on
loopback, on the test's event loop, in real time: librdkafka has its own
threads and clock).
"""

from __future__ import annotations

import anyio
import pytest

from gengroup import ConsumerGroup, CooperativeStickyBalancer
from gengroup.broker import BrokerSettings
from gengroup.testing.pytest_plugin import make_unique_name

from .confluent_member import IncrementalMember
from .cooperative import SpanLedger, wait_until
from .helpers import FAST, all_partitions, broker_under_test, create_topic, produce_ids

PARTITIONS = 6
RECORDS = 300


@pytest.mark.parametrize("broker", [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
@pytest.mark.parametrize(
    "gengroup_leads", [True, False], ids=["gengroup-leader", "gengroup-follower"]
)
async def test_cooperative_group_with_a_librdkafka_member(
    request: pytest.FixtureRequest, broker: str, gengroup_leads: bool
) -> None:
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    async with broker_under_test(request, broker, settings) as bootstrap:
        await cooperative_group_with_a_librdkafka_member(bootstrap, gengroup_leads)


async def cooperative_group_with_a_librdkafka_member(bootstrap: str, gengroup_leads: bool) -> None:
    topic, group_id = make_unique_name("coop-mixed"), make_unique_name("g")
    await create_topic(bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    ledger = SpanLedger()
    peer = IncrementalMember(
        topic,
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        },
    )

    def alone() -> bool:
        return ledger.assigned("gengroup") == every and ledger.owners.keys() == every

    def shared() -> bool:
        mine, theirs = ledger.assigned("gengroup"), peer.current()
        return (
            len(mine) == len(theirs) == PARTITIONS // 2
            and not mine & theirs
            and mine | theirs == every
            and all(ledger.owners.get(tp) == "gengroup" for tp in mine)
        )

    try:
        if not gengroup_leads:
            peer.start()
            await wait_until(lambda: peer.current() == every, "librdkafka alone", 60)
        async with (
            ConsumerGroup(
                group_id,
                [topic],
                bootstrap,
                client_id="gengroup",
                balancers=[CooperativeStickyBalancer()],
                **FAST,
            ) as group,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ledger.member, "gengroup", group)
            if gengroup_leads:
                await wait_until(alone, "gengroup alone", 60)
                peer.start()
            await wait_until(shared, "both clients to share the partitions", 60)
            gen = ledger.current()["gengroup"]
            assert gen.is_leader is gengroup_leads
            assert gen.protocol == "cooperative-sticky"
            assert gen.rebalance_protocol == "cooperative"
            kept = ledger.assigned("gengroup")
            await produce_ids(bootstrap, topic, range(RECORDS))
            expected = {f"id-{i}".encode() for i in range(RECORDS)}
            await wait_until(
                lambda: set(ledger.processed) | peer.values >= expected, "every record", 60
            )
            tg.cancel_scope.cancel()
    finally:
        peer.close()
    assert peer.error is None, peer.error
    assert not ledger.overlaps, ledger.overlaps
    generations = ledger.generations["gengroup"]
    assert all(g.rebalance_protocol == "cooperative" for g in generations)
    if gengroup_leads:
        # It gave half its partitions up and kept the others' workers running.
        assert any(g.revoked for g in generations)
        assert all(ledger.starts_of("gengroup")[tp] == 1 for tp in kept)
