"""The sticky balancer against the Java client's ``StickyAssignor``.

``java/AssignorVectors.java`` runs the real assignor of the kafka-clients jar
that the Kafka test harness caches (fetched with Maven if missing); it is
compiled with ``javac`` by the ``java_sticky`` fixture. Random groups -- equal
and differing subscriptions, members with and without previous assignments,
older generations, conflicting claims, unreadable user data -- are given to
both, and the outputs must be equal. A missing JDK fails the tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from gengroup import _java
from gengroup.membership.balancers import GroupAssignment, GroupMember, balancer_user_data
from gengroup.membership.sticky import StickyBalancer, decode_user_data, encode_user_data
from gengroup.protocol.consumer_protocol import (
    Assignment,
    decode_subscription,
    encode_assignment,
)

from . import assignor_vectors as vectors
from .test_balancers import groups

STICKY = StickyBalancer()


@pytest.fixture(scope="module")
def java_sticky(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """Run AssignorVectors with Java's StickyAssignor on some input; returns its output."""
    return vectors.java_runner("sticky", tmp_path_factory.mktemp("sticky-vectors"))


def claims_missing_partitions(case: vectors.Case) -> bool:
    """Whether some member's user data claims a partition beyond its topic's count."""
    for m in case.members:
        for topic, p in decode_user_data(m.user_data)[0]:
            if topic in case.counts and p >= case.counts[topic]:
                return True
    return False


def check_valid(case: vectors.Case, result: GroupAssignment) -> None:
    """Every member is a key; every partition of a subscribed topic goes to one subscriber."""
    seen = set(vectors.check_assigned_once(case, result))
    wanted = set().union(*(m.topics for m in case.members))
    assert seen == {(t, p) for t, n in case.counts.items() if t in wanted for p in range(n)}


def random_member(
    rng: random.Random, group: vectors.RandomGroup, mid: str, kind: float, generation: int
) -> GroupMember:
    """Sticky user data of version 1 or 0 (no generation), unreadable, or none."""
    if kind < 0.15:
        user_data, sub_generation = None, -1
    elif kind < 0.2:
        user_data, sub_generation = b"\x00\x01\xff", -1
    elif kind < 0.3:
        v1 = encode_user_data(vectors.grouped(group.owned[mid]), generation)
        user_data, sub_generation = v1[:-4], -1  # version 0: no generation
    else:
        user_data = encode_user_data(vectors.grouped(group.owned[mid]), generation)
        sub_generation = generation if rng.random() < 0.8 else -1
    return GroupMember(
        member_id=mid,
        topics=tuple(group.subscriptions[mid]),
        user_data=user_data,
        generation_id=sub_generation,
    )


def test_random_groups_match_java(java_sticky: Callable[[str], str]) -> None:
    vectors.assert_random_groups_match(
        java_sticky, random_member, 40, STICKY.assign, check_valid, claims_missing_partitions
    )


def test_successive_generations_match_java(java_sticky: Callable[[str], str]) -> None:
    """Members come and go over generations, each reporting what the last one gave it."""

    def member(
        mid: str, topics: tuple[str, ...], owned: vectors.Partitions | None, last: int
    ) -> GroupMember:
        if owned is None:
            return GroupMember(member_id=mid, topics=topics, user_data=None, generation_id=-1)
        data = STICKY.owned_user_data(owned, last)
        return GroupMember(member_id=mid, topics=topics, user_data=data, generation_id=last)

    vectors.assert_generations_match(
        java_sticky,
        random.Random(7),
        25,
        joiners=lambda rng: rng.randint(0, 2),
        partial=0.4,
        leave=0.4,
        member=member,
        assign=STICKY.assign,
        check=check_valid,
    )


def test_user_data_bytes_match_java(java_sticky: Callable[[str], str]) -> None:
    owned_sets = [
        (3, (("t0", (0, 2)), ("t1", (1,)))),
        (0, ()),
        (12, (("orders", (4, 5, 6)), ("a-b", (0,)), ("t3", (9,)), ("t2", (1,)))),
    ]
    lines = [
        vectors.user_data_input(generation, tuple(sorted(owned)))
        for generation, owned in owned_sets
    ]
    java = vectors.parse_user_data(java_sticky("".join(lines)))
    for (generation, owned), want in zip(owned_sets, java, strict=True):
        data = STICKY.owned_user_data(owned, generation)
        assert data is not None and data.hex() == want
        parts, got_generation = decode_user_data(data)
        assert got_generation == generation
        assert sorted(parts) == sorted((t, p) for t, ps in owned for p in ps)


def test_first_join_sends_no_user_data_and_later_ones_send_what_was_owned() -> None:
    assert balancer_user_data(STICKY, ["t"]) is None
    data = balancer_user_data(STICKY, ["t"], (("t", (1, 0)),), 4)
    assert data is not None and decode_user_data(data) == ([("t", 0), ("t", 1)], 4)


def test_unreadable_user_data_is_no_previous_assignment() -> None:
    assert decode_user_data(None) == ([], None)
    assert decode_user_data(b"") == ([], None)
    assert decode_user_data(b"\x00\x01\xff") == ([], -1)
    v0 = encode_user_data((("t", (3,)),), 5)[:-4]
    assert decode_user_data(v0) == ([("t", 3)], None)


def test_sticky_keeps_owned_partitions_when_a_member_joins() -> None:
    first = STICKY.assign([GroupMember("a", ("t",)), GroupMember("b", ("t",))], {"t": 6})
    members = [
        GroupMember(
            mid,
            ("t",),
            user_data=STICKY.owned_user_data((("t", tuple(first[mid]["t"])),), 1),
            generation_id=1,
        )
        for mid in ("a", "b")
    ]
    second = STICKY.assign([*members, GroupMember("c", ("t",))], {"t": 6})
    assert set(second["a"]["t"]) <= set(first["a"]["t"])
    assert set(second["b"]["t"]) <= set(first["b"]["t"])
    assert sorted(len(v["t"]) for v in second.values()) == [2, 2, 2]


def test_member_order_uses_java_hashmap_order() -> None:
    ids = ["consumer-1-a", "consumer-2-b", "consumer-3-c"]
    assert _java.hashmap_order(ids) == _java.hashmap_order(list(reversed(ids)))


@given(group=groups(), seed=st.integers(0, 2**32))
def test_every_partition_assigned_once_to_a_subscriber(
    group: tuple[list[GroupMember], dict[str, int]], seed: int
) -> None:
    members, counts = group
    rng = random.Random(seed)
    # Give some members a previous assignment, valid or not.
    with_data = []
    for m in members:
        owned = tuple((t, tuple(rng.sample(range(12), rng.randint(0, 3)))) for t in m.topics[:2])
        data = STICKY.owned_user_data(owned, rng.randint(-1, 3)) if rng.random() < 0.6 else None
        with_data.append(replace(m, user_data=data, generation_id=rng.randint(-1, 3)))
    result = STICKY.assign(with_data, counts)
    check_valid(vectors.Case(with_data, {t: n for t, n in counts.items() if n > 0}), result)


def test_a_subscription_naming_a_topic_more_than_once_counts_it_once() -> None:
    # Found by the property above: Java compares a subscription list's length
    # with a set's, so ("t0", "t0", "t0", "t0") equalled four topics, the
    # subscriptions were taken as identical, and a t0-only member got a
    # partition of t1.
    members = [
        GroupMember(member_id="", topics=("t0", "t1", "t2", "t3")),
        GroupMember(member_id="0", topics=("t0",) * 4),
        GroupMember(member_id="00", topics=("t0",) * 4),
    ]
    result = STICKY.assign(members, {"t0": 0, "t1": 2})
    assert result == {"": {"t1": [0, 1]}, "0": {}, "00": {}}


def test_a_member_reports_its_assignment_in_the_next_join() -> None:
    m = vectors.single_balancer_member(STICKY)
    first = decode_subscription(m.join_params().protocols[0][1])
    assert first.user_data is None
    m.on_join(
        error_code=0, member_id="m1", generation_id=7, protocol="sticky", leader="x", members=()
    )
    m.on_sync(
        error_code=0,
        assignment=encode_assignment(Assignment.from_mapping({"t": [3, 1]})),
    )
    m.generation_ended()
    again = decode_subscription(m.join_params().protocols[0][1])
    assert decode_user_data(again.user_data) == ([("t", 1), ("t", 3)], 7)
