"""Fetch requests written straight to bytes, sans-IO.

Theory of operation:

A consuming member sends a Fetch to each broker every time data arrives, a
few hundred a second on a trickle of records, and each names the partitions
whose position moved. kio's generic writer walks a request's dataclasses
field by field, and the dataclasses must be built first
(:func:`~gengroup.protocol.fetch.build_fetch_request`): for a request of a few
partitions that is most of the Python work a Fetch costs apart from the
socket. :func:`encode_fetch_request` writes the versions gengroup speaks
(v11; v12, the first flexible one; v13 to v16) with precompiled ``struct``
formats into an :class:`~gengroup.protocol.framing.EncodedRequest`, whose
header :func:`~gengroup.protocol.framing.encode_request` adds.

The bytes are those kio writes for the same request (the tests compare the
two for random requests of every version), so the kio path stays the
reference: v12 adds ``last_fetched_epoch`` to each partition, compact
lengths (unsigned varints of length + 1) and an empty tagged-field section
after each structure; the tagged ``cluster_id`` is never sent. v13 names
each topic (fetched or forgotten) by its id, 16 bytes in place of the name
(``topic_ids``, the caller's, from the Metadata it acted on); v15 drops
``replica_id`` (a follower's state moved to a tagged field a consumer never
sends). A partition costs one ``struct`` pack in every version, a topic one
dictionary look-up more from v13.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Final
from uuid import UUID

from .._types import TopicPartition
from .fetch import IsolationLevelArg, isolation_code
from .framing import EncodedRequest
from .versions import ApiKey

__all__ = ["FLEXIBLE_FROM", "TOPIC_IDS_FROM", "encode_fetch_request"]

#: The first flexible Fetch version.
FLEXIBLE_FROM: Final = 12
#: The first Fetch version naming topics by id.
TOPIC_IDS_FROM: Final = 13
#: The first Fetch version without ``replica_id``.
_NO_REPLICA_ID_FROM: Final = 15
_VERSIONS: Final = frozenset(range(11, 17))
_INT32_MAX: Final = (1 << 31) - 1
_HEAD = struct.Struct(">iiiibii")  # replica_id .. session_epoch
_HEAD_V15 = struct.Struct(">iiibii")  # max_wait .. session_epoch
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_V11 = struct.Struct(">iiqqi")  # partition, epoch, offset, log start, max bytes
_PART_V12 = struct.Struct(">iiqiqib")  # ... last fetched epoch; empty tags


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _count(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_fetch_request(
    version: int,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait: float,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int | Mapping[TopicPartition, int],
    isolation_level: IsolationLevelArg | int,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Iterable[TopicPartition] = (),
    topic_ids: Mapping[str, UUID] | None = None,
    forgotten_ids: Mapping[str, UUID] | None = None,
) -> EncodedRequest:
    """The Fetch request :func:`~gengroup.protocol.fetch.build_fetch_request`
    builds from the same arguments, already encoded.

    ``forgotten_ids`` (v13+): the ids that forgotten topics are named by, where
    they differ from ``topic_ids`` (a session forgets a topic under the id it
    was added with, which a topic created again no longer has).

    Raises:
        ValueError: ``version`` is not one this encoder writes (11 to 16), or
            from v13 a topic of the request has no id in ``topic_ids``.
    """
    if version not in _VERSIONS:
        raise ValueError(f"Fetch v{version} is not written here (v11 to v16 are)")
    flexible = version >= FLEXIBLE_FROM
    gone: Mapping[str, UUID] = {}  # the ids of forgotten topics (v13+)
    if version >= TOPIC_IDS_FROM:
        ids = topic_ids or {}

        def name(topic: str, ids: Mapping[str, UUID] = ids) -> bytes:
            found = ids.get(topic)
            if found is None:
                raise ValueError(f"Fetch v{version} names topics by id: no id for {topic!r}")
            return found.bytes

        gone = {**ids, **(forgotten_ids or {})}
    else:

        def name(topic: str, ids: Mapping[str, UUID] = gone) -> bytes:
            return _string(topic, flexible)

    epochs = leader_epochs or {}
    one_limit = partition_max_bytes if isinstance(partition_max_bytes, int) else None
    by_topic: dict[str, list[bytes]] = {}
    for tp, offset in positions.items():
        limit = one_limit if one_limit is not None else partition_max_bytes[tp]  # type: ignore[index]
        limit = min(limit, _INT32_MAX)
        epoch = epochs.get(tp, -1)
        part = (
            _PART_V12.pack(tp.partition, epoch, offset, -1, -1, limit, 0)
            if flexible
            else _PART_V11.pack(tp.partition, epoch, offset, -1, limit)
        )
        by_topic.setdefault(tp.topic, []).append(part)
    head = (
        round(max_wait * 1000),
        min_bytes,
        min(max_bytes, _INT32_MAX),
        isolation_code(isolation_level),
        session_id,
        session_epoch,
    )
    out = [
        _HEAD_V15.pack(*head) if version >= _NO_REPLICA_ID_FROM else _HEAD.pack(-1, *head),
        _count(len(by_topic), flexible),
    ]
    end = b"\x00" if flexible else b""
    for topic, parts in by_topic.items():
        out.append(name(topic))
        out.append(_count(len(parts), flexible))
        out.extend(parts)
        out.append(end)
    dropped: dict[str, list[int]] = {}
    for tp in forgotten:
        dropped.setdefault(tp.topic, []).append(tp.partition)
    out.append(_count(len(dropped), flexible))
    for topic, partitions in dropped.items():
        out.append(name(topic, gone))
        out.append(_count(len(partitions), flexible))
        out.append(struct.pack(f">{len(partitions)}i", *partitions))
        out.append(end)
    out.append(_string("", flexible))  # rack_id
    out.append(end)
    return EncodedRequest(int(ApiKey.FETCH), int(version), flexible, "FetchRequest", b"".join(out))
