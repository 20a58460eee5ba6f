"""Tests for the sans-IO consumer group (KIP-848) coordinator, on virtual time.

Every request carries ``now_ms``; nothing here has a socket or an event loop.
The ``Group`` helper plays members heartbeating a :class:`GroupCoordinator`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gengroup.broker.coordinator import (
    ConsumerGroupDescribeInput,
    ConsumerGroupDescribeOutput,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatOutput,
    CoordinatorConfig,
    DeleteGroupsInput,
    DeleteGroupsOutput,
    DescribeGroupsInput,
    DescribeGroupsOutput,
    GroupCoordinator,
    JoinGroupInput,
    JoinGroupOutput,
    ListGroupsInput,
    ListGroupsOutput,
    OffsetCommitInput,
    OffsetCommitOutput,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchInput,
    OffsetFetchOutput,
    TopicInfo,
)
from gengroup.broker.coordinator.assignors import MemberSpec, range_assignor, uniform

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"t": TopicInfo(T1, 6), "u": TopicInfo(T2, 3)}

Owned = Mapping[uuid.UUID, Sequence[int]]


class Group:
    """A coordinator and the time; members heartbeat through it."""

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        # Assignments are recomputed at every change unless a test sets an interval.
        config = config or CoordinatorConfig(consumer_assignment_interval_ms=0)
        self.coordinator = GroupCoordinator(config)
        self.now = 0
        self.topics: dict[str, TopicInfo] = dict(TOPICS)

    def call(self, request: Any) -> Any:
        replies = self.coordinator.handle(self.now, object(), request)
        assert len(replies) == 1
        return replies[0].response

    def hb(
        self,
        member_id: str,
        epoch: int,
        owned: Owned | None = None,
        *,
        group_id: str = "g",
        topics: Sequence[str] | None = None,
        regex: str | None = None,
        instance_id: str | None = None,
        assignor: str | None = None,
        rebalance_timeout_ms: int = -1,
        version: int = 1,
    ) -> ConsumerGroupHeartbeatOutput:
        if epoch == 0:
            owned = {} if owned is None else owned
            if topics is None and regex is None:
                topics = ["t"]
            if rebalance_timeout_ms == -1:
                rebalance_timeout_ms = 30000
        out = self.call(
            ConsumerGroupHeartbeatInput(
                group_id,
                member_id,
                epoch,
                instance_id=instance_id,
                rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=topics,
                subscribed_topic_regex=regex,
                server_assignor=assignor,
                owned=None if owned is None else tuple(owned.items()),
                topics=self.topics,
                client_id=member_id,
                client_host="/127.0.0.1",
                version=version,
            )
        )
        assert isinstance(out, ConsumerGroupHeartbeatOutput)
        return out

    def advance(self, ms: int) -> None:
        self.now += ms
        self.coordinator.advance(self.now)

    def commit(
        self, member_id: str, epoch: int, partition: int = 0, *, offset: int = 1, version: int = 9
    ) -> ErrorCode:
        """Commit ``offset`` of ``t``'s ``partition`` to group ``g`` as ``member_id`` at
        ``epoch``; the partition's error code."""
        topics = (OffsetCommitTopic("t", (OffsetCommitPartition(partition, offset),)),)
        out = self.call(OffsetCommitInput("g", topics, epoch, member_id, version=version))
        assert isinstance(out, OffsetCommitOutput)
        return out.topics[0].partitions[0].error_code


def parts(out: ConsumerGroupHeartbeatOutput, topic: uuid.UUID = T1) -> list[int]:
    assert out.assignment is not None
    return sorted(out.assignment.get(topic, ()))


def test_the_first_member_gets_epoch_1_and_every_partition() -> None:
    g = Group()
    out = g.hb("m1", 0)
    assert out.error_code is ErrorCode.none
    assert (out.member_id, out.member_epoch, out.heartbeat_interval_ms) == ("m1", 2, 5000)
    assert parts(out) == [0, 1, 2, 3, 4, 5]
    # A heartbeat that changes nothing carries no assignment.
    again = g.hb("m1", 2, {T1: range(6)})
    assert (again.member_epoch, again.assignment) == (2, None)
    group = g.coordinator.consumer.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state.value) == (2, 2, "Stable")


def test_a_partition_moves_only_after_its_previous_owner_revoked_it() -> None:
    g = Group()
    g.hb("m1", 0)
    m2 = g.hb("m2", 0)
    # m2 is at the new epoch but m1 still holds the partitions it is to get.
    assert (m2.member_epoch, parts(m2)) == (3, [])
    group = g.coordinator.consumer.groups["g"]
    assert group.state.value == "Reconciling"
    # m1 is asked to revoke: it stays at epoch 2 with the partitions it keeps.
    m1 = g.hb("m1", 2, {T1: range(6)})
    assert (m1.member_epoch, parts(m1)) == (2, [0, 1, 2])
    # Still owning the revoked partitions: nothing moves.
    assert g.hb("m1", 2, {T1: range(6)}).assignment is None
    waiting = g.hb("m2", 3, {})
    assert (waiting.member_epoch, waiting.assignment) == (3, None)
    # m1 acknowledges: it reaches epoch 3; then m2 gets the released partitions.
    m1 = g.hb("m1", 2, {T1: [0, 1, 2]})
    assert (m1.member_epoch, m1.assignment) == (3, None)
    m2 = g.hb("m2", 3, {})
    assert (m2.member_epoch, parts(m2)) == (3, [3, 4, 5])
    assert group.state.value == "Stable"


def test_the_member_epoch_is_checked_as_kafka_checks_it() -> None:
    g = Group()
    g.hb("m1", 0)
    g.hb("m2", 0)
    g.hb("m1", 2, {T1: range(6)})
    g.hb("m1", 2, {T1: [0, 1, 2]})  # m1: epoch 2, previous epoch 1
    ahead = g.hb("m1", 4, {T1: [0, 1, 2]})
    assert ahead.error_code is ErrorCode.fenced_member_epoch
    assert ahead.error_message is not None and "greater member epoch (4)" in ahead.error_message
    # The previous epoch is accepted when the owned partitions are within the assignment
    # (the response with the new epoch may have been lost) ...
    assert g.hb("m1", 2, {T1: [0, 1]}).error_code is ErrorCode.none
    # ... not with partitions outside it, nor an older epoch.
    assert g.hb("m1", 2, {T1: [0, 5]}).error_code is ErrorCode.fenced_member_epoch
    # A known member rejoining with epoch 0 keeps its state (Kafka 4.3 answers so).
    rejoined = g.hb("m1", 0, {})
    assert (rejoined.error_code, rejoined.member_epoch, parts(rejoined)) == (
        ErrorCode.none,
        3,
        [0, 1, 2],
    )
    assert g.hb("nobody", 3, {}).error_code is ErrorCode.unknown_member_id
    assert g.hb("m1", 3, group_id="other").error_code is ErrorCode.group_id_not_found


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"member_id": ""}, "MemberId can't be empty."),
        ({"instance_id": ""}, "InstanceId can't be empty."),
        ({"member_epoch": -3}, "MemberEpoch is invalid."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"owned": None}, "TopicPartitions must be empty when (re-)joining."),
        ({"owned": ((T1, (0,)),)}, "TopicPartitions must be empty when (re-)joining."),
        ({"subscribed_topic_names": None}, "SubscribedTopicRegex must be non-null"),
        ({"member_epoch": -2, "instance_id": None}, "InstanceId can't be null."),
    ],
)
def test_invalid_requests_are_refused(request_fields: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "group_id": "g",
        "member_id": "m1",
        "member_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": ("t",),
        "owned": (),
        "topics": TOPICS,
        **request_fields,
    }
    out = Group().call(ConsumerGroupHeartbeatInput(**fields))
    assert out.error_code is ErrorCode.invalid_request
    assert message in out.error_message


def test_an_unknown_assignor_and_a_bad_regex_are_refused() -> None:
    g = Group()
    bad = g.hb("m1", 0, assignor="sticky")
    assert bad.error_code is ErrorCode.unsupported_assignor
    assert "uniform, range" in (bad.error_message or "")
    assert g.hb("m1", 0, regex="(").error_code is ErrorCode.invalid_regular_expression
    assert "g" not in g.coordinator.consumer.groups


def test_v0_lets_the_coordinator_make_the_member_id() -> None:
    out = Group().hb("", 0, version=0)
    assert out.error_code is ErrorCode.none
    assert out.member_id is not None and len(out.member_id) == 22


def test_leaving_with_epoch_minus_1_bumps_the_group_epoch() -> None:
    g = Group()
    g.hb("m1", 0)
    g.hb("m2", 0)
    left = g.hb("m2", -1)
    assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, "m2", -1)
    assert left.assignment is None
    group = g.coordinator.consumer.groups["g"]
    assert (group.group_epoch, list(group.members)) == (4, ["m1"])
    # m1, which had not revoked anything yet, keeps the whole topic at epoch 4:
    # its assignment did not change, so the answer carries none.
    m1 = g.hb("m1", 2, {T1: range(6)})
    assert (m1.member_epoch, m1.assignment) == (4, None)
    assert g.hb("m2", -1).error_code is ErrorCode.unknown_member_id
    assert g.hb("m2", -1, group_id="nope").error_code is ErrorCode.group_id_not_found


def test_a_silent_member_is_fenced_after_the_session_timeout() -> None:
    g = Group(
        CoordinatorConfig(consumer_session_timeout_ms=6000, consumer_assignment_interval_ms=0)
    )
    g.hb("m1", 0)
    g.hb("m2", 0)
    g.advance(5999)
    g.hb("m1", 2, {T1: [0, 1, 2]})  # m1 keeps its session alive; m2 does not
    assert "m2" in g.coordinator.consumer.groups["g"].members
    g.advance(1)
    assert list(g.coordinator.consumer.groups["g"].members) == ["m1"]
    assert g.hb("m2", 3, {}).error_code is ErrorCode.unknown_member_id
    # The fenced member rejoins with epoch 0, keeping its id.
    back = g.hb("m2", 0)
    assert (back.error_code, back.member_epoch) == (ErrorCode.none, 5)


def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout() -> None:
    g = Group()
    g.hb("m1", 0, rebalance_timeout_ms=10000)
    g.hb("m2", 0)
    m1 = g.hb("m1", 2, {T1: range(6)})  # asked to revoke 3, 4, 5
    assert m1.member_epoch == 2
    g.advance(4000)
    g.hb("m1", 2, {T1: range(6)})  # heartbeats, but never revokes
    g.advance(6000)
    assert list(g.coordinator.consumer.groups["g"].members) == ["m2"]
    assert g.hb("m1", 2, {T1: range(6)}).error_code is ErrorCode.unknown_member_id
    m2 = g.hb("m2", 3, {})
    assert parts(m2) == [0, 1, 2, 3, 4, 5]


def test_a_static_member_keeps_its_partitions_while_away() -> None:
    g = Group(
        CoordinatorConfig(consumer_session_timeout_ms=6000, consumer_assignment_interval_ms=0)
    )
    g.hb("s-a", 0, instance_id="s1")
    g.hb("m2", 0)
    kept = parts(g.hb("s-a", 2, {T1: range(6)}, instance_id="s1"))
    assert g.hb("s-a", 2, {T1: kept}, instance_id="s1").member_epoch == 3
    assert parts(g.hb("m2", 3, {})) == [3, 4, 5]
    twin = g.hb("s-b", 0, instance_id="s1")
    assert twin.error_code is ErrorCode.unreleased_instance_id
    assert g.hb("s-b", 3, {}, instance_id="s1").error_code is ErrorCode.fenced_instance_id
    assert g.hb("x", 3, {}, instance_id="s9").error_code is ErrorCode.unknown_member_id
    away = g.hb("s-a", -2, instance_id="s1")
    assert (away.member_id, away.member_epoch) == ("s-a", -2)
    group = g.coordinator.consumer.groups["g"]
    epoch = group.group_epoch
    # The restarted instance (new member id) gets the same partitions, no rebalance.
    back = g.hb("s-b", 0, instance_id="s1")
    assert (back.member_epoch, parts(back)) == (epoch, kept)
    assert group.group_epoch == epoch
    assert list(group.members) == ["m2", "s-b"]
    # Away past the session timeout, the static member is removed.
    g.hb("s-b", -2, instance_id="s1")
    g.advance(3000)
    g.hb("m2", 3, {T1: [3, 4, 5]})
    g.advance(3000)
    assert list(group.members) == ["m2"] and group.group_epoch == epoch + 1


def test_a_regex_subscription_matches_whole_topic_names() -> None:
    g = Group()
    g.topics["tt"] = TopicInfo(uuid.UUID(int=3), 1)
    out = g.hb("m1", 0, topics=None, regex="t|u")
    assert out.assignment is not None
    assert {topic: sorted(p) for topic, p in out.assignment.items()} == {
        T1: [0, 1, 2, 3, 4, 5],
        T2: [0, 1, 2],
    }


def test_a_new_partition_bumps_the_group_epoch() -> None:
    g = Group()
    g.hb("m1", 0)
    g.topics["t"] = TopicInfo(T1, 8)
    out = g.hb("m1", 2, {T1: range(6)})
    assert (out.member_epoch, parts(out)) == (3, list(range(8)))


def test_range_assignor_matches_kafka() -> None:
    members = [MemberSpec(m, None, frozenset({T1, T2}), {}) for m in ("c", "a", "b")]
    target = range_assignor(members, {T1: 7, T2: 2}, [T1, T2])
    assert {m: {t: sorted(p) for t, p in a.items()} for m, a in target.items()} == {
        "a": {T1: [0, 1, 2], T2: [0]},
        "b": {T1: [3, 4], T2: [1]},
        "c": {T1: [5, 6]},
    }
    # Static members come first, by instance id.
    static = [
        MemberSpec("z", "i1", frozenset({T1}), {}),
        MemberSpec("a", None, frozenset({T1}), {}),
    ]
    assert sorted(range_assignor(static, {T1: 2}, [T1])["z"][T1]) == [0]


def test_uniform_assignor_is_sticky_and_balanced() -> None:
    fresh = uniform([MemberSpec("a", None, frozenset({T1}), {})], {T1: 6}, [T1])
    assert fresh == {"a": {T1: frozenset(range(6))}}
    members = [
        MemberSpec("a", None, frozenset({T1}), {T1: frozenset(range(6))}),
        MemberSpec("b", None, frozenset({T1}), {}),
        MemberSpec("c", None, frozenset({T1}), {}),
    ]
    target = uniform(members, {T1: 7}, [T1])
    sizes = sorted(len(a.get(T1, ())) for a in target.values())
    assert sizes == [2, 2, 3]
    assert target["a"][T1] <= frozenset(range(6))  # a keeps a part of what it had
    assert frozenset().union(*(a[T1] for a in target.values())) == frozenset(range(7))
    # Different subscriptions: each topic goes only to its subscribers, balanced.
    mixed = [
        MemberSpec("a", None, frozenset({T1}), {}),
        MemberSpec("b", None, frozenset({T1, T2}), {}),
    ]
    target = uniform(mixed, {T1: 4, T2: 2}, [T1, T2])
    assert T2 not in target["a"]
    assert sorted(len(p) for a in target.values() for p in a.values()) in ([1, 2, 3], [2, 2, 2])


def test_offset_commits_carry_the_member_epoch() -> None:
    g = Group()
    g.hb("m1", 0)

    def commit(epoch: int, member_id: str = "m1", version: int = 9) -> ErrorCode:
        return g.commit(member_id, epoch, offset=10, version=version)

    assert commit(2) is ErrorCode.none
    assert commit(1) is ErrorCode.stale_member_epoch  # older than its partitions
    assert commit(3) is ErrorCode.stale_member_epoch  # ahead
    assert commit(2, "nobody") is ErrorCode.unknown_member_id
    assert commit(2, version=8) is ErrorCode.unsupported_version
    fetched = g.call(OffsetFetchInput((OffsetFetchGroup("g", None),)))
    assert isinstance(fetched, OffsetFetchOutput)
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 10
    stale = g.call(OffsetFetchInput((OffsetFetchGroup("g", None, "m1", 7),)))
    assert stale.groups[0].error_code is ErrorCode.stale_member_epoch
    # An empty group accepts "simple" commits (epoch -1).
    g.hb("m1", -1)
    assert commit(-1, "") is ErrorCode.none


def test_admin_requests_see_consumer_groups() -> None:
    g = Group()
    g.hb("m1", 0)
    listed = g.call(ListGroupsInput())
    assert isinstance(listed, ListGroupsOutput)
    assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed.groups] == [
        ("g", "consumer", "Stable", "consumer")
    ]
    assert g.call(ListGroupsInput(types_filter=("classic",))).groups == ()
    described = g.call(DescribeGroupsInput(("g",)))
    assert isinstance(described, DescribeGroupsOutput)
    assert described.groups[0].group_state == "Dead"
    cgd = g.call(ConsumerGroupDescribeInput(("g", "nope"), TOPICS))
    assert isinstance(cgd, ConsumerGroupDescribeOutput)
    mine, unknown = cgd.groups
    assert (mine.group_state, mine.group_epoch, mine.assignment_epoch) == ("Stable", 2, 2)
    assert mine.assignor_name == "uniform"
    member = mine.members[0]
    assert member.assignment == ((T1, "t", (0, 1, 2, 3, 4, 5)),)
    assert member.target_assignment == member.assignment
    assert unknown.error_code is ErrorCode.group_id_not_found
    deleted = g.call(DeleteGroupsInput(("g",)))
    assert isinstance(deleted, DeleteGroupsOutput)
    assert deleted.results[0].error_code is ErrorCode.non_empty_group
    g.hb("m1", -1)
    assert g.call(DeleteGroupsInput(("g",))).results[0].error_code is ErrorCode.none
    assert "g" not in g.coordinator.consumer.groups


def test_classic_and_consumer_groups_do_not_mix() -> None:
    g = Group()
    g.hb("m1", 0)
    join = g.call(
        JoinGroupInput("g", "", 10000, 10000, "consumer", (("range", b""),), client_id="c")
    )
    assert isinstance(join, JoinGroupOutput)
    assert join.error_code is ErrorCode.inconsistent_group_protocol
    # A classic group with members is not turned into a consumer group.
    classic = JoinGroupInput(
        "classic", "", 10000, 10000, "consumer", (("range", b""),), require_known_member_id=False
    )
    assert g.coordinator.handle(g.now, object(), classic) == []  # parked: a member joined
    refused = g.hb("m1", 0, group_id="classic")
    assert refused.error_code is ErrorCode.group_id_not_found


def test_the_target_assignment_is_recomputed_at_most_once_per_interval() -> None:
    """Kafka 4.3's assignment batching (KIP-1263), on the probe Kafka answered."""
    g = Group(CoordinatorConfig())  # consumer_assignment_interval_ms = 1000
    first = g.hb("m1", 0)
    assert (first.member_epoch, parts(first)) == (2, [0, 1, 2, 3, 4, 5])  # immediate
    g.advance(10)
    m2 = g.hb("m2", 0)
    group = g.coordinator.consumer.groups["g"]
    assert (m2.member_epoch, parts(m2)) == (2, [])
    assert (group.group_epoch, group.assignment_epoch, group.state.value) == (3, 2, "Assigning")
    g.advance(989)
    assert g.hb("m1", 2, {T1: range(6)}).assignment is None  # 999 ms: not yet
    g.advance(1)
    m1 = g.hb("m1", 2, {T1: range(6)})  # 1000 ms after the last computation
    assert (m1.member_epoch, parts(m1)) == (2, [0, 1, 2])
    assert (group.assignment_epoch, group.state.value) == (3, "Reconciling")


def test_an_older_epoch_commits_partitions_held_since_then() -> None:
    """KIP-1251 (Kafka 4.3): what conformance's ``commit_epochs`` observed."""
    g = Group()
    g.hb("m1", 0)  # t:0-5 at epoch 2
    g.hb("m2", 0)
    g.hb("m1", 2, {T1: range(6)})  # revoke 3, 4, 5
    g.hb("m1", 2, {T1: [0, 1, 2]})  # epoch 3
    g.hb("m2", 3, {})  # t:3-5 at epoch 3

    assert g.commit("m1", 2, 0) is ErrorCode.none
    assert g.commit("m1", 1, 0) is ErrorCode.stale_member_epoch
    assert g.commit("m1", 2, 4) is ErrorCode.stale_member_epoch  # no longer its own
    assert g.commit("m2", 2, 4) is ErrorCode.stale_member_epoch  # given at epoch 3
    assert g.commit("m2", 3, 0) is ErrorCode.none  # its current epoch: any partition


def test_an_empty_consumer_group_makes_way_for_a_classic_group() -> None:
    g = Group()
    g.hb("m1", 0)
    g.hb("m1", -1)
    join = JoinGroupInput(
        "g", "", 10000, 10000, "consumer", (("range", b""),), require_known_member_id=False
    )
    assert g.coordinator.handle(g.now, object(), join) == []  # a classic group, joining
    assert "g" not in g.coordinator.consumer.groups
    assert g.coordinator.group("g") is not None
