"""One sticky group mixing gengroup members and Java KafkaConsumers, on real Kafka.

The Java member is ``java/JavaMember.java``, compiled with ``javac`` against
the kafka-clients jar the Kafka harness caches, running the Java client's
``StickyAssignor``. Whichever client leads, the partitions are covered exactly
once, every record is consumed, and when another member joins the old members
only give partitions away. A missing JDK fails the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, Generation, StickyBalancer
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from ..consumer.helpers import FAST, Ledger, all_partitions, create_topic, produce_ids
from .members import ProcessMember

pytestmark = pytest.mark.kafka

PARTITIONS = 6
RECORDS = 60


@pytest.mark.parametrize("gengroup_leads", [True, False], ids=["gengroup-leads", "java-leads"])
async def test_sticky_group_with_java_members(
    kafka: KafkaBroker, java_member: list[str], tmp_path: Path, gengroup_leads: bool
) -> None:
    topic, group_id = make_unique_name("sticky"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    strategy = "org.apache.kafka.clients.consumer.StickyAssignor"
    peer = ProcessMember(
        [*java_member, kafka.bootstrap, group_id, topic, strategy], topic, tmp_path / "java.log"
    )
    ledger = Ledger()

    async def wait_for(predicate: Any, what: str) -> None:
        try:
            await ledger.wait_for(predicate, what, timeout=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the Java member said:\n{peer.tail()}") from None

    def shared(*names: str) -> bool:
        cur = ledger.current()
        gens: list[Generation | None] = [cur.get(n) for n in names]
        if any(g is None for g in gens) or not peer.generations:
            return False
        ids = {g.id for g in gens if g is not None} | {peer.generations[-1]["generation"]}
        seen = [tp for g in gens if g is not None for tp in g.assignments] + list(peer.current())
        return (
            len(ids) == 1
            and len(seen) == len(set(seen))
            and set(seen) == every
            and all(g.assignments for g in gens if g is not None)
            and bool(peer.current())
        )

    async def member(name: str) -> None:
        async with ConsumerGroup(
            group_id, [topic], kafka.bootstrap, balancers=[StickyBalancer()], **FAST
        ) as group:
            await ledger.member(name, group)

    async with anyio.create_task_group() as tg:
        try:
            if gengroup_leads:
                tg.start_soon(member, "gengroup")
                await wait_for(
                    lambda: ledger.assigned("gengroup") == every, "gengroup to own everything"
                )
                tg.start_soon(peer.run)
            else:
                tg.start_soon(peer.run)
                await wait_for(lambda: peer.current() == every, "Java to own everything")
                tg.start_soon(member, "gengroup")
            await wait_for(lambda: shared("gengroup"), "gengroup and Java to share")
            gen = ledger.current()["gengroup"]
            assert gen.protocol == "sticky"
            assert gen.is_leader is gengroup_leads
            before = {"gengroup": set(gen.assignments), "java": peer.current()}

            await produce_ids(kafka.bootstrap, topic, range(RECORDS))
            wanted = {f"id-{i}" for i in range(RECORDS)}

            def consumed() -> set[str]:
                return {v.decode() for v in ledger.processed} | {r["value"] for r in peer.records}

            await wait_for(lambda: wanted <= consumed(), "every record consumed")
            assert peer.consumed() <= before["java"]

            # A third member joins: sticky means the others only give partitions away.
            tg.start_soon(member, "gengroup-2")
            await wait_for(lambda: shared("gengroup", "gengroup-2"), "three members to share")
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
