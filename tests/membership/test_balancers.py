"""Tests of the range and round-robin balancers.

The expected outputs are the Javadoc examples of Java's ``RangeAssignor`` and
``RoundRobinAssignor``, vectors worked out by hand from their algorithms, and a
few larger vectors recorded from the Java client (kafka-clients 4.3.1), plus
property tests of the invariants both strategies promise.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, strategies as st

from gengroup.membership.balancers import (
    Balancer,
    GroupAssignment,
    GroupMember,
    RangeBalancer,
    RoundRobinBalancer,
    balancer_user_data,
)
from gengroup.protocol.consumer_protocol import Subscription

RANGE = RangeBalancer()
ROUND_ROBIN = RoundRobinBalancer()
BALANCERS: list[Balancer] = [RANGE, ROUND_ROBIN]


def m(member_id: str, *topics: str, instance: str | None = None) -> GroupMember:
    return GroupMember(member_id=member_id, topics=topics, group_instance_id=instance)


# ----------------------------------------------------------------------------- API


def test_names_match_java_and_librdkafka() -> None:
    assert RANGE.name == "range"
    assert ROUND_ROBIN.name == "roundrobin"


def test_user_data_hook() -> None:
    class WithoutHook:
        name = "bare"

        def assign(
            self, members: Sequence[GroupMember], partitions: Mapping[str, int]
        ) -> GroupAssignment:
            return {}

    class WithHook(WithoutHook):
        name = "custom"

        def user_data(self, topics: Sequence[str]) -> bytes | None:
            return ",".join(topics).encode()

    assert balancer_user_data(WithHook(), ["a", "b"]) == b"a,b"
    assert balancer_user_data(WithoutHook(), ["a"]) is None
    assert balancer_user_data(RANGE, ["a"]) is None
    assert balancer_user_data(ROUND_ROBIN, ["a"]) is None


def test_member_from_subscription() -> None:
    sub = Subscription(topics=("a", "b"), user_data=b"u", owned_partitions=(("a", (1,)),), rack="")
    member = GroupMember.from_subscription("m-1", "inst", sub)
    assert member == GroupMember(
        member_id="m-1",
        topics=("a", "b"),
        group_instance_id="inst",
        user_data=b"u",
        owned_partitions=(("a", (1,)),),
        rack=None,  # Java treats an empty rack as no rack
    )


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_duplicate_member_ids_rejected(balancer: Balancer) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        balancer.assign([m("a", "t"), m("a", "t", instance="i")], {"t": 1})


# ----------------------------------------------------------------------------- Javadoc examples


def test_range_javadoc_example() -> None:
    members = [m("C0", "t0", "t1"), m("C1", "t0", "t1")]
    assert RANGE.assign(members, {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 1], "t1": [0, 1]},
        "C1": {"t0": [2], "t1": [2]},
    }


def test_roundrobin_javadoc_example() -> None:
    members = [m("C0", "t0", "t1"), m("C1", "t0", "t1")]
    assert ROUND_ROBIN.assign(members, {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 2], "t1": [1]},
        "C1": {"t0": [1], "t1": [0, 2]},
    }


def test_roundrobin_javadoc_differing_subscriptions() -> None:
    members = [m("C0", "t0"), m("C1", "t0", "t1"), m("C2", "t0", "t1", "t2")]
    assert ROUND_ROBIN.assign(members, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": {"t0": [0]},
        "C1": {"t1": [0]},
        "C2": {"t1": [1], "t2": [0, 1, 2]},
    }


def test_range_javadoc_static_membership() -> None:
    # After a rolling bounce C0 -> C3 and C1 -> C2: dynamic members reshuffle...
    members = [m("C3", "t0", "t1"), m("C2", "t0", "t1")]
    assert RANGE.assign(members, {"t0": 3, "t1": 3}) == {
        "C2": {"t0": [0, 1], "t1": [0, 1]},
        "C3": {"t0": [2], "t1": [2]},
    }
    # ...but static members keep their partitions, whatever their member ids.
    for ids in (("C0", "C1"), ("C3", "C2")):
        members = [m(ids[0], "t0", "t1", instance="I0"), m(ids[1], "t0", "t1", instance="I1")]
        assert RANGE.assign(members, {"t0": 3, "t1": 3}) == {
            ids[0]: {"t0": [0, 1], "t1": [0, 1]},
            ids[1]: {"t0": [2], "t1": [2]},
        }


def test_roundrobin_javadoc_static_membership() -> None:
    topics = ("t0", "t1")
    counts = {"t0": 3, "t1": 3}
    before = ROUND_ROBIN.assign([m("C0", *topics), m("C1", *topics), m("C2", *topics)], counts)
    assert before == {
        "C0": {"t0": [0], "t1": [0]},
        "C1": {"t0": [1], "t1": [1]},
        "C2": {"t0": [2], "t1": [2]},
    }
    # C0 -> C5, C1 -> C3, C2 -> C4: the assignment is shuffled.
    after = ROUND_ROBIN.assign([m("C5", *topics), m("C3", *topics), m("C4", *topics)], counts)
    assert after == {
        "C3": {"t0": [0], "t1": [0]},
        "C4": {"t0": [1], "t1": [1]},
        "C5": {"t0": [2], "t1": [2]},
    }
    # With instance ids the same bounce changes nothing.
    for ids in (("C0", "C1", "C2"), ("C5", "C3", "C4")):
        members = [m(ids[i], *topics, instance=f"I{i}") for i in range(3)]
        assert ROUND_ROBIN.assign(members, counts) == {
            ids[i]: {"t0": [i], "t1": [i]} for i in range(3)
        }


# ----------------------------------------------------------------------------- hand-computed


def test_range_uneven_split_gives_extras_to_first_members() -> None:
    members = [m("c", "t"), m("a", "t"), m("b", "t")]
    assert RANGE.assign(members, {"t": 7}) == {
        "a": {"t": [0, 1, 2]},
        "b": {"t": [3, 4]},
        "c": {"t": [5, 6]},
    }


def test_range_more_members_than_partitions() -> None:
    members = [m("a", "t"), m("b", "t"), m("c", "t")]
    assert RANGE.assign(members, {"t": 2}) == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {}}
    assert ROUND_ROBIN.assign(members, {"t": 2}) == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {}}


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_mixed_topics(balancer: Balancer) -> None:
    # Range: Java's RangeAssignorTest.testMultipleConsumersMixedTopics. Round robin:
    # sorted partitions topic1-0..2, topic2-0..1; members cycle 1, 2, 3. Both agree here.
    members = [
        m("consumer1", "topic1"),
        m("consumer2", "topic1", "topic2"),
        m("consumer3", "topic1"),
    ]
    assert balancer.assign(members, {"topic1": 3, "topic2": 2}) == {
        "consumer1": {"topic1": [0]},
        "consumer2": {"topic1": [1], "topic2": [0, 1]},
        "consumer3": {"topic1": [2]},
    }


def test_roundrobin_cursor_continues_across_topics() -> None:
    # a-0 -> x, a-1 -> y, a-2 -> z, b-0: cursor at x, x not subscribed -> y, b-1 -> z.
    members = [m("x", "a"), m("y", "a", "b"), m("z", "a", "b")]
    assert ROUND_ROBIN.assign(members, {"a": 3, "b": 2}) == {
        "x": {"a": [0]},
        "y": {"a": [1], "b": [0]},
        "z": {"a": [2], "b": [1]},
    }


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_unknown_and_empty_topics_are_ignored(balancer: Balancer) -> None:
    members = [m("a", "known", "unknown", "empty"), m("b", "unknown")]
    result = balancer.assign(members, {"known": 2, "empty": 0, "unsubscribed": 5})
    assert result == {"a": {"known": [0, 1]}, "b": {}}


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_no_members_and_no_topics(balancer: Balancer) -> None:
    assert balancer.assign([], {"t": 3}) == {}
    assert balancer.assign([m("a"), m("b")], {"t": 3}) == {"a": {}, "b": {}}


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_topic_listed_twice_counts_once(balancer: Balancer) -> None:
    # Matches Java: RangeAssignor de-duplicates consumers per topic, RoundRobin uses a set.
    result = balancer.assign([m("C0", "t0", "t0"), m("C1", "t0")], {"t0": 5})
    if balancer is RANGE:
        assert result == {"C0": {"t0": [0, 1, 2]}, "C1": {"t0": [3, 4]}}
    else:
        assert result == {"C0": {"t0": [0, 2, 4]}, "C1": {"t0": [1, 3]}}


# ----------------------------------------------------------------------------- member order


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_static_members_first_by_instance_id_then_dynamic_by_member_id(
    balancer: Balancer,
) -> None:
    members = [
        m("a-dynamic", "t"),
        m("z-static", "t", instance="i2"),
        m("b-dynamic", "t"),
        m("m-static", "t", instance="i1"),
        m("0-static", "t", instance=""),  # an empty instance id is still present
    ]
    order = ["0-static", "m-static", "z-static", "a-dynamic", "b-dynamic"]
    result = balancer.assign(members, {"t": 5})
    assert result == {member_id: {"t": [i]} for i, member_id in enumerate(order)}
    assert list(result) == order


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
def test_member_order_is_java_utf16_order(balancer: Balancer) -> None:
    # Java compares UTF-16 code units: a surrogate pair (0xD800...) sorts before
    # U+FFFF, unlike Python's code-point order.
    astral, bmp = "\U00010000", "\uffff"
    assert bmp < astral
    result = balancer.assign([m(bmp, "t"), m(astral, "t")], {"t": 2})
    assert result == {astral: {"t": [0]}, bmp: {"t": [1]}}
    static = balancer.assign([m("x", "t", instance=bmp), m("y", "t", instance=astral)], {"t": 2})
    assert static == {"y": {"t": [0]}, "x": {"t": [1]}}


# ----------------------------------------------------------------------------- recorded from Java

# (members as (member_id, group_instance_id, topics), partition counts,
#  RangeAssignor output, RoundRobinAssignor output) from kafka-clients 4.3.1.
JAVA_VECTORS = [
    (
        [
            ("consumer-83-f", None, ("t2",)),
            ("consumer-5-b", "host-6", ("t0", "t1", "t3")),
            ("consumer-71-f", "host-8", ("t1",)),
            ("consumer-2-f", None, ("t1",)),
            ("consumer-65-c", None, ("t0", "t1", "t2", "t3")),
        ],
        {"t0": 3, "t1": 5, "t2": 3, "t3": 8},
        {
            "consumer-2-f": {"t1": [3]},
            "consumer-5-b": {"t0": [0, 1], "t1": [0, 1], "t3": [0, 1, 2, 3]},
            "consumer-65-c": {"t0": [2], "t1": [4], "t2": [0, 1], "t3": [4, 5, 6, 7]},
            "consumer-71-f": {"t1": [2]},
            "consumer-83-f": {"t2": [2]},
        },
        {
            "consumer-2-f": {"t1": [1]},
            "consumer-5-b": {"t0": [0, 2], "t1": [3], "t3": [0, 2, 4, 6]},
            "consumer-65-c": {"t0": [1], "t1": [2], "t2": [0, 2], "t3": [1, 3, 5, 7]},
            "consumer-71-f": {"t1": [0, 4]},
            "consumer-83-f": {"t2": [1]},
        },
    ),
    (
        [
            ("consumer-13-c", "host-8", ("t0",)),
            ("consumer-51-c", None, ("t0",)),
            ("consumer-57-e", "host-1", ("t0", "t1")),
            ("consumer-42-d", "host-3", ("t0", "t1")),
        ],
        {"t0": 8, "t1": 4},
        {
            "consumer-13-c": {"t0": [4, 5]},
            "consumer-42-d": {"t0": [2, 3], "t1": [2, 3]},
            "consumer-51-c": {"t0": [6, 7]},
            "consumer-57-e": {"t0": [0, 1], "t1": [0, 1]},
        },
        {
            "consumer-13-c": {"t0": [2, 6]},
            "consumer-42-d": {"t0": [1, 5], "t1": [1, 3]},
            "consumer-51-c": {"t0": [3, 7]},
            "consumer-57-e": {"t0": [0, 4], "t1": [0, 2]},
        },
    ),
    (
        [
            ("consumer-68-a", "host-5", ("t0", "t1")),
            ("consumer-54-a", None, ("t1", "t2")),
            ("consumer-55-d", None, ("t0",)),
            ("consumer-61-b", None, ("t1", "t2")),
            ("consumer-91-a", "host-3", ("t0", "t2")),
        ],
        {"t0": 3, "t1": 2, "t2": 1},
        {
            "consumer-54-a": {"t1": [1]},
            "consumer-55-d": {"t0": [2]},
            "consumer-61-b": {},
            "consumer-68-a": {"t0": [1], "t1": [0]},
            "consumer-91-a": {"t0": [0], "t2": [0]},
        },
        {
            "consumer-54-a": {"t2": [0]},
            "consumer-55-d": {"t0": [2]},
            "consumer-61-b": {"t1": [0]},
            "consumer-68-a": {"t0": [1], "t1": [1]},
            "consumer-91-a": {"t0": [0]},
        },
    ),
    (
        [
            ("consumer-10-d", None, ("t0", "t1", "t2", "t3")),
            ("consumer-20-d", "host-9", ("t0",)),
            ("consumer-21-b", None, ("t0", "t3")),
            ("consumer-80-b", None, ("t1", "t2", "t3")),
            ("consumer-7-f", "host-2", ("t0", "t1", "t2", "t3")),
        ],
        {"t0": 4, "t1": 7, "t2": 2, "t3": 3},
        {
            "consumer-10-d": {"t0": [2], "t1": [3, 4], "t2": [1], "t3": [1]},
            "consumer-20-d": {"t0": [1]},
            "consumer-21-b": {"t0": [3], "t3": [2]},
            "consumer-7-f": {"t0": [0], "t1": [0, 1, 2], "t2": [0], "t3": [0]},
            "consumer-80-b": {"t1": [5, 6]},
        },
        {
            "consumer-10-d": {"t0": [2], "t1": [2, 5], "t2": [1]},
            "consumer-20-d": {"t0": [1]},
            "consumer-21-b": {"t0": [3], "t3": [0]},
            "consumer-7-f": {"t0": [0], "t1": [1, 4], "t2": [0], "t3": [2]},
            "consumer-80-b": {"t1": [0, 3, 6], "t3": [1]},
        },
    ),
    (
        [
            ("consumer-43-c", "host-8", ("t1", "t2", "t3")),
            ("consumer-21-b", None, ("t2", "t3")),
            ("consumer-79-c", None, ("t0", "t2")),
            ("consumer-88-e", None, ("t2",)),
        ],
        {"t0": 2, "t1": 8, "t2": 8, "t3": 3},
        {
            "consumer-21-b": {"t2": [2, 3], "t3": [2]},
            "consumer-43-c": {"t1": [0, 1, 2, 3, 4, 5, 6, 7], "t2": [0, 1], "t3": [0, 1]},
            "consumer-79-c": {"t0": [0, 1], "t2": [4, 5]},
            "consumer-88-e": {"t2": [6, 7]},
        },
        {
            "consumer-21-b": {"t2": [0, 4], "t3": [0, 2]},
            "consumer-43-c": {"t1": [0, 1, 2, 3, 4, 5, 6, 7], "t2": [3, 7], "t3": [1]},
            "consumer-79-c": {"t0": [0, 1], "t2": [1, 5]},
            "consumer-88-e": {"t2": [2, 6]},
        },
    ),
]


@pytest.mark.parametrize(("members", "counts", "expect_range", "expect_rr"), JAVA_VECTORS)
def test_java_recorded_vectors(
    members: list[tuple[str, str | None, tuple[str, ...]]],
    counts: dict[str, int],
    expect_range: GroupAssignment,
    expect_rr: GroupAssignment,
) -> None:
    group = [GroupMember(mid, topics, group_instance_id=inst) for mid, inst, topics in members]
    assert RANGE.assign(group, counts) == expect_range
    assert ROUND_ROBIN.assign(group, counts) == expect_rr


# ----------------------------------------------------------------------------- properties

TOPICS = ["t0", "t1", "t2", "t3", "t4"]


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[GroupMember], dict[str, int]]:
    member_ids = draw(st.lists(st.text(max_size=4), max_size=8, unique=True))
    instance_ids = draw(
        st.lists(
            st.text(max_size=3), min_size=len(member_ids), max_size=len(member_ids), unique=True
        )
    )
    members = [
        GroupMember(
            member_id=mid,
            topics=tuple(draw(st.lists(st.sampled_from(TOPICS), max_size=6))),
            group_instance_id=inst if draw(st.booleans()) else None,
        )
        for mid, inst in zip(member_ids, instance_ids, strict=True)
    ]
    counts = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(-1, 12)))
    return members, counts


def check_valid(
    members: list[GroupMember], counts: dict[str, int], result: GroupAssignment
) -> None:
    assert set(result) == {member.member_id for member in members}
    subscribed = {member.member_id: set(member.topics) for member in members}
    seen: dict[tuple[str, int], str] = {}
    for member_id, per_topic in result.items():
        for topic, parts in per_topic.items():
            assert topic in subscribed[member_id]
            assert parts, "empty partition lists are left out"
            assert parts == sorted(parts)
            for p in parts:
                assert (topic, p) not in seen
                seen[topic, p] = member_id
    expected = {
        (topic, p)
        for topic in set().union(*subscribed.values())
        for p in range(max(0, counts.get(topic, 0)))
    }
    assert set(seen) == expected


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
@given(group=groups())
def test_every_partition_assigned_once_to_a_subscriber(
    balancer: Balancer, group: tuple[list[GroupMember], dict[str, int]]
) -> None:
    members, counts = group
    check_valid(members, counts, balancer.assign(members, counts))


@pytest.mark.parametrize("balancer", BALANCERS, ids=lambda b: b.name)
@given(group=groups(), seed=st.integers())
def test_result_does_not_depend_on_member_order(
    balancer: Balancer, group: tuple[list[GroupMember], dict[str, int]], seed: int
) -> None:
    members, counts = group
    shuffled = list(members)
    random.Random(seed).shuffle(shuffled)
    a, b = balancer.assign(members, counts), balancer.assign(shuffled, counts)
    assert a == b
    assert list(a.items()) == list(b.items())


@given(group=groups())
def test_range_is_balanced_per_topic(group: tuple[list[GroupMember], dict[str, int]]) -> None:
    members, counts = group
    result = RANGE.assign(members, counts)
    for topic in TOPICS:
        sizes = [len(result[mm.member_id].get(topic, [])) for mm in members if topic in mm.topics]
        if sizes:
            assert max(sizes) - min(sizes) <= 1
        # Each member's share of a topic is one contiguous range.
        for per_topic in result.values():
            parts = per_topic.get(topic)
            if parts:
                assert parts == list(range(parts[0], parts[0] + len(parts)))


@given(
    n_members=st.integers(1, 8),
    counts=st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1),
)
def test_roundrobin_is_balanced_with_identical_subscriptions(
    n_members: int, counts: dict[str, int]
) -> None:
    members = [m(f"member-{i}", *counts) for i in range(n_members)]
    result = ROUND_ROBIN.assign(members, counts)
    sizes = [sum(len(parts) for parts in per.values()) for per in result.values()]
    assert max(sizes) - min(sizes) <= 1


@given(
    n_members=st.integers(1, 6),
    n_partitions=st.integers(1, 12),
    topics=st.lists(st.sampled_from(TOPICS), min_size=1, unique=True),
)
def test_range_co_partitions_topics_with_equal_counts(
    n_members: int, n_partitions: int, topics: list[str]
) -> None:
    members = [m(f"member-{i}", *topics) for i in range(n_members)]
    result = RANGE.assign(members, dict.fromkeys(topics, n_partitions))
    for per_topic in result.values():
        assert len({tuple(per_topic[t]) for t in per_topic}) <= 1
