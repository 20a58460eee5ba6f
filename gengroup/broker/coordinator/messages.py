"""The coordinator's request/response model: version-independent dataclasses.

The server translates each wire request into one of the ``*Input`` classes
(the :data:`Request` union), submits it to
:meth:`~gengroup.broker.coordinator.GroupCoordinator.handle`, and receives
:class:`Reply` objects pairing the caller's token with one of the ``*Output``
classes (the :data:`Response` union). See the package documentation for what
the server must do around the coordinator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, Generic, TypeAlias, TypeVar

from kio.schema.errors import ErrorCode

from .consumer_messages import (
    ConsumerGroupDescribeInput,
    ConsumerGroupDescribeOutput,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatOutput,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

NO_OFFSET: Final = -1
"""Committed offset reported for a partition without a committed offset."""

NO_LEADER_EPOCH: Final = -1
"""Leader epoch reported when none was committed."""

CLASSIC_GROUP_TYPE: Final = "classic"
"""The group type reported by ListGroups v5+."""

D = TypeVar("D", bound="DataclassInstance")
G = TypeVar("G")


def copy_fields(cls: type[D], source: object, /, **values: Any) -> D:
    """A ``cls`` whose fields are the same-named attributes of ``source``.

    Members, requests and their descriptions name what they share alike, so
    one is made from another by copying those fields. ``values`` set the
    fields that are computed or renamed on the way; a field neither in
    ``values`` nor on ``source`` keeps its default.
    """
    copied = {
        f.name: getattr(source, f.name)
        for f in fields(cls)
        if f.init and f.name not in values and hasattr(source, f.name)
    }
    return cls(**copied, **values)


@dataclass(frozen=True)
class JoinGroupInput:
    """A JoinGroup request, independent of its API version.

    Attributes:
        group_id: The group to join.
        member_id: ``""`` for a member that has no id yet.
        session_timeout_ms: The member's session timeout.
        rebalance_timeout_ms: The member's rebalance timeout (for v0, the
            session timeout).
        protocol_type: E.g. ``"consumer"``.
        protocols: ``(name, metadata)`` pairs in the member's preference order.
        group_instance_id: The static member id (KIP-345), or None.
        client_id: The client id from the request header.
        client_host: The client's address, as DescribeGroups reports it.
        require_known_member_id: True for JoinGroup v4+ (KIP-394): a new
            dynamic member first gets MEMBER_ID_REQUIRED and an id.
        version: The request's API version; v9+ lets a replaced static leader
            skip the assignment (KIP-814).
        reason: The client's reason (v8+), informational only.
    """

    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    version: int = 9
    reason: str | None = None


@dataclass(frozen=True)
class JoinGroupMember:
    """One entry of the member list sent to the leader.

    Attributes:
        member_id: The member's id.
        group_instance_id: Its group instance id, or None.
        metadata: Its metadata for the selected protocol.
    """

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupOutput:
    """A JoinGroup response.

    Attributes:
        error_code: The error, ``ErrorCode.none`` on success.
        member_id: The member's (possibly newly assigned) id.
        generation_id: The generation joined, -1 on error.
        protocol_type: The group's protocol type, None when unset.
        protocol_name: The selected protocol, None when unset.
        leader: The leader's member id, ``""`` when unknown.
        skip_assignment: True when a replaced static leader must not compute
            a new assignment (KIP-814, v9+).
        members: The members with their metadata, for the leader only.
    """

    error_code: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True)
class _GenerationInput:
    """A request of a member naming its generation (SyncGroup and Heartbeat).

    Attributes:
        group_id: The group.
        generation_id: The generation the member joined.
        member_id: The member's id.
        group_instance_id: Its group instance id, or None.
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class SyncGroupInput(_GenerationInput):
    """A SyncGroup request: the member's generation and, from the leader, the assignments.

    Attributes:
        protocol_type: The protocol type (v5+; None before).
        protocol_name: The protocol name (v5+; None before).
        assignments: ``(member_id, assignment)`` pairs; only the leader's are
            used.
        version: The request's API version (v5+ requires protocol type and
            name).
    """

    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Sequence[tuple[str, bytes]] = ()
    version: int = 5


@dataclass(frozen=True)
class SyncGroupOutput:
    """A SyncGroup response.

    Attributes:
        error_code: The error, ``ErrorCode.none`` on success.
        protocol_type: The group's protocol type on success, else None.
        protocol_name: The group's protocol name on success, else None.
        assignment: The member's assignment (empty on error).
    """

    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatInput(_GenerationInput):
    """A Heartbeat request (the member's generation)."""


@dataclass(frozen=True)
class HeartbeatOutput:
    """A Heartbeat response.

    Attributes:
        error_code: The error, ``ErrorCode.none`` on success.
    """

    error_code: ErrorCode


@dataclass(frozen=True)
class MemberIdentity:
    """A member leaving the group (LeaveGroup v3+ batch entry).

    Attributes:
        member_id: The member id, or ``""`` to remove a static member by its
            group instance id (administrative removal).
        group_instance_id: The group instance id, or None.
        reason: The client's reason (v5+), informational only.
    """

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LeaveGroupInput:
    """A LeaveGroup request.

    Attributes:
        group_id: The group.
        members: The members leaving.
    """

    group_id: str
    members: Sequence[MemberIdentity]


@dataclass(frozen=True)
class LeaveGroupMemberOutput:
    """The outcome for one leaving member.

    Attributes:
        member_id: The member id as requested.
        group_instance_id: The group instance id as requested.
        error_code: The error for this member.
    """

    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True)
class LeaveGroupOutput:
    """A LeaveGroup response.

    Attributes:
        error_code: A request-level error, ``ErrorCode.none`` otherwise.
        members: One outcome per requested member (empty on a request-level
            error).
    """

    error_code: ErrorCode
    members: tuple[LeaveGroupMemberOutput, ...] = ()


@dataclass(frozen=True)
class OffsetCommitPartition:
    """One partition of an OffsetCommit request.

    Attributes:
        partition_index: The partition.
        committed_offset: The offset to commit.
        committed_leader_epoch: The leader epoch (v6+), -1 when unknown.
        committed_metadata: Client metadata; None is stored as ``""``.
    """

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = NO_LEADER_EPOCH
    committed_metadata: str | None = ""


@dataclass(frozen=True)
class OffsetCommitTopic:
    """One topic of an OffsetCommit request.

    Attributes:
        name: The topic.
        partitions: Its partitions.
    """

    name: str
    partitions: Sequence[OffsetCommitPartition]


@dataclass(frozen=True)
class OffsetCommitInput:
    """An OffsetCommit request.

    Attributes:
        group_id: The group.
        topics: The offsets to commit.
        generation_id: The member's generation; -1 for a "simple" commit by a
            consumer that does not use group management (or an admin client).
        member_id: The member's id, ``""`` for a simple commit.
        group_instance_id: The group instance id (v7+), or None.
        version: The request's API version: for a group that does not exist,
            v9+ answers GROUP_ID_NOT_FOUND, older versions ILLEGAL_GENERATION.
    """

    group_id: str | None
    topics: Sequence[OffsetCommitTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    version: int = 9


@dataclass(frozen=True)
class OffsetCommitPartitionOutput:
    """The outcome for one committed partition.

    Attributes:
        partition_index: The partition.
        error_code: The error for this partition.
    """

    partition_index: int
    error_code: ErrorCode


@dataclass(frozen=True)
class OffsetCommitTopicOutput:
    """The outcome for one committed topic.

    Attributes:
        name: The topic.
        partitions: One outcome per requested partition, in request order.
    """

    name: str
    partitions: tuple[OffsetCommitPartitionOutput, ...]


@dataclass(frozen=True)
class OffsetCommitOutput:
    """An OffsetCommit response.

    Attributes:
        topics: One outcome per requested topic, in request order.
    """

    topics: tuple[OffsetCommitTopicOutput, ...]


@dataclass(frozen=True)
class OffsetFetchTopic:
    """Partitions of one topic whose committed offsets are wanted.

    Attributes:
        name: The topic.
        partition_indexes: The partitions.
    """

    name: str
    partition_indexes: Sequence[int]


@dataclass(frozen=True)
class OffsetFetchGroup:
    """One group of an OffsetFetch request.

    Attributes:
        group_id: The group.
        topics: The partitions wanted, or None for every committed offset.
        member_id: The member asking (v9+, consumer groups), or None.
        member_epoch: Its member epoch (v9+), -1 when not given.
    """

    group_id: str | None
    topics: Sequence[OffsetFetchTopic] | None = None
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True)
class OffsetFetchInput:
    """An OffsetFetch request (v8+ shape; wrap older ones as one group).

    Attributes:
        groups: The groups.
        require_stable: Accepted and ignored: there are no transactional
            offsets, so every committed offset is stable.
    """

    groups: Sequence[OffsetFetchGroup]
    require_stable: bool = False


@dataclass(frozen=True)
class OffsetFetchPartitionOutput:
    """The committed offset of one partition.

    Attributes:
        partition_index: The partition.
        committed_offset: The offset, -1 when none is committed.
        committed_leader_epoch: The committed leader epoch, -1 when unknown.
        metadata: The committed metadata, ``""`` when none.
        error_code: The error for this partition.
    """

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error_code: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class OffsetFetchTopicOutput:
    """Committed offsets of one topic.

    Attributes:
        name: The topic.
        partitions: The partitions.
    """

    name: str
    partitions: tuple[OffsetFetchPartitionOutput, ...]


@dataclass(frozen=True)
class OffsetFetchGroupOutput:
    """Committed offsets of one group.

    Attributes:
        group_id: The group.
        error_code: A group-level error.
        topics: The topics.
    """

    group_id: str | None
    error_code: ErrorCode
    topics: tuple[OffsetFetchTopicOutput, ...] = ()


@dataclass(frozen=True)
class _PerGroupOutput(Generic[G]):
    """A response with one entry per requested group (OffsetFetch and DescribeGroups).

    Attributes:
        groups: The entries, in request order.
    """

    groups: tuple[G, ...]


@dataclass(frozen=True)
class OffsetFetchOutput(_PerGroupOutput[OffsetFetchGroupOutput]):
    """An OffsetFetch response (``groups``: the groups' committed offsets)."""


@dataclass(frozen=True)
class _GroupIdsInput:
    """A request naming groups (DescribeGroups and DeleteGroups).

    Attributes:
        group_ids: The groups (None stands for a null group id).
    """

    group_ids: Sequence[str | None]


@dataclass(frozen=True)
class DescribeGroupsInput(_GroupIdsInput):
    """A DescribeGroups request (``group_ids``: the groups to describe)."""


@dataclass(frozen=True)
class DeleteGroupsInput(_GroupIdsInput):
    """A DeleteGroups request (``group_ids``: the groups to delete)."""


@dataclass(frozen=True)
class DescribedGroupMember:
    """A member as DescribeGroups shows it.

    Attributes:
        member_id: The member id.
        group_instance_id: The group instance id, or None.
        client_id: The client id.
        client_host: The client host.
        member_metadata: Metadata for the selected protocol (Stable groups
            only, else empty).
        member_assignment: The member's current assignment.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    """A group as DescribeGroups shows it.

    Attributes:
        group_id: The group id.
        error_code: The error, ``ErrorCode.none`` when described.
        group_state: The state name (``"Dead"`` for an unknown group).
        protocol_type: The protocol type, ``""`` when unset.
        protocol_data: The selected protocol (Stable groups only, else ``""``).
        members: The members.
    """

    group_id: str | None
    error_code: ErrorCode
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()


@dataclass(frozen=True)
class DescribeGroupsOutput(_PerGroupOutput[DescribedGroup]):
    """A DescribeGroups response (``groups``: the groups described)."""


@dataclass(frozen=True)
class ListGroupsInput:
    """A ListGroups request.

    Attributes:
        states_filter: State names to keep (v4+, case-insensitive); empty
            keeps all.
        types_filter: Group types to keep (v5+, case-insensitive); empty keeps
            all.
    """

    states_filter: Sequence[str] = ()
    types_filter: Sequence[str] = ()


@dataclass(frozen=True)
class ListedGroup:
    """One group in a ListGroups response.

    Attributes:
        group_id: The group id.
        protocol_type: The protocol type, ``""`` when unset.
        group_state: The state name.
        group_type: ``"classic"`` or ``"consumer"``.
    """

    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True)
class ListGroupsOutput:
    """A ListGroups response.

    Attributes:
        error_code: Always ``ErrorCode.none``.
        groups: The groups, in creation order.
    """

    error_code: ErrorCode
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True)
class DeletableGroupResult:
    """The outcome for one group to delete.

    Attributes:
        group_id: The group id.
        error_code: The error, ``ErrorCode.none`` when deleted.
    """

    group_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True)
class DeleteGroupsOutput:
    """A DeleteGroups response.

    Attributes:
        results: One outcome per distinct requested group, in request order.
    """

    results: tuple[DeletableGroupResult, ...]


@dataclass(frozen=True)
class OffsetDeleteInput:
    """An OffsetDelete request.

    Attributes:
        group_id: The group.
        topics: ``(topic, partition indexes)`` whose committed offsets to delete.
    """

    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class OffsetDeleteOutput:
    """An OffsetDelete response.

    Attributes:
        error_code: The group-level error (GROUP_ID_NOT_FOUND, ...).
        topics: ``(topic, ((partition, error code), ...))`` in request order.
    """

    error_code: ErrorCode
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]


Request: TypeAlias = (
    JoinGroupInput
    | SyncGroupInput
    | HeartbeatInput
    | LeaveGroupInput
    | OffsetCommitInput
    | OffsetFetchInput
    | DescribeGroupsInput
    | ListGroupsInput
    | DeleteGroupsInput
    | OffsetDeleteInput
    | ConsumerGroupHeartbeatInput
    | ConsumerGroupDescribeInput
)
"""Any request :meth:`~gengroup.broker.coordinator.GroupCoordinator.handle` accepts."""

Response: TypeAlias = (
    JoinGroupOutput
    | SyncGroupOutput
    | HeartbeatOutput
    | LeaveGroupOutput
    | OffsetCommitOutput
    | OffsetFetchOutput
    | DescribeGroupsOutput
    | ListGroupsOutput
    | DeleteGroupsOutput
    | OffsetDeleteOutput
    | ConsumerGroupHeartbeatOutput
    | ConsumerGroupDescribeOutput
)
"""Any response the coordinator produces."""


@dataclass(frozen=True)
class Reply:
    """A response to send for the request identified by ``token``.

    Attributes:
        token: The token the request was submitted with.
        response: The response.
    """

    token: object
    response: Response
