"""Admin's group offset operations: lag (with the partitions live members own,
committed or not), and resetting offsets (refused while the group has
members), on the embedded broker and on real Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from gengroup import (
    Admin,
    BrokerError,
    ConsumerGroup,
    GroupLag,
    PartitionLag,
    Producer,
    TopicAuthorizationFailed,
    TopicPartition,
)
from gengroup.admin_types import GroupDescription, MemberDescription
from gengroup.broker import FakeCluster
from gengroup.broker.faults import ControlHandler, Fail, Intercepted
from gengroup.protocol.consumer_protocol import Assignment, encode_assignment
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaBroker


@asynccontextmanager
async def embedded() -> AsyncIterator[str]:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        yield cluster.bootstrap


async def scenario(bootstrap: str, topic: str, group_id: str) -> None:
    """Ten records in each of two partitions; the group commits 4 and 7, then leaves."""
    settings = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "join_backoff": 0.1}
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Admin(bootstrap) as admin, Producer(admin.cluster) as producer:
        await admin.create_topics({topic: 2})
        for p in (0, 1):
            for i in range(10):
                await producer.send(topic, str(i).encode(), partition=p)
        async with ConsumerGroup(group_id, [topic], bootstrap, **settings) as group:
            gen = await group.next()
            # Nothing committed yet: the member's partitions are listed, lag unknown.
            live = await admin.group_lag(group_id)
            assert list(live) == [tp0, tp1]
            assert all((p.committed, p.end, p.lag) == (None, 10, None) for p in live.values())
            assert {(p.member_id, p.client_id) for p in live.values()} == {
                (gen.member_id, group.config.client_id)
            }
            assert (live.state, live.total, live.partial) == ("Stable", 0, True)
            await gen.commit({tp0: 4, tp1: 7})
            live = await admin.group_lag(group_id)
            assert [(p.lag, p.member_id) for p in live.values()] == [
                (6, gen.member_id),
                (3, gen.member_id),
            ]
            assert (live.total, live.partial) == (9, False)
            # A live member: resetting is refused.
            with pytest.raises(BrokerError) as refused:
                await admin.reset_offsets(group_id, [tp0], to="earliest")
            assert refused.value.code == ErrorCode.non_empty_group
            assert "live member" in str(refused.value)
            gen.cancel()

        lag = await admin.group_lag(group_id)
        assert lag == {tp0: PartitionLag(4, 10, 6), tp1: PartitionLag(7, 10, 3)}
        assert (lag.state, lag.total, lag.partial) == ("Empty", 9, False)

        plan = await admin.reset_offsets(group_id, [tp0, tp1], to="earliest", dry_run=True)
        assert plan == {tp0: 0, tp1: 0}
        assert (await admin.fetch_offsets(group_id)) == {tp0: 4, tp1: 7}  # dry run: unchanged

        assert await admin.reset_offsets(group_id, [tp0], to="latest") == {tp0: 10}
        assert await admin.reset_offsets(group_id, [tp1], offset=99) == {tp1: 10}  # clamped
        # By time: the first offset at or after the timestamp; past the end, the end.
        assert await admin.reset_offsets(group_id, [tp1], to=0) == {tp1: 0}
        assert await admin.reset_offsets(group_id, [tp1], to=2**50) == {tp1: 10}
        assert await admin.reset_offsets(group_id, [tp1], offset=2) == {tp1: 2}
        assert (await admin.fetch_offsets(group_id)) == {tp0: 10, tp1: 2}
        assert (await admin.fetch_offsets(group_id, [tp1], require_stable=True)) == {tp1: 2}
        lag = await admin.group_lag(group_id, topics=[topic])
        assert [p.lag for p in lag.values()] == [0, 8]
        await admin.delete_offsets(group_id, [tp1])
        lag = await admin.group_lag(group_id, topics=[topic])  # tp1: of the topic, uncommitted
        assert (lag[tp1], lag.total, lag.partial) == (PartitionLag(None, 10, None), 0, True)
        await admin.reset_offsets(group_id, [tp1], offset=2)
        with pytest.raises(ValueError):
            await admin.reset_offsets(group_id, [tp0])

        await admin.delete_offsets(group_id, [tp1])
        assert (await admin.fetch_offsets(group_id)) == {tp0: 10}
        with pytest.raises(BrokerError) as missing:
            await admin.delete_offsets(group_id + "-nope", [tp0])
        assert missing.value.code == ErrorCode.group_id_not_found

        # A live member keeps the offsets of the topics it subscribes to.
        async with ConsumerGroup(group_id, [topic], bootstrap, **settings) as group:
            gen = await group.next()
            with pytest.raises(BrokerError) as subscribed:
                await admin.delete_offsets(group_id, [tp0])
            assert subscribed.value.code == ErrorCode.group_subscribed_to_topic
            gen.cancel()


async def test_group_offsets_on_the_embedded_broker() -> None:
    async with embedded() as bootstrap:
        await scenario(bootstrap, "t", "g")


async def test_offsets_listed_and_reset_come_in_topic_and_partition_order() -> None:
    """``list_offsets`` built its result over a set: ``reset_offsets(to=...)``
    plans (and the CLI's outputs of them) came out in a random order."""
    async with FakeCluster(3, topics={"b": 12, "a": 12}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            tps = [TopicPartition(t, p) for t in ("b", "a") for p in reversed(range(12))]
            ordered = sorted(tps)
            for spec in ("earliest", "latest", 0):
                assert list(await admin.list_offsets(tps, spec)) == ordered, spec
                plan = await admin.reset_offsets("g", tps, to=spec, dry_run=True)
                assert list(plan) == ordered, spec
            assert list(await admin.reset_offsets("g", tps, to="earliest")) == ordered
            assert list(await admin.reset_offsets("g", tps, offset=0)) == ordered


async def test_group_lag_is_negative_for_a_committed_offset_past_the_end() -> None:
    """As Kafka's tool: not clamped to 0 (the log was truncated below the commit)."""
    tp = TopicPartition("t", 0)
    async with embedded() as bootstrap, Admin(bootstrap) as admin:
        await admin.create_topics({"t": 1})
        async with Producer(admin.cluster) as producer:
            for i in range(3):
                await producer.send("t", b"%d" % i, partition=0)
        async with ConsumerGroup("g", ["t"], bootstrap, join_backoff=0.1) as group:
            gen = await group.next()
            await gen.commit({tp: 8})
            gen.cancel()
        lag = await admin.group_lag("g")
        assert lag == {tp: PartitionLag(8, 3, -5)}
        assert (lag.total, lag.partial) == (0, False)


def test_a_rebalancing_group_has_no_owners_and_a_partial_total() -> None:
    """Between generations Kafka describes members without assignments: who owns
    what is not known, so the total may leave partitions out."""
    tp = TopicPartition("t", 0)
    assignment = encode_assignment(Assignment(partitions=(("t", (0,)),)))
    member = MemberDescription("m-1", "c", "/h", None, "consumer", b"", assignment)
    stable = GroupDescription("g", "Stable", "consumer", "range", (member,))
    lag = GroupLag.of({tp: 3}, {tp: 5}, stable)
    assert lag == {tp: PartitionLag(3, 5, 2, "m-1", "c", "/h")}
    assert (lag.rebalancing, lag.partial, lag.total) == (False, False, 2)
    moving = replace(stable, state="PreparingRebalance")
    assert moving.owners == {}
    lag = GroupLag.of({tp: 3}, {tp: 5}, moving)
    assert lag == {tp: PartitionLag(3, 5, 2)}
    assert (lag.state, lag.rebalancing, lag.partial, lag.total) == (
        "PreparingRebalance",
        True,
        True,
        2,
    )


@pytest.mark.kafka
async def test_group_offsets_on_real_kafka(
    kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    await scenario(kafka.bootstrap, unique_name("lag"), unique_name("lag-group"))


async def test_group_lag_shows_commits_left_for_deleted_topics_and_partitions(
    autojump_clock: object,
) -> None:
    """A commit for a deleted topic, or a partition the topic no longer has, failed
    the whole report (UnknownTopicOrPartition); it is listed with end and lag None,
    as Kafka's tool shows it, and the live partitions' lag is reported."""
    async with (
        FakeCluster(
            topics={"orders": 2, "old": 1, "shrunk": 3}, initial_rebalance_delay_ms=0
        ) as cluster,
        Admin(cluster.bootstrap) as admin,
    ):
        for p in range(2):
            cluster.produce("orders", [b"x"] * 5, partition=p)
        cluster.produce("shrunk", [b"x"] * 4, partition=2)
        tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
        await admin.reset_offsets("g", tps, offset=2)
        await admin.reset_offsets("g", [TopicPartition("old", 0)], offset=0)
        await admin.reset_offsets("g", [TopicPartition("shrunk", 2)], offset=3)
        # Kafka deletes a deleted topic's committed offsets when its coordinator
        # learns of the deletion; until then OffsetFetch still returns them. The
        # topics' logs alone are deleted here, the offsets left as in that window.
        cluster.state.topics.delete("old")
        cluster.state.topics.delete("shrunk")
        await admin.create_topics({"shrunk": 1})

        lag = await admin.group_lag("g")
        assert lag == {
            TopicPartition("old", 0): PartitionLag(0, None, None),
            TopicPartition("orders", 0): PartitionLag(2, 5, 3),
            TopicPartition("orders", 1): PartitionLag(2, 5, 3),
            TopicPartition("shrunk", 2): PartitionLag(3, None, None),
        }
        assert (lag.total, lag.partial) == (6, True)
        # A topic asked for by name must still exist.
        with pytest.raises(BrokerError, match="topic 'old'"):
            await admin.group_lag("g", ["old"])


async def test_an_owned_partition_with_an_empty_log_and_no_commit_has_lag_0(
    autojump_clock: object,
) -> None:
    """A member commits only what it read, so a partition without records had no
    commit and its lag stayed unknown: a caught-up group was partial forever.
    An empty log (log start == end) has nothing to read: lag 0. A log with
    records and no commit stays unknown."""
    async with (
        FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster,
        Admin(cluster.bootstrap) as admin,
    ):
        cluster.produce("t", [b"x"] * 10, partition=0)
        cluster.produce("t", [b"x"] * 4, partition=2)
        await admin.delete_records({TopicPartition("t", 2): 4})  # empty, starting at 4
        async with ConsumerGroup("g", ["t"], cluster.bootstrap) as group:
            gen = await group.next()
            await gen.commit({TopicPartition("t", 0): 10})
            lag = await admin.group_lag("g")
            assert [(p.committed, p.end, p.lag) for p in lag.values()] == [
                (10, 10, 0),
                (None, 0, 0),
                (None, 4, 0),
                (None, 0, 0),
            ]
            assert (lag.total, lag.partial) == (0, False)
            cluster.produce("t", [b"x"] * 2, partition=3)
            lag = await admin.group_lag("g")
            assert lag[TopicPartition("t", 3)].lag is None and lag.partial
            gen.cancel()


def _refused(code: int, times: int | None = None) -> ControlHandler:
    """Answer the Metadata requests naming topic ``secret`` with ``code`` for
    it (the first ``times`` of them; None: all), as a broker does for a topic
    the client may not describe (29) or one still being created (5)."""
    left = [times]

    def handler(call: Intercepted) -> Fail | None:
        if "secret" not in [t.name for t in call.request.topics or ()] or left[0] == 0:
            return None
        if left[0] is not None:
            left[0] -= 1
        return Fail(code)

    return handler


@pytest.mark.parametrize("error", ["not authorized", "being created"])
async def test_group_lag_raises_or_retries_a_topic_error_other_than_unknown_topic(
    autojump_clock: object, error: str
) -> None:
    """Every topic error in the metadata made a committed partition "no longer
    existing" (end and lag None): a topic the admin may not describe, or one
    whose leader is not elected yet. Only an unknown topic is; an authorization
    failure is raised, typed, and a retriable error retried within the timeout."""
    async with (
        FakeCluster(topics={"secret": 1}, initial_rebalance_delay_ms=0) as cluster,
        Admin(cluster.bootstrap) as admin,
    ):
        cluster.produce("secret", [b"x"] * 7, partition=0)
        secret = TopicPartition("secret", 0)
        await admin.reset_offsets("g", [secret], offset=2)
        if error == "not authorized":
            cluster.control(ApiKey.METADATA, _refused(ErrorCode.topic_authorization_failed))
            with pytest.raises(TopicAuthorizationFailed, match="topic 'secret'"):
                await admin.group_lag("g")
        else:
            cluster.control(ApiKey.METADATA, _refused(ErrorCode.leader_not_available, 2))
            lag = await admin.group_lag("g")
            assert lag == {secret: PartitionLag(2, 7, 5)}
            cluster.control(ApiKey.METADATA, _refused(ErrorCode.leader_not_available))
            with pytest.raises(TimeoutError):
                await admin.group_lag("g", timeout=5)
