"""Subscribing by pattern under the classic protocol, on the embedded broker, in virtual time.

The member matches its pattern against the cluster's topics (whole names,
internal topics left out), joins with the matches, and re-checks them every
``partition_watch_interval``: a topic created or deleted that changes the
matches ends the generation, and the next one subscribes to the new set.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import trio
import trio.testing

from gengroup import ConsumerGroup, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.protocol.records import NewRecord

from .helpers import EMBEDDED_SETTINGS, Ledger, all_partitions, covers_exactly_once

ORDERS = re.compile(r"orders\..*")

SETTINGS = {**EMBEDDED_SETTINGS, "partition_watch_interval": 2.0}


def produce(
    cluster: FakeCluster, topic: str, partitions: int, per_partition: int = 3
) -> set[bytes]:
    """Records ``<topic>/<partition>-<i>`` in every partition; their values."""
    values = set()
    for p in range(partitions):
        batch = [f"{topic}/{p}-{i}".encode() for i in range(per_partition)]
        cluster.produce(topic, [NewRecord(None, v, (), 0) for v in batch], partition=p)
        values.update(batch)
    return values


@asynccontextmanager
async def members(cluster: FakeCluster, *names: str) -> AsyncIterator[Ledger]:
    """Members of group "g" subscribed to ``orders\\..*``, each running into the ledger."""
    ledger = Ledger()
    async with anyio.create_task_group() as tg:

        async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
            async with ConsumerGroup("g", ORDERS, cluster.bootstrap, **SETTINGS) as group:
                task_status.started()
                await ledger.member(name, group)

        for name in names:
            await tg.start(run, name)
        yield ledger
        tg.cancel_scope.cancel()


def owned(ledger: Ledger) -> set[TopicPartition]:
    """The partitions of every member's live generation."""
    return {tp for gen in ledger.current().values() for tp in gen.assignments}


async def test_pattern_subscribes_to_matching_topics_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Whole names only: ``xorders.a`` and ``orders`` do not match, nor does ``payments``."""
    topics = {"orders.a": 2, "orders.b": 1, "payments": 2, "xorders.a": 1, "orders": 1}
    async with FakeCluster(topics=topics, initial_rebalance_delay_ms=0) as cluster:
        wanted = produce(cluster, "orders.a", 2) | produce(cluster, "orders.b", 1)
        produce(cluster, "payments", 2)
        async with members(cluster, "m") as ledger:
            await ledger.wait_for(lambda: set(ledger.processed) == wanted, "the orders records")
            expected = all_partitions("orders.a", 2) | all_partitions("orders.b", 1)
            assert owned(ledger) == expected
            assert len(ledger.generations["m"]) == 1
        assert set(ledger.processed) == wanted


async def test_a_new_matching_topic_is_picked_up(autojump_clock: trio.testing.MockClock) -> None:
    """A non-matching new topic changes nothing; a matching one forms a generation with it
    within a watch interval, and its records are processed."""
    async with FakeCluster(topics={"orders.a": 2}, initial_rebalance_delay_ms=0) as cluster:
        before = produce(cluster, "orders.a", 2)
        async with members(cluster, "m") as ledger:
            await ledger.wait_for(lambda: set(ledger.processed) == before, "orders.a records")
            first = ledger.generations["m"][-1]
            cluster.create_topic("payments.new", 2)
            await trio.sleep(3 * SETTINGS["partition_watch_interval"])
            assert ledger.generations["m"] == [first] and not first.ending
            cluster.create_topic("orders.new", 3)
            added = produce(cluster, "orders.new", 3)
            t0 = trio.current_time()
            await ledger.wait_for(
                lambda: (
                    owned(ledger) == all_partitions("orders.a", 2) | all_partitions("orders.new", 3)
                ),
                "a generation with orders.new",
            )
            assert trio.current_time() - t0 <= SETTINGS["partition_watch_interval"] + 1.0
            await ledger.wait_for(lambda: set(ledger.processed) == before | added, "orders.new")
            assert first.ended


async def test_a_deleted_topic_leaves_the_subscription(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(
        topics={"orders.a": 1, "orders.b": 2}, initial_rebalance_delay_ms=0
    ) as cluster:
        async with members(cluster, "m") as ledger:
            everything = all_partitions("orders.a", 1) | all_partitions("orders.b", 2)
            await ledger.wait_for(lambda: owned(ledger) == everything, "both topics")
            cluster.delete_topic("orders.b")
            await ledger.wait_for(
                lambda: owned(ledger) == all_partitions("orders.a", 1), "orders.b gone"
            )
            assert ledger.generations["m"][0].ended


async def test_an_empty_match_joins_then_picks_a_topic_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Matching nothing, the member joins with an empty subscription (as the Java client)."""
    async with FakeCluster(topics={"payments": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with members(cluster, "m") as ledger:
            await ledger.wait_for(lambda: "m" in ledger.current(), "a generation")
            assert ledger.current()["m"].assignments == {}
            cluster.create_topic("orders.late", 2)
            values = produce(cluster, "orders.late", 2)
            await ledger.wait_for(
                lambda: owned(ledger) == all_partitions("orders.late", 2), "orders.late assigned"
            )
            await ledger.wait_for(lambda: set(ledger.processed) == values, "its records")


async def test_internal_topics_are_not_matched(autojump_clock: trio.testing.MockClock) -> None:
    """``.*`` matches every topic but ``__consumer_offsets`` (the Java client's default
    ``exclude.internal.topics=true``); a topic merely named like one is matched."""
    async with FakeCluster(
        topics={"orders.a": 1, "__not_internal": 1}, initial_rebalance_delay_ms=0
    ) as cluster:
        async with ConsumerGroup("g", re.compile(".*"), cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            assert "__consumer_offsets" in cluster.state.topics.by_name
            assert set(gen.assignments) == {
                TopicPartition("orders.a", 0),
                TopicPartition("__not_internal", 0),
            }
            await trio.sleep(3 * SETTINGS["partition_watch_interval"])
            assert not gen.ending


async def test_every_member_picks_a_new_topic_up(autojump_clock: trio.testing.MockClock) -> None:
    """Two members: the new topic's partitions are spread over both, each owned once."""
    async with FakeCluster(topics={"orders.a": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with members(cluster, "m1", "m2") as ledger:
            await ledger.wait_for(
                lambda: (
                    set(ledger.current()) == {"m1", "m2"}
                    and covers_exactly_once(
                        ledger.current().values(), all_partitions("orders.a", 2)
                    )
                ),
                "both members sharing orders.a",
            )
            cluster.create_topic("orders.b", 2)
            values = produce(cluster, "orders.b", 2)
            every = all_partitions("orders.a", 2) | all_partitions("orders.b", 2)
            await ledger.wait_for(
                lambda: (
                    set(ledger.current()) == {"m1", "m2"}
                    and covers_exactly_once(ledger.current().values(), every)
                    and all(len(g.assignments) == 2 for g in ledger.current().values())
                ),
                "both members sharing both topics",
            )
            await ledger.wait_for(lambda: values <= set(ledger.processed), "orders.b records")
            assert not ledger.overlaps
