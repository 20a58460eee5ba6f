"""Kafka's ``sticky`` strategy, equal to the Java client's ``StickyAssignor``.

Theory of operation:

A sticky assignment is as balanced as the subscriptions allow while moving as
few partitions as possible from the members that owned them in the previous
generation. Because members of a group trust whatever the leader computes, the
point of reproducing Java's algorithm exactly is that a gengroup leader and a
Java leader give the same group the same partitions, so mixing the two never
costs extra partition movements.

What each member owned travels in its subscription's *user data*, in the
``StickyAssignor`` layout (:func:`encode_user_data`): the partitions assigned
to it in its last generation and that generation's id. A member that was never
assigned anything sends no user data. As in Java, the ``owned_partitions``
field of a version 1+ subscription is not used by this eager strategy (the
member revoked everything before rejoining); only the user data counts, and
the subscription's (version 2+) generation id settles which of two members of
the same generation claiming one partition keeps it.

The assignment has two paths, as in Java:

* every member subscribes to the same topics: the *constrained* path keeps
  each member's previously owned partitions up to its quota (``floor`` or
  ``ceil`` of partitions per member) and deals the rest round-robin to the
  members below quota, in member id order;
* otherwise the *general* path keeps the still-valid owned partitions, gives
  each unassigned partition (topics with the fewest subscribers first) to the
  least-loaded subscriber, then moves partitions from the most to the least
  loaded members until no move improves the balance, preferring to send a
  partition back to its owner of an older generation, and keeps the result
  only if it is more balanced than before.

Where Java's choices depend on the iteration order of its hash maps and sets
(which member may keep ``ceil`` partitions first, which of several moved
partitions moves back), the same order is computed here
(:func:`gengroup._java.hashmap_order`, a model of ``HashSet<TopicPartition>``).
Members are taken in the order given, which should be the JoinGroup
response's as for Java's leader; that order only matters for member ids that
share a hash bucket. Java's rack-aware refinements are not implemented (racks
are ignored, as by :class:`~gengroup.membership.balancers.RangeBalancer`).
Four deliberate differences, all on input where Java's output is not a valid
assignment: a previously owned partition that does not exist (any more) is
ignored, where Java would keep it in the owner's assignment or fail; a
partition goes back to its owner of an older generation only if that member
still subscribes to its topic (Java may hand it to a member that dropped the
topic); where Java's assignor fails with an exception, a valid assignment is
returned instead; and a subscription naming a topic more than once counts it
once when subscriptions are compared (Java compares a list's length with a
set's, takes such a subscription for one of as many topics, and hands its
member partitions of topics it did not name).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple

from .. import _java
from ..protocol.consumer_protocol import TopicPartitions
from .balancers import GroupAssignment, GroupMember

__all__ = ["StickyBalancer", "decode_user_data", "encode_user_data", "sticky_assign"]

_DEFAULT_GENERATION: Final = -1
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_U32: Final = 0xFFFFFFFF


class _TP(NamedTuple):
    topic: str
    partition: int


def _topic_key(topic: str) -> bytes:
    return _java.string_sort_key(topic)


# --------------------------------------------------------------------------- user data


def encode_user_data(owned: TopicPartitions, generation: int) -> bytes:
    """The user data a ``StickyAssignor`` member sends: what it owned, and when.

    Layout (Java's ``STICKY_ASSIGNOR_USER_DATA_V1``): an int32 count of
    ``(int16-length topic, int32 count, int32 partitions)`` entries, then the
    int32 generation.

    Args:
        owned: the partitions assigned to the member in its last generation.
        generation: that generation's id.

    Returns:
        The encoded user data.
    """
    out = [_I32.pack(len(owned))]
    for topic, parts in owned:
        raw = topic.encode("utf-8")
        out.append(_I16.pack(len(raw)) + raw + _I32.pack(len(parts)))
        out.extend(_I32.pack(p) for p in parts)
    out.append(_I32.pack(generation))
    return b"".join(out)


class _Short(Exception):
    """The user data ended or held an impossible length."""


def _read_assignment(data: bytes, with_generation: bool) -> tuple[list[_TP], int | None]:
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise _Short
        pos += n
        return data[pos - n : pos]

    def i32() -> int:
        value: int = _I32.unpack(take(4))[0]
        return value

    def array_size() -> int:
        n = i32()
        if n < 0 or n > len(data) - pos:
            raise _Short
        return n

    partitions: list[_TP] = []
    for _ in range(array_size()):
        length: int = _I16.unpack(take(2))[0]
        topic = take(length).decode("utf-8", "replace")
        partitions.extend(_TP(topic, i32()) for _ in range(array_size()))
    return partitions, (i32() if with_generation else None)


def decode_user_data(data: bytes | None) -> tuple[list[tuple[str, int]], int | None]:
    """Read a ``StickyAssignor`` member's user data as Java does.

    Version 1 (partitions and generation) is tried first, then version 0
    (partitions only, no generation); bytes that are neither mean no
    partitions and generation -1. No user data means no partitions and no
    generation.

    Args:
        data: the member's user data, or ``None``.

    Returns:
        ``([(topic, partition), ...], generation or None)``.
    """
    if not data:
        return [], None
    try:
        parts, generation = _read_assignment(bytes(data), True)
    except _Short:
        try:
            parts, generation = _read_assignment(bytes(data), False)
        except _Short:
            return [], _DEFAULT_GENERATION
    return [(tp.topic, tp.partition) for tp in parts], generation


# --------------------------------------------------------------------------- Java collections


def _tp_bucket_hash(tp: _TP) -> int:
    """``TopicPartition.hashCode()`` spread as ``HashMap.hash`` does (unsigned)."""
    h = ((31 * (31 + tp.partition)) + _java.string_hash(tp.topic)) & _U32
    return h ^ (h >> 16)


class _JavaHashSet:
    """A ``HashSet<TopicPartition>`` that knows its iteration order."""

    __slots__ = ("_capacity", "_items", "_seq")

    def __init__(self) -> None:
        self._items: dict[_TP, int] = {}
        self._capacity = 16
        self._seq = 0

    def add(self, tp: _TP) -> None:
        if tp in self._items:
            return
        self._seq += 1
        self._items[tp] = self._seq
        if len(self._items) > self._capacity * 3 // 4:
            self._capacity *= 2

    def remove(self, tp: _TP) -> None:
        self._items.pop(tp, None)

    def __bool__(self) -> bool:
        return bool(self._items)

    def first(self) -> _TP:
        mask = self._capacity - 1
        return min(self._items, key=lambda tp: (_tp_bucket_hash(tp) & mask, self._items[tp]))


class _Movements:
    """Java's ``PartitionMovements``: which partitions moved between which members."""

    def __init__(self) -> None:
        self.moved: dict[_TP, tuple[str, str]] = {}
        self.by_topic: dict[str, dict[tuple[str, str], _JavaHashSet]] = {}

    def _remove(self, tp: _TP) -> tuple[str, str]:
        pair = self.moved.pop(tp)
        per_topic = self.by_topic[tp.topic]
        per_topic[pair].remove(tp)
        if not per_topic[pair]:
            del per_topic[pair]
        if not per_topic:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: _TP, pair: tuple[str, str]) -> None:
        self.moved[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, _JavaHashSet()).add(tp)

    def move(self, tp: _TP, old: str, new: str) -> None:
        if tp in self.moved:
            src, _ = self._remove(tp)
            if src != new:
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def to_move(self, tp: _TP, old: str, new: str) -> _TP:
        """The partition to move for ``tp``: one that moved the other way before, if any."""
        per_topic = self.by_topic.get(tp.topic)
        if per_topic is None:
            return tp
        if tp in self.moved:
            old = self.moved[tp][0]
        back = per_topic.get((new, old))
        return tp if back is None else back.first()


# --------------------------------------------------------------------------- the balancer


class StickyBalancer:
    """Kafka's ``sticky`` strategy, equal to Java's ``StickyAssignor`` without racks.

    Balanced like ``roundrobin`` where subscriptions allow, and sticky: a
    member keeps what it owned in the previous generation as far as the
    balance allows. Members report what they owned in their user data
    (:meth:`owned_user_data`), which gengroup's members send automatically.
    It is an eager strategy: every member gives up all its partitions when a
    generation ends, as with the other built-in balancers.
    """

    name: Final = "sticky"

    def user_data(self, topics: Sequence[str]) -> bytes | None:
        """Return ``None``: the first subscription of a member carries no user data."""
        return None

    def owned_user_data(self, owned: TopicPartitions, generation: int) -> bytes | None:
        """The user data of a member that owned ``owned`` in ``generation``.

        Args:
            owned: the partitions assigned to the member in its last
                generation, grouped by topic.
            generation: that generation's id; negative if the member was never
                assigned anything.

        Returns:
            The encoded user data, or ``None`` if the member never had an
            assignment (as Java sends).
        """
        if generation < 0:
            return None
        by_topic: dict[str, set[int]] = {}
        for topic, parts in owned:
            by_topic.setdefault(topic, set()).update(parts)
        # Java groups the partitions in a HashMap: its topic order, for equal bytes.
        topics = _java.hashmap_order(sorted(by_topic))
        return encode_user_data(tuple((t, tuple(sorted(by_topic[t]))) for t in topics), generation)

    def assign(
        self, members: Sequence[GroupMember], partitions: Mapping[str, int]
    ) -> GroupAssignment:
        """Assign partitions to members as Java's ``StickyAssignor`` does.

        See :meth:`Balancer.assign <gengroup.membership.balancers.Balancer.assign>`;
        ``members`` come in JoinGroup order.

        Raises:
            ValueError: two members share a member id.
        """
        return _result(sticky_assign(members, partitions)[0])


def sticky_assign(
    members: Sequence[GroupMember],
    partitions: Mapping[str, int],
    member_data: Callable[[GroupMember], tuple[list[tuple[str, int]], int | None]] | None = None,
) -> tuple[dict[str, list[_TP]], dict[_TP, str] | None]:
    """Java's ``AbstractStickyAssignor.assignPartitions``, without racks.

    Args:
        members: every member, in JoinGroup order.
        partitions: the partition count of each known topic.
        member_data: what each member owned and in which generation (Java's
            ``memberData``); default: the ``StickyAssignor`` user data.

    Returns:
        Each member's partitions, and the partitions the identical-subscription
        path took from an owner, with their new owner (None after the
        general path, which does not say).

    Raises:
        ValueError: two members share a member id.
    """
    by_id: dict[str, GroupMember] = {}
    for member in members:
        if member.member_id in by_id:
            raise ValueError(f"duplicate member id {member.member_id!r}")
        by_id[member.member_id] = member
    if not by_id:
        return {}, {}
    order = _java.hashmap_order(list(by_id))
    subscribed = {t for m in members for t in m.topics}
    counts = {t: partitions[t] for t in subscribed if partitions.get(t, 0) > 0}
    state = (
        _Inputs(order, by_id, counts)
        if member_data is None
        else _Inputs(order, by_id, counts, member_data)
    )
    if state.all_subscriptions_equal:
        transfers: dict[_TP, str] = {}
        raw = _constrained(state, transfers)
        return {m: raw.get(m, []) for m in by_id}, transfers
    raw = _General(state).build()
    return {m: raw.get(m, []) for m in by_id}, None


def _result(raw: Mapping[str, Sequence[tuple[str, int]]]) -> GroupAssignment:
    """``member_id -> topic -> sorted partitions``, members and topics in order."""
    result: GroupAssignment = {}
    for member_id in sorted(raw, key=_java.string_sort_key):
        per_topic: dict[str, list[int]] = {}
        for topic, partition in raw[member_id]:
            per_topic.setdefault(topic, []).append(partition)
        result[member_id] = {t: sorted(ps) for t, ps in sorted(per_topic.items())}
    return result


class _Inputs:
    """Java's ``allSubscriptionsEqual``: the owned partitions worth keeping, per member."""

    def __init__(
        self,
        order: list[str],
        members: Mapping[str, GroupMember],
        counts: dict[str, int],
        member_data: Callable[[GroupMember], tuple[list[tuple[str, int]], int | None]] = (
            lambda m: decode_user_data(m.user_data)
        ),
    ) -> None:
        self.order = order
        self.members = members
        self.counts = counts
        self.member_data: dict[str, tuple[list[_TP], int | None]] = {}
        self.owned: dict[str, list[_TP]] = {}
        self.doubly_claimed: set[_TP] = set()
        self.max_generation = _DEFAULT_GENERATION
        self.all_subscriptions_equal = True
        first_topics: set[str] | None = None
        previous_owner: dict[_TP, str] = {}
        for member_id in order:
            member = members[member_id]
            # Each topic once: Java compares a list's length with a set's, so a
            # subscription naming one topic four times equalled one of four topics.
            topics = list(dict.fromkeys(member.topics))
            # Java compares with the first non-empty subscription, so a member subscribed
            # to nothing can be handed the others' partitions; compare with the first one.
            if first_topics is None:
                first_topics = set(topics)
            elif self.all_subscriptions_equal and not (
                len(topics) == len(first_topics) and first_topics.issuperset(topics)
            ):
                self.all_subscriptions_equal = False
            parts, generation = member_data(member)
            data = ([_TP(t, p) for t, p in parts], generation)
            self.member_data[member_id] = data
            member_generation = _DEFAULT_GENERATION if generation is None else generation
            self.max_generation = max(self.max_generation, member_generation)
            mine: list[_TP] = []
            self.owned[member_id] = mine
            for tp in data[0]:
                if not 0 <= tp.partition < counts.get(tp.topic, 0):
                    continue
                other = previous_owner.get(tp)
                if other is None:
                    mine.append(tp)
                    previous_owner[tp] = member_id
                    continue
                other_generation = max(members[other].generation_id, _DEFAULT_GENERATION)
                if member_generation == other_generation:
                    self.doubly_claimed.add(tp)
                    _remove_first(self.owned[other], tp)
                    previous_owner[tp] = member_id
                elif member_generation > other_generation:
                    mine.append(tp)
                    _remove_first(self.owned[other], tp)
                    previous_owner[tp] = member_id

    def total(self) -> int:
        return sum(self.counts.values())

    def all_partitions(self, sorted_topics: list[str]) -> list[_TP]:
        return [_TP(t, p) for t in sorted_topics for p in range(self.counts[t])]


def _remove_first(items: list[_TP], tp: _TP) -> None:
    """``ArrayList.remove(Object)``: drop the first equal element, if any."""
    if tp in items:
        items.remove(tp)


def _unassigned(all_sorted: list[_TP], assigned_sorted: list[_TP]) -> list[_TP]:
    """Java's merge of all partitions against the (sorted) assigned ones."""
    if not assigned_sorted:
        return all_sorted
    out: list[_TP] = []
    rest = iter(assigned_sorted)
    upcoming = next(rest)
    exhausted = False
    for tp in all_sorted:
        if exhausted or upcoming != tp:
            out.append(tp)
        else:
            try:
                upcoming = next(rest)
            except StopIteration:
                exhausted = True
    return out


def _constrained(state: _Inputs, transfers: dict[_TP, str] | None = None) -> dict[str, list[_TP]]:
    """Java's ``ConstrainedAssignmentBuilder`` (identical subscriptions), without racks.

    ``transfers`` (if given) receives each partition taken from a member that
    owned it, with its new owner (Java's ``partitionsTransferringOwnership``).
    """
    revoked: set[_TP] = set()
    total, n = state.total(), len(state.owned)
    min_quota, max_quota = total // n, -(-total // n)
    expected_over = total % n
    over = 0
    assignment: dict[str, list[_TP]] = {m: [] for m in state.owned}
    assigned: list[_TP] = []
    under_min: list[str] = []
    at_min: list[str] = []
    for member_id in state.order:
        owned = sorted(state.owned[member_id], key=lambda tp: (tp.partition, _topic_key(tp.topic)))
        for tp in state.doubly_claimed:
            _remove_first(owned, tp)
        if len(owned) < min_quota:
            assignment[member_id].extend(owned)
            assigned.extend(owned)
            under_min.append(member_id)
        elif len(owned) >= max_quota and over < expected_over:
            over += 1
            if over == expected_over:
                at_min.clear()
            assignment[member_id].extend(owned[:max_quota])
            assigned.extend(owned[:max_quota])
            revoked.update(owned[max_quota:])
        else:
            assignment[member_id].extend(owned[:min_quota])
            assigned.extend(owned[:min_quota])
            revoked.update(owned[min_quota:])
            if over < expected_over:
                at_min.append(member_id)
    topics = sorted(state.counts, key=_topic_key)
    assigned.sort(key=lambda tp: (_topic_key(tp.topic), tp.partition))
    unassigned = _unassigned(state.all_partitions(topics), assigned)
    under_min.sort(key=_java.string_sort_key)
    at_min.sort(key=_java.string_sort_key)
    # Round-robin over the members under quota (a Java iterator over a list
    # that loses members as they reach the minimum quota).
    pos, last = 0, -1
    for tp in unassigned:
        if pos < len(under_min):
            last, pos = pos, pos + 1
            member_id = under_min[last]
        elif not under_min and not at_min:  # Java fails here; valid input never gets here
            member_id = min(
                assignment, key=lambda m: (len(assignment[m]), _java.string_sort_key(m))
            )
        elif not under_min:
            member_id = at_min.pop(0)
        else:
            last, pos = 0, 1
            member_id = under_min[0]
        assignment[member_id].append(tp)
        if transfers is not None and (tp in revoked or tp in state.doubly_claimed):
            transfers[tp] = member_id
        count = len(assignment[member_id])
        if count == min_quota:
            del under_min[last]
            pos -= 1
            at_min.append(member_id)
        elif count == max_quota:
            over += 1
    return assignment


class _General:
    """Java's ``GeneralAssignmentBuilder`` (differing subscriptions), without racks."""

    def __init__(self, state: _Inputs) -> None:
        self.state = state
        self.counts = state.counts
        self.current: dict[str, list[_TP]] = state.owned
        self.topic_members: dict[str, list[str]] = {t: [] for t in self.counts}
        self.member_topics: dict[str, list[str]] = {}
        for member_id in state.order:
            topics = [t for t in state.members[member_id].topics if t in self.counts]
            self.member_topics[member_id] = topics
            for topic in topics:
                self.topic_members[topic].append(member_id)
            self.current.setdefault(member_id, [])
        self.owner: dict[_TP, str] = {tp: m for m, tps in self.current.items() for tp in tps}
        sorted_topics = sorted(
            self.topic_members, key=lambda t: (len(self.topic_members[t]), _topic_key(t))
        )
        self.all_sorted = state.all_partitions(sorted_topics)
        self.in_tree: set[str] = set()
        self.revocation_required = False
        self.movements = _Movements()

    # -- helpers ----------------------------------------------------------

    def _tree(self) -> list[str]:
        """``sortedCurrentSubscriptions``: by partition count, then member id."""
        return sorted(self.in_tree, key=lambda m: (len(self.current[m]), _java.string_sort_key(m)))

    def _max_size(self, topics: list[str]) -> int:
        if len(topics) == len(self.counts):
            return self.state.total()
        return sum(self.counts[t] for t in topics)

    def _partition_key(self, tp: _TP) -> tuple[int, bytes, int]:
        return (len(self.topic_members[tp.topic]), _topic_key(tp.topic), tp.partition)

    # -- build ------------------------------------------------------------

    def build(self) -> dict[str, list[_TP]]:
        previous = self._previous_assignment()
        assigned = self._keep_owned()
        assigned.sort(key=self._partition_key)
        unassigned = _unassigned(self.all_sorted, assigned)
        self.in_tree.update(self.current)
        self._balance(previous, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[_TP, tuple[str, int]]:
        """Partitions owned in generations before the newest, with their owner."""
        previous: dict[_TP, tuple[str, int]] = {}
        top = self.state.max_generation
        for member_id in self.state.order:
            parts, generation = self.state.member_data[member_id]
            if generation is not None and generation < top:
                at = generation
            elif generation is None and top > _DEFAULT_GENERATION:
                at = _DEFAULT_GENERATION
            else:
                continue
            for tp in parts:
                known = previous.get(tp)
                if known is None or at > known[1]:
                    previous[tp] = (member_id, at)
        return previous

    def _keep_owned(self) -> list[_TP]:
        assigned: list[_TP] = []
        for member_id, parts in self.current.items():
            subscribed = self.state.members[member_id].topics
            kept: list[_TP] = []
            for tp in parts:
                if tp.topic not in self.topic_members:
                    self.owner.pop(tp, None)
                elif tp.topic not in subscribed:
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.append(tp)
            parts[:] = kept
        return assigned

    def _is_balanced(self) -> bool:
        tree = self._tree()
        if len(self.current[tree[0]]) >= len(self.current[tree[-1]]) - 1:
            return True
        holder = {tp: m for m, parts in self.current.items() for tp in parts}
        for member_id in tree:
            mine = self.current[member_id]
            count = len(mine)
            topics = self.member_topics[member_id]
            if count == self._max_size(topics):
                continue
            held = set(mine)
            for topic in topics:
                for p in range(self.counts[topic]):
                    tp = _TP(topic, p)
                    if tp in held:
                        continue
                    other = holder.get(tp)
                    if other is not None and count + 1 < len(self.current[other]):
                        return False
        return True

    def _can_move(self, member_id: str) -> bool:
        parts = self.current[member_id]
        if len(parts) < self._max_size(self.member_topics[member_id]):
            return True
        return any(len(self.topic_members[tp.topic]) >= 2 for tp in parts)

    def _assign_one(self, tp: _TP) -> None:
        for member_id in self._tree():
            if tp.topic in self.member_topics[member_id]:
                self.current[member_id].append(tp)
                self.owner[tp] = member_id
                return

    def _balance(self, previous: dict[_TP, tuple[str, int]], unassigned: list[_TP]) -> None:
        initializing = not self.current[self._tree()[-1]]
        for tp in unassigned:
            if self.topic_members[tp.topic]:
                self._assign_one(tp)
        fixed_partitions = {
            _TP(t, p)
            for t, members in self.topic_members.items()
            if len(members) < 2
            for p in range(self.counts[t])
        }
        self.all_sorted[:] = [tp for tp in self.all_sorted if tp not in fixed_partitions]
        unassigned[:] = [tp for tp in unassigned if tp not in fixed_partitions]
        fixed: dict[str, list[_TP]] = {}
        for member_id in self.member_topics:
            if not self._can_move(member_id):
                self.in_tree.discard(member_id)
                fixed[member_id] = self.current.pop(member_id)
        before = {m: list(parts) for m, parts in self.current.items()}
        owner_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        moved = self._reassign(self.all_sorted, previous)
        if not initializing and moved and _score(self.current) >= _score(before):
            self.current.clear()
            self.current.update(before)
            self.owner = owner_before
        for member_id, parts in fixed.items():
            self.current[member_id] = parts
            self.in_tree.add(member_id)

    def _reassign(self, partitions: list[_TP], previous: dict[_TP, tuple[str, int]]) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                member_id = self.owner[tp]
                earlier = previous.get(tp)
                if (
                    earlier is not None
                    and earlier[0] in self.current
                    and tp.topic in self.member_topics[earlier[0]]
                    and len(self.current[member_id]) > len(self.current[earlier[0]]) + 1
                ):
                    self._move(tp, earlier[0])
                    performed = modified = True
                    continue
                count = len(self.current[member_id])
                for other in self.topic_members[tp.topic]:
                    if other in self.current and count > len(self.current[other]) + 1:
                        self._move_to_least_loaded(tp)
                        performed = modified = True
                        break
        return performed

    def _move_to_least_loaded(self, tp: _TP) -> None:
        for member_id in self._tree():
            if tp.topic in self.member_topics[member_id]:
                self._move(tp, member_id)
                return

    def _move(self, tp: _TP, new: str) -> None:
        actual = self.movements.to_move(tp, self.owner[tp], new)
        old = self.owner[actual]
        self.movements.move(actual, old, new)
        _remove_first(self.current[old], actual)
        self.current[new].append(actual)
        self.owner[actual] = new


def _score(assignment: Mapping[str, list[_TP]]) -> int:
    sizes = [len(parts) for parts in assignment.values()]
    return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])
