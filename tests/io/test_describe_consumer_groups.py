"""Admin on groups of the consumer group protocol (KIP-848): described by
ConsumerGroupDescribe (members, the partitions they hold, epochs, assignor),
their lag lists a live member's partitions before it commits, and resetting
their offsets is refused NON_EMPTY_GROUP; a classic group is described by
DescribeGroups as before. On the embedded broker and on real Kafka."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import trio.testing
from kio.schema.consumer_group_describe.v1 import response as cgd
from kio.schema.errors import ErrorCode

from gengroup import Admin, BrokerError, ConsumerGroup, GroupIdNotFound, Producer, TopicPartition
from gengroup.admin_groups import consumer_group_description, unnamed_topics
from gengroup.admin_types import CLASSIC_GROUP, CONSUMER_GROUP
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Fail
from gengroup.broker.state import BrokerSettings
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaBroker

#: Quick member timings (the consumer protocol's session is the broker's).
SETTINGS: dict[str, Any] = {"heartbeat_interval": 0.5, "join_backoff": 0.1, "commit_interval": 0}


async def scenario(bootstrap: str, topic: str, group_id: str, classic_id: str) -> None:
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Admin(bootstrap) as admin, Producer(admin.cluster) as producer:
        await admin.create_topics({topic: 2})
        for p in (0, 1):
            for i in range(10):
                await producer.send(topic, b"%d" % i, partition=p)

        kip848 = {**SETTINGS, "group_protocol": "consumer"}
        async with ConsumerGroup(group_id, [topic], bootstrap, **kip848) as group:
            gen = await group.next()
            d = (await admin.describe_groups([group_id]))[group_id]
            assert (d.state, d.group_protocol, d.protocol_type, d.protocol) == (
                "Stable",
                CONSUMER_GROUP,
                "consumer",
                "uniform",
            )
            (m,) = d.members
            assert (m.member_id, m.client_id) == (gen.member_id, group.config.client_id)
            assert m.partitions == m.target == {tp0, tp1}
            assert m.assignment is not None and m.assignment.partitions == ((topic, (0, 1)),)
            assert m.member_epoch == d.group_epoch == d.assignment_epoch
            assert m.member_epoch is not None and m.member_epoch > 0
            assert d.owners == {tp0: m, tp1: m}

            # Nothing committed yet: the member's partitions are listed, lag unknown.
            lag = await admin.group_lag(group_id)
            assert list(lag) == [tp0, tp1]
            assert all(
                (p.committed, p.end, p.lag, p.member_id) == (None, 10, None, gen.member_id)
                for p in lag.values()
            )
            assert (lag.state, lag.total, lag.partial) == ("Stable", 0, True)

            with pytest.raises(BrokerError) as refused:
                await admin.reset_offsets(group_id, [tp0], to="earliest")
            assert refused.value.code == ErrorCode.non_empty_group
            assert "1 live member(s) (state Stable)" in str(refused.value)
            assert await admin.fetch_offsets(group_id) == {}  # nothing was committed
            gen.cancel()

        # A classic group: described by DescribeGroups, as before.
        async with ConsumerGroup(classic_id, [topic], bootstrap, **SETTINGS) as group:
            gen = await group.next()
            d = (await admin.describe_groups([classic_id]))[classic_id]
            assert (d.state, d.group_protocol, d.protocol_type, d.protocol) == (
                "Stable",
                CLASSIC_GROUP,
                "consumer",
                "range",
            )
            (m,) = d.members
            assert (m.member_id, m.partitions, m.member_epoch, m.held, m.target) == (
                gen.member_id,
                {tp0, tp1},
                None,
                None,
                None,
            )
            assert (d.group_epoch, d.assignment_epoch) == (None, None)
            gen.cancel()

        missing = f"{classic_id}-nope"
        d = (await admin.describe_groups([missing]))[missing]
        assert (d.state, d.group_protocol, d.members) == ("Dead", CLASSIC_GROUP, ())


async def test_consumer_protocol_groups_on_the_embedded_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        await scenario(cluster.bootstrap, "t", "g", "classic")
        assert not cluster.state.errors, cluster.state.errors


@pytest.mark.kafka
async def test_consumer_protocol_groups_on_real_kafka(
    kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    await scenario(kafka.bootstrap, unique_name("cgd"), unique_name("cgd-g"), unique_name("cgd-c"))


async def test_a_broker_without_the_consumer_protocol_describes_classic_groups(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No ConsumerGroupDescribe there: DescribeGroups describes the group."""
    settings = BrokerSettings(
        group_initial_rebalance_delay_ms=0, group_coordinator_rebalance_protocols=("classic",)
    )
    async with (
        FakeCluster(topics={"t": 1}, settings=settings) as cluster,
        Admin(cluster.bootstrap) as admin,
        ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group,
    ):
        gen = await group.next()
        d = (await admin.describe_groups(["g"]))["g"]
        assert (d.state, d.group_protocol) == ("Stable", CLASSIC_GROUP)
        assert [m.member_id for m in d.members] == [gen.member_id]
        gen.cancel()


def test_an_unnamed_topic_is_named_from_metadata_and_a_gone_one_left_out() -> None:
    known, gone = uuid.uuid4(), uuid.uuid4()

    def assignment(*entries: tuple[uuid.UUID, str, tuple[int, ...]]) -> Any:
        return cgd.Assignment(
            topic_partitions=tuple(
                cgd.TopicPartitions(topic_id=i, topic_name=n, partitions=p) for i, n, p in entries
            )
        )

    member = cgd.Member(
        member_id="m",
        instance_id=None,
        rack_id=None,
        member_epoch=3,
        client_id="c",
        client_host="/h",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex=None,
        assignment=assignment((known, "", (0,)), (gone, "", (1,))),
        target_assignment=assignment((known, "a", (0, 1))),
        member_type=1,
    )
    group = cgd.DescribedGroup(
        error_code=ErrorCode.none,
        error_message=None,
        group_id="g",
        group_state="Reconciling",
        group_epoch=4,
        assignment_epoch=4,
        assignor_name="range",
        members=(member,),
        authorized_operations=-(2**31),
    )
    assert unnamed_topics(group) == {known, gone}
    d = consumer_group_description(group, {known: "a"})
    (m,) = d.members
    assert (m.held, m.target) == (
        {TopicPartition("a", 0)},
        {TopicPartition("a", 0), TopicPartition("a", 1)},
    )
    # Who holds what is known while a consumer-protocol group reconciles.
    assert d.owners == {TopicPartition("a", 0): m}


@pytest.mark.parametrize(
    ("message", "refused"),
    [("Group share-g is not a consumer group.", True), ("Group share-g not found.", False)],
)
async def test_a_group_of_another_type_is_not_described_as_missing(
    autojump_clock: trio.testing.MockClock, message: str, refused: bool
) -> None:
    """Kafka 4.1+ has share (and streams) groups: ConsumerGroupDescribe refuses one
    as "not a consumer group" and DescribeGroups before v6 reports it Dead, as a
    group that does not exist. The description must not say it does not exist."""
    async with FakeCluster(topics={"t": 1}) as cluster, Admin(cluster.bootstrap) as admin:
        cluster.control(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            lambda call: Fail(ErrorCode.group_id_not_found, message),
        )
        if refused:
            with pytest.raises(GroupIdNotFound, match="neither a classic group nor") as caught:
                await admin.describe_groups(["share-g"])
            assert "is not a consumer group" in str(caught.value)
            with pytest.raises(GroupIdNotFound, match="share or streams group"):
                await admin.group_lag("share-g")
        else:
            d = (await admin.describe_groups(["share-g"]))["share-g"]
            assert (d.state, d.members) == ("Dead", ())


async def test_a_group_of_another_type_among_several_is_described_as_dead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Describing several groups (all of ``list_groups()``, say), one of another
    type does not fail the others: it is described as DescribeGroups reports it."""
    async with FakeCluster(topics={"t": 1}) as cluster, Admin(cluster.bootstrap) as admin:
        for g in ("a", "b"):
            await admin.reset_offsets(g, [TopicPartition("t", 0)], offset=0)
        cluster.control(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            lambda call: (
                Fail(ErrorCode.group_id_not_found, "Group share-g is not a consumer group.")
                if "share-g" in call.request.group_ids
                else None
            ),
        )
        described = await admin.describe_groups(["a", "share-g", "b"])
        assert [d.state for d in described.values()] == ["Empty", "Dead", "Empty"]


async def test_a_classic_group_deleted_while_it_is_described_is_dead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ConsumerGroupDescribe refuses a classic group as "not a consumer group" too:
    deleted before DescribeGroups answers, it is Dead, not a group of another type."""
    async with FakeCluster(topics={"t": 1}) as cluster, Admin(cluster.bootstrap) as admin:
        await admin.reset_offsets("g", [TopicPartition("t", 0)], offset=0)
        cluster.control(ApiKey.DESCRIBE_GROUPS, lambda call: Delay(2.0), once=True)
        async with anyio.create_task_group() as tg:

            async def delete() -> None:
                await anyio.sleep(1.0)
                async with Admin(cluster.bootstrap) as other:
                    await other.delete_groups(["g"])

            tg.start_soon(delete)
            d = (await admin.describe_groups(["g"]))["g"]
        assert (d.state, d.members) == ("Dead", ())


async def test_a_classic_group_deleted_and_created_again_while_it_is_described_is_described(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Deleted before DescribeGroups answers, created again (classic) before the
    second ConsumerGroupDescribe answers: still a classic group, described."""
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}) as cluster, Admin(cluster.bootstrap) as admin:
        await admin.reset_offsets("g", [tp], offset=0)
        cluster.control(ApiKey.DESCRIBE_GROUPS, lambda call: Delay(2.0), once=True)
        asked = 0

        def second_is_slow(call: Any) -> Delay | None:
            nonlocal asked
            asked += 1
            return Delay(2.0) if asked == 2 else None

        cluster.control(ApiKey.CONSUMER_GROUP_DESCRIBE, second_is_slow)
        async with anyio.create_task_group() as tg:

            async def churn() -> None:
                await anyio.sleep(1.0)
                async with Admin(cluster.bootstrap) as other:
                    await other.delete_groups(["g"])
                    await anyio.sleep(2.0)
                    await other.reset_offsets("g", [tp], offset=0)

            tg.start_soon(churn)
            d = (await admin.describe_groups(["g"]))["g"]
        assert d.state == "Empty"
