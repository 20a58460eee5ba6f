"""The embedded metadata of the ``consumer`` protocol type: subscriptions and assignments.

Theory of operation:

A consumer group's JoinGroup and SyncGroup requests carry opaque byte strings
whose layout is defined by the group's *protocol type*. For the ``consumer``
protocol type every member puts a :class:`Subscription` in its JoinGroup
protocol metadata (one copy per balancer it offers), and the leader returns
one :class:`Assignment` per member in SyncGroup. Both are Kafka's
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` schemas: a
big-endian, non-flexible encoding prefixed by an ``int16`` version.

Subscription layout, by version::

    int16   version
    v0+     topics            int32 count, then int16-length UTF-8 strings
    v0+     user_data         int32 length (negative = null), then bytes
    v1+     owned_partitions  int32 count of (topic string, int32 count, int32 partitions)
    v2+     generation_id     int32 (-1 = unknown)
    v3+     rack              int16 length (negative = null), then UTF-8

Assignment layout (identical for versions 0-3)::

    int16   version
    assigned_partitions  int32 count of (topic string, int32 count, int32 partitions)
    user_data            int32 length (negative = null), then bytes

Kafka's rule for evolving these schemas is "append only": a newer version may
add fields at the end but never remove or reorder existing ones. So, like the
Java client, the decoders read any version >= 0 by parsing the fields they know
for ``min(version, 3)`` and ignoring whatever follows (trailing bytes are
always tolerated). The coordinator sends an empty byte string to members the
leader left out of its assignment, so ``decode_assignment(b"")`` is an empty
assignment rather than an error. Like Java's generated readers, any negative
length on a nullable field means null. Every parse failure (truncation,
negative version, negative array count, null where a value is required,
invalid UTF-8) raises :class:`~gengroup._errors.ProtocolError` and nothing
else.

Encoding writes exactly the requested version (0-3). Fields that version
cannot carry are dropped silently, as Java does for these "ignorable" fields:
owned partitions below v1, generation id below v2, rack below v3. The encoder
preserves the order it is given; the Java client sorts topics and owned
partitions before encoding, so callers wanting byte-identical output should do
the same.

This module is sans-IO: it only turns values into bytes and back.

Interop notes: the Java client (3.x and later) and librdkafka both send
version 3 subscriptions, and librdkafka fills in owned partitions.
segmentio/kafka-go labels its subscriptions version 1 but writes only the
version-0 fields; the decoder reads a version >= 1 that ends right after the
user data as version 0 (as franz-go does). A kafka-go leader reads only the
version-0 fields and rejects any bytes after them, so a member sharing a group
with kafka-go must send version 0 (``subscription_version=0``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gengroup._errors import ProtocolError

__all__ = [
    "LATEST_VERSION",
    "PROTOCOL_TYPE",
    "Assignment",
    "Subscription",
    "TopicPartitions",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

PROTOCOL_TYPE: Final = "consumer"
"""The JoinGroup ``protocol_type`` whose metadata this module encodes."""

LATEST_VERSION: Final = 3
"""The highest subscription/assignment version this module knows how to write."""

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]
"""Partitions grouped by topic: ``(("topic", (0, 1)), ("other", (3,)))``."""

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I16_MIN: Final = -(2**15)
_I16_MAX: Final = 2**15 - 1
_I32_MIN: Final = -(2**31)
_I32_MAX: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's subscription, sent as JoinGroup protocol metadata.

    Attributes:
        topics: the topics the member wants to consume.
        user_data: opaque bytes for the balancer (``None`` is distinct from ``b""``).
        owned_partitions: the partitions the member owned in its previous
            generation, grouped by topic (v1+; used by cooperative/sticky balancers).
        generation_id: the generation in which ``owned_partitions`` were owned,
            -1 when unknown (v2+).
        rack: the member's ``client.rack``, or ``None`` (v3+). Java treats an
            empty rack like ``None``.
        version: the version this value was decoded from (informational; the
            encoder takes its version as an argument).
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack: str | None = None
    version: int = LATEST_VERSION


@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions the leader assigned to one member, sent in SyncGroup.

    Attributes:
        partitions: the assigned partitions, grouped by topic.
        user_data: opaque bytes from the balancer, or ``None``.
        version: the version this value was decoded from (0 for the empty byte
            string; informational, the encoder takes its version as an argument).
    """

    partitions: TopicPartitions = ()
    user_data: bytes | None = None
    version: int = LATEST_VERSION

    @classmethod
    def from_mapping(
        cls, partitions: Mapping[str, Iterable[int]], user_data: bytes | None = None
    ) -> Assignment:
        """Build an assignment from a ``topic -> partitions`` mapping.

        Topics are ordered by name and partitions numerically; topics with no
        partitions are left out.

        Args:
            partitions: the partitions per topic, e.g. one member's entry of a
                balancer's result.
            user_data: optional balancer user data.

        Returns:
            The assignment.
        """
        grouped = tuple(
            (topic, tuple(sorted(parts)))
            for topic, parts in sorted((t, list(p)) for t, p in partitions.items())
            if parts
        )
        return cls(partitions=grouped, user_data=user_data)

    def as_mapping(self) -> dict[str, list[int]]:
        """Return the assigned partitions as ``topic -> sorted partitions``.

        A topic listed more than once has its partitions merged; duplicates are
        removed.
        """
        merged: dict[str, set[int]] = {}
        for topic, parts in self.partitions:
            merged.setdefault(topic, set()).update(parts)
        return {topic: sorted(parts) for topic, parts in merged.items()}


# --------------------------------------------------------------------------- encoding


def _check_version(version: int) -> None:
    if not 0 <= version <= LATEST_VERSION:
        raise ValueError(f"consumer protocol version must be 0..{LATEST_VERSION}, got {version}")


def _pack_i32(value: int, what: str) -> bytes:
    if not _I32_MIN <= value <= _I32_MAX:
        raise ValueError(f"{what} {value} does not fit in an int32")
    return _I32.pack(value)


def _pack_string(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > _I16_MAX:
        raise ValueError(f"{what} is {len(raw)} bytes long, at most {_I16_MAX} fit")
    return _I16.pack(len(raw)) + raw


def _pack_nullable_string(value: str | None, what: str) -> bytes:
    return _I16.pack(-1) if value is None else _pack_string(value, what)


def _pack_nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I32.pack(-1)
    if len(value) > _I32_MAX:
        raise ValueError("user_data is too long")
    return _I32.pack(len(value)) + bytes(value)


def _pack_topic_partitions(groups: TopicPartitions, what: str) -> bytes:
    out = [_pack_i32(len(groups), what)]
    for topic, parts in groups:
        out.append(_pack_string(topic, "topic name"))
        out.append(_pack_i32(len(parts), what))
        out.extend(_pack_i32(p, "partition") for p in parts)
    return b"".join(out)


def encode_subscription(sub: Subscription, version: int = LATEST_VERSION) -> bytes:
    """Encode a subscription for JoinGroup protocol metadata.

    Args:
        sub: the subscription. Its ``version`` attribute is ignored.
        version: the version to write, 0 to 3. Fields the version cannot carry
            are dropped, as the Java client does.

    Returns:
        The version-prefixed encoding.

    Raises:
        ValueError: ``version`` is out of range, or a value does not fit its
            wire type (a string over 32767 UTF-8 bytes, an integer outside int32).
    """
    _check_version(version)
    out = [_I16.pack(version), _pack_i32(len(sub.topics), "topic count")]
    out.extend(_pack_string(topic, "topic name") for topic in sub.topics)
    out.append(_pack_nullable_bytes(sub.user_data))
    if version >= 1:
        out.append(_pack_topic_partitions(sub.owned_partitions, "owned partitions"))
    if version >= 2:
        out.append(_pack_i32(sub.generation_id, "generation id"))
    if version >= 3:
        out.append(_pack_nullable_string(sub.rack, "rack"))
    return b"".join(out)


def encode_assignment(assignment: Assignment, version: int = LATEST_VERSION) -> bytes:
    """Encode an assignment for a SyncGroup request.

    Args:
        assignment: the assignment. Its ``version`` attribute is ignored.
        version: the version to write, 0 to 3 (all share one layout).

    Returns:
        The version-prefixed encoding.

    Raises:
        ValueError: ``version`` is out of range, or a value does not fit its
            wire type.
    """
    _check_version(version)
    return b"".join(
        (
            _I16.pack(version),
            _pack_topic_partitions(assignment.partitions, "assigned partitions"),
            _pack_nullable_bytes(assignment.user_data),
        )
    )


# --------------------------------------------------------------------------- decoding


class _Reader:
    """A bounds-checked big-endian cursor over a byte string."""

    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _fail(self, reason: str) -> ProtocolError:
        return ProtocolError(
            f"malformed consumer protocol {self._what}: {reason} at byte {self._pos}"
        )

    def _take(self, n: int, field: str) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise self._fail(f"truncated {field}")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def i16(self, field: str) -> int:
        value: int = _I16.unpack(self._take(2, field))[0]
        return value

    def i32(self, field: str) -> int:
        value: int = _I32.unpack(self._take(4, field))[0]
        return value

    def count(self, field: str, min_item_size: int) -> int:
        n = self.i32(field)
        if n < 0:
            raise self._fail(f"null {field} array")
        if n * min_item_size > len(self._data) - self._pos:
            raise self._fail(f"truncated {field} array ({n} items)")
        return n

    def string(self, field: str) -> str:
        s = self.nullable_string(field)
        if s is None:
            raise self._fail(f"null {field}")
        return s

    def nullable_string(self, field: str) -> str | None:
        n = self.i16(field)
        if n < 0:
            return None
        raw = self._take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"invalid UTF-8 in {field}") from None

    def nullable_bytes(self, field: str) -> bytes | None:
        n = self.i32(field)
        if n < 0:
            return None
        return self._take(n, field)

    def int32_array(self, field: str) -> tuple[int, ...]:
        n = self.count(field, 4)
        raw = self._take(4 * n, field)
        return struct.unpack(f">{n}i", raw)

    def topic_partitions(self, field: str) -> TopicPartitions:
        n = self.count(field, 6)  # int16 topic length + int32 partition count
        return tuple((self.string("topic name"), self.int32_array("partitions")) for _ in range(n))

    def at_end(self) -> bool:
        return self._pos == len(self._data)

    def version(self) -> int:
        v = self.i16("version")
        if v < 0:
            raise self._fail(f"unsupported version {v}")
        return v


def decode_subscription(data: bytes) -> Subscription:
    """Decode a member's JoinGroup protocol metadata.

    Any version >= 0 is accepted: fields of versions above 3 and trailing bytes
    are ignored; fields the version lacks get their defaults. A subscription of
    version 1 or later that ends right after its user data (what
    segmentio/kafka-go sends, labelled version 1) is read as version 0.

    Args:
        data: the metadata bytes.

    Returns:
        The subscription, with ``version`` set to the version on the wire.

    Raises:
        ProtocolError: the bytes are not a valid subscription.
    """
    r = _Reader(bytes(data), "subscription")
    version = r.version()
    topics = tuple(r.string("topic name") for _ in range(r.count("topics", 2)))
    user_data = r.nullable_bytes("user data")
    if version >= 1 and r.at_end():
        # segmentio/kafka-go labels its subscription version 1 but writes only
        # the version-0 fields: read such a truncated v1 (or later) as v0.
        return Subscription(topics=topics, user_data=user_data, version=0)
    added: dict[str, Any] = {}  # the fields of later versions; absent ones keep their defaults
    if version >= 1:
        added["owned_partitions"] = r.topic_partitions("owned partitions")
    if version >= 2:
        added["generation_id"] = r.i32("generation id")
    if version >= 3:
        added["rack"] = r.nullable_string("rack")
    return Subscription(topics=topics, user_data=user_data, version=version, **added)


def decode_assignment(data: bytes) -> Assignment:
    """Decode a member's assignment from a SyncGroup response.

    Any version >= 0 is accepted and trailing bytes are ignored.

    Args:
        data: the assignment bytes; empty ones (what the coordinator sends a
            member the leader gave nothing) decode to an empty assignment of
            ``version`` 0.

    Returns:
        The assignment, with ``version`` set to the version on the wire.

    Raises:
        ProtocolError: the bytes are not a valid assignment.
    """
    if not data:
        return Assignment(version=0)
    r = _Reader(bytes(data), "assignment")
    version = r.version()
    partitions = r.topic_partitions("assigned partitions")
    user_data = r.nullable_bytes("user data")
    return Assignment(partitions=partitions, user_data=user_data, version=version)
