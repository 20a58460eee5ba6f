"""What :class:`~gengroup.admin.Admin` takes and returns: topics to create,
group listings and descriptions, lag (plain data; the checks of its arguments)."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, SupportsIndex

from ._types import TopicPartition
from .protocol.consumer_protocol import PROTOCOL_TYPE, Assignment, decode_assignment

__all__ = [
    "CLASSIC_GROUP",
    "CONSUMER_GROUP",
    "GroupDescription",
    "GroupLag",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "PartitionLag",
    "INT16_MAX",
    "INT32_MAX",
    "INT64_MAX",
    "check_int",
    "check_offsets",
    "check_partitions",
    "names_of",
    "new_topics",
]

#: The largest values the wire format's signed integers hold: a replication
#: factor is an int16, a partition count or index an int32, an offset or a
#: timestamp an int64.
INT16_MAX: Final = 2**15 - 1
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


def check_int(what: str, value: object, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high``, which a request can carry.

    Raises:
        TypeError: ``value`` is not an integer (a bool is not one).
        ValueError: out of range, naming ``what``.
    """
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise TypeError(f"{what} must be an int, got {value!r}")
    number = operator.index(value)
    if not low <= number <= high:
        raise ValueError(f"{what} must be from {low} to {high}, got {number}")
    return number


def _listed(given: Iterable[Any], what: str, expected: str) -> list[Any]:
    """``given`` as a list, if it is a collection rather than one item (a
    :class:`~gengroup.TopicPartition` or :class:`NewTopic`) or no collection.

    Raises:
        TypeError: it is not, saying what ``what`` takes (``expected``).
    """
    if isinstance(given, TopicPartition | NewTopic) or not isinstance(given, Iterable):
        raise TypeError(f"{what} takes {expected}, got {given!r}")
    return list(given)


def check_offsets(given: Mapping[TopicPartition, int], what: str) -> Mapping[TopicPartition, int]:
    """``given``, a mapping of :class:`~gengroup.TopicPartition` to offset
    (its keys checked as :func:`check_partitions` checks them).

    Raises:
        TypeError: ``given`` is not a mapping (a topic name, a list of
            partitions ...), or a key is not a TopicPartition.
        ValueError: a partition index out of range, naming the topic.
    """
    if not isinstance(given, Mapping):
        raise TypeError(f"{what} takes a mapping of TopicPartition to offset, got {given!r}")
    check_partitions(given, what)
    return given


def check_partitions(tps: Iterable[TopicPartition], what: str) -> list[TopicPartition]:
    """``tps`` as a list, each partition index from 0 to :data:`INT32_MAX`.

    Raises:
        TypeError: ``tps`` is one topic name (a str or bytes: iterated, it
            would be its characters), one TopicPartition or no collection,
            or holds something else than :class:`~gengroup.TopicPartition`
            objects; an index that is not an int, naming the topic.
        ValueError: an index out of range, naming the topic.
    """
    if isinstance(tps, str | bytes):
        raise TypeError(f"{what} takes a list of TopicPartition, not a topic name: {tps!r}")
    given = _listed(tps, what, "a list of TopicPartition")
    for tp in given:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"{what} takes TopicPartition objects, got {tp!r}")
        check_int(f"{what}: the partition index of topic {tp.topic!r}", tp.partition, 0, INT32_MAX)
    return given


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.

    Raises:
        TypeError: a field of the wrong type.
        ValueError: ``partitions`` beyond an int32, ``replication_factor``
            beyond an int16 (what a request can carry).

    Attributes:
        name: the topic name.
        partitions: the number of partitions (-1: the broker's
            ``num.partitions``).
        replication_factor: copies of each partition (default -1: the
            broker's ``default.replication.factor``, as the Java
            ``AdminClient`` and ``kafka-topics.sh`` leave it).
        configs: topic configuration overrides, e.g. ``{"cleanup.policy": "compact"}``.
    """

    name: str
    partitions: int
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Types and the wire's ranges only: the values (a name's characters,
        # a count below 1 but -1, the broker's default) are the broker's to
        # judge, in its words.
        if not isinstance(self.name, str):
            raise TypeError(f"a topic name is a str, got {self.name!r}")
        # What the wire format cannot carry is refused here, naming the field.
        for what, high in (("partitions", INT32_MAX), ("replication_factor", INT16_MAX)):
            value = getattr(self, what)
            if isinstance(value, bool) or not hasattr(type(value), "__index__"):
                raise TypeError(f"topic {self.name!r}: {what} must be an int, got {value!r}")
            number = check_int(f"topic {self.name!r}: {what}", value, -high - 1, high)
            object.__setattr__(self, what, number)  # numpy's ints too
        if not isinstance(self.configs, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.configs.items()
        ):
            raise TypeError(f"topic {self.name!r}: configs must map str to str")


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position in one partition, as ``kafka-consumer-groups --describe`` shows it.

    Attributes:
        committed: the group's committed offset (None: nothing committed).
        end: the partition's end offset (the high watermark). None: the
            partition no longer exists (its topic was deleted, or has fewer
            partitions now) and the group's commit for it is a leftover; its
            lag is None too.
        lag: ``end - committed``. When nothing is committed: 0 if the log is
            empty (its log start is its end: nothing to read, wherever the
            member starts), else None: the lag is not known (the owner reads
            from its ``start_offset``, which the coordinator does not know).
            Negative when the committed offset is past the end: the log was
            truncated below it (an unclean leader election, a topic deleted
            and created again), so the group's next fetch there is out of
            range. Kafka's tool shows it so too.
        member_id: the live member the partition is assigned to (None: no
            member owns it, or the group is rebalancing).
        client_id: that member's client id (None without a member).
        host: the address that member connected from (None without a member).
    """

    committed: int | None
    end: int | None
    lag: int | None
    member_id: str | None = None
    client_id: str | None = None
    host: str | None = None


#: Group states in which the coordinator describes its members' assignments
#: (or there are no members); in the others (``PreparingRebalance``,
#: ``CompletingRebalance``, ``Assigning``, ``Reconciling``) the group is between
#: generations (of a classic group, who owns what is not known then).
_SETTLED = frozenset({"Stable", "Empty", "Dead"})

#: :attr:`GroupDescription.group_protocol` of a group of the consumer group
#: protocol (KIP-848), described by ConsumerGroupDescribe.
CONSUMER_GROUP: Final = "consumer"
#: :attr:`GroupDescription.group_protocol` of a classic group (or of a group
#: the broker does not know), described by DescribeGroups.
CLASSIC_GROUP: Final = "classic"


class GroupLag(dict[TopicPartition, PartitionLag]):
    """What :meth:`~gengroup.admin.Admin.group_lag` returns: a dict of each
    partition's :class:`PartitionLag`, sorted by partition, and the group's state.

    It lists, as ``kafka-consumer-groups --describe`` does, every partition
    the group committed for and every partition assigned to a live member,
    committed or not (with the member), plus the partitions of the topics asked for.

    Attributes:
        state: the group's state when it was described (``Stable``,
            ``Empty``, ``PreparingRebalance`` ...; ``Dead``: the coordinator
            knows no members of it).
    """

    __slots__ = ("state",)

    def __init__(self, rows: Mapping[TopicPartition, PartitionLag], state: str) -> None:
        super().__init__(sorted(rows.items()))
        self.state = state

    @classmethod
    def of(
        cls,
        committed: Mapping[TopicPartition, int],
        ends: Mapping[TopicPartition, int],
        group: GroupDescription,
        gone: Iterable[TopicPartition] = (),
        starts: Mapping[TopicPartition, int] | None = None,
    ) -> GroupLag:
        """The lag of each partition of ``ends`` from the group's committed
        offsets and its description (which member owns which partition);
        the partitions of ``gone`` no longer exist (end and lag None).
        A partition without a commit has lag 0 when its log is empty (its end
        is 0, or its log start in ``starts`` equals its end): there is nothing
        to read, whatever offset a member starts from.

        Raises:
            ProtocolError: a member's assignment is not a consumer-protocol one.
        """
        owners = group.owners
        rows: dict[TopicPartition, PartitionLag] = {}
        found: dict[TopicPartition, int | None] = {tp: None for tp in gone}
        found.update(ends)
        for tp, end in found.items():
            mine = committed.get(tp)
            # not clamped: see PartitionLag.lag
            if end is None:
                lag = None
            elif mine is not None:
                lag = end - mine
            else:
                lag = 0 if end == 0 or (starts or {}).get(tp) == end else None
            owner = owners.get(tp)
            if owner is None:
                rows[tp] = PartitionLag(mine, end, lag)
            else:
                who = (owner.member_id, owner.client_id, owner.client_host)
                rows[tp] = PartitionLag(mine, end, lag, *who)
        return cls(rows, group.state)

    @property
    def rebalancing(self) -> bool:
        """The group is between generations. Which member owns which partition
        is then not known for a classic group (the coordinator describes the
        assignments of a stable group only); a consumer-protocol group (KIP-848)
        names them, but partitions are moving between members."""
        return self.state not in _SETTLED

    @property
    def total(self) -> int:
        """Records the group has still to read where that is known: the sum of
        the lags above 0 (a negative lag is no record to read). A lower bound
        when :attr:`partial`."""
        return sum(p.lag for p in self.values() if p.lag is not None and p.lag > 0)

    @property
    def partial(self) -> bool:
        """:attr:`total` leaves something out: a partition's lag is not known
        (assigned to a member that has not committed yet, its log not empty, of a topic asked
        for that the group never committed for, or no longer existing: a
        commit left for a deleted topic), or the group is rebalancing
        (a classic group's members' partitions are not known then, so some may
        be missing)."""
        return self.rebalancing or any(p.lag is None for p in self.values())


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as listed by ListGroups.

    Attributes:
        group_id: the group id.
        protocol_type: ``"consumer"`` for consumer groups, ``""`` for offset-only groups.
        state: the group state (``Stable``, ``Empty`` ...), ``""`` if the broker did not say.
    """

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a described group.

    A member of a classic group is described by its JoinGroup and SyncGroup
    bytes; a member of a consumer-protocol group (KIP-848) by the partitions
    ConsumerGroupDescribe names (``held``, ``target``) and its epoch.

    Attributes:
        member_id: the member id.
        client_id: the member's client id.
        client_host: the address the member connected from.
        group_instance_id: the static membership id, or None.
        protocol_type: the group's protocol type (tells how to read the bytes).
        raw_metadata: the member's JoinGroup metadata for the chosen protocol
            (empty for a consumer-protocol member).
        raw_assignment: the member's SyncGroup assignment bytes (empty for a
            consumer-protocol member).
        member_epoch: a consumer-protocol member's epoch (None for a classic member).
        held: the partitions a consumer-protocol member holds: assigned to it,
            and those it has still to revoke (None for a classic member, whose
            ``raw_assignment`` says).
        target: the partitions the coordinator means a consumer-protocol
            member to hold once reconciled (None for a classic member).
    """

    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    protocol_type: str
    raw_metadata: bytes
    raw_assignment: bytes
    member_epoch: int | None = None
    held: frozenset[TopicPartition] | None = None
    target: frozenset[TopicPartition] | None = None

    @property
    def assignment(self) -> Assignment | None:
        """The assignment for ``consumer`` groups (a consumer-protocol member's:
        its ``held`` partitions), None for other protocol types.

        Raises:
            ProtocolError: the group claims the ``consumer`` protocol type but
                the bytes are not a consumer-protocol assignment.
        """
        if self.held is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in self.held:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            return Assignment.from_mapping(by_topic)
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        return decode_assignment(self.raw_assignment)

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        """The assigned partitions (a consumer-protocol member's: those it
        holds; empty for non-consumer groups).

        Raises:
            ProtocolError: as :attr:`assignment`.
        """
        if self.held is not None:
            return self.held
        assignment = self.assignment
        if assignment is None:
            return frozenset()
        return frozenset(
            TopicPartition(topic, p) for topic, parts in assignment.partitions for p in parts
        )


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as described by ConsumerGroupDescribe (a group of the consumer
    group protocol, KIP-848) or DescribeGroups (a classic group).

    Attributes:
        group_id: the group id.
        state: a classic group's ``Empty``, ``PreparingRebalance``,
            ``CompletingRebalance``, ``Stable`` or ``Dead`` (Dead: the
            coordinator knows no such group); a consumer-protocol group's
            ``Empty``, ``Assigning``, ``Reconciling`` or ``Stable``.
        protocol_type: e.g. ``"consumer"``.
        protocol: the chosen protocol (for consumers: the assignor name).
        members: the members, in the coordinator's order.
        group_protocol: :data:`CONSUMER_GROUP` (``"consumer"``) for a group of
            the consumer group protocol, :data:`CLASSIC_GROUP` (``"classic"``) otherwise.
        group_epoch: a consumer-protocol group's epoch (None for a classic group).
        assignment_epoch: the epoch of a consumer-protocol group's target
            assignment (None for a classic group).
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    group_protocol: str = CLASSIC_GROUP
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def owners(self) -> dict[TopicPartition, MemberDescription]:
        """The member each partition is assigned to. Empty while a classic
        group is rebalancing (Kafka then describes members without their
        assignments, and an older assignment would not say who owns what now);
        a consumer-protocol group names the partitions each member holds in
        every state.

        Raises:
            ProtocolError: a member's assignment is not a consumer-protocol one.
        """
        if self.state not in _SETTLED and self.group_protocol != CONSUMER_GROUP:
            return {}
        return {tp: m for m in self.members for tp in m.partitions}


def names_of(given: Iterable[str], what: str) -> list[str]:
    """``given`` as a list of distinct names, in order.

    Raises:
        TypeError: ``given`` is one string (iterated, it would be its
            characters: ``delete_topics("orders")`` deleting ``o`` and ``s``)
            or no collection of names, or holds something else than strings.
    """
    if isinstance(given, str | bytes):
        raise TypeError(f"{what} takes a list of names, not one name: [{given!r}]")
    names = _listed(given, what, "a list of names")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} takes names (str), got {name!r}")
    return list(dict.fromkeys(names))


def new_topics(topics: Mapping[str, int] | Iterable[NewTopic]) -> dict[str, NewTopic]:
    """The topics ``create_topics`` was given, by name.

    Raises:
        TypeError: not ``{name: partitions}`` nor a collection of
            :class:`NewTopic` objects (a count that is not an int: see :class:`NewTopic`).
        ValueError: a name given twice.
    """
    if isinstance(topics, Mapping):
        given = [NewTopic(name, count) for name, count in topics.items()]
    elif isinstance(topics, str | bytes):
        raise TypeError(f"create_topics takes {{name: partitions}} or NewTopic objects: {topics!r}")
    else:
        given = _listed(topics, "create_topics", "{name: partitions} or NewTopic objects")
    out: dict[str, NewTopic] = {}
    for topic in given:
        if not isinstance(topic, NewTopic):
            raise TypeError(f"create_topics takes NewTopic objects, got {topic!r}")
        if topic.name in out:
            raise ValueError(f"topic {topic.name!r} is given twice")
        out[topic.name] = topic
    return out
