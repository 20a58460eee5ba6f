"""What a generation's commits are made of, and what sends them.

The types :class:`~gengroup.consumer.generation.Generation` commits with
(re-exported by :mod:`gengroup.consumer.generation`): the offsets and their
metadata, the codes OffsetCommit answers, and the :class:`Committer` that sends
a commit under a generation's identity (the group's coordinator client).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeAlias
from uuid import UUID

from .._types import GenerationIdentity, TopicPartition

__all__ = ["CommitCodes", "Committer", "OffsetMetadata", "Offsets", "TopicIds"]

#: The offsets of a commit: the next offset to read, per partition.
Offsets: TypeAlias = Mapping[TopicPartition, int]
#: The metadata string stored with each committed offset.
OffsetMetadata: TypeAlias = Mapping[TopicPartition, str]
#: The id of the topic each partition's offset was read from (OffsetCommit v10).
TopicIds: TypeAlias = Mapping[TopicPartition, UUID]
#: What OffsetCommit answered: each partition's error code (0 = stored).
CommitCodes: TypeAlias = dict[TopicPartition, int]


class Committer(Protocol):
    """Sends OffsetCommit for a generation (the group's coordinator client)."""

    async def commit_offsets(
        self,
        identity: GenerationIdentity,
        offsets: Offsets,
        metadata: OffsetMetadata | None = None,
        topic_ids: TopicIds | None = None,
    ) -> CommitCodes:
        """Commit ``offsets`` under ``identity`` (their topics named by ``topic_ids``
        where the coordinator takes ids); the error code of each partition (0 = stored)."""
        ...
