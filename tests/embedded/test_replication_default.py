"""Topics created through gengroup get the broker's ``default.replication.factor``
unless asked for another, as with the Java AdminClient and ``kafka-topics.sh``
(CreateTopics' -1): on a three-broker embedded cluster whose default is 3."""

from __future__ import annotations

import trio
import trio.testing

from gengroup import Admin
from gengroup.admin import NewTopic
from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.cli import main


def three_brokers() -> FakeCluster:
    settings = BrokerSettings(default_replication_factor=3, group_initial_rebalance_delay_ms=0)
    return FakeCluster(brokers=3, settings=settings)


def replication(admin: Admin, topic: str) -> set[int]:
    """The replica counts of ``topic``'s partitions in the admin's metadata."""
    return {len(p.replicas) for p in admin.cluster.topics[topic].partitions.values()}


async def test_admin_topics_get_the_brokers_default_replication_factor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with three_brokers() as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"orders": 6})
            await admin.create_topics([NewTopic("audit", 2), NewTopic("one", 1, 1)])
            await admin.create_topics([NewTopic("two", 1, replication_factor=2)])
            await admin.metadata(["orders", "audit", "one", "two"])
            assert replication(admin, "orders") == {3}
            assert replication(admin, "audit") == {3}
            assert replication(admin, "one") == {1}
            assert replication(admin, "two") == {2}
    assert NewTopic("x", 1).replication_factor == -1


async def test_topics_create_takes_the_brokers_default_or_its_replication_factor() -> None:
    """``gengroup topics create`` (run in a thread: its own event loop)."""
    async with three_brokers() as cluster:

        def create(*args: str) -> int:
            argv = ["topics", "create", *args, "--bootstrap", cluster.bootstrap]
            return main([*argv, "--config", "/dev/null", "--json"])

        with trio.fail_after(60):
            assert await trio.to_thread.run_sync(create, "default", "--partitions", "2") == 0
            assert await trio.to_thread.run_sync(create, "two", "--replication-factor", "2") == 0
        async with Admin(cluster.bootstrap) as admin:
            await admin.metadata(["default", "two"])
            assert replication(admin, "default") == {3}
            assert replication(admin, "two") == {2}
