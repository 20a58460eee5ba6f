"""The classic group APIs' requests and responses, without I/O.

Theory of operation:

Each group API the consumer sends gets two halves here: a builder that makes
the request from the kio module of the negotiated version (a
:data:`~gengroup.io.request.MakeRequest` once its other arguments are bound)
and a reader that takes from the response the fields the member machine
needs. Sending is the caller's: :class:`~gengroup.consumer.forming.GroupClient`
sends JoinGroup, SyncGroup, Heartbeat and LeaveGroup to the coordinator node
its member works with (:meth:`Cluster.call <gengroup.io.cluster.Cluster.call>`),
and OffsetCommit through its :class:`~gengroup.io.coordinator.CoordinatorClient`,
which follows a moved coordinator. OffsetFetch's halves are
:mod:`gengroup.io.offsets`'.

Error codes are returned, not raised: the member machine interprets them
(:func:`gengroup._error_table.outcome_for`). The describing halves are the
exception: DescribeGroups' and ConsumerGroupDescribe's (a group of the
consumer group protocol, KIP-848, which DescribeGroups answers as ``Dead``)
serve :class:`~gengroup.admin.Admin` and a member's messages, and
:func:`read_consumer_group` raises a group's error as its typed error.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from kio.schema.errors import ErrorCode

from .._errors import BrokerError, UnsupportedVersion, error_for_code, raise_for_code
from .._types import GenerationIdentity, TopicPartition
from ..protocol.framing import build, ms, request_module
from .member import JoinParams

__all__ = [
    "ConsumerHeartbeat",
    "GroupView",
    "JoinResult",
    "OFFSET_COMMIT_BY_ID",
    "PATTERN_NEEDS_V1",
    "commit_request",
    "consumer_group_request",
    "consumer_heartbeat_request",
    "describe_request",
    "error_code",
    "heartbeat_request",
    "join_request",
    "leave_request",
    "offset_commit_request",
    "parse_describe",
    "parse_join",
    "parse_leave",
    "parse_offset_commit",
    "parse_sync",
    "read_consumer_group",
    "sync_request",
    "unmentioned_group",
]

#: The first OffsetCommit version that names topics by id (and only by id).
OFFSET_COMMIT_BY_ID: Final = 10

_GROUP_ID_NOT_FOUND = int(ErrorCode.group_id_not_found)

#: ConsumerGroupDescribe's answers for a group it does not describe, which
#: DescribeGroups is asked about then (as Java's AdminClient does).
_ASK_DESCRIBE_GROUPS = frozenset({_GROUP_ID_NOT_FOUND, int(ErrorCode.unsupported_version)})


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The fields of a JoinGroup response."""

    error_code: int
    member_id: str
    generation_id: int
    protocol: str | None
    leader: str
    members: tuple[tuple[str, str | None, bytes], ...]


@dataclass(frozen=True, slots=True)
class GroupView:
    """What DescribeGroups says of a group, as far as a member's messages need it.

    Attributes:
        state: the group's state (``Stable``, ``PreparingRebalance``, ...).
        protocol_type: the group's protocol type (``consumer``), or ``""``.
        protocol: the protocol (assignor) the group runs, ``""`` while none
            is chosen (the coordinator names it only once a generation forms).
        clients: member id -> ``client_id@client_host``.
    """

    state: str
    protocol_type: str
    protocol: str
    clients: dict[str, str]


def describe_request(mod: Any, group_id: str) -> Any:
    """A DescribeGroups request of one group."""
    return build(mod.DescribeGroupsRequest, groups=(group_id,), include_authorized_operations=False)


def parse_describe(resp: Any, group_id: str) -> GroupView | None:
    """The group's view from a DescribeGroups response; None if it has none (an error)."""
    for g in resp.groups:
        if g.group_id == group_id and not g.error_code:
            return GroupView(
                state=str(g.group_state or ""),
                protocol_type=str(g.protocol_type or ""),
                protocol=str(g.protocol_data or ""),
                clients={m.member_id: f"{m.client_id}@{m.client_host}" for m in g.members},
            )
    return None


def unmentioned_group(api: str, group_id: str) -> BrokerError:
    """GROUP_ID_NOT_FOUND for a describing response (``api``) that left ``group_id`` out."""
    return error_for_code(_GROUP_ID_NOT_FOUND, f"{api} response did not mention group {group_id!r}")


def consumer_group_request(mod: Any, group_id: str) -> Any:
    """A ConsumerGroupDescribe request of one group."""
    return build(
        mod.ConsumerGroupDescribeRequest, group_ids=(group_id,), include_authorized_operations=False
    )


def read_consumer_group(resp: Any, group_id: str, refusals: list[str] | None = None) -> Any | None:
    """The group's entry of a ConsumerGroupDescribe response, or None when the
    group is DescribeGroups' to describe (a classic or unknown group, or the
    consumer protocol not enabled); the broker's message then goes to
    ``refusals``, if given.

    Raises:
        BrokerError: any other error of the group (a coordinator error,
            authorization ...), with the broker's message.
    """
    for g in resp.groups:
        if g.group_id != group_id:
            continue
        code = int(g.error_code)
        if code in _ASK_DESCRIBE_GROUPS:
            if refusals is not None and g.error_message:
                refusals.append(g.error_message)
            return None
        message = f"group {group_id!r}" + (f": {g.error_message}" if g.error_message else "")
        raise_for_code(code, message)
        return g
    raise unmentioned_group("ConsumerGroupDescribe", group_id)


def error_code(resp: Any) -> int:
    """A response's top-level error code (Heartbeat's whole answer)."""
    return int(resp.error_code)


def join_request(mod: Any, params: JoinParams) -> Any:
    """A JoinGroup request for the member's ``params``."""
    return build(
        mod.JoinGroupRequest,
        group_id=params.group_id,
        session_timeout=ms(params.session_timeout),
        rebalance_timeout=ms(params.rebalance_timeout),
        member_id=params.member_id,
        group_instance_id=params.group_instance_id,
        protocol_type="consumer",
        protocols=tuple(
            build(mod.JoinGroupRequestProtocol, name=n, metadata=m) for n, m in params.protocols
        ),
        reason=params.reason,
    )


def parse_join(resp: Any) -> JoinResult:
    """The fields of a JoinGroup response."""
    return JoinResult(
        error_code=int(resp.error_code),
        member_id=resp.member_id,
        generation_id=int(resp.generation_id),
        protocol=resp.protocol_name,
        leader=resp.leader,
        members=tuple(
            (m.member_id, getattr(m, "group_instance_id", None), bytes(m.metadata))
            for m in resp.members
        ),
    )


def sync_request(
    mod: Any, identity: GenerationIdentity, protocol: str, assignments: Mapping[str, bytes]
) -> Any:
    """A SyncGroup request (``assignments`` is empty unless the member leads)."""
    return build(
        mod.SyncGroupRequest,
        **identity.fields(),
        protocol_type="consumer",
        protocol_name=protocol,
        assignments=tuple(
            build(mod.SyncGroupRequestAssignment, member_id=k, assignment=v)
            for k, v in assignments.items()
        ),
    )


def parse_sync(resp: Any) -> tuple[int, bytes]:
    """(error code, this member's encoded assignment) of a SyncGroup response."""
    return int(resp.error_code), bytes(resp.assignment)


def heartbeat_request(mod: Any, identity: GenerationIdentity) -> Any:
    """A Heartbeat request."""
    return build(mod.HeartbeatRequest, **identity.fields())


def leave_request(mod: Any, group_id: str, member_id: str, reason: str | None) -> Any:
    """A LeaveGroup request for one dynamic member."""
    return build(
        mod.LeaveGroupRequest,
        group_id=group_id,
        members=(
            build(mod.MemberIdentity, member_id=member_id, group_instance_id=None, reason=reason),
        ),
    )


def parse_leave(resp: Any) -> int:
    """The leaving member's error code (the top-level one first)."""
    if resp.error_code:
        return int(resp.error_code)
    for m in resp.members:
        if m.error_code:
            return int(m.error_code)
    return 0


def offset_commit_request(
    mod: Any,
    identity: GenerationIdentity,
    offsets: Mapping[TopicPartition, int],
    metadata: Mapping[TopicPartition, str] | None = None,
    topic_ids: Mapping[TopicPartition, uuid.UUID] | None = None,
) -> Any:
    """An OffsetCommit request of ``offsets`` (``metadata`` per partition) under ``identity``.

    From v10 the request names each topic by id alone: ``topic_ids`` gives
    the id each partition's offset was read under, and the coordinator
    refuses an id it does not know (UNKNOWN_TOPIC_ID), such as a topic's
    deleted before it was created again, where a name would store the old
    topic's position on the new one. If a partition's id is not known, the
    request is v9 (names), as every partition must have one in v10.
    """
    notes = metadata or {}
    ids = topic_ids or {}
    by_id = int(mod.OffsetCommitRequest.__version__) >= OFFSET_COMMIT_BY_ID and all(
        tp in ids for tp in offsets
    )
    if not by_id and int(mod.OffsetCommitRequest.__version__) >= OFFSET_COMMIT_BY_ID:
        mod = request_module(mod.OffsetCommitRequest.__api_key__, OFFSET_COMMIT_BY_ID - 1)
    return commit_request(
        mod,
        group_id=identity.group_id,
        generation_id=identity.generation_id,
        member_id=identity.member_id,
        group_instance_id=identity.group_instance_id,
        offsets=(
            (ids[tp] if by_id else tp.topic, tp.partition, off, notes.get(tp))
            for tp, off in sorted(offsets.items())
        ),
    )


def commit_request(
    mod: Any,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    offsets: Iterable[tuple[str | uuid.UUID, int, int, str | None]],
) -> Any:
    """An OffsetCommit request of ``mod``'s version, any version.

    Args:
        mod: the kio request module of the version to send.
        group_id: the group.
        generation_id: the generation (-1 for a commit from outside the group).
        member_id: the member ("" from outside the group).
        group_instance_id: the static member's instance id, or None.
        offsets: ``(topic, partition, offset, metadata)`` entries, grouped by
            topic in the order the topics first appear; ``topic`` is the
            topic's id from v10 on, its name before. The retention time
            (v2-v4) and commit timestamp (v1) are -1: the broker's defaults.
    """
    by_topic: dict[str | uuid.UUID, list[tuple[int, int, str | None]]] = {}
    key = "topic_id" if int(mod.OffsetCommitRequest.__version__) >= OFFSET_COMMIT_BY_ID else "name"
    for topic, partition, offset, metadata in offsets:
        by_topic.setdefault(topic, []).append((partition, offset, metadata))
    return build(
        mod.OffsetCommitRequest,
        group_id=group_id,
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        retention_time=datetime.timedelta(milliseconds=-1),
        topics=tuple(
            build(
                mod.OffsetCommitRequestTopic,
                **{key: topic},
                partitions=tuple(
                    build(
                        mod.OffsetCommitRequestPartition,
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=-1,
                        commit_timestamp=-1,
                        committed_metadata=metadata,
                    )
                    for p, o, metadata in parts
                ),
            )
            for topic, parts in by_topic.items()
        ),
    )


def parse_offset_commit(
    resp: Any, topic_ids: Mapping[TopicPartition, uuid.UUID] | None = None
) -> dict[TopicPartition, int]:
    """The error code of every partition of an OffsetCommit response (0 = stored).

    A v10 response names topics by id: ``topic_ids`` (the request's) gives
    their names back.
    """
    names = {i: tp.topic for tp, i in (topic_ids or {}).items()}
    return {
        TopicPartition(
            names.get(t.topic_id, str(t.topic_id)) if hasattr(t, "topic_id") else t.name,
            int(p.partition_index),
        ): int(p.error_code)
        for t in resp.topics
        for p in t.partitions
    }


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat of the consumer group protocol (KIP-848).

    Every field is sent each time (none is left null as "unchanged"), except
    on leaving (``member_epoch`` -1 or -2), which sends only who leaves.

    Attributes:
        group_id: the group.
        member_id: the member's own id (the coordinator's from v0 on, once it
            gave one).
        member_epoch: 0 to join, the current epoch, -1 to leave, -2 for a
            static member leaving to come back.
        instance_id: the static member id, or None.
        rack: the member's rack, or None.
        rebalance_timeout: seconds the coordinator waits for a revocation.
        topics: the subscribed topic names.
        assignor: the server-side assignor asked for, or None.
        owned: topic id -> the partitions the member owns (empty to join).
        regex: subscribing by pattern: the regular expression (RE2J syntax)
            the broker matches topic names against, sent in
            ``subscribed_topic_regex`` (v1) instead of ``topics``; None
            subscribes by names.
    """

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack: str | None
    rebalance_timeout: float
    topics: tuple[str, ...]
    assignor: str | None
    owned: Mapping[uuid.UUID, tuple[int, ...]]
    regex: str | None = None


#: What :func:`consumer_heartbeat_request` says of a pattern a v0 broker cannot take.
PATTERN_NEEDS_V1: Final = (
    "subscribing by pattern needs ConsumerGroupHeartbeat v1 (subscribed_topic_regex)"
)


def consumer_heartbeat_request(mod: Any, beat: ConsumerHeartbeat) -> Any:
    """A ConsumerGroupHeartbeat request (v0-v1).

    Raises:
        UnsupportedVersion: ``beat`` subscribes by pattern and the negotiated
            version (v0) has no ``subscribed_topic_regex``.
    """
    if beat.regex is not None and "subscribed_topic_regex" not in {
        f.name for f in fields(mod.ConsumerGroupHeartbeatRequest)
    }:
        raise UnsupportedVersion(f"{PATTERN_NEEDS_V1}; the broker speaks only v0")
    identity = {
        "group_id": beat.group_id,
        "member_id": beat.member_id,
        "member_epoch": beat.member_epoch,
        "instance_id": beat.instance_id,
    }
    if beat.member_epoch < 0:
        return build(mod.ConsumerGroupHeartbeatRequest, **identity, topic_partitions=None)
    return build(
        mod.ConsumerGroupHeartbeatRequest,
        **identity,
        rack_id=beat.rack,
        rebalance_timeout=ms(beat.rebalance_timeout),
        subscribed_topic_names=None if beat.regex is not None else tuple(sorted(beat.topics)),
        subscribed_topic_regex=beat.regex,
        server_assignor=beat.assignor,
        topic_partitions=tuple(
            build(mod.TopicPartitions, topic_id=tid, partitions=tuple(sorted(parts)))
            for tid, parts in sorted(beat.owned.items())
        ),
    )
