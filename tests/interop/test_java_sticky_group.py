"""One sticky group mixing gengroup members and Java KafkaConsumers, on real Kafka.

The Java member is ``java/JavaMember.java``, compiled with ``javac`` against
the kafka-clients jar the Kafka harness caches, running the Java client's
``StickyAssignor``. Whichever client leads, the partitions are covered exactly
once, every record is consumed, and when another member joins the old members
only give partitions away. A missing JDK fails the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from gengroup import StickyBalancer
from gengroup.testing.kafka import KafkaBroker

from ..consumer.helpers import Ledger
from .conftest import JavaGroup
from .members import (
    gengroup_members,
    produce_and_consume,
    share_one_generation,
    start_one_then_the_other,
)

pytestmark = pytest.mark.kafka

RECORDS = 60
STRATEGY = "org.apache.kafka.clients.consumer.StickyAssignor"


@pytest.mark.parametrize("gengroup_leads", [True, False], ids=["gengroup-leads", "java-leads"])
async def test_sticky_group_with_java_members(
    kafka: KafkaBroker,
    java_group: Callable[[str, str], Coroutine[Any, Any, JavaGroup]],
    gengroup_leads: bool,
) -> None:
    topic, group_id, every, peer = await java_group(STRATEGY, "sticky")
    ledger = Ledger()

    def shared(*names: str) -> bool:
        cur = ledger.current()
        return share_one_generation([cur.get(n) for n in names], peer, every)

    member = gengroup_members(ledger, kafka.bootstrap, group_id, topic, StickyBalancer)

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
            assert gen.protocol == "sticky"
            assert gen.is_leader is gengroup_leads
            before = {"gengroup": set(gen.assignments), "java": peer.current()}

            await produce_and_consume(
                kafka.bootstrap, topic, RECORDS, peer, lambda: ledger.processed
            )
            assert peer.consumed() <= before["java"]

            # A third member joins: sticky means the others only give partitions away.
            tg.start_soon(member, "gengroup-2")
            await peer.wait_for(lambda: shared("gengroup", "gengroup-2"), "three members to share")
            after = {"gengroup": ledger.assigned("gengroup"), "java": peer.current()}
            assert ledger.current()["gengroup"].is_leader is gengroup_leads
            for name in ("gengroup", "java"):
                assert after[name] <= before[name], (name, before, after)
                assert len(after[name]) == 2
            assert len(ledger.assigned("gengroup-2")) == 2
            tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await peer.stop()
    assert peer.errors == []
