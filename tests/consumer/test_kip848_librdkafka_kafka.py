"""One consumer-protocol (KIP-848) group mixing gengroup members and a librdkafka consumer."""

from __future__ import annotations

import anyio
import pytest

from gengroup import ConsumerGroup
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .confluent_member import IncrementalMember
from .cooperative import SpanLedger, wait_until
from .helpers import all_partitions, create_topic, produce_ids
from .kip848 import KIP848

pytestmark = pytest.mark.kafka

PARTITIONS = 6


class Librdkafka848Member(IncrementalMember):
    """A confluent-kafka consumer with ``group.protocol=consumer`` (its rebalance
    callbacks are incremental under that protocol)."""

    def __init__(self, bootstrap: str, group_id: str, topic: str) -> None:
        super().__init__(
            topic,
            {"bootstrap.servers": bootstrap, "group.id": group_id, "group.protocol": "consumer"},
        )


async def test_a_mixed_group_covers_every_partition_once(kip848_kafka: KafkaBroker) -> None:
    """Two gengroup members and a librdkafka consumer in one consumer-protocol group:
    every partition has exactly one owner once the group settled, with each of the
    three and after the librdkafka consumer left; gengroup's retained workers never
    restart."""
    bootstrap = kip848_kafka.bootstrap
    topic, group_id = make_unique_name("kip848-mixed"), make_unique_name("g")
    await create_topic(bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    ledger = SpanLedger()
    peer = Librdkafka848Member(bootstrap, group_id, topic)

    def settled(gengroup: set[str], with_peer: bool) -> bool:
        cur = ledger.current()
        if set(cur) != gengroup:
            return False
        owned = [tp for g in cur.values() for tp in g.assignments]
        theirs = peer.current() if with_peer else set()
        if with_peer and not theirs:
            return False
        share = PARTITIONS // (len(gengroup) + with_peer)
        return (
            len(owned) == len(set(owned))
            and not set(owned) & theirs
            and set(owned) | theirs == every
            and all(len(g.assignments) == share for g in cur.values())
            and all(ledger.owners.get(tp) == n for n, g in cur.items() for tp in g.assignments)
        )

    def open_group(name: str) -> ConsumerGroup:
        return ConsumerGroup(group_id, [topic], bootstrap, client_id=name, **KIP848)

    try:
        async with (
            open_group("g1") as g1,
            open_group("g2") as g2,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ledger.member, "g1", g1)
            tg.start_soon(ledger.member, "g2", g2)
            await wait_until(lambda: settled({"g1", "g2"}, False), "g1 and g2 to share", 60)
            before = {n: ledger.assigned(n) for n in ("g1", "g2")}
            peer.start()
            await wait_until(lambda: settled({"g1", "g2"}, True), "three to share", 60)
            theirs = peer.current()
            kept = {n: ledger.assigned(n) for n in ("g1", "g2")}
            for name in ("g1", "g2"):
                assert kept[name] <= before[name], name
            await produce_ids(bootstrap, topic, range(300))
            expected = {f"id-{i}".encode() for i in range(300)}
            await wait_until(
                lambda: set(ledger.processed) | peer.values >= expected, "every record", 60
            )
            peer.close()
            await wait_until(lambda: settled({"g1", "g2"}, False), "g1 and g2 again", 60)
            for name in ("g1", "g2"):
                assert kept[name] <= ledger.assigned(name), name
            tg.cancel_scope.cancel()
    finally:
        peer.close()
    assert peer.error is None, peer.error
    assert theirs and not ledger.overlaps, ledger.overlaps
    # The partitions a gengroup member kept throughout: their workers started once.
    for name in ("g1", "g2"):
        assert all(ledger.starts_of(name)[tp] == 1 for tp in kept[name]), name
