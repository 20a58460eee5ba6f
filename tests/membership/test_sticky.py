"""The sticky balancer against the Java client's ``StickyAssignor``.

``java/StickyVectors.java`` runs the real assignor of the kafka-clients jar
that the Kafka test harness caches (fetched with Maven if missing); it is
compiled with ``javac`` by the ``java_sticky`` fixture. Random groups -- equal
and differing subscriptions, members with and without previous assignments,
older generations, conflicting claims, unreadable user data -- are given to
both, and the outputs must be equal. A missing JDK fails the tests.
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from gengroup import _java
from gengroup.membership.balancers import GroupAssignment, GroupMember, balancer_user_data
from gengroup.membership.member import Member, MemberConfig
from gengroup.membership.sticky import StickyBalancer, decode_user_data, encode_user_data
from gengroup.protocol.consumer_protocol import (
    Assignment,
    decode_subscription,
    encode_assignment,
)
from tests.java import compile_java

from .test_balancers import groups

STICKY = StickyBalancer()
SOURCE = Path(__file__).parent / "java" / "StickyVectors.java"
TOPICS = ["t0", "t1", "t2", "t3", "orders", "a-b"]


@pytest.fixture(scope="module")
def java_sticky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Run StickyVectors on some input; returns its output."""
    command = compile_java(SOURCE, tmp_path_factory.mktemp("sticky-vectors"))

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
            raise AssertionError(f"StickyVectors failed:\n{done.stderr[-3000:]}")
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
            data = "-" if m.user_data is None else m.user_data.hex() or "-"
            lines.append(f"member {m.member_id} {topics} {data} {m.generation_id}")
        lines.append("end")
        return "\n".join(lines) + "\n"

    def claims_missing_partitions(self) -> bool:
        """Whether some member's user data claims a partition beyond its topic's count."""
        for m in self.members:
            for topic, p in decode_user_data(m.user_data)[0]:
                if topic in self.counts and p >= self.counts[topic]:
                    return True
        return False


def check_valid(case: Case, result: GroupAssignment) -> None:
    """Every member is a key; every partition of a subscribed topic goes to one subscriber."""
    assert set(result) == {m.member_id for m in case.members}
    topics = {m.member_id: set(m.topics) for m in case.members}
    seen: set[tuple[str, int]] = set()
    for member_id, per_topic in result.items():
        for topic, parts in per_topic.items():
            assert topic in topics[member_id] and parts == sorted(parts)
            for p in parts:
                assert (topic, p) not in seen
                seen.add((topic, p))
    wanted = set().union(*topics.values())
    assert seen == {(t, p) for t, n in case.counts.items() if t in wanted for p in range(n)}


def is_valid(case: Case, result: GroupAssignment) -> bool:
    try:
        check_valid(case, result)
    except AssertionError:
        return False
    return True


def parse_java(output: str) -> list[GroupAssignment | None]:
    """Java's assignments, None where it threw."""
    results: list[GroupAssignment | None] = []
    current: GroupAssignment | None = {}
    for line in output.splitlines():
        if line == "case":
            current = {}
        elif line == "end":
            results.append(current)
        elif line.startswith("failed "):
            current = None
        elif current is None:
            raise AssertionError(f"unexpected line after a failure: {line}")
        elif line.startswith("assign "):
            _, member_id, spec = line.split(" ")
            per_topic: dict[str, list[int]] = {}
            if spec != "-":
                for group in spec.split(";"):
                    topic, parts = group.split(":")
                    per_topic[topic] = [int(p) for p in parts.split(",")]
            current[member_id] = per_topic
    return results


def random_case(rng: random.Random) -> Case:
    counts = {t: rng.randint(1, 9) for t in rng.sample(TOPICS, rng.randint(1, 4))}
    known = list(counts)
    n = rng.randint(1, 9) if rng.random() < 0.8 else rng.randint(10, 40)
    ids = sorted({f"consumer-{rng.randint(1, 60)}-{rng.choice('abcdef')}" for _ in range(n)})
    rng.shuffle(ids)
    same = rng.random() < 0.5
    common = rng.sample([*known, "missing"], rng.randint(1, len(known)))
    subscriptions = {
        mid: common if same else rng.sample([*known, "missing"], rng.randint(1, len(known) + 1))
        for mid in ids
    }
    newest = rng.randint(2, 9)
    # A previous generation's owners, deliberately unbalanced and now and
    # then with a partition claimed twice or out of range.
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
        if kind < 0.15:
            user_data, sub_generation = None, -1
        elif kind < 0.2:
            user_data, sub_generation = b"\x00\x01\xff", -1
        elif kind < 0.3:
            v1 = encode_user_data(_grouped(owned[mid]), generation)
            user_data, sub_generation = v1[:-4], -1  # version 0: no generation
        else:
            user_data = encode_user_data(_grouped(owned[mid]), generation)
            sub_generation = generation if rng.random() < 0.8 else -1
        members.append(
            GroupMember(
                member_id=mid,
                topics=tuple(subscriptions[mid]),
                user_data=user_data,
                generation_id=sub_generation,
            )
        )
    return Case(members, counts)


def _grouped(parts: Sequence[tuple[str, int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in parts:
        by_topic.setdefault(topic, []).append(p)
    return tuple((t, tuple(ps)) for t, ps in by_topic.items())


def test_random_groups_match_java(java_sticky: Callable[[str], str]) -> None:
    rng = random.Random(20261124)
    cases = [random_case(rng) for _ in range(400)]
    expected = parse_java(java_sticky("".join(c.java_input() for c in cases)))
    assert len(expected) == len(cases)
    compared = 0
    for i, (case, want) in enumerate(zip(cases, expected, strict=True)):
        got = STICKY.assign(case.members, case.counts)
        check_valid(case, got)
        if want is None or case.claims_missing_partitions() or not is_valid(case, want):
            continue  # Java fails, or its output is not a valid assignment
        assert got == want, f"case {i}:\n{case.java_input()}"
        compared += 1
    assert compared > 300


def test_successive_generations_match_java(java_sticky: Callable[[str], str]) -> None:
    """Members come and go over generations, each reporting what the last one gave it."""
    rng = random.Random(7)
    counts = {"t0": 7, "t1": 5, "orders": 12}
    alive: dict[str, tuple[str, ...]] = {}
    previous: GroupAssignment = {}
    cases: list[Case] = []
    ours: list[GroupAssignment] = []
    for generation in range(1, 25):
        for _ in range(rng.randint(0, 2)):
            alive[f"consumer-{rng.randint(1, 99)}-{generation}"] = tuple(
                rng.sample(list(counts), rng.randint(1, 3)) if rng.random() < 0.4 else counts
            )
        if len(alive) > 1 and rng.random() < 0.4:
            del alive[rng.choice(sorted(alive))]
        if not alive:
            continue
        members = [
            GroupMember(
                member_id=mid,
                topics=topics,
                user_data=STICKY.owned_user_data(
                    tuple((t, tuple(ps)) for t, ps in previous[mid].items()), generation - 1
                )
                if mid in previous
                else None,
                generation_id=generation - 1 if mid in previous else -1,
            )
            for mid, topics in alive.items()
        ]
        cases.append(Case(members, counts))
        ours.append(STICKY.assign(members, counts))
        check_valid(cases[-1], ours[-1])
        previous = ours[-1]
    # Each generation's input is built from the previous output, so all of them
    # match Java's only if every output does.
    expected = parse_java(java_sticky("".join(c.java_input() for c in cases)))
    for i, (case, got, want) in enumerate(zip(cases, ours, expected, strict=True)):
        assert got == want, f"generation {i + 1}:\n{case.java_input()}"


def test_user_data_bytes_match_java(java_sticky: Callable[[str], str]) -> None:
    owned_sets = [
        (3, (("t0", (0, 2)), ("t1", (1,)))),
        (0, ()),
        (12, (("orders", (4, 5, 6)), ("a-b", (0,)), ("t3", (9,)), ("t2", (1,)))),
    ]
    lines = []
    for generation, owned in owned_sets:
        spec = ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(owned)) or "-"
        lines.append(f"userdata {generation} {spec}\n")
    java = [line.split(" ")[1] for line in java_sticky("".join(lines)).splitlines()]
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
    check_valid(Case(with_data, {t: n for t, n in counts.items() if n > 0}), result)


def test_a_member_reports_its_assignment_in_the_next_join() -> None:
    m = Member(
        MemberConfig(
            group_id="g",
            topics=("t",),
            balancers=(STICKY,),
            session_timeout=10.0,
            rebalance_timeout=30.0,
            heartbeat_interval=1.0,
        )
    )
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
