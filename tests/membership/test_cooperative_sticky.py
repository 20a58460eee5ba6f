"""The cooperative sticky balancer against the Java client's ``CooperativeStickyAssignor``.

``java/CooperativeStickyVectors.java`` runs the real assignor of the
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
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gengroup import CooperativeStickyBalancer
from gengroup.membership.balancers import GroupAssignment, GroupMember, balancer_user_data
from gengroup.membership.member import Member, MemberConfig
from gengroup.protocol.consumer_protocol import Assignment, decode_subscription, encode_assignment
from tests.java import compile_java

from .test_sticky import _grouped, parse_java

COOPERATIVE = CooperativeStickyBalancer()
SOURCE = Path(__file__).parent / "java" / "CooperativeStickyVectors.java"
TOPICS = ["t0", "t1", "t2", "t3", "orders", "a-b"]


@pytest.fixture(scope="module")
def java_cooperative(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Run CooperativeStickyVectors on some input; returns its output."""
    command = compile_java(SOURCE, tmp_path_factory.mktemp("cooperative-vectors"))

    def run(cases: str) -> str:
        done = subprocess.run(
            command,
            input=cases,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"CooperativeStickyVectors failed:\n{done.stderr[-3000:]}")
        return done.stdout

    yield run


@dataclass
class Case:
    members: list[GroupMember]
    counts: dict[str, int]

    def java_input(self) -> str:
        lines = ["case"]
        lines += [f"topic {t} {n}" for t, n in self.counts.items()]
        for m in self.members:
            topics = ",".join(m.topics) or "-"
            owned = ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in m.owned_partitions if ps)
            data = "-" if m.user_data is None else m.user_data.hex() or "-"
            lines.append(f"member {m.member_id} {topics} {owned or '-'} {data} {m.generation_id}")
        lines.append("end")
        return "\n".join(lines) + "\n"

    def claims_missing_partitions(self) -> bool:
        """Whether some member claims a partition beyond its topic's count."""
        return any(
            t in self.counts and p >= self.counts[t]
            for m in self.members
            for t, ps in m.owned_partitions
            for p in ps
        )


def check_cooperative(case: Case, result: GroupAssignment) -> None:
    """Every member is a key; each partition goes at most once, to a subscriber,
    and never to a member while another member (its only claimer) reports owning it."""
    assert set(result) == {m.member_id for m in case.members}
    topics = {m.member_id: set(m.topics) for m in case.members}
    owners: dict[tuple[str, int], set[str]] = {}
    for m in case.members:
        for t, ps in m.owned_partitions:
            for p in ps:
                owners.setdefault((t, p), set()).add(m.member_id)
    seen: set[tuple[str, int]] = set()
    for member_id, per_topic in result.items():
        for topic, parts in per_topic.items():
            assert topic in topics[member_id] and parts == sorted(parts)
            for p in parts:
                assert (topic, p) not in seen
                seen.add((topic, p))
                claimers = owners.get((topic, p), set())
                assert len(claimers) != 1 or claimers == {member_id}, (topic, p)


def is_valid(case: Case, result: GroupAssignment) -> bool:
    try:
        check_cooperative(case, result)
    except AssertionError:
        return False
    return True


def random_case(rng: random.Random) -> Case:
    counts = {t: rng.randint(1, 9) for t in rng.sample(TOPICS, rng.randint(1, 4))}
    known = list(counts)
    n = rng.randint(1, 9) if rng.random() < 0.8 else rng.randint(10, 30)
    ids = sorted({f"consumer-{rng.randint(1, 60)}-{rng.choice('abcdef')}" for _ in range(n)})
    rng.shuffle(ids)
    same = rng.random() < 0.5
    common = rng.sample([*known, "missing"], rng.randint(1, len(known)))
    subscriptions = {
        mid: common if same else rng.sample([*known, "missing"], rng.randint(1, len(known) + 1))
        for mid in ids
    }
    newest = rng.randint(2, 9)
    owned: dict[str, list[tuple[str, int]]] = {mid: [] for mid in ids}
    for topic, count in counts.items():
        for p in range(count + (1 if rng.random() < 0.05 else 0)):
            if rng.random() < 0.75:
                owner = rng.choice(ids[: max(1, len(ids) // 2)] if rng.random() < 0.5 else ids)
                owned[owner].append((topic, p))
                if rng.random() < 0.05:
                    owned[rng.choice(ids)].append((topic, p))
    members = []
    for mid in ids:
        kind = rng.random()
        generation = newest if rng.random() < 0.7 else rng.randint(0, newest - 1)
        parts = owned[mid] if rng.random() < 0.9 else []
        if kind < 0.6:  # a v2+ subscription: the generation in its own field
            user_data: bytes | None = COOPERATIVE.owned_user_data((), generation)
            sub_generation = generation
        elif kind < 0.8:  # v1: only the user data says the generation
            user_data, sub_generation = COOPERATIVE.owned_user_data((), generation), -1
        elif kind < 0.9:
            user_data, sub_generation = None, -1
        else:
            user_data, sub_generation = b"\x07", -1
        members.append(
            GroupMember(
                member_id=mid,
                topics=tuple(subscriptions[mid]),
                user_data=user_data,
                owned_partitions=_grouped(parts),
                generation_id=sub_generation,
            )
        )
    return Case(members, counts)


def test_random_groups_match_java(java_cooperative: Callable[[str], str]) -> None:
    rng = random.Random(20261124)
    cases = [random_case(rng) for _ in range(400)]
    expected = parse_java(java_cooperative("".join(c.java_input() for c in cases)))
    assert len(expected) == len(cases)
    compared = 0
    for i, (case, want) in enumerate(zip(cases, expected, strict=True)):
        got = COOPERATIVE.assign(case.members, case.counts)
        check_cooperative(case, got)
        if want is None or case.claims_missing_partitions() or not is_valid(case, want):
            continue  # Java fails, or its output is not a valid assignment
        assert got == want, f"case {i}:\n{case.java_input()}"
        compared += 1
    assert compared > 300


def test_successive_generations_match_java(java_cooperative: Callable[[str], str]) -> None:
    """A cooperative group over generations: each member reports what it still owns."""
    rng = random.Random(11)
    counts = {"t0": 7, "t1": 5, "orders": 12}
    alive: dict[str, tuple[str, ...]] = {}
    previous: GroupAssignment = {}
    cases: list[Case] = []
    ours: list[GroupAssignment] = []
    data = COOPERATIVE.owned_user_data
    for generation in range(1, 30):
        if rng.random() < 0.5:
            alive[f"consumer-{rng.randint(1, 99)}-{generation}"] = tuple(
                rng.sample(list(counts), rng.randint(1, 3)) if rng.random() < 0.3 else counts
            )
        if len(alive) > 1 and rng.random() < 0.25:
            del alive[rng.choice(sorted(alive))]
        if not alive:
            continue
        members = [
            GroupMember(
                member_id=mid,
                topics=topics,
                user_data=data((), generation - 1 if mid in previous else -1),
                owned_partitions=tuple((t, tuple(ps)) for t, ps in previous.get(mid, {}).items()),
                generation_id=generation - 1 if mid in previous else -1,
            )
            for mid, topics in alive.items()
        ]
        cases.append(Case(members, counts))
        ours.append(COOPERATIVE.assign(members, counts))
        check_cooperative(cases[-1], ours[-1])
        previous = ours[-1]
    expected = parse_java(java_cooperative("".join(c.java_input() for c in cases)))
    for i, (case, got, want) in enumerate(zip(cases, ours, expected, strict=True)):
        assert got == want, f"generation {i + 1}:\n{case.java_input()}"


def test_user_data_bytes_match_java(java_cooperative: Callable[[str], str]) -> None:
    generations = [-1, 0, 7, 123456]
    out = java_cooperative("".join(f"userdata {g}\n" for g in generations))
    java = [line.split(" ")[1] for line in out.splitlines()]
    ours = [balancer_user_data(COOPERATIVE, ["t"], (), g) for g in generations]
    assert [d.hex() if d is not None else "-" for d in ours] == java


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
    m = Member(
        MemberConfig(
            group_id="g",
            topics=("t",),
            balancers=(COOPERATIVE,),
            session_timeout=10.0,
            rebalance_timeout=30.0,
            heartbeat_interval=1.0,
        )
    )
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
