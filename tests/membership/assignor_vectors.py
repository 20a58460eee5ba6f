"""Our sticky balancers against the Java client's assignors, through ``java/AssignorVectors.java``.

The Java program runs the real ``StickyAssignor`` or ``CooperativeStickyAssignor``
of the kafka-clients jar that the Kafka test harness caches; :func:`java_runner`
compiles it (a missing JDK fails the test) and returns a function feeding it
cases. :class:`Case` writes a group in the program's input format,
:func:`parse_java` reads its assignments back, and :func:`random_group` draws
the random groups both balancers' tests start from.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gengroup.membership.balancers import Balancer, GroupAssignment, GroupMember
from gengroup.membership.member import Member, MemberConfig
from tests.java import compile_java
from tests.programs import run_program

SOURCE = Path(__file__).parent / "java" / "AssignorVectors.java"
TOPICS = ["t0", "t1", "t2", "t3", "orders", "a-b"]

Partitions = tuple[tuple[str, tuple[int, ...]], ...]


def java_runner(assignor: str, out: Path) -> Callable[[str], str]:
    """Compile AssignorVectors into ``out``; a function running it for ``assignor`` on some input.

    Args:
        assignor: the Java assignor's protocol name, ``sticky`` or ``cooperative-sticky``.
        out: the directory for the compiled class.
    """
    command = [*compile_java(SOURCE, out), assignor]

    def run(cases: str) -> str:
        return run_program(command, f"AssignorVectors {assignor}", stdin=cases)

    return run


def partitions_spec(owned: Partitions) -> str:
    """``TOPIC:P,P;TOPIC:P`` as the Java program reads it; ``-`` for none."""
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in owned if ps) or "-"


def user_data_input(generation: int, owned: Partitions = ()) -> str:
    """The input asking for the user data sent once ``owned`` is assigned in ``generation``."""
    return f"userdata {generation} {partitions_spec(owned)}\n"


@dataclass
class Case:
    """A group to assign: its members and the partition count of each topic."""

    members: list[GroupMember]
    counts: dict[str, int]

    def java_input(self) -> str:
        lines = ["case"]
        lines += [f"topic {t} {n}" for t, n in self.counts.items()]
        for m in self.members:
            topics = ",".join(m.topics) or "-"
            owned = partitions_spec(m.owned_partitions)
            data = "-" if m.user_data is None else m.user_data.hex() or "-"
            lines.append(f"member {m.member_id} {topics} {owned} {data} {m.generation_id}")
        lines.append("end")
        return "\n".join(lines) + "\n"


def check_assigned_once(case: Case, result: GroupAssignment) -> dict[tuple[str, int], str]:
    """Every member is a key; each partition goes at most once, to a subscriber.

    Returns:
        The member each assigned partition went to.
    """
    assert set(result) == {m.member_id for m in case.members}
    topics = {m.member_id: set(m.topics) for m in case.members}
    owner: dict[tuple[str, int], str] = {}
    for member_id, per_topic in result.items():
        for topic, parts in per_topic.items():
            assert topic in topics[member_id] and parts == sorted(parts)
            for p in parts:
                assert (topic, p) not in owner
                owner[topic, p] = member_id
    return owner


def is_valid(
    check: Callable[[Case, GroupAssignment], None], case: Case, result: GroupAssignment
) -> bool:
    """Whether ``check`` accepts ``result``."""
    try:
        check(case, result)
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


def parse_user_data(output: str) -> list[str]:
    """The hex user data of each ``userdata`` output line (``-`` for none)."""
    return [line.split(" ")[1] for line in output.splitlines()]


def grouped(parts: Sequence[tuple[str, int]]) -> Partitions:
    """``(topic, partition)`` pairs grouped by topic, in first-seen order."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in parts:
        by_topic.setdefault(topic, []).append(p)
    return tuple((t, tuple(ps)) for t, ps in by_topic.items())


@dataclass
class RandomGroup:
    """A random group before its members' user data is chosen."""

    counts: dict[str, int]
    ids: list[str]
    subscriptions: dict[str, list[str]]
    newest: int
    """The group's newest generation."""
    owned: dict[str, list[tuple[str, int]]]
    """A previous generation's owners, deliberately unbalanced and now and
    then with a partition claimed twice or out of range."""


def random_group(rng: random.Random, most_members: int) -> RandomGroup:
    """Equal or differing subscriptions (some to a missing topic) and previous owners."""
    counts = {t: rng.randint(1, 9) for t in rng.sample(TOPICS, rng.randint(1, 4))}
    known = list(counts)
    n = rng.randint(1, 9) if rng.random() < 0.8 else rng.randint(10, most_members)
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
    return RandomGroup(counts, ids, subscriptions, newest, owned)


def random_case(
    rng: random.Random,
    most_members: int,
    member: Callable[[random.Random, RandomGroup, str, float, int], GroupMember],
) -> Case:
    """A :func:`random_group` whose members ``member`` draws.

    ``member`` is given the group, the member's id, a uniform draw in [0, 1)
    choosing what kind of member it is, and the generation it last joined in
    (mostly the newest).
    """
    group = random_group(rng, most_members)
    members = []
    for mid in group.ids:
        kind = rng.random()
        generation = group.newest if rng.random() < 0.7 else rng.randint(0, group.newest - 1)
        members.append(member(rng, group, mid, kind, generation))
    return Case(members, group.counts)


def assert_random_groups_match(
    java: Callable[[str], str],
    member: Callable[[random.Random, RandomGroup, str, float, int], GroupMember],
    most_members: int,
    assign: Callable[[list[GroupMember], dict[str, int]], GroupAssignment],
    check: Callable[[Case, GroupAssignment], None],
    claims_missing_partitions: Callable[[Case], bool],
) -> None:
    """On 400 :func:`random_case` groups, our assignment is valid and, where Java's is,
    equal to it.

    Cases where Java throws, returns an invalid assignment, or a member claims
    a partition its topic does not have are not compared; most must be.
    """
    rng = random.Random(20261124)
    cases = [random_case(rng, most_members, member) for _ in range(400)]
    expected = parse_java(java("".join(c.java_input() for c in cases)))
    assert len(expected) == len(cases)
    compared = 0
    for i, (case, want) in enumerate(zip(cases, expected, strict=True)):
        got = assign(case.members, case.counts)
        check(case, got)
        if want is None or claims_missing_partitions(case) or not is_valid(check, case, want):
            continue  # Java fails, or its output is not a valid assignment
        assert got == want, f"case {i}:\n{case.java_input()}"
        compared += 1
    assert compared > len(cases) * 3 // 4


def assert_generations_match(
    java: Callable[[str], str],
    rng: random.Random,
    generations: int,
    *,
    joiners: Callable[[random.Random], int],
    partial: float,
    leave: float,
    member: Callable[[str, tuple[str, ...], Partitions | None, int], GroupMember],
    assign: Callable[[list[GroupMember], dict[str, int]], GroupAssignment],
    check: Callable[[Case, GroupAssignment], None],
) -> None:
    """Members come and go over generations; each generation's assignment equals Java's.

    Args:
        java: runs AssignorVectors.
        rng: draws who joins and leaves.
        generations: one more than the number of generations.
        joiners: how many members join before a generation.
        partial: the chance that a joiner subscribes to only some topics.
        leave: the chance that a member leaves before a generation.
        member: a member as it joins: its id, its topics, what the previous
            generation assigned it (None for a new member), and that generation.
        assign: our balancer.
        check: what each of our assignments must satisfy.
    """
    counts = {"t0": 7, "t1": 5, "orders": 12}
    alive: dict[str, tuple[str, ...]] = {}
    previous: GroupAssignment = {}
    cases: list[Case] = []
    ours: list[GroupAssignment] = []
    for generation in range(1, generations):
        for _ in range(joiners(rng)):
            alive[f"consumer-{rng.randint(1, 99)}-{generation}"] = tuple(
                rng.sample(list(counts), rng.randint(1, 3)) if rng.random() < partial else counts
            )
        if len(alive) > 1 and rng.random() < leave:
            del alive[rng.choice(sorted(alive))]
        if not alive:
            continue
        members = [
            member(
                mid,
                topics,
                tuple((t, tuple(ps)) for t, ps in previous[mid].items())
                if mid in previous
                else None,
                generation - 1,
            )
            for mid, topics in alive.items()
        ]
        cases.append(Case(members, counts))
        ours.append(assign(members, counts))
        check(cases[-1], ours[-1])
        previous = ours[-1]
    # Each generation's input is built from the previous output, so all of them
    # match Java's only if every output does.
    expected = parse_java(java("".join(c.java_input() for c in cases)))
    for i, (case, got, want) in enumerate(zip(cases, ours, expected, strict=True)):
        assert got == want, f"generation {i + 1}:\n{case.java_input()}"


def single_balancer_member(balancer: Balancer) -> Member:
    """A member of group ``g`` reading topic ``t`` with only ``balancer``."""
    return Member(
        MemberConfig(
            group_id="g",
            topics=("t",),
            balancers=(balancer,),
            session_timeout=10.0,
            rebalance_timeout=30.0,
            heartbeat_interval=1.0,
        )
    )
