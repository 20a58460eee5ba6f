"""The consumer group (KIP-848) model: members, epochs, and reconciliation.

Theory of operation:

A :class:`ConsumerGroup` has a *group epoch*, bumped whenever what the
assignment depends on changes (a member joins, leaves or changes its
subscription; a subscribed topic's partition count changes), and a *target
assignment* computed by an assignor at an *assignment epoch*. Each
:class:`ConsumerGroupMember` converges on its share of the target one
heartbeat at a time (:func:`reconcile`, Kafka's ``CurrentAssignmentBuilder``):

* a member that holds partitions the target gave to someone else must revoke
  them first: it stays at its epoch in ``UNREVOKED_PARTITIONS``, its usable
  assignment shrinks to what it keeps, and it moves on only once a heartbeat
  no longer reports the revoked partitions as owned;
* a partition is handed to its new owner only once nobody holds it (the
  group's *partition owners*); until then the new owner is in
  ``UNRELEASED_PARTITIONS`` at the new epoch;
* otherwise the member is ``STABLE`` at the assignment epoch.

The group's state is derived: ``Empty`` without members, ``Assigning`` while
the group epoch is ahead of the assignment epoch, ``Reconciling`` while a
member is not yet stable at the assignment epoch, else ``Stable``.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .consumer_messages import Assignment

FrozenAssignment = dict[uuid.UUID, frozenset[int]]


class MemberState(enum.Enum):
    """Where a member is in its reconciliation (Kafka's ``MemberState``)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """The states a consumer group reports (Kafka's ``ConsumerGroupState``)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass
class ConsumerGroupMember:
    """A member of a consumer group.

    Attributes:
        member_id: The member id.
        instance_id: The group instance id of a static member, or None.
        member_epoch: Its epoch (-2 while a static member is away).
        previous_member_epoch: Its epoch before the last change.
        state: Its reconciliation state.
        assigned: The partitions it may use.
        pending_revocation: The partitions it must give up.
        rebalance_timeout_ms: How long it may take to revoke.
        subscribed_topic_names: Its subscribed topics.
        subscribed_topic_regex: Its subscription as a regular expression.
        server_assignor: The assignor it asked for, or None.
        rack_id: Its rack, or None.
        client_id: Its client id.
        client_host: Its address.
        assignment_epochs: The member epoch at which it was given each of its
            assigned partitions (KIP-1251: a commit with an older epoch is
            accepted for partitions it had since then).
    """

    member_id: str
    instance_id: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: FrozenAssignment = field(default_factory=dict)
    pending_revocation: FrozenAssignment = field(default_factory=dict)
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        """Stable at ``epoch``."""
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def held(self) -> FrozenAssignment:
        """The partitions it holds: assigned and pending revocation."""
        out = dict(self.assigned)
        for topic, parts in self.pending_revocation.items():
            out[topic] = out.get(topic, frozenset()) | parts
        return out


@dataclass
class ConsumerGroup:
    """A consumer group.

    Attributes:
        group_id: The group id.
        group_epoch: The group epoch.
        assignment_epoch: The epoch of the target assignment.
        members: The members by id, in join order.
        target: The target assignment by member id.
        partition_topics: The subscribed topics' partition counts by name,
            when the group epoch was last bumped for them.
        owners: The member holding each partition.
        assigned_at_ms: When the target assignment was last computed (None:
            never).
        topic_ids: The ids of the topics its members subscribed to, by name
            (to check offset commits, which name topics).

    A new group starts at group epoch 1, so its first member gets epoch 2, as
    in Kafka 4.3.
    """

    group_id: str
    group_epoch: int = 1
    assignment_epoch: int = 1
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, FrozenAssignment] = field(default_factory=dict)
    partition_topics: dict[str, int] = field(default_factory=dict)
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    assigned_at_ms: int | None = None
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        """The state, derived from the members and epochs."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        """The member with group instance id ``instance_id``, or None."""
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def partition_owner(self, topic: uuid.UUID, partition: int) -> str | None:
        """The member holding a partition, or None when it is free."""
        return self.owners.get((topic, partition))

    def put(self, member: ConsumerGroupMember) -> None:
        """Add or update ``member``, updating the partition owners."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for topic, parts in member.held().items():
            for p in parts:
                self.owners[(topic, p)] = member.member_id

    def remove(self, member_id: str) -> ConsumerGroupMember | None:
        """Remove a member and its target assignment; its partitions become free."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
        self.target.pop(member_id, None)
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for topic, parts in member.held().items():
            for p in parts:
                if self.owners.get((topic, p)) == member.member_id:
                    del self.owners[(topic, p)]


def _freeze(assignment: Mapping[uuid.UUID, set[int] | frozenset[int]]) -> FrozenAssignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def owns_any(owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None, of: Assignment) -> bool:
    """Whether the reported ``owned`` partitions include any of ``of`` (None: assume so)."""
    if owned is None:
        return True
    return any(p in of.get(topic, ()) for topic, parts in owned for p in parts)


def is_subset(owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None, of: Assignment) -> bool:
    """Whether every reported owned partition is in ``of`` (None: not a subset)."""
    if owned is None:
        return False
    for topic, parts in owned:
        mine = of.get(topic)
        if mine is None or any(p not in mine for p in parts):
            return False
    return True


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owner: Callable[[uuid.UUID, int], str | None],
    owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None,
) -> ConsumerGroupMember:
    """The member's next assignment state (Kafka's ``CurrentAssignmentBuilder.build``).

    Args:
        member: The member (not modified).
        target_epoch: The target assignment's epoch.
        target: The member's target assignment.
        owner: Who holds a partition (None: free).
        owned: The partitions the member reported as owned (None: not reported).

    Returns:
        The member, unchanged or a changed copy.
    """
    # Kafka's build: whether the member moves, and from which epoch.
    epoch = member.member_epoch
    if member.state is MemberState.STABLE and epoch == target_epoch:
        return member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        epoch += 1
    # Kafka's computeNextAssignment: keep what stays, revoke the rest first,
    # then acquire what is free.
    unreleased = False
    assigned: dict[uuid.UUID, set[int]] = {}
    revoking: dict[uuid.UUID, set[int]] = {}
    acquiring: dict[uuid.UUID, set[int]] = {}
    for topic in {*target, *member.assigned}:
        wanted = target.get(topic, frozenset())
        current = member.assigned.get(topic, frozenset())
        keep = current & wanted
        assigned[topic] = set(keep)
        revoking[topic] = set(current - keep)
        free = set()
        for p in wanted - keep:
            if owner(topic, p) is None:
                free.add(p)
            else:
                unreleased = True
        acquiring[topic] = free
    pending = _freeze(revoking)
    if pending and owns_any(owned, pending):
        return _updated(member, MemberState.UNREVOKED_PARTITIONS, epoch, _freeze(assigned), pending)
    if any(acquiring.values()):
        for topic, parts in acquiring.items():
            assigned.setdefault(topic, set()).update(parts)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _updated(member, state, target_epoch, _freeze(assigned), {})


def _updated(
    member: ConsumerGroupMember,
    state: MemberState,
    epoch: int,
    assigned: FrozenAssignment,
    pending: FrozenAssignment,
) -> ConsumerGroupMember:
    since = {
        (topic, p): member.assignment_epochs.get((topic, p), epoch)
        for topic, parts in assigned.items()
        for p in parts
    }
    return dataclasses.replace(
        member,
        state=state,
        previous_member_epoch=member.member_epoch,
        member_epoch=epoch,
        assigned=assigned,
        pending_revocation=pending,
        assignment_epochs=since,
    )
