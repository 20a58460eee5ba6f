"""Partition assignment strategies ("balancers") run by the group leader.

Theory of operation:

After a JoinGroup round the coordinator picks one protocol name that every
member offered and hands the leader all members' subscriptions. The leader runs
the balancer registered under that name, turns the result into one
:class:`~gengroup.protocol.consumer_protocol.Assignment` per member, and sends
them in SyncGroup. A balancer is therefore a pure function from
``(members, partition counts)`` to ``member_id -> topic -> partitions``; it does
no I/O. The protocol name is what makes balancers interoperable: every member of
a group that agreed on ``"range"`` trusts the leader's ``"range"`` output,
whatever client the leader runs, so the built-in balancers reproduce the Java
client's assignors partition for partition.

Member order. Both Java assignors sort members with
``AbstractPartitionAssignor.MemberInfo.compareTo``: static members (those with a
``group.instance.id``) come first, ordered by instance id; dynamic members
follow, ordered by member id. Java compares strings by UTF-16 code units, which
differs from Python's code-point order for characters outside the Basic
Multilingual Plane, so the sort keys here compare UTF-16-BE encodings. Where
Java's order is undefined (two members with the same instance id, which the
coordinator never produces) the member id breaks the tie, so the result never
depends on input order.

Result shape. Every member appears in the result, including members that
receive nothing; a member's inner mapping lists only the topics it was given
partitions of, each with its partitions in ascending order (so an idle member
maps to ``{}``). Java's per-member lists carry the same partitions; encoded as
an assignment they give the same topic groups.

Topics a member subscribes to that are absent from ``partitions`` (unknown to
the metadata), or whose count is zero or negative, are skipped, as Java skips
topics without metadata. A topic listed twice in one subscription counts once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from gengroup import _java
from gengroup.protocol.consumer_protocol import Subscription, TopicPartitions

__all__ = [
    "Balancer",
    "GroupAssignment",
    "GroupMember",
    "RangeBalancer",
    "RoundRobinBalancer",
    "SupportsOwnedUserData",
    "SupportsUserData",
    "balancer_user_data",
    "rebalance_protocol",
]

GroupAssignment = dict[str, dict[str, list[int]]]
"""A balancer's result: ``member_id -> topic -> sorted partitions``."""


@dataclass(frozen=True)
class GroupMember:
    """One member of the group as the leader sees it in the JoinGroup response.

    Attributes:
        member_id: the coordinator-assigned member id.
        topics: the topics the member subscribed to.
        group_instance_id: the member's ``group.instance.id`` (static
            membership), or ``None`` for a dynamic member.
        user_data: the balancer user data from the member's subscription.
        owned_partitions: the partitions the member owned in its previous
            generation, grouped by topic.
        rack: the member's rack, or ``None``.
        generation_id: the generation in which it owned ``owned_partitions``
            (version 2+ subscriptions), -1 when unknown.
    """

    member_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    rack: str | None = None
    generation_id: int = -1

    @classmethod
    def from_subscription(
        cls, member_id: str, group_instance_id: str | None, subscription: Subscription
    ) -> GroupMember:
        """Build a member from a decoded JoinGroup subscription.

        An empty rack is treated as no rack, as the Java client does.

        Args:
            member_id: the member id from the JoinGroup response.
            group_instance_id: the member's instance id from the JoinGroup
                response, or ``None``.
            subscription: the member's decoded protocol metadata.

        Returns:
            The member.
        """
        return cls(
            member_id=member_id,
            topics=tuple(subscription.topics),
            group_instance_id=group_instance_id,
            user_data=subscription.user_data,
            owned_partitions=subscription.owned_partitions,
            rack=subscription.rack or None,
            generation_id=subscription.generation_id,
        )


class Balancer(Protocol):
    """A partition assignment strategy.

    Implementations may additionally provide the optional
    :class:`SupportsUserData` hook; call it through :func:`balancer_user_data`.

    Attributes:
        name: the protocol name offered in JoinGroup (``"range"``,
            ``"roundrobin"``, ...). Members of one group must agree on what a
            name means, so reuse a name only for an identical algorithm.
    """

    @property
    def name(self) -> str:
        """The protocol name offered in JoinGroup."""
        ...

    def assign(
        self, members: Sequence[GroupMember], partitions: Mapping[str, int]
    ) -> GroupAssignment:
        """Assign partitions to members.

        Args:
            members: every member of the generation (the leader included), in
                any order; member ids are unique.
            partitions: the partition count of each topic known to metadata.
                It may lack subscribed topics and contain unsubscribed ones.

        Returns:
            ``member_id -> topic -> sorted partitions``, covering every member.
        """
        ...


@runtime_checkable
class SupportsUserData(Protocol):
    """The optional hook through which a balancer puts user data in the subscription."""

    def user_data(self, topics: Sequence[str]) -> bytes | None:
        """Return the ``user_data`` to send in this member's subscription.

        Args:
            topics: the topics this member subscribes to.

        Returns:
            Opaque bytes that the leader's balancer will see in
            :attr:`GroupMember.user_data`, or ``None``.
        """
        ...


@runtime_checkable
class SupportsOwnedUserData(Protocol):
    """The optional hook of a balancer whose user data says what the member owned."""

    def owned_user_data(self, owned: TopicPartitions, generation: int) -> bytes | None:
        """Return the ``user_data`` of a member that owned ``owned`` in ``generation``.

        Args:
            owned: the partitions assigned to this member in its last
                generation, grouped by topic.
            generation: that generation's id, negative if it never had one.

        Returns:
            The user data, or ``None`` to fall back to :meth:`SupportsUserData.user_data`.
        """
        ...


def balancer_user_data(
    balancer: Balancer,
    topics: Sequence[str],
    owned: TopicPartitions = (),
    generation: int = -1,
) -> bytes | None:
    """Call the balancer's optional user-data hooks.

    Args:
        balancer: any balancer.
        topics: the topics this member subscribes to.
        owned: the partitions assigned to this member in its last generation.
        generation: that generation's id, negative if it never had one.

    Returns:
        What ``owned_user_data`` returns if the balancer has it and it is not
        ``None``, else what ``user_data`` returns, else ``None``.
    """
    if isinstance(balancer, SupportsOwnedUserData):
        data = balancer.owned_user_data(owned, generation)
        if data is not None:
            return data
    if isinstance(balancer, SupportsUserData):
        return balancer.user_data(topics)
    return None


def rebalance_protocol(balancer: Balancer) -> str:
    """How a group whose chosen balancer is ``balancer`` moves partitions.

    A balancer with a ``rebalance_protocol`` attribute equal to
    ``"cooperative"`` never assigns a partition that another member still
    reports owning (KIP-429), so members keep their partitions across a
    rebalance; any other balancer is eager: every member gives up everything
    before rejoining.

    Args:
        balancer: any balancer.

    Returns:
        ``"cooperative"`` or ``"eager"``.
    """
    return (
        "cooperative" if getattr(balancer, "rebalance_protocol", "") == "cooperative" else "eager"
    )


# --------------------------------------------------------------------------- helpers


_STATIC: Final = 0
_DYNAMIC: Final = 1


def _member_key(member: GroupMember) -> tuple[int, bytes, bytes]:
    """Java's ``MemberInfo`` order, made total by breaking ties on member id."""
    if member.group_instance_id is not None:
        return (
            _STATIC,
            _java.string_sort_key(member.group_instance_id),
            _java.string_sort_key(member.member_id),
        )
    return (_DYNAMIC, b"", _java.string_sort_key(member.member_id))


def _sorted_members(members: Sequence[GroupMember]) -> list[GroupMember]:
    seen: set[str] = set()
    for member in members:
        if member.member_id in seen:
            raise ValueError(f"duplicate member id {member.member_id!r}")
        seen.add(member.member_id)
    return sorted(members, key=_member_key)


def _partition_count(partitions: Mapping[str, int], topic: str) -> int:
    return max(0, partitions.get(topic, 0))


# --------------------------------------------------------------------------- balancers


class _JavaEagerAssignor:
    """What the built-in eager strategies share: no user data, Java's member order."""

    def user_data(self, topics: Sequence[str]) -> bytes | None:
        """Return ``None``: the built-in strategies send no user data."""
        return None

    def assign(
        self, members: Sequence[GroupMember], partitions: Mapping[str, int]
    ) -> GroupAssignment:
        """Assign partitions to members by this strategy (see :meth:`Balancer.assign`).

        The members may come in any order: they are sorted as Java sorts them.

        Raises:
            ValueError: two members share a member id.
        """
        ordered = _sorted_members(members)
        result: GroupAssignment = {m.member_id: {} for m in ordered}
        self._deal(ordered, partitions, result)
        return result

    def _deal(
        self, ordered: list[GroupMember], partitions: Mapping[str, int], result: GroupAssignment
    ) -> None:
        raise NotImplementedError


class RangeBalancer(_JavaEagerAssignor):
    """Kafka's ``range`` strategy, equal to Java's ``RangeAssignor`` without racks.

    Each topic is assigned on its own: its partitions, in numeric order, are cut
    into contiguous ranges, one per subscribed member in member order; the first
    ``count % members`` members get one partition more. Members subscribed to
    the same topics with equal partition counts get the same partition numbers
    of each ("co-partitioning"), and the per-topic sizes differ by at most one,
    but the leftovers of every topic go to the same first members.

    Java's rack-aware refinement (used when members set ``client.rack`` and
    partition replicas span racks unevenly) is not implemented: racks are
    ignored, which gives Java's output for every group in which that refinement
    does not apply. Balancers only receive partition counts, not replica
    placement.
    """

    name: Final = "range"

    def _deal(
        self, ordered: list[GroupMember], partitions: Mapping[str, int], result: GroupAssignment
    ) -> None:
        """Assign contiguous partition ranges per topic."""
        subscribers: dict[str, list[str]] = {}
        for member in ordered:  # already in member order, so each list is too
            for topic in dict.fromkeys(member.topics):
                subscribers.setdefault(topic, []).append(member.member_id)
        for topic in sorted(subscribers, key=_java.string_sort_key):
            count = _partition_count(partitions, topic)
            if count == 0:
                continue
            consumers = subscribers[topic]
            per_member, with_extra = divmod(count, len(consumers))
            for i, member_id in enumerate(consumers):
                start = per_member * i + min(i, with_extra)
                length = per_member + (1 if i < with_extra else 0)
                if length:
                    result[member_id][topic] = list(range(start, start + length))


class RoundRobinBalancer(_JavaEagerAssignor):
    """Kafka's ``roundrobin`` strategy, equal to Java's ``RoundRobinAssignor``.

    All partitions of all subscribed topics are laid out sorted by topic name,
    then partition. A cursor cycles over the members in member order; each
    partition goes to the first member at or after the cursor that subscribes
    to its topic, and the cursor moves just past that member. With identical
    subscriptions the members' partition counts differ by at most one; with
    differing subscriptions the result can be unbalanced.
    """

    name: Final = "roundrobin"

    def _deal(
        self, ordered: list[GroupMember], partitions: Mapping[str, int], result: GroupAssignment
    ) -> None:
        """Deal partitions to members in turn."""
        subscribed = [frozenset(m.topics) for m in ordered]
        topics = sorted({t for topics in subscribed for t in topics}, key=_java.string_sort_key)
        cursor = 0
        for topic in topics:
            for partition in range(_partition_count(partitions, topic)):
                # Terminates: the topic came from some member's subscription.
                while topic not in subscribed[cursor]:
                    cursor = (cursor + 1) % len(ordered)
                result[ordered[cursor].member_id].setdefault(topic, []).append(partition)
                cursor = (cursor + 1) % len(ordered)
