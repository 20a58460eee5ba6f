"""The consumer group protocol's server-side assignors: ``uniform`` and ``range``.

Theory of operation:

An assignor turns the members' subscriptions (topic ids) and the previous
target assignment into a new target assignment. Both follow Apache Kafka's
``group-coordinator`` assignors:

* ``uniform`` (the default), when every member subscribes to the same topics
  (Kafka's homogeneous builder): each member may keep up to its quota of the
  partitions it had (``total // members``, plus one for the first ``total %
  members`` members in Kafka's member order), the rest are revoked; then the
  members below quota take, in member order, the unassigned partitions in
  topic order and ascending partition order, followed by the revoked ones.
  Kafka's member order is the iteration order of a ``HashMap`` keyed by
  member id, reproduced with :func:`gengroup._java.hashmap_order`. Its topic
  order is a ``HashSet`` of topic ids; here topics are taken by name, which
  only matters when several topics are subscribed.
  With different subscriptions (Kafka's heterogeneous builder) this module
  keeps what members had while they stay subscribed and then balances each
  topic greedily, giving each unassigned partition to the subscribed member
  with the fewest partitions, then moving partitions from the fullest to the
  emptiest subscribed member while they differ by more than one. The counts
  match Kafka's balance; which member gets which partition may differ.
* ``range``: members sorted by group instance id (static members first), then
  member id; for each topic, the ``i``-th subscribed member takes a contiguous
  range of ``partitions // members`` partitions, one more for the first
  ``partitions % members`` members. Kafka's output exactly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ... import _java

Target = dict[str, dict[uuid.UUID, frozenset[int]]]
"""A target assignment: partitions by topic id, by member id."""


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows about a member.

    Attributes:
        member_id: The member id.
        instance_id: The group instance id of a static member, or None.
        subscribed: The topic ids it subscribes to (existing topics only).
        assignment: Its previous target assignment.
    """

    member_id: str
    instance_id: str | None
    subscribed: frozenset[uuid.UUID]
    assignment: Mapping[uuid.UUID, frozenset[int]]


Assignor = Callable[[Sequence[MemberSpec], Mapping[uuid.UUID, int], Sequence[uuid.UUID]], Target]
"""``assign(members, partition counts by topic id, topic ids in order) -> target``."""


def uniform(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    topic_order: Sequence[uuid.UUID],
) -> Target:
    """Kafka's ``UniformAssignor`` (see the module documentation)."""
    if not members:
        return {}
    subscriptions = {m.subscribed for m in members}
    if len(subscriptions) > 1:
        return _uniform_heterogeneous(members, partitions, topic_order)
    subscribed = next(iter(subscriptions))
    if not subscribed:
        return {m.member_id: {} for m in members}
    order = _java.hashmap_order([m.member_id for m in members])
    by_id = {m.member_id: m for m in members}
    previously = {
        (topic, p) for m in members for topic, parts in m.assignment.items() for p in parts
    }
    unassigned: list[tuple[uuid.UUID, int]] = []
    total = 0
    for topic in topic_order:
        if topic not in subscribed:
            continue
        count = partitions[topic]
        unassigned.extend((topic, p) for p in range(count) if (topic, p) not in previously)
        total += count
    minimum, extra = divmod(total, len(members))
    target: Target = {}
    unfilled: list[tuple[str, int]] = []
    for member_id in order:
        quota = minimum
        if extra > 0:
            quota += 1
            extra -= 1
        kept: dict[uuid.UUID, set[int]] = {}
        for topic, parts in by_id[member_id].assignment.items():
            if topic not in subscribed:
                continue
            for p in sorted(parts):
                if quota > 0:
                    quota -= 1
                    kept.setdefault(topic, set()).add(p)
                else:
                    unassigned.append((topic, p))
        if quota > 0:
            unfilled.append((member_id, quota))
        target[member_id] = {t: frozenset(ps) for t, ps in kept.items()}
    index = 0
    for member_id, quota in unfilled:
        # Kafka gives the remaining extra partitions to the first unfilled members.
        if extra > 0:
            quota += 1
            extra -= 1
        assignment = {t: set(ps) for t, ps in target[member_id].items()}
        for _ in range(quota):
            if index >= len(unassigned):
                break
            topic, p = unassigned[index]
            index += 1
            assignment.setdefault(topic, set()).add(p)
        target[member_id] = {t: frozenset(ps) for t, ps in assignment.items()}
    return target


def _uniform_heterogeneous(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    topic_order: Sequence[uuid.UUID],
) -> Target:
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    counts = dict.fromkeys(owned, 0)
    for topic in topic_order:
        subscribers = [m.member_id for m in members if topic in m.subscribed]
        if not subscribers:
            continue
        holder: dict[int, str] = {}
        for m in members:
            if m.member_id in subscribers:
                for p in m.assignment.get(topic, ()):
                    if p < partitions[topic] and p not in holder:
                        holder[p] = m.member_id
        for p, member_id in holder.items():
            owned[member_id].setdefault(topic, set()).add(p)
            counts[member_id] += 1
        for p in range(partitions[topic]):
            if p not in holder:
                member_id = min(subscribers, key=lambda m: counts[m])
                owned[member_id].setdefault(topic, set()).add(p)
                counts[member_id] += 1
        while True:
            fullest = max(subscribers, key=lambda m: len(owned[m].get(topic, ())))
            emptiest = min(subscribers, key=lambda m: counts[m])
            mine = owned[fullest].get(topic, set())
            if counts[fullest] - counts[emptiest] <= 1 or not mine:
                break
            p = max(mine)
            mine.discard(p)
            owned[emptiest].setdefault(topic, set()).add(p)
            counts[fullest] -= 1
            counts[emptiest] += 1
    return {
        m: {t: frozenset(ps) for t, ps in assignment.items() if ps}
        for m, assignment in owned.items()
    }


def range_assignor(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    topic_order: Sequence[uuid.UUID],
) -> Target:
    """Kafka's server-side ``RangeAssignor`` (see the module documentation)."""
    ordered = sorted(
        members,
        key=lambda m: (
            (0, _java.string_sort_key(m.instance_id))
            if m.instance_id is not None
            else (1, _java.string_sort_key(m.member_id))
        ),
    )
    target: Target = {m.member_id: {} for m in ordered}
    for topic in topic_order:
        subscribers = [m for m in ordered if topic in m.subscribed]
        if not subscribers:
            continue
        count = partitions[topic]
        minimum, extra = divmod(count, len(subscribers))
        start = 0
        for m in subscribers:
            quota = minimum
            if extra > 0:
                quota += 1
                extra -= 1
            end = min(start + quota, count)
            if start < end:
                target[m.member_id][topic] = frozenset(range(start, end))
            start = end
    return target


ASSIGNORS: Final[Mapping[str, Assignor]] = {"uniform": uniform, "range": range_assignor}
"""The assignors by name; the first is the default."""
