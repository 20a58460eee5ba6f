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

from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, CooperativeStickyBalancer
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from ..consumer.cooperative import SpanLedger
from ..consumer.helpers import FAST, all_partitions, create_topic, produce_ids
from .members import ProcessMember

pytestmark = pytest.mark.kafka

PARTITIONS = 6
RECORDS = 120
STRATEGY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


@pytest.mark.parametrize("gengroup_leads", [True, False], ids=["gengroup-leads", "java-leads"])
async def test_cooperative_group_with_a_java_member(
    kafka: KafkaBroker, java_member: list[str], tmp_path: Path, gengroup_leads: bool
) -> None:
    topic, group_id = make_unique_name("coop"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    peer = ProcessMember(
        [*java_member, kafka.bootstrap, group_id, topic, STRATEGY], topic, tmp_path / "java.log"
    )
    ledger = SpanLedger()

    async def wait_for(predicate: Any, what: str) -> None:
        try:
            with anyio.fail_after(90):
                while not predicate():
                    await anyio.sleep(0.05)
        except TimeoutError:
            said = peer.tail()
            raise AssertionError(f"timed out waiting for {what}; Java said:\n{said}") from None

    def shared(*names: str) -> bool:
        cur = ledger.current()
        gens = [cur.get(n) for n in names]
        if any(g is None for g in gens) or not peer.generations:
            return False
        ids = {g.id for g in gens if g is not None} | {peer.generations[-1]["generation"]}
        seen = [tp for g in gens if g is not None for tp in g.assignments] + list(peer.current())
        running = all(ledger.owners.get(tp) == n for n in names for tp in cur[n].assignments)
        return (
            len(ids) == 1
            and len(seen) == len(set(seen))
            and set(seen) == every
            and all(g.assignments for g in gens if g is not None)
            and bool(peer.current())
            and running
        )

    async def member(name: str) -> None:
        async with ConsumerGroup(
            group_id, [topic], kafka.bootstrap, balancers=[CooperativeStickyBalancer()], **FAST
        ) as group:
            await ledger.member(name, group)

    async with anyio.create_task_group() as tg:
        try:
            if gengroup_leads:
                tg.start_soon(member, "gengroup")
                await wait_for(lambda: ledger.assigned("gengroup") == every, "gengroup to own all")
                tg.start_soon(peer.run)
            else:
                tg.start_soon(peer.run)
                await wait_for(lambda: peer.current() == every, "Java to own everything")
                tg.start_soon(member, "gengroup")
            await wait_for(lambda: shared("gengroup"), "gengroup and Java to share")
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

            await produce_ids(kafka.bootstrap, topic, range(RECORDS))
            wanted = {f"id-{i}" for i in range(RECORDS)}

            def consumed() -> set[str]:
                return {v.decode() for v in ledger.processed} | {r["value"] for r in peer.records}

            await wait_for(lambda: wanted <= consumed(), "every record consumed")

            # A third member joins: the others only give partitions away, and
            # gengroup's workers of the partitions it keeps never restart.
            tg.start_soon(member, "gengroup-2")
            await wait_for(lambda: shared("gengroup", "gengroup-2"), "three members to share")
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
