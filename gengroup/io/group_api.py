"""The classic group APIs as coroutines: build the request for the negotiated
version, send it to the coordinator, return the fields the member machine needs.

Every call goes through :meth:`Cluster.call <gengroup.io.cluster.Cluster.call>`
to the node given (the coordinator; finding and following it is
:mod:`gengroup.io.coordinator`'s job). Error codes are returned, not raised,
for the calls whose errors the member machine interprets (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit per partition); OffsetFetch
raises typed errors (see :mod:`gengroup.io.offsets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._types import TopicPartition
from ..group.member import JoinParams
from ..protocol.framing import build, ms
from ..protocol.versions import ApiKey
from . import offsets
from .cluster import Cluster

__all__ = [
    "JoinResult",
    "commit_offsets",
    "fetch_committed",
    "heartbeat",
    "join_group",
    "leave_group",
    "sync_group",
]


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The fields of a JoinGroup response."""

    error_code: int
    member_id: str
    generation_id: int
    protocol: str | None
    leader: str
    members: tuple[tuple[str, str | None, bytes], ...]


def _member(
    group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
) -> dict[str, Any]:
    """The fields that name a member of a generation, shared by its requests."""
    return {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
    }


async def join_group(
    cluster: Cluster, node: int, params: JoinParams, *, client_timeout: float
) -> JoinResult:
    """Send JoinGroup; the coordinator may hold it up to the rebalance timeout."""

    def make(mod: Any) -> Any:
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

    resp: Any = await cluster.call(
        node, ApiKey.JOIN_GROUP, make, timeout=client_timeout, channel="group"
    )
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


async def sync_group(
    cluster: Cluster,
    node: int,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    protocol: str,
    assignments: Mapping[str, bytes],
    client_timeout: float,
) -> tuple[int, bytes]:
    """Send SyncGroup; returns (error_code, assignment bytes)."""

    def make(mod: Any) -> Any:
        return build(
            mod.SyncGroupRequest,
            **_member(group_id, generation_id, member_id, group_instance_id),
            protocol_type="consumer",
            protocol_name=protocol,
            assignments=tuple(
                build(mod.SyncGroupRequestAssignment, member_id=k, assignment=v)
                for k, v in assignments.items()
            ),
        )

    resp: Any = await cluster.call(
        node, ApiKey.SYNC_GROUP, make, timeout=client_timeout, channel="group"
    )
    return int(resp.error_code), bytes(resp.assignment)


async def heartbeat(
    cluster: Cluster,
    node: int,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    timeout: float,
) -> int:
    """Send Heartbeat; returns its error code."""
    resp: Any = await cluster.call(
        node,
        ApiKey.HEARTBEAT,
        lambda mod: build(
            mod.HeartbeatRequest, **_member(group_id, generation_id, member_id, group_instance_id)
        ),
        timeout=timeout,
    )
    return int(resp.error_code)


async def leave_group(
    cluster: Cluster, node: int, *, group_id: str, member_id: str, reason: str | None = None
) -> int:
    """Send LeaveGroup for one dynamic member; returns the member's error code."""
    resp: Any = await cluster.call(
        node,
        ApiKey.LEAVE_GROUP,
        lambda mod: build(
            mod.LeaveGroupRequest,
            group_id=group_id,
            members=(
                build(
                    mod.MemberIdentity, member_id=member_id, group_instance_id=None, reason=reason
                ),
            ),
        ),
    )
    if resp.error_code:
        return int(resp.error_code)
    for m in resp.members:
        if m.error_code:
            return int(m.error_code)
    return 0


async def commit_offsets(
    cluster: Cluster,
    node: int,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    offsets: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Send OffsetCommit; returns the error code of every partition (0 = stored)."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for tp, off in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append((tp.partition, off))

    def make(mod: Any) -> Any:
        return build(
            mod.OffsetCommitRequest,
            group_id=group_id,
            generation_id_or_member_epoch=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            topics=tuple(
                build(
                    mod.OffsetCommitRequestTopic,
                    name=topic,
                    partitions=tuple(
                        build(
                            mod.OffsetCommitRequestPartition,
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        )
                        for p, o in parts
                    ),
                )
                for topic, parts in sorted(by_topic.items())
            ),
        )

    resp: Any = await cluster.call(node, ApiKey.OFFSET_COMMIT, make)
    return {
        TopicPartition(t.name, int(p.partition_index)): int(p.error_code)
        for t in resp.topics
        for p in t.partitions
    }


async def fetch_committed(
    cluster: Cluster, node: int, *, group_id: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """OffsetFetch with require_stable; returns committed offsets (-1 if none).

    Raises:
        BrokerError: a group-level or partition-level error (typed).
    """
    return await offsets.fetch_committed(cluster, node, group_id, partitions)
