"""One cooperative-sticky group mixing gengroup members and a Java KafkaConsumer, on real Kafka.

The Java member (``java/JavaMember.java``) runs the Java client's
``CooperativeStickyAssignor`` with its cooperative rebalance protocol; the
gengroup members run :class:`~gengroup.CooperativeStickyBalancer` with
span-scoped workers. Whichever client leads, the partitions are covered
exactly once, every record is consumed, and when a member joins the others
only give partitions away, in two rebalances, and gengroup's workers of the
partitions it keeps never restart. A missing JDK fails the tests.
"""

from __future__ import annotations

import anyio
import pytest

from gengroup import CooperativeStickyBalancer

from ..consumer.cooperative import SpanLedger
from .conftest import JavaGroup

pytestmark = pytest.mark.kafka

RECORDS = 120
STRATEGY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


@pytest.mark.parametrize("gengroup_leads", [True, False], ids=["gengroup-leads", "java-leads"])
async def test_cooperative_group_with_a_java_member(
    java_group: JavaGroup, gengroup_leads: bool
) -> None:
    ledger = SpanLedger()
    group = await java_group(STRATEGY, "coop", ledger)
    peer = group.peer
    member = group.gengroup_member(CooperativeStickyBalancer)

    def shared(*names: str) -> bool:
        """They share a generation, and each gengroup worker of it runs."""
        if not group.share_one_generation(*names):
            return False
        cur = ledger.current()
        return all(ledger.owners.get(tp) == n for n in names for tp in cur[n].assignments)

    async with anyio.create_task_group() as tg:
        try:
            await group.start_one_then_the_other(tg, member, gengroup_first=gengroup_leads)
            await peer.wait_for(lambda: shared("gengroup"), "gengroup and Java to share")
            gen = ledger.current()["gengroup"]
            assert gen.protocol == "cooperative-sticky"
            assert gen.rebalance_protocol == "cooperative"
            assert gen.is_leader is gengroup_leads
            before = group.owned()
            if gengroup_leads:
                # gengroup gave partitions away in two rebalances; what it
                # kept, its workers kept processing.
                assert any(g.revoked for g in ledger.generations["gengroup"])
                assert peer.revocations == []
            else:
                assert peer.revocations, "Java should have revoked partitions for gengroup"

            await group.produce_and_consume(RECORDS)

            # A third member joins: the others only give partitions away, and
            # gengroup's workers of the partitions it keeps never restart.
            tg.start_soon(member, "gengroup-2")
            await peer.wait_for(lambda: shared("gengroup", "gengroup-2"), "three members to share")
            group.check_a_third_took_a_share(before)
            assert ledger.current()["gengroup"].is_leader is gengroup_leads
            assert all(ledger.starts_of("gengroup")[tp] == 1 for tp in ledger.assigned("gengroup"))
            tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await peer.stop()
    assert not ledger.overlaps, ledger.overlaps
    assert peer.errors == []
