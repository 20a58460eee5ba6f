"""The cached cluster metadata: brokers, topics, partition leaders, and leader hints.

Theory of operation:

:class:`~gengroup.io.cluster.Cluster` caches what the last Metadata answers
said: the brokers by node id and, per topic, its id and each partition's
leader and leader epoch. Two rules keep that cache from going backwards:

* A partition's leader never goes back to an older leader epoch while the
  topic is the same one (the same topic id): a broker that has not heard of a
  leadership change yet still answers Metadata with the old leader, and taking
  that would send the next request back to the broker that just refused it
  (the Java client keeps the newer epoch too, KIP-320). A topic deleted and
  created again has a new id, and its epochs start over; without topic ids
  (a broker that does not send them) every answer is taken as it is.
* A leader hint (KIP-951) is taken only when newer than the cache. A broker
  refusing a Produce with NOT_LEADER_OR_FOLLOWER (Produce v10+), or a Fetch
  with it or FENCED_LEADER_EPOCH (Fetch v16), says who leads the partition
  now, at which epoch, and how to reach that broker; :func:`apply_leader_hint`
  puts it in the cache, so that the retry goes to the new leader at once
  instead of after a Metadata round trip. A Produce hint names the topic
  only (Produce carries no topic id), and a Fetch one is taken the same
  way, by name: one from a broker
  that has not yet heard the topic was deleted and created again names the
  old topic's leader and epoch. So a hinted epoch binds nothing: the next
  Metadata answer replaces it whatever its epoch (``hinted``), and only an
  epoch a Metadata answer gave is kept against an older one.

Plain state, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from .._types import TopicPartition

__all__ = ["BrokerInfo", "PartitionInfo", "TopicInfo", "apply_leader_hint", "keep_newer"]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker from the metadata."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's leadership as last seen in metadata."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as last seen in metadata (what :meth:`Admin.metadata
    <gengroup.admin.Admin.metadata>` returns).

    Attributes:
        name: the topic name.
        topic_id: the topic's id (None if the broker did not say).
        partitions: each partition's :class:`PartitionInfo` (leader, replicas), by index.
        error_code: 0, or the topic's error (3: UNKNOWN_TOPIC_OR_PARTITION).
        is_internal: an internal topic (``__consumer_offsets`` ...).
    """

    name: str
    topic_id: UUID | None
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error_code: int = 0
    is_internal: bool = False


def keep_newer(
    cached: TopicInfo | None, answered: TopicInfo, hinted: Collection[int] = ()
) -> TopicInfo:
    """``answered``, but with each partition whose cached leader epoch is newer kept
    as cached (same topic id only; not the ``hinted`` partitions, whose cached
    epoch a leader hint gave)."""
    if cached is None or answered.topic_id is None or cached.topic_id != answered.topic_id:
        return answered

    def newer(i: int, p: PartitionInfo) -> PartitionInfo | None:
        old = cached.partitions.get(i)
        return old if old is not None and old.leader_epoch > p.leader_epoch else None

    kept = {
        i: old for i, p in answered.partitions.items() if i not in hinted and (old := newer(i, p))
    }
    if not kept:
        return answered
    return replace(answered, partitions={**answered.partitions, **kept})


def apply_leader_hint(
    topics: dict[str, TopicInfo],
    brokers: dict[int, BrokerInfo],
    hinted: dict[str, set[int]],
    tp: TopicPartition,
    hint: Any,
    endpoints: Iterable[Any],
) -> bool:
    """Put a broker's leader hint for ``tp`` in the cache if it is newer than what
    the cache holds.

    Args:
        topics: the cache's topics (the partition's topic replaced by one with the hint).
        brokers: the cache's brokers (the hinted leader added if unknown, or
            its address updated from ``endpoints``).
        hinted: by topic, the partitions whose cached epoch a hint gave (``tp``
            added), which the next Metadata answer replaces (:func:`keep_newer`).
        tp: the partition.
        hint: the answer's ``current_leader`` (``leader_id``, ``leader_epoch``;
            -1 when the broker does not know).
        endpoints: the answer's ``node_endpoints`` (``node_id``, ``host``,
            ``port``, ``rack``).

    Returns:
        Whether the hint changed the partition's leader or epoch: the caller
        may retry at once.
    """
    leader, epoch = int(hint.leader_id), int(hint.leader_epoch)
    topic = topics.get(tp.topic)
    part = None if topic is None else topic.partitions.get(tp.partition)
    if topic is None or part is None or leader < 0 or epoch <= part.leader_epoch:
        return False
    for e in endpoints:
        if int(e.node_id) == leader:
            brokers[leader] = BrokerInfo(leader, e.host, int(e.port), e.rack)
    if leader not in brokers:
        return False  # no address to send the retry to: the metadata's refresh says
    taken = replace(part, leader=leader, leader_epoch=epoch, error_code=0)
    topics[tp.topic] = replace(topic, partitions={**topic.partitions, tp.partition: taken})
    hinted.setdefault(tp.topic, set()).add(tp.partition)
    return True
