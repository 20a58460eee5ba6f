"""One group mixing gengroup members and librdkafka (confluent-kafka) consumers."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, RangeBalancer, RoundRobinBalancer
from gengroup._errors import InconsistentGroupProtocol
from gengroup.membership.balancers import Balancer
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .confluent_member import PolledMember, partitions_of
from .helpers import FAST, Ledger, all_partitions, create_topic

pytestmark = pytest.mark.kafka

PARTITIONS = 6


class LibrdkafkaMember(PolledMember):
    """A classic-protocol member on an eager ``strategy``: each assignment replaces
    the previous one."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, strategy: str) -> None:
        # librdkafka joins the group from its own threads as soon as it
        # subscribes, poll() or not: subscribing waits for start(), so that
        # "gengroup leads" really has gengroup join first.
        super().__init__(
            topic,
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
            },
        )
        self.generations = 0

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        with self._lock:
            self.assignment = partitions_of(partitions)
            self.generations += 1

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        with self._lock:
            self.assignment = set()


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
@pytest.mark.parametrize(
    "gengroup_leads", [True, False], ids=["gengroup-leader", "gengroup-follower"]
)
async def test_mixed_group_covers_every_partition_once(
    kafka: KafkaBroker, strategy: str, gengroup_leads: bool
) -> None:
    topic, group_id = make_unique_name("mixed"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    balancer: Balancer = RangeBalancer() if strategy == "range" else RoundRobinBalancer()
    every = all_partitions(topic, PARTITIONS)
    peer = LibrdkafkaMember(kafka.bootstrap, group_id, topic, strategy)
    ledger = Ledger()
    try:
        if not gengroup_leads:
            peer.start()
            with anyio.fail_after(60):
                while peer.current() != every:
                    await anyio.sleep(0.05)
        async with (
            ConsumerGroup(
                group_id, [topic], kafka.bootstrap, balancers=[balancer], **FAST
            ) as group,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ledger.member, "gengroup", group)
            if gengroup_leads:
                await ledger.wait_for(
                    lambda: (
                        "gengroup" in ledger.current()
                        and set(ledger.current()["gengroup"].assignments) == every
                    ),
                    "gengroup alone to own every partition",
                )
                peer.start()

            def shared() -> bool:
                cur = ledger.current().get("gengroup")
                if cur is None:
                    return False
                mine = set(cur.assignments)
                theirs = peer.current()
                return (
                    bool(mine) and bool(theirs) and not (mine & theirs) and mine | theirs == every
                )

            await ledger.wait_for(shared, "both clients to share the partitions", timeout=60)
            gen = ledger.current()["gengroup"]
            assert gen.is_leader is gengroup_leads
            assert gen.protocol == strategy
            mine = sorted(gen.assignments)
            tg.cancel_scope.cancel()
        if strategy == "range":
            # Java's RangeAssignor gives contiguous ranges, 3 partitions each.
            assert len(mine) == 3
            assert [tp.partition for tp in mine] in ([0, 1, 2], [3, 4, 5])
        else:
            assert len(mine) == 3
        assert peer.error is None
    finally:
        peer.close()


async def test_a_group_running_a_protocol_gengroup_does_not_offer_is_explained(
    kafka: KafkaBroker,
) -> None:
    """A librdkafka member on cooperative-sticky holds the group; gengroup offers
    range and roundrobin: the error says both sides' protocols and who is there."""
    topic, group_id = make_unique_name("inconsistent"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    peer = LibrdkafkaMember(kafka.bootstrap, group_id, topic, "cooperative-sticky")
    try:
        peer.start()
        with anyio.fail_after(60):
            while peer.current() != every:
                await anyio.sleep(0.05)
        with pytest.raises(InconsistentGroupProtocol) as raised:
            async with ConsumerGroup(group_id, [topic], kafka.bootstrap, **FAST) as group:
                await group.next()
        said = str(raised.value)
        assert "INCONSISTENT_GROUP_PROTOCOL" in said
        assert "[range, roundrobin]" in said
        assert "runs the protocol 'cooperative-sticky'" in said
        assert "librdkafka-member@" in said
        assert peer.current() == every  # the group went on without us
        assert peer.error is None
    finally:
        peer.close()
