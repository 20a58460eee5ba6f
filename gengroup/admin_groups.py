"""How :class:`~gengroup.admin.Admin` describes and deletes groups: the
requests, and their answers read (into
:class:`~gengroup.admin_types.GroupDescription` for a description).

Theory of operation:

Kafka describes a group of the consumer group protocol (KIP-848) only with
ConsumerGroupDescribe (API 69): DescribeGroups answers for one as if it were
``Dead``, with no members. So, as Java's AdminClient does
(``DescribeConsumerGroupsHandler``), a group is asked for with
ConsumerGroupDescribe first, and with DescribeGroups when that answers
GROUP_ID_NOT_FOUND (a classic group, or a group the coordinator does not
know) or UNSUPPORTED_VERSION, or when the coordinator does not serve the API
at all (the consumer protocol is not enabled there; :func:`read_consumer_group`
returns None, or the request raises
:class:`~gengroup._errors.UnsupportedVersion`). DescribeGroups describes a
classic group, and a group nobody knows as ``Dead`` with no members.

ConsumerGroupDescribe names each member's partitions by topic id and name. A
name the broker left empty is looked up by id in the cluster's metadata
(:func:`topic_names`, which refreshes it when an id is not known); the
partitions of a topic that is gone are left out, as Kafka leaves them out.

DeleteGroups deletes groups with their committed offsets; OffsetDelete
deletes a group's committed offsets of some partitions. Their answers carry
an error per group, or per partition, raised as the typed errors of
:mod:`gengroup._errors`. Several groups are deleted each at its own
coordinator, a few at once (:func:`delete_each`), and every one is tried, as
Java's AdminClient does: the failures are reported together, in
:class:`~gengroup._errors.GroupsNotDeleted`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from functools import partial
from typing import Any, Final
from uuid import UUID

import anyio
from kio.schema.errors import ErrorCode

from ._errors import GroupIdNotFound, GroupsNotDeleted, UnsupportedVersion, raise_for_code
from ._types import TopicPartition
from .admin_types import CONSUMER_GROUP, GroupDescription, MemberDescription
from .io.cluster import Cluster
from .io.request import raise_item_errors
from .io.retry import retry
from .membership.requests import consumer_group_request, read_consumer_group, unmentioned_group
from .protocol.consumer_protocol import PROTOCOL_TYPE
from .protocol.framing import build
from .protocol.versions import ApiKey

__all__ = [
    "consumer_group_description",
    "consumer_group_request",
    "delete_each",
    "delete_groups_request",
    "describe_group",
    "describe_groups_request",
    "offset_delete_request",
    "read_consumer_group",
    "read_deleted_group",
    "read_described_group",
    "read_offset_delete",
    "topic_names",
    "unnamed_topics",
]


#: How many groups :func:`delete_each` deletes at once.
_DELETING_AT_ONCE: Final = 16


# --------------------------------------------------------------------------- DescribeGroups


def describe_groups_request(mod: Any, group_id: str) -> Any:
    """DescribeGroups of one group."""
    return build(mod.DescribeGroupsRequest, groups=(group_id,), include_authorized_operations=False)


def read_described_group(resp: Any, group_id: str) -> GroupDescription:
    """The group as DescribeGroups describes it (a classic group; ``Dead`` if unknown).

    Raises:
        BrokerError: the group's error (a coordinator error, authorization ...).
    """
    for g in resp.groups:
        if g.group_id != group_id:
            continue
        raise_item_errors([g], lambda _g: f"group {group_id!r}")
        members = tuple(
            MemberDescription(
                m.member_id,
                m.client_id,
                m.client_host,
                m.group_instance_id,
                g.protocol_type,
                bytes(m.member_metadata),
                bytes(m.member_assignment),
            )
            for m in g.members
        )
        return GroupDescription(group_id, g.group_state, g.protocol_type, g.protocol_data, members)
    raise unmentioned_group("DescribeGroups", group_id)


# --------------------------------------------------------------------------- ConsumerGroupDescribe
# Its request and reader are :mod:`gengroup.membership.requests`' (shared with a
# member's messages): consumer_group_request, read_consumer_group.


def unnamed_topics(group: Any) -> set[UUID]:
    """The topic ids ConsumerGroupDescribe's ``group`` gives without a name."""
    return {
        tp.topic_id
        for m in group.members
        for assignment in (m.assignment, m.target_assignment)
        for tp in assignment.topic_partitions
        if not tp.topic_name
    }


async def topic_names(cluster: Cluster, ids: Set[UUID], timeout: float) -> dict[UUID, str]:
    """The names of topic ids, from the cluster's metadata (refreshed when
    one of ``ids`` is not in it; a topic that is gone stays unnamed).

    Raises:
        TimeoutError: the metadata could not be fetched in time.
    """

    def known() -> dict[UUID, str]:
        return {i.topic_id: n for n, i in cluster.topics.items() if i.topic_id is not None}

    names = known()
    if ids - names.keys():
        await retry(
            "metadata",
            partial(cluster.refresh_metadata, None),
            timeout=timeout,
            backoff=cluster.retry_backoff,
            waiting_on=cluster.waiting_on,
        )
        names = known()
    return names


def _partitions(assignment: Any, names: Mapping[UUID, str]) -> frozenset[TopicPartition]:
    out: set[TopicPartition] = set()
    for tp in assignment.topic_partitions:
        name = tp.topic_name or names.get(tp.topic_id)
        if name:  # else the topic is gone: left out, as Kafka does
            out.update(TopicPartition(name, p) for p in tp.partitions)
    return frozenset(out)


def consumer_group_description(group: Any, names: Mapping[UUID, str]) -> GroupDescription:
    """ConsumerGroupDescribe's ``group`` as a :class:`GroupDescription`
    (protocol type ``consumer``, the protocol its assignor).

    Args:
        group: the group's entry (see :func:`read_consumer_group`).
        names: names of the topic ids the entry leaves unnamed (:func:`topic_names`).
    """
    members = tuple(
        MemberDescription(
            m.member_id,
            m.client_id,
            m.client_host,
            m.instance_id,
            PROTOCOL_TYPE,
            b"",
            b"",
            member_epoch=int(m.member_epoch),
            held=_partitions(m.assignment, names),
            target=_partitions(m.target_assignment, names),
        )
        for m in group.members
    )
    return GroupDescription(
        group.group_id,
        group.group_state,
        PROTOCOL_TYPE,
        group.assignor_name,
        members,
        group_protocol=CONSUMER_GROUP,
        group_epoch=int(group.group_epoch),
        assignment_epoch=int(group.assignment_epoch),
    )


# --------------------------------------------------------------------------- deleting


async def delete_each(names: Sequence[str], delete: Callable[[str], Awaitable[None]]) -> None:
    """Delete each group of ``names`` with ``delete`` (a few at once), trying every one.

    Raises:
        GroupsNotDeleted: of several groups, some were not deleted (each one's
            error is in it).
        Exception: the one group's error, when ``names`` holds one.
    """
    if len(names) == 1:
        return await delete(names[0])
    limiter = anyio.CapacityLimiter(_DELETING_AT_ONCE)
    errors: dict[str, Exception] = {}

    async def attempt(group_id: str) -> None:
        try:
            async with limiter:
                await delete(group_id)
        except Exception as exc:  # reported below, with the other groups' outcomes
            errors[group_id] = exc

    async with anyio.create_task_group() as tg:
        for group_id in names:
            tg.start_soon(attempt, group_id)
    if errors:
        deleted = [g for g in names if g not in errors]
        raise GroupsNotDeleted(deleted, {g: errors[g] for g in names if g in errors})


def delete_groups_request(mod: Any, group_ids: Sequence[str]) -> Any:
    """DeleteGroups of ``group_ids`` (all on one coordinator)."""
    return build(mod.DeleteGroupsRequest, groups_names=tuple(group_ids))


def read_deleted_group(resp: Any, group_id: str) -> None:
    """Check DeleteGroups' answer for ``group_id``.

    Raises:
        BrokerError: the group's error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
            a coordinator error ...); GROUP_ID_NOT_FOUND if the answer does
            not mention the group.
    """
    results = [r for r in resp.results if r.group_id == group_id]
    if not results:
        raise unmentioned_group("DeleteGroups", group_id)
    raise_item_errors(results, lambda _r: f"group {group_id!r}")


def offset_delete_request(mod: Any, group_id: str, by_topic: Mapping[str, Sequence[int]]) -> Any:
    """OffsetDelete of ``group_id``'s offsets of the partitions ``by_topic`` (name: indexes)."""
    return build(
        mod.OffsetDeleteRequest,
        group_id=group_id,
        topics=tuple(
            build(
                mod.OffsetDeleteRequestTopic,
                name=name,
                partitions=tuple(
                    build(mod.OffsetDeleteRequestPartition, partition_index=p) for p in parts
                ),
            )
            for name, parts in by_topic.items()
        ),
    )


def read_offset_delete(resp: Any, group_id: str) -> None:
    """Check OffsetDelete's answer: the group's error, then each partition's.

    Raises:
        BrokerError: e.g. GROUP_ID_NOT_FOUND, or GROUP_SUBSCRIBED_TO_TOPIC for
            a partition.
    """
    raise_for_code(int(resp.error_code), f"OffsetDelete of {group_id!r}")
    for t in resp.topics:
        for p in t.partitions:
            where = f"{t.name}[{p.partition_index}]"
            raise_for_code(int(p.error_code), f"OffsetDelete of {group_id!r} for {where}")


#: How Kafka's ConsumerGroupDescribe refuses a group of another type (a share
#: or streams group, Kafka 4.1 and later), which DescribeGroups before v6 then
#: reports as ``Dead``, as it does a group that does not exist.
_NOT_A_CONSUMER_GROUP: Final = "is not a consumer group"


async def describe_group(
    call: Callable[..., Awaitable[Any]],
    cluster: Cluster,
    group_id: str,
    left: Callable[[], float],
    *,
    other_types: bool = True,
) -> GroupDescription:
    """``group_id`` described by ConsumerGroupDescribe, or by DescribeGroups if
    it is not a group of the consumer protocol (``call``: the admin's request
    to the group's coordinator; ``left``: the time left).

    A group ConsumerGroupDescribe refuses as "not a consumer group" (a classic
    group, or one of another type: share, streams) and DescribeGroups reports
    ``Dead`` is asked of ConsumerGroupDescribe once more: a classic group
    deleted, or taken over by the consumer protocol, between the two requests
    is then ``Dead``, or described; a group still refused so, and still
    ``Dead`` to DescribeGroups, is of another type.

    Raises:
        GroupIdNotFound: the group is of another type, and ``other_types``
            (else it is described as DescribeGroups reports it: ``Dead``).
    """
    refusals: list[str] = []

    async def consumer_group() -> GroupDescription | None:
        try:
            found = await call(
                group_id,
                "ConsumerGroupDescribe",
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                partial(consumer_group_request, group_id=group_id),
                partial(read_consumer_group, group_id=group_id, refusals=refusals),
                max(left(), 0.001),
            )
        except UnsupportedVersion:  # the coordinator does not serve the consumer protocol
            return None
        if found is None:
            return None
        names = await topic_names(cluster, unnamed_topics(found), max(left(), 0.001))
        return consumer_group_description(found, names)

    async def classic() -> GroupDescription:
        described: GroupDescription = await call(
            group_id,
            "DescribeGroups",
            ApiKey.DESCRIBE_GROUPS,
            partial(describe_groups_request, group_id=group_id),
            partial(read_described_group, group_id=group_id),
            max(left(), 0.001),
        )
        return described

    if (found := await consumer_group()) is not None:
        return found
    described = await classic()
    if described.state != "Dead" or not refusals or _NOT_A_CONSUMER_GROUP not in refusals[-1]:
        return described
    refusals.clear()
    if (found := await consumer_group()) is not None:
        return found  # taken over by the consumer protocol meanwhile
    if not other_types or not refusals or _NOT_A_CONSUMER_GROUP not in refusals[-1]:
        return described  # gone meanwhile (or described among others)
    if (again := await classic()).state != "Dead":
        return again  # a classic group created again meanwhile
    raise GroupIdNotFound(
        int(ErrorCode.group_id_not_found),
        f"group {group_id!r} is neither a classic group nor a group of the consumer "
        f"protocol (the coordinator: {refusals[-1]!r}); a share or streams group is "
        "not described here",
    )
