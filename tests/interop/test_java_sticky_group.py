"""One sticky group mixing gengroup members and Java KafkaConsumers, on real Kafka.

The Java member is ``java/JavaMember.java``, compiled with ``javac`` against
the kafka-clients jar the Kafka harness caches, running the Java client's
``StickyAssignor``. Whichever client leads, the partitions are covered exactly
once, every record is consumed, and when another member joins the old members
only give partitions away. A missing JDK fails the tests.
"""

from __future__ import annotations

import anyio
import pytest

from gengroup import StickyBalancer

from ..consumer.helpers import Ledger
from .conftest import JavaGroup

pytestmark = pytest.mark.kafka

RECORDS = 60
STRATEGY = "org.apache.kafka.clients.consumer.StickyAssignor"


@pytest.mark.parametrize("gengroup_leads", [True, False], ids=["gengroup-leads", "java-leads"])
async def test_sticky_group_with_java_members(java_group: JavaGroup, gengroup_leads: bool) -> None:
    ledger = Ledger()
    group = await java_group(STRATEGY, "sticky", ledger)
    peer = group.peer
    member = group.gengroup_member(StickyBalancer)

    async with anyio.create_task_group() as tg:
        try:
            await group.start_one_then_the_other(tg, member, gengroup_first=gengroup_leads)
            await peer.wait_for(
                lambda: group.share_one_generation("gengroup"), "gengroup and Java to share"
            )
            gen = ledger.current()["gengroup"]
            assert gen.protocol == "sticky"
            assert gen.is_leader is gengroup_leads
            before = group.owned()

            await group.produce_and_consume(RECORDS)
            assert peer.consumed() <= before["peer"]

            # A third member joins: sticky means the others only give partitions away.
            tg.start_soon(member, "gengroup-2")
            await peer.wait_for(
                lambda: group.share_one_generation("gengroup", "gengroup-2"),
                "three members to share",
            )
            group.check_a_third_took_a_share(before)
            assert ledger.current()["gengroup"].is_leader is gengroup_leads
            tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await peer.stop()
    assert peer.errors == []
