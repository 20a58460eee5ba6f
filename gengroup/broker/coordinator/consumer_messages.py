"""The consumer group protocol's (KIP-848) requests and responses, version-independent.

Topics are named by id on the wire. The coordinator is sans-IO and does not
own the topics, so every request that needs them carries a snapshot of the
cluster's topics (:class:`TopicInfo` by name), taken by the server when the
request arrives.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kio.schema.errors import ErrorCode

CONSUMER_GROUP_TYPE: Final = "consumer"
"""The group type (and protocol type) of a consumer group."""

LEAVE_GROUP_MEMBER_EPOCH: Final = -1
"""The member epoch of a member leaving the group."""

LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2
"""The member epoch of a static member leaving for a while (it keeps its partitions)."""

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id."""


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the coordinator needs it.

    Attributes:
        topic_id: The topic's id.
        partitions: Its number of partitions.
    """

    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True)
class ConsumerGroupHeartbeatInput:
    """A ConsumerGroupHeartbeat request (API 68).

    The optional fields are None (``rebalance_timeout_ms`` -1) when they did
    not change since the member's previous heartbeat.

    Attributes:
        group_id: The group.
        member_id: The member's id (made by the member from v1; v0 may send
            ``""`` to have the coordinator make one).
        member_epoch: 0 to join, -1 to leave, -2 for a static member leaving
            for a while, else the member's current epoch.
        instance_id: The static member's group instance id.
        rack_id: The member's rack.
        rebalance_timeout_ms: How long the member may take to revoke partitions.
        subscribed_topic_names: The subscribed topics.
        subscribed_topic_regex: The subscription as a regular expression (v1).
        server_assignor: The assignor the member asks for.
        owned: The partitions the member owns, by topic id.
        topics: The cluster's topics when the request arrived, by name.
        client_id: The request header's client id.
        client_host: The client's address.
        version: The request's API version.
    """

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Sequence[tuple[uuid.UUID, Sequence[int]]] | None = None
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True)
class ConsumerGroupHeartbeatOutput:
    """A ConsumerGroupHeartbeat response.

    Attributes:
        error_code: The error, ``ErrorCode.none`` on success.
        error_message: Kafka's message for the error, or None.
        member_id: The member's id (None on error).
        member_epoch: The member's epoch (-1 on error).
        heartbeat_interval_ms: When to heartbeat next (0 on error).
        assignment: The partitions the member may use now, or None when
            unchanged (and the request was not a full one).
    """

    error_code: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True)
class ConsumerGroupDescribeInput:
    """A ConsumerGroupDescribe request (API 69).

    Attributes:
        group_ids: The groups to describe.
        topics: The cluster's topics (to name topic ids), by name.
    """

    group_ids: Sequence[str]
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class DescribedConsumerMember:
    """A member as ConsumerGroupDescribe shows it.

    Attributes:
        member_id: The member id.
        instance_id: The group instance id, or None.
        rack_id: The rack, or None.
        member_epoch: The member epoch.
        client_id: The client id.
        client_host: The client host.
        subscribed_topic_names: The subscribed topics.
        subscribed_topic_regex: The subscribed regular expression, or None.
        assignment: The partitions it holds (assigned and pending revocation),
            as ``(topic id, name, partitions)``.
        target_assignment: The target assignment, same shape.
    """

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]
    target_assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class DescribedConsumerGroup:
    """A group as ConsumerGroupDescribe shows it.

    Attributes:
        group_id: The group id.
        error_code: GROUP_ID_NOT_FOUND for an unknown or classic group.
        error_message: Kafka's message for the error, or None.
        group_state: ``Empty``, ``Assigning``, ``Reconciling`` or ``Stable``.
        group_epoch: The group epoch.
        assignment_epoch: The target assignment's epoch.
        assignor_name: The assignor in use.
        members: The members.
    """

    group_id: str
    error_code: ErrorCode
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(frozen=True)
class ConsumerGroupDescribeOutput:
    """A ConsumerGroupDescribe response.

    Attributes:
        groups: One per requested group, in request order.
    """

    groups: tuple[DescribedConsumerGroup, ...]
