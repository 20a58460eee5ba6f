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

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from gengroup import CooperativeStickyBalancer
from gengroup.testing.kafka import KafkaBroker

from ..consumer.cooperative import SpanLedger
from .conftest import JavaGroup
from .members import (
    gengroup_members,
    produce_and_consume,
    share_one_generation,
    start_one_then_the_other,
)

pytestmark = pytest.mark.kafka

RECORDS = 120
STRATEGY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


@pytest.mark.parametrize("gengroup_leads", [True, False], ids=["gengroup-leads", "java-leads"])
async def test_cooperative_group_with_a_java_member(
    kafka: KafkaBroker,
    java_group: Callable[[str, str], Coroutine[Any, Any, JavaGroup]],
    gengroup_leads: bool,
) -> None:
    topic, group_id, every, peer = await java_group(STRATEGY, "coop")
    ledger = SpanLedger()

    def shared(*names: str) -> bool:
        """They share a generation, and each gengroup worker of it runs."""
        cur = ledger.current()
        if not share_one_generation([cur.get(n) for n in names], peer, every):
            return False
        return all(ledger.owners.get(tp) == n for n in names for tp in cur[n].assignments)

    member = gengroup_members(ledger, kafka.bootstrap, group_id, topic, CooperativeStickyBalancer)

    async with anyio.create_task_group() as tg:
        try:
            await start_one_then_the_other(
                tg,
                peer,
                every,
                gengroup_first=gengroup_leads,
                start_gengroup=lambda: tg.start_soon(member, "gengroup"),
                gengroup_owns_all=lambda: ledger.assigned("gengroup") == every,
            )
            await peer.wait_for(lambda: shared("gengroup"), "gengroup and Java to share")
            gen = ledger.current()["gengroup"]
            assert gen.protocol == "cooperative-sticky"
            assert gen.rebalance_protocol == "cooperative"
            assert gen.is_leader is gengroup_leads
            before = {"gengroup": set(gen.assignments), "java": peer.current()}
            if gengroup_leads:
                # gengroup gave partitions away in two rebalances; what it
                # kept, its workers kept processing.
                assert any(g.revoked for g in ledger.generations["gengroup"])
                assert peer.revocations == []
            else:
                assert peer.revocations, "Java should have revoked partitions for gengroup"

            await produce_and_consume(
                kafka.bootstrap, topic, RECORDS, peer, lambda: ledger.processed
            )

            # A third member joins: the others only give partitions away, and
            # gengroup's workers of the partitions it keeps never restart.
            tg.start_soon(member, "gengroup-2")
            await peer.wait_for(lambda: shared("gengroup", "gengroup-2"), "three members to share")
            after = {"gengroup": ledger.assigned("gengroup"), "java": peer.current()}
            assert ledger.current()["gengroup"].is_leader is gengroup_leads
            for name in ("gengroup", "java"):
                assert after[name] <= before[name], (name, before, after)
                assert len(after[name]) == 2
            assert len(ledger.assigned("gengroup-2")) == 2
            assert all(ledger.starts_of("gengroup")[tp] == 1 for tp in after["gengroup"])
            tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await peer.stop()
    assert not ledger.overlaps, ledger.overlaps
    assert peer.errors == []
