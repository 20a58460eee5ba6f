"""Committed offsets: the rules of OffsetCommit and OffsetFetch.

This is the part of Kafka's ``OffsetMetadataManager`` the classic protocol
uses, with ``ClassicGroup.validateOffsetCommit`` (non-transactional commits
only). Offsets are kept per group, topic and partition, in first-commit order;
they never expire and go away only with their group (DeleteGroups).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ... import _java
from ..._errors import ProtocolError
from ...protocol.consumer_protocol import PROTOCOL_TYPE, decode_subscription
from .group import ClassicGroup, GroupState
from .messages import (
    NO_OFFSET,
    OffsetCommitInput,
    OffsetCommitOutput,
    OffsetCommitPartition,
    OffsetCommitPartitionOutput,
    OffsetCommitTopicOutput,
    OffsetDeleteInput,
    OffsetDeleteOutput,
    OffsetFetchPartitionOutput,
    OffsetFetchTopic,
    OffsetFetchTopicOutput,
)


@dataclass(frozen=True)
class StoredOffset:
    """A committed offset as stored."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int

    def fetched(self, partition_index: int) -> OffsetFetchPartitionOutput:
        """The offset as OffsetFetch reports it for ``partition_index``."""
        return OffsetFetchPartitionOutput(
            partition_index, self.offset, self.leader_epoch, self.metadata
        )


def validate_offset_commit(group: ClassicGroup, request: OffsetCommitInput) -> ErrorCode | None:
    """Kafka's ``ClassicGroup.validateOffsetCommit`` for a non-transactional commit.

    Returns:
        The error for every partition of the request, or None to store them.
    """
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if request.generation_id < 0 and group.state is GroupState.EMPTY:
        return None
    if (
        request.generation_id >= 0
        or request.member_id != ""
        or request.group_instance_id is not None
    ):
        error = group.validate_member_generation(
            request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return error
    elif group.state is not GroupState.EMPTY:
        return ErrorCode.unknown_member_id
    if group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    return None


def _commit_output(
    request: OffsetCommitInput, outcome: Callable[[str, OffsetCommitPartition], ErrorCode]
) -> OffsetCommitOutput:
    """The response to ``request``, each partition's error given by ``outcome``."""
    return OffsetCommitOutput(
        tuple(
            OffsetCommitTopicOutput(
                topic.name,
                tuple(
                    OffsetCommitPartitionOutput(
                        partition.partition_index, outcome(topic.name, partition)
                    )
                    for partition in topic.partitions
                ),
            )
            for topic in request.topics
        )
    )


def rejected_commit(request: OffsetCommitInput, error: ErrorCode) -> OffsetCommitOutput:
    """The response to a commit refused as a whole: ``error`` for every partition."""
    return _commit_output(request, lambda _topic, _partition: error)


class OffsetStore:
    """The committed offsets of every group.

    Args:
        metadata_max_bytes: ``offset.metadata.max.bytes``; longer commit
            metadata is refused with OFFSET_METADATA_TOO_LARGE. Measured, as in
            Java, in UTF-16 code units.
    """

    def __init__(self, metadata_max_bytes: int) -> None:
        self._metadata_max_bytes = metadata_max_bytes
        self._offsets: dict[str, dict[str, dict[int, StoredOffset]]] = {}

    def commit(self, group_id: str, request: OffsetCommitInput, now_ms: int) -> OffsetCommitOutput:
        """Store the offsets of a validated commit.

        Returns:
            The response: NONE per stored partition, OFFSET_METADATA_TOO_LARGE
            for a partition whose metadata is too long (it is not stored).
        """
        group_offsets = self._offsets.setdefault(group_id, {})

        def store(topic: str, partition: OffsetCommitPartition) -> ErrorCode:
            metadata = partition.committed_metadata
            if metadata is not None and _java.string_length(metadata) > self._metadata_max_bytes:
                return ErrorCode.offset_metadata_too_large
            group_offsets.setdefault(topic, {})[partition.partition_index] = StoredOffset(
                offset=partition.committed_offset,
                leader_epoch=partition.committed_leader_epoch,
                metadata=metadata if metadata is not None else "",
                commit_timestamp_ms=now_ms,
            )
            return ErrorCode.none

        return _commit_output(request, store)

    def forget_topic(self, topic: str) -> None:
        """Drop every group's offsets of ``topic`` (deleted: Kafka deletes them with it)."""
        for group_offsets in self._offsets.values():
            group_offsets.pop(topic, None)

    def fetch(
        self, group_id: str | None, topics: Sequence[OffsetFetchTopic] | None
    ) -> tuple[OffsetFetchTopicOutput, ...]:
        """The committed offsets of a group.

        Args:
            group_id: The group, or None for a group that does not exist (it
                has no offsets).
            topics: The partitions wanted (those without a committed offset
                report -1), or None for every committed offset.
        """
        stored = self._offsets.get(group_id, {}) if group_id is not None else {}
        if topics is None:
            return tuple(
                OffsetFetchTopicOutput(
                    topic, tuple(offset.fetched(index) for index, offset in partitions.items())
                )
                for topic, partitions in stored.items()
            )
        out: list[OffsetFetchTopicOutput] = []
        for topic in topics:
            topic_offsets = stored.get(topic.name, {})
            partitions: list[OffsetFetchPartitionOutput] = []
            for index in topic.partition_indexes:
                offset = topic_offsets.get(index)
                if offset is None:
                    partitions.append(OffsetFetchPartitionOutput(index, NO_OFFSET))
                else:
                    partitions.append(offset.fetched(index))
            out.append(OffsetFetchTopicOutput(topic.name, tuple(partitions)))
        return tuple(out)

    def delete(self, group_id: str) -> None:
        """Forget every offset of the group."""
        self._offsets.pop(group_id, None)

    def delete_partitions(self, group_id: str, topic: str, partitions: Sequence[int]) -> None:
        """Forget the group's committed offsets of these partitions (OffsetDelete)."""
        stored = self._offsets.get(group_id, {}).get(topic)
        if stored is None:
            return
        for index in partitions:
            stored.pop(index, None)
        if not stored:
            del self._offsets[group_id][topic]


def delete_offsets(
    group: ClassicGroup | None, store: OffsetStore, request: OffsetDeleteInput
) -> OffsetDeleteOutput:
    """OffsetDelete: a live consumer group keeps the offsets of topics it subscribes to."""
    if group is None or group.state is GroupState.DEAD:
        return OffsetDeleteOutput(ErrorCode.group_id_not_found, ())
    subscribed = _subscribed_topics(group)
    out = []
    for topic, partitions in request.topics:
        if topic in subscribed:
            code = ErrorCode.group_subscribed_to_topic
        else:
            code = ErrorCode.none
            store.delete_partitions(request.group_id, topic, partitions)
        out.append((topic, tuple((p, code) for p in partitions)))
    return OffsetDeleteOutput(ErrorCode.none, tuple(out))


def _subscribed_topics(group: ClassicGroup) -> set[str]:
    """The topics a non-empty consumer group's members subscribe to (as Kafka reads them)."""
    if group.state is GroupState.EMPTY or group.protocol_type != PROTOCOL_TYPE:
        return set()
    topics: set[str] = set()
    for member in group.members.values():
        try:
            topics.update(decode_subscription(member.metadata(group.protocol_name)).topics)
        except ProtocolError:
            continue  # an unreadable subscription protects nothing, as in Kafka
    return topics
