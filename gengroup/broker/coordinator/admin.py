"""The admin requests: DescribeGroups, ListGroups and DeleteGroups.

DescribeGroups and ListGroups are read-only views of the groups the
coordinator owns; DeleteGroups removes empty groups and their offsets. Consumer
groups (KIP-848) are listed with type ``consumer``; DescribeGroups shows them as
``Dead``, as Kafka's classic DescribeGroups does for a group that is not classic.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from kio.schema.errors import ErrorCode

from .consumer_group import ConsumerGroup
from .consumer_messages import CONSUMER_GROUP_TYPE
from .consumer_service import ConsumerGroupService
from .group import ClassicGroup, GroupEvent, GroupState
from .messages import (
    CLASSIC_GROUP_TYPE,
    DeletableGroupResult,
    DeleteGroupsInput,
    DeleteGroupsOutput,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsInput,
    DescribeGroupsOutput,
    ListedGroup,
    ListGroupsInput,
    ListGroupsOutput,
    copy_fields,
)
from .offsets import OffsetStore
from .timers import Timers, join_key, sync_key


def describe_group(group_id: str | None, group: ClassicGroup | None) -> DescribedGroup:
    """A group as DescribeGroups shows it.

    Args:
        group_id: The requested id (None for a null group id: INVALID_GROUP_ID).
        group: The group with that id, or None: an unknown group is described
            as ``Dead``, without error.
    """
    if group_id is None:
        return DescribedGroup(None, ErrorCode.invalid_group_id)
    if group is None:
        return DescribedGroup(group_id, ErrorCode.none, group_state=GroupState.DEAD.value)
    # Protocol and member metadata are shown for Stable groups only.
    stable = group.state is GroupState.STABLE
    return DescribedGroup(
        group_id,
        ErrorCode.none,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=tuple(
            copy_fields(
                DescribedGroupMember,
                m,
                member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment,
            )
            for m in group.members.values()
        ),
    )


def describe_groups(
    groups: MutableMapping[str, ClassicGroup], request: DescribeGroupsInput
) -> DescribeGroupsOutput:
    """The DescribeGroups response (consumer groups are not classic groups: ``Dead``)."""
    return DescribeGroupsOutput(
        tuple(describe_group(g, None if g is None else groups.get(g)) for g in request.group_ids)
    )


def list_groups(
    groups: Iterable[ClassicGroup],
    consumer_groups: Iterable[ConsumerGroup],
    request: ListGroupsInput,
) -> ListGroupsOutput:
    """The ListGroups response: the groups (classic ones first) that pass the filters.

    Args:
        groups: Every classic group, in creation order.
        consumer_groups: Every consumer group, in creation order.
        request: The state and type filters (case-insensitive; empty keeps all).
    """
    states = {s.strip().lower() for s in request.states_filter}
    types = {t.strip().lower() for t in request.types_filter}
    listed = [
        ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
        for group in groups
        if (not states or group.state.value.lower() in states)
        and (not types or CLASSIC_GROUP_TYPE in types)
    ]
    listed.extend(
        ListedGroup(group.group_id, CONSUMER_GROUP_TYPE, group.state.value, CONSUMER_GROUP_TYPE)
        for group in consumer_groups
        if (not states or group.state.value.lower() in states)
        and (not types or CONSUMER_GROUP_TYPE in types)
    )
    return ListGroupsOutput(ErrorCode.none, tuple(listed))


def delete_groups(
    groups: MutableMapping[str, ClassicGroup],
    consumer: ConsumerGroupService,
    offsets: OffsetStore,
    timers: Timers,
    now_ms: int,
    request: DeleteGroupsInput,
) -> DeleteGroupsOutput:
    """The DeleteGroups response; empty groups are deleted with their offsets."""

    def delete(group_id: str | None) -> ErrorCode:
        if group_id is None:
            return ErrorCode.invalid_group_id
        consumer_error = consumer.delete(group_id)
        if consumer_error is not None:
            if consumer_error is ErrorCode.none:
                offsets.delete(group_id)
            return consumer_error
        group = groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        offsets.delete(group_id)
        group.transition(GroupEvent.DELETE, now_ms)
        del groups[group_id]
        timers.cancel(join_key(group_id))
        timers.cancel(sync_key(group_id))
        return ErrorCode.none

    return DeleteGroupsOutput(
        tuple(
            DeletableGroupResult(group_id, delete(group_id))
            for group_id in dict.fromkeys(request.group_ids)
        )
    )
