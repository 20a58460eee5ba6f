"""What DescribeGroups and ListGroups show of the groups.

Read-only views of the :class:`~.group.ClassicGroup` objects the coordinator
owns (DeleteGroups, which changes them, is handled by the coordinator itself).
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from .group import ClassicGroup, GroupState
from .messages import (
    CLASSIC_GROUP_TYPE,
    DescribedGroup,
    DescribedGroupMember,
    ListedGroup,
    ListGroupsInput,
    ListGroupsOutput,
)


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
            DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment,
            )
            for m in group.members.values()
        ),
    )


def list_groups(groups: Iterable[ClassicGroup], request: ListGroupsInput) -> ListGroupsOutput:
    """The ListGroups response: ``groups`` (in their order) that pass the filters.

    Args:
        groups: Every group.
        request: The state and type filters (case-insensitive; empty keeps
            all; only the ``"classic"`` type exists).
    """
    states = {s.strip().lower() for s in request.states_filter}
    types = {t.strip().lower() for t in request.types_filter}
    listed = tuple(
        ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
        for group in groups
        if (not states or group.state.value.lower() in states)
        and (not types or CLASSIC_GROUP_TYPE in types)
    )
    return ListGroupsOutput(ErrorCode.none, listed)
