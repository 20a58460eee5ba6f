"""What :class:`~gengroup.admin.Admin` takes and returns: topics to create,
group listings and descriptions, lag (plain data; the checks of its arguments)."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ._types import TopicPartition
from .protocol.consumer_protocol import PROTOCOL_TYPE, Assignment, decode_assignment

__all__ = [
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "PartitionLag",
    "names_of",
    "new_topics",
]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.

    Attributes:
        name: the topic name.
        partitions: the number of partitions.
        replication_factor: copies of each partition.
        configs: topic configuration overrides, e.g. ``{"cleanup.policy": "compact"}``.
    """

    name: str
    partitions: int
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Types only: the values (a name's characters, a count below 1 but
        # -1, the broker's default) are the broker's to judge, in its words.
        if not isinstance(self.name, str):
            raise TypeError(f"a topic name is a str, got {self.name!r}")
        for what in ("partitions", "replication_factor"):
            value = getattr(self, what)
            if isinstance(value, bool) or not hasattr(type(value), "__index__"):
                raise TypeError(f"topic {self.name!r}: {what} must be an int, got {value!r}")
            object.__setattr__(self, what, operator.index(value))  # numpy's ints too
        if not isinstance(self.configs, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.configs.items()
        ):
            raise TypeError(f"topic {self.name!r}: configs must map str to str")


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position in one partition.

    Attributes:
        committed: the group's committed offset (None: nothing committed).
        end: the partition's end offset (the high watermark).
        lag: records between the two (None when nothing is committed).
    """

    committed: int | None
    end: int
    lag: int | None


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

    Attributes:
        member_id: the coordinator-assigned member id.
        client_id: the member's client id.
        client_host: the address the member connected from.
        group_instance_id: the static membership id, or None.
        protocol_type: the group's protocol type (tells how to read the bytes).
        raw_metadata: the member's JoinGroup metadata for the chosen protocol.
        raw_assignment: the member's SyncGroup assignment bytes.
    """

    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    protocol_type: str
    raw_metadata: bytes
    raw_assignment: bytes

    @property
    def assignment(self) -> Assignment | None:
        """The decoded assignment for ``consumer`` groups, None for other protocol types.

        Raises:
            ProtocolError: the group claims the ``consumer`` protocol type but
                the bytes are not a consumer-protocol assignment.
        """
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        return decode_assignment(self.raw_assignment)

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        """The assigned partitions (empty for non-consumer groups).

        Raises:
            ProtocolError: as :attr:`assignment`.
        """
        assignment = self.assignment
        if assignment is None:
            return frozenset()
        return frozenset(
            TopicPartition(topic, p) for topic, parts in assignment.partitions for p in parts
        )


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as described by DescribeGroups.

    Attributes:
        group_id: the group id.
        state: ``Empty``, ``PreparingRebalance``, ``CompletingRebalance``,
            ``Stable`` or ``Dead``.
        protocol_type: e.g. ``"consumer"``.
        protocol: the chosen protocol (for consumers: the assignor name).
        members: the members, in the coordinator's order.
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


def names_of(given: Iterable[str], what: str) -> list[str]:
    """``given`` as a list of distinct names, in order.

    Raises:
        TypeError: ``given`` is one string (iterated, it would be its
            characters: ``delete_topics("orders")`` deleting ``o`` and ``s``),
            or holds something else than strings.
    """
    if isinstance(given, str | bytes):
        raise TypeError(f"{what} takes a list of names, not one name: [{given!r}]")
    names = list(given)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} takes names (str), got {name!r}")
    return list(dict.fromkeys(names))


def new_topics(topics: Mapping[str, int] | Iterable[NewTopic]) -> dict[str, NewTopic]:
    """The topics ``create_topics`` was given, by name.

    Raises:
        TypeError: not ``{name: partitions}`` nor :class:`NewTopic` objects
            (a count that is not an int: see :class:`NewTopic`).
        ValueError: a name given twice.
    """
    if isinstance(topics, Mapping):
        given = [NewTopic(name, count) for name, count in topics.items()]
    elif isinstance(topics, str | bytes):
        raise TypeError(f"create_topics takes {{name: partitions}} or NewTopic objects: {topics!r}")
    else:
        given = list(topics)
    out: dict[str, NewTopic] = {}
    for topic in given:
        if not isinstance(topic, NewTopic):
            raise TypeError(f"create_topics takes NewTopic objects, got {topic!r}")
        if topic.name in out:
            raise ValueError(f"topic {topic.name!r} is given twice")
        out[topic.name] = topic
    return out
