"""Small value types shared by every layer."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from ._errors import ConfigError

__all__ = [
    "GenerationIdentity",
    "IdentityFields",
    "IdentityNames",
    "TopicPartition",
    "checked_offset",
    "parse_address",
    "show_partitions",
    "topic_name_error",
]

#: The largest offset Kafka stores (a signed 64-bit integer).
MAX_OFFSET = 2**63 - 1

_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_TOPIC_NAME = 249


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or ``None`` if it is.

    Kafka's rule: 1 to 249 characters from ``[a-zA-Z0-9._-]``, and not ``.``
    or ``..``.
    """
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > _MAX_TOPIC_NAME:
        return f"topic name is longer than {_MAX_TOPIC_NAME} characters"
    if not set(name) <= _LEGAL_TOPIC_CHARS:
        return f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    return None


class TopicPartition(NamedTuple):
    """A topic name and a partition index."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


def show_partitions(tps: Iterable[TopicPartition]) -> str:
    """Partitions for a log line, per topic with runs folded: ``t[0-3,7], u[1]`` (``none``).

    A member's assignment of hundreds of partitions stays one short line.
    """
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    shown = []
    for topic in sorted(by_topic):
        runs: list[list[int]] = []
        for p in sorted(set(by_topic[topic])):
            if runs and p == runs[-1][1] + 1:
                runs[-1][1] = p
            else:
                runs.append([p, p])
        spans = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
        shown.append(f"{topic}[{spans}]")
    return ", ".join(shown) or "none"


def parse_address(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[::1]:9092``) into its parts; spaces around it are dropped.

    Raises:
        ConfigError: not a string of a host and a port from 1 to 65535.
    """
    if not isinstance(addr, str):
        raise ConfigError(f"broker address {addr!r} is not a host:port string")
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"broker address {addr!r} is not host:port")
    if "," in host or any(c.isspace() for c in host):
        raise ConfigError(
            f"broker address {addr!r} is not one host:port (give a list of addresses, "
            "or one string of them separated by commas)"
        )
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"broker address {addr!r}: the port must be from 1 to 65535")
    return host.strip("[]"), int(port)


def checked_offset(tp: TopicPartition, offset: object) -> int:
    """``offset`` as an offset of ``tp`` to mark or commit, checked where it is given.

    An integer (or an object with ``__index__``, such as numpy's integers)
    from 0 to 2**63 - 1; not a bool. Checked at the call, so that a bad one
    never reaches the commit of the other partitions' marks.

    Raises:
        TypeError: ``offset`` is not an integer.
        ValueError: ``offset`` is negative or above 2**63 - 1.
    """
    if isinstance(offset, bool):
        raise TypeError(f"offset of {tp} must be an integer, not bool ({offset!r})")
    try:
        value = operator.index(offset)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"offset of {tp} must be an integer, not {type(offset).__name__} ({offset!r})"
        ) from None
    if not 0 <= value <= MAX_OFFSET:
        raise ValueError(f"offset of {tp} must be from 0 to 2**63 - 1, not {value}")
    return value


class IdentityFields(TypedDict):
    """A :class:`GenerationIdentity` as the keyword arguments of a group request."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class GenerationIdentity:
    """Who a member is in one generation: what SyncGroup, Heartbeat and
    OffsetCommit carry.

    Attributes:
        group_id: the consumer group.
        generation_id: the generation.
        member_id: the member's id in the generation.
        group_instance_id: the static member id (KIP-345), or None.
        sequence: the member's own count of the generations it formed (1, 2,
            3, ...; 0 if unknown). Generation ids repeat (a KIP-848 member
            may form two generations in one member epoch, and a group
            converted between the classic and the consumer protocol may
            reuse an id), so a generation is told apart by its sequence,
            never by its id. Not sent to the broker.
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    sequence: int = 0

    @property
    def label(self) -> str:
        """The generation id and sequence, for logs: ``"3 (#2)"``."""
        return f"{self.generation_id} (#{self.sequence})"

    def fields(self) -> IdentityFields:
        """The four fields as keyword arguments (``**identity.fields()``)."""
        return IdentityFields(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )


class IdentityNames:
    """The id, sequence and label of a generation, read from its ``identity``.

    Shared by :class:`~gengroup.Generation` and the records of
    :attr:`ConsumerGroup.history <gengroup.consumer.group.ConsumerGroup.history>`.
    """

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def identity(self) -> GenerationIdentity: ...

    @property
    def id(self) -> int:
        """The generation id every commit carries (the member epoch under the consumer protocol)."""
        return self.identity.generation_id

    @property
    def sequence(self) -> int:
        """This member's count of generations up to this one (1, 2, 3, ...).

        Generation ids can repeat (two generations of one KIP-848 member
        epoch; a group converted between the classic and the consumer
        protocol); the sequence never does, for one member. Compare
        generations by :attr:`identity` or by object, never by :attr:`id`.
        """
        return self.identity.sequence

    @property
    def label(self) -> str:
        """The id and the sequence, as logs and errors name the generation: ``"3 (#2)"``."""
        return self.identity.label
