"""The cooperative sticky balancer against the Java client's ``CooperativeStickyAssignor``.

``java/AssignorVectors.java`` runs the real assignor of the
kafka-clients jar that the Kafka test harness caches; it is compiled with
``javac`` by the ``java_cooperative`` fixture. Random groups -- equal and
differing subscriptions, owned partitions reported in the subscription (v1+)
with or without its generation (v2+), older generations, conflicting claims,
generations only in the user data, unreadable user data -- and successive
generations of a cooperative group are given to both; the outputs must be
equal. A missing JDK fails the tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gengroup import CooperativeStickyBalancer
from gengroup.membership.balancers import GroupAssignment, GroupMember, balancer_user_data
from gengroup.protocol.consumer_protocol import Assignment, decode_subscription, encode_assignment

from . import assignor_vectors as vectors

COOPERATIVE = CooperativeStickyBalancer()


@pytest.fixture(scope="module")
def java_cooperative(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """Run AssignorVectors with the CooperativeStickyAssignor on some input; returns its output."""
    return vectors.java_runner("cooperative-sticky", tmp_path_factory.mktemp("cooperative-vectors"))


def claims_missing_partitions(case: vectors.Case) -> bool:
    """Whether some member claims a partition beyond its topic's count."""
    return any(
        t in case.counts and p >= case.counts[t]
        for m in case.members
        for t, ps in m.owned_partitions
        for p in ps
    )


def check_cooperative(case: vectors.Case, result: GroupAssignment) -> None:
    """Every member is a key; each partition goes at most once, to a subscriber,
    and never to a member while another member (its only claimer) reports owning it."""
    owners: dict[tuple[str, int], set[str]] = {}
    for m in case.members:
        for t, ps in m.owned_partitions:
            for p in ps:
                owners.setdefault((t, p), set()).add(m.member_id)
    for (topic, p), member_id in vectors.check_assigned_once(case, result).items():
        claimers = owners.get((topic, p), set())
        assert len(claimers) != 1 or claimers == {member_id}, (topic, p)


def random_member(
    rng: random.Random, group: vectors.RandomGroup, mid: str, kind: float, generation: int
) -> GroupMember:
    """Owned partitions (mostly), the generation in the subscription (v2+) or only
    in the user data (v1), unreadable user data, or none."""
    parts = group.owned[mid] if rng.random() < 0.9 else []
    if kind < 0.6:  # a v2+ subscription: the generation in its own field
        user_data: bytes | None = COOPERATIVE.owned_user_data((), generation)
        sub_generation = generation
    elif kind < 0.8:  # v1: only the user data says the generation
        user_data, sub_generation = COOPERATIVE.owned_user_data((), generation), -1
    elif kind < 0.9:
        user_data, sub_generation = None, -1
    else:
        user_data, sub_generation = b"\x07", -1
    return GroupMember(
        member_id=mid,
        topics=tuple(group.subscriptions[mid]),
        user_data=user_data,
        owned_partitions=vectors.grouped(parts),
        generation_id=sub_generation,
    )


def test_random_groups_match_java(java_cooperative: Callable[[str], str]) -> None:
    vectors.assert_random_groups_match(
        java_cooperative,
        random_member,
        30,
        COOPERATIVE.assign,
        check_cooperative,
        claims_missing_partitions,
    )


def test_user_data_bytes_match_java(java_cooperative: Callable[[str], str]) -> None:
    generations = [-1, 0, 7, 123456]
    java = vectors.parse_user_data(
        java_cooperative("".join(vectors.user_data_input(g) for g in generations))
    )
    ours = [balancer_user_data(COOPERATIVE, ["t"], (), g) for g in generations]
    assert [d.hex() if d is not None else "-" for d in ours] == java


def test_successive_generations_match_java(java_cooperative: Callable[[str], str]) -> None:
    """A cooperative group over generations: each member reports what it still owns."""

    def member(
        mid: str, topics: tuple[str, ...], owned: vectors.Partitions | None, last: int
    ) -> GroupMember:
        generation = -1 if owned is None else last
        return GroupMember(
            member_id=mid,
            topics=topics,
            user_data=COOPERATIVE.owned_user_data((), generation),
            owned_partitions=owned or (),
            generation_id=generation,
        )

    vectors.assert_generations_match(
        java_cooperative,
        random.Random(11),
        30,
        joiners=lambda rng: 1 if rng.random() < 0.5 else 0,
        partial=0.3,
        leave=0.25,
        member=member,
        assign=COOPERATIVE.assign,
        check=check_cooperative,
    )


def test_a_partition_moves_in_two_rounds() -> None:
    """A member joins: in the first round the moving partitions go to nobody."""
    first = COOPERATIVE.assign([GroupMember("a", ("t",)), GroupMember("b", ("t",))], {"t": 6})
    assert first == {"a": {"t": [0, 2, 4]}, "b": {"t": [1, 3, 5]}}

    def owning(mid: str, assignment: GroupAssignment) -> GroupMember:
        owned = tuple((t, tuple(ps)) for t, ps in assignment.get(mid, {}).items())
        return GroupMember(mid, ("t",), owned_partitions=owned, generation_id=1)

    round1 = COOPERATIVE.assign([owning("a", first), owning("b", first), owning("c", {})], {"t": 6})
    assert round1["c"] == {}
    assert len(round1["a"]["t"]) == len(round1["b"]["t"]) == 2
    round2 = COOPERATIVE.assign(
        [owning("a", round1), owning("b", round1), owning("c", round1)], {"t": 6}
    )
    assert round2["a"] == round1["a"] and round2["b"] == round1["b"]
    assert len(round2["c"]["t"]) == 2


def test_a_member_reports_owned_partitions_and_generation() -> None:
    m = vectors.single_balancer_member(COOPERATIVE)
    first = decode_subscription(m.join_params().protocols[0][1])
    assert first.owned_partitions == () and first.user_data == b"\xff\xff\xff\xff"
    m.on_join(
        error_code=0,
        member_id="m1",
        generation_id=7,
        protocol="cooperative-sticky",
        leader="x",
        members=(),
    )
    m.on_sync(error_code=0, assignment=encode_assignment(Assignment.from_mapping({"t": [3, 1]})))
    m.generation_ended()
    again = decode_subscription(m.join_params().protocols[0][1])
    assert again.owned_partitions == (("t", (1, 3)),)
    assert again.generation_id == 7 and again.user_data == b"\x00\x00\x00\x07"
