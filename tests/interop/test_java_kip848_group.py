"""One consumer-protocol (KIP-848) group mixing gengroup members and a Java KafkaConsumer.

The Java member is ``java/Kip848Member.java`` (``group.protocol=consumer``),
compiled with ``javac`` against the kafka-clients jar the Kafka harness
caches. The coordinator assigns with its ``uniform`` assignor: whoever joins
or leaves, the members' assignments are disjoint and cover every partition
once they settle, every record is consumed, and the committed offsets only
move forward until they cover every record. A missing JDK fails the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, TopicPartition
from gengroup.broker import BrokerSettings
from gengroup.testing.pytest_plugin import make_unique_name
from tests.java import compile_java

from ..consumer.helpers import (
    FAST,
    Ledger,
    all_partitions,
    broker_under_test,
    create_topic,
    produce_ids,
)
from .members import ProcessMember

pytestmark = pytest.mark.kafka

SOURCE = Path(__file__).parent / "java" / "Kip848Member.java"
PARTITIONS = 6
#: The shared broker keeps Kafka's consumer-group defaults (heartbeat 5 s,
#: session 45 s): the members' session timeout matches.
KIP848: dict[str, Any] = {
    **FAST,
    "group_protocol": "consumer",
    "group_remote_assignor": "uniform",
    "session_timeout": 45.0,
}


@pytest.fixture(scope="session")
def kip848_java_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command line running Kip848Member (arguments follow), compiled once."""
    command = compile_java(SOURCE, tmp_path_factory.mktemp("java-kip848-member"))
    yield command


#: The embedded broker: Kafka's consumer-group defaults but a 1 s heartbeat interval.
EMBEDDED = BrokerSettings(
    group_initial_rebalance_delay_ms=0, group_consumer_heartbeat_interval_ms=1000
)


@pytest.fixture(params=["kafka", "embedded"])
async def bootstrap(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """The broker under test: the session's Apache Kafka, or a fresh embedded cluster."""
    async with broker_under_test(request, request.param, EMBEDDED, brokers=3) as address:
        yield address


async def test_a_consumer_protocol_group_with_a_java_member(
    bootstrap: str, kip848_java_member: list[str], tmp_path: Path
) -> None:
    topic, group_id = make_unique_name("kip848-java"), make_unique_name("g")
    await create_topic(bootstrap, topic, PARTITIONS)
    every = all_partitions(topic, PARTITIONS)
    peer = ProcessMember(
        [*kip848_java_member, bootstrap, group_id, topic, "uniform"], topic, tmp_path / "java.log"
    )
    ledger = Ledger()
    committed_history: dict[TopicPartition, list[int]] = {}

    async def wait_for(predicate: Any, what: str) -> None:
        try:
            await ledger.wait_for(predicate, what, timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the Java member said:\n{peer.tail()}") from None

    def settled(names: set[str], java: bool) -> bool:
        """The members' assignments are disjoint, cover every partition, evenly."""
        cur = ledger.current()
        if set(cur) != names or (java and not peer.generations):
            return False
        owned = [tp for g in cur.values() for tp in g.assignments]
        owned += list(peer.current()) if java else []
        share = PARTITIONS // (len(names) + java)
        sizes = [len(g.assignments) for g in cur.values()] + ([len(peer.current())] if java else [])
        return len(owned) == len(set(owned)) and set(owned) == every and set(sizes) == {share}

    def consumed() -> set[str]:
        return {v.decode() for v in ledger.processed} | {r["value"] for r in peer.records}

    async def member(name: str) -> None:
        async with ConsumerGroup(group_id, [topic], bootstrap, client_id=name, **KIP848) as g:
            await ledger.member(name, g)

    async def watch_commits() -> None:
        async with Admin(bootstrap) as admin:
            while True:
                for tp, off in (await admin.fetch_offsets(group_id)).items():
                    committed_history.setdefault(tp, []).append(off)
                await anyio.sleep(0.2)

    async with anyio.create_task_group() as tg:
        try:
            tg.start_soon(watch_commits)
            tg.start_soon(member, "g1")
            await wait_for(lambda: settled({"g1"}, java=False), "g1 to own everything")
            tg.start_soon(peer.run)
            await wait_for(lambda: settled({"g1"}, java=True), "g1 and Java to share")
            await produce_ids(bootstrap, topic, range(300))
            await wait_for(lambda: {f"id-{i}" for i in range(300)} <= consumed(), "300 records")

            tg.start_soon(member, "g2")
            await wait_for(lambda: settled({"g1", "g2"}, java=True), "three members to share")
            await produce_ids(bootstrap, topic, range(300, 600))
            await wait_for(lambda: {f"id-{i}" for i in range(600)} <= consumed(), "600 records")

            await peer.stop()  # closes: leaves the group
            await wait_for(lambda: settled({"g1", "g2"}, java=False), "Java's partitions back")
            await produce_ids(bootstrap, topic, range(600, 900))
            wanted = {f"id-{i}" for i in range(900)}
            await wait_for(lambda: wanted <= consumed(), "every record consumed")

            def all_committed() -> bool:
                return sum(seq[-1] for seq in committed_history.values() if seq) == 900

            await wait_for(all_committed, "the commits to cover every record")
            tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await peer.stop()
    assert peer.errors == []
    assert consumed() == wanted
    assert not ledger.overlaps, ledger.overlaps
    for tp, seq in committed_history.items():
        assert seq == sorted(seq), f"committed offset of {tp} went backwards: {seq}"
    for name in ("g1", "g2"):
        assert all(g.commit_error is None for g in ledger.generations[name]), name
