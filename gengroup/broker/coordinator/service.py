"""The group coordinator: one entry point, the classic group protocol behind it.

:class:`GroupCoordinator` takes every request through :meth:`~GroupCoordinator.handle`,
which dispatches on the request's type (:data:`_HANDLERS`) after the work every
request shares: refusing to run once poisoned, firing the timers that are due,
and collecting the replies. Its private methods mirror Kafka's
``GroupMetadataManager`` ``classicGroup*`` methods and carry their names. The
group model is in :mod:`.group`, the offset rules in :mod:`.offsets`, the
deadlines in :mod:`.timers`, the request/response model in :mod:`.messages`;
the package documentation is the theory of operation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from .admin import delete_groups, describe_groups, list_groups
from .config import CoordinatorConfig
from .consumer_messages import ConsumerGroupDescribeInput, ConsumerGroupHeartbeatInput
from .consumer_service import ConsumerGroupService
from .group import (
    ClassicGroup,
    ClassicGroupMember,
    CoordinatorPoisonedError,
    GroupCoordinatorError,
    GroupEvent,
    GroupState,
    Parked,
)
from .messages import (
    DeleteGroupsInput,
    DescribeGroupsInput,
    HeartbeatInput,
    HeartbeatOutput,
    JoinGroupInput,
    JoinGroupOutput,
    LeaveGroupInput,
    LeaveGroupMemberOutput,
    LeaveGroupOutput,
    ListGroupsInput,
    OffsetCommitInput,
    OffsetCommitOutput,
    OffsetDeleteInput,
    OffsetFetchGroup,
    OffsetFetchGroupOutput,
    OffsetFetchInput,
    OffsetFetchOutput,
    Reply,
    Request,
    Response,
    SyncGroupInput,
    SyncGroupOutput,
    copy_fields,
)
from .offsets import OffsetStore, delete_offsets, rejected_commit, validate_offset_commit
from .timers import Timers, heartbeat_key, join_key, sync_key


def _protocols(request: JoinGroupInput) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, bytes(metadata)) for name, metadata in request.protocols)


def _update_member(
    group: ClassicGroup, member: ClassicGroupMember, request: JoinGroupInput, parked: Parked
) -> None:
    group.update_member(
        member,
        _protocols(request),
        request.rebalance_timeout_ms,
        request.session_timeout_ms,
        parked,
    )


def _is_protocol_inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


class GroupCoordinator:
    """Kafka's classic group coordinator as a sans-IO state machine.

    :meth:`handle` takes the current time, a token identifying the request and
    the request itself, and returns the replies to send now: the request's own
    reply when it is answered at once, and replies to requests parked earlier
    that this call completed. Due timers fire first; :meth:`advance` fires them
    alone.

    Args:
        config: Broker settings; Kafka's defaults when omitted.
    """

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self._config = config if config is not None else CoordinatorConfig()
        self._groups: dict[str, ClassicGroup] = {}
        self._offsets = OffsetStore(self._config.offset_metadata_max_bytes)
        self._timers = Timers()
        self._now = -(2**63)
        self._out: list[Reply] = []
        self._poisoned: BaseException | None = None
        self._consumer = ConsumerGroupService(
            self._config, self._timers, lambda: self._now, self._groups
        )

    # -- inspection --------------------------------------------------------

    @property
    def config(self) -> CoordinatorConfig:
        """The configuration."""
        return self._config

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        """The groups by id (read-only use)."""
        return self._groups

    @property
    def consumer(self) -> ConsumerGroupService:
        """The consumer groups (KIP-848) and their protocol."""
        return self._consumer

    def group(self, group_id: str) -> ClassicGroup | None:
        """The group ``group_id``, or None."""
        return self._groups.get(group_id)

    def next_deadline(self) -> int | None:
        """The earliest timer deadline (ms), or None when no timer is armed.

        Call :meth:`advance` once the clock reaches it. A deadline may be at or
        before the last time passed in (a zero-delay timer): advance at once.
        """
        return self._timers.next_deadline()

    def join_deadline(self, group_id: str) -> int | None:
        """The deadline of the group's delayed-join timer, or None."""
        return self._timers.deadline_of(join_key(group_id))

    def sync_deadline(self, group_id: str) -> int | None:
        """The deadline of the group's pending-sync timer, or None."""
        return self._timers.deadline_of(sync_key(group_id))

    def session_deadline(self, group_id: str, member_id: str) -> int | None:
        """The deadline of a member's (or pending member's) session timer, or None."""
        return self._timers.deadline_of(heartbeat_key(group_id, member_id))

    # -- entry points ------------------------------------------------------

    def advance(self, now_ms: int) -> list[Reply]:
        """Fire every timer due at ``now_ms``.

        Args:
            now_ms: The current time.

        Returns:
            Replies to parked requests completed by the timers.
        """
        return self._call(now_ms, lambda: None)

    def handle(self, now_ms: int, token: object, request: Request) -> list[Reply]:
        """Handle any request, after firing the timers due at ``now_ms``.

        JoinGroup is usually parked until the rebalance completes, and a
        follower's SyncGroup until the leader's assignment arrives; every other
        request is answered at once.

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request; its type selects the handler.

        Returns:
            The replies to send now: the request's own when it is answered at
            once, and those of parked requests this call completed.

        Raises:
            TypeError: If ``request`` is not a coordinator request.
            CoordinatorPoisonedError: If an earlier call failed.
        """
        handler = _HANDLERS.get(type(request))
        if handler is None:
            raise TypeError(f"not a group coordinator request: {type(request).__name__}")

        def run() -> None:
            response = handler(self, token, request)
            if response is not None:
                self._emit(token, response)

        return self._call(now_ms, run)

    # -- plumbing ----------------------------------------------------------

    def _call(self, now_ms: int, handler: Callable[[], None]) -> list[Reply]:
        if self._poisoned is not None:
            raise CoordinatorPoisonedError(
                "the group coordinator failed earlier"
            ) from self._poisoned
        out: list[Reply] = []
        self._out = out
        try:
            now_ms = max(now_ms, self._now)
            while (due := self._timers.pop_due(now_ms)) is not None:
                deadline, action = due
                self._now = max(self._now, deadline)
                action()
            self._now = now_ms
            handler()
        except BaseException as exc:
            self._poisoned = exc
            raise
        finally:
            self._out = []
        return out

    def _emit(self, token: object, response: Response) -> None:
        self._out.append(Reply(token, response))

    def _schedule(self, key: Hashable, delay_ms: int, action: Callable[[], None]) -> None:
        self._timers.schedule(key, self._now + delay_ms, action)

    def _create_group(self, group_id: str) -> ClassicGroup:
        group = ClassicGroup(group_id, self._now, self._emit)
        self._groups[group_id] = group
        return group

    # -- JoinGroup ---------------------------------------------------------

    def _classic_group_join(self, token: object, request: JoinGroupInput) -> JoinGroupOutput | None:
        # GroupCoordinatorService.joinGroup
        if not request.group_id:
            return JoinGroupOutput(ErrorCode.invalid_group_id, request.member_id)
        if not (
            self._config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._config.max_session_timeout_ms
        ):
            return JoinGroupOutput(ErrorCode.invalid_session_timeout, request.member_id)
        if self._consumer.yield_to_classic(request.group_id) is False:
            # Kafka lets a classic member join a consumer group; not served here.
            return JoinGroupOutput(ErrorCode.inconsistent_group_protocol, request.member_id)

        # GroupMetadataManager.classicGroupJoinToClassicGroup
        is_unknown_member = request.member_id == ""
        group = self._groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                return JoinGroupOutput(ErrorCode.unknown_member_id, request.member_id)
            group = self._create_group(request.group_id)

        if not self._accept_joining_member(group, request.member_id):
            group.remove(request.member_id)
            return JoinGroupOutput(ErrorCode.group_max_size_reached, "")
        # The checks common to classicGroupJoinNewMember and ...ExistingMember.
        if group.state is GroupState.DEAD:
            return JoinGroupOutput(ErrorCode.coordinator_not_available, request.member_id)
        if not group.supports_protocols(
            request.protocol_type, (name for name, _ in request.protocols)
        ):
            return JoinGroupOutput(ErrorCode.inconsistent_group_protocol, request.member_id)
        parked = Parked(token)
        if is_unknown_member:
            return self._classic_group_join_new_member(parked, request, group)
        return self._classic_group_join_existing_member(parked, request, group)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self._config.max_group_size
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            # The number of awaiting members is used: the group may already be
            # above the maximum, and this kicks out the last rejoining members.
            return (
                group.has_member(member_id) and group.member(member_id).is_awaiting_join
            ) or group.num_awaiting_join() < max_size
        return group.has_member(member_id) or len(group.members) < max_size

    def _classic_group_join_new_member(
        self, parked: Parked, request: JoinGroupInput, group: ClassicGroup
    ) -> JoinGroupOutput | None:
        instance_id = request.group_instance_id
        new_member_id = self._config.member_id_generator(
            instance_id if instance_id is not None else request.client_id
        )
        if instance_id is None:
            return self._classic_group_join_new_dynamic_member(
                parked, request, group, new_member_id
            )
        # classicGroupJoinNewStaticMember
        existing_member_id = group.static_member_id(instance_id)
        if existing_member_id is not None:
            self._update_static_member_then_rebalance_or_complete_join(
                parked, request, group, existing_member_id, new_member_id
            )
        else:
            self._add_member_then_rebalance_or_complete_join(parked, request, group, new_member_id)
        return None

    def _classic_group_join_new_dynamic_member(
        self, parked: Parked, request: JoinGroupInput, group: ClassicGroup, new_member_id: str
    ) -> JoinGroupOutput | None:
        if not request.require_known_member_id:
            self._add_member_then_rebalance_or_complete_join(parked, request, group, new_member_id)
            return None
        # KIP-394: hand out an id and wait for the member to rejoin with it.
        group.add_pending_member(new_member_id)
        group_id = group.group_id
        self._schedule(
            heartbeat_key(group_id, new_member_id),
            request.session_timeout_ms,
            lambda: self._expire_classic_group_member_heartbeat(group_id, new_member_id),
        )
        return JoinGroupOutput(ErrorCode.member_id_required, new_member_id)

    def _classic_group_join_existing_member(
        self, parked: Parked, request: JoinGroupInput, group: ClassicGroup
    ) -> JoinGroupOutput | None:
        member_id = request.member_id
        if group.is_pending_member(member_id):
            if request.group_instance_id is not None:
                # Kafka throws IllegalStateException here: UNKNOWN_SERVER_ERROR.
                return JoinGroupOutput(ErrorCode.unknown_server_error, "")
            self._add_member_then_rebalance_or_complete_join(parked, request, group, member_id)
            return None

        error = group.validate_member(member_id, request.group_instance_id)
        if error is not None:
            return JoinGroupOutput(error, member_id)

        member = group.member(member_id)
        state = group.state
        if state is GroupState.COMPLETING_REBALANCE and member.matches(request.protocols):
            # Same metadata (it may have missed the JoinGroup response): return
            # the current generation.
            return group.generation_join_output(member_id, with_members=group.is_leader(member_id))
        if (
            state is GroupState.STABLE
            and not group.is_leader(member_id)
            and member.matches(request.protocols)
        ):
            return group.generation_join_output(member_id, with_members=False)
        if state in (
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            # Changed protocols force a rebalance; in Stable, so does the
            # leader rejoining (e.g. topic metadata changed).
            self._update_member_then_rebalance_or_complete_join(parked, request, group, member)
            return None
        return JoinGroupOutput(ErrorCode.unknown_member_id, member_id)

    def _update_member_then_rebalance_or_complete_join(
        self,
        parked: Parked,
        request: JoinGroupInput,
        group: ClassicGroup,
        member: ClassicGroupMember,
    ) -> None:
        _update_member(group, member, request, parked)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _add_member_then_rebalance_or_complete_join(
        self, parked: Parked, request: JoinGroupInput, group: ClassicGroup, member_id: str
    ) -> None:
        # Instance id, client, timeouts and protocol type come from the request.
        member = copy_fields(
            ClassicGroupMember,
            request,
            member_id=member_id,
            protocols=_protocols(request),
            is_new=True,
        )
        # A new member extends the initial delayed join.
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.previous_state is GroupState.EMPTY
        ):
            group.new_member_added = True
        group.add(member, parked)
        # A new member cannot heartbeat while parked, so it gets the new-member
        # join timeout instead of its session timeout.
        self._reschedule_classic_group_member_heartbeat(
            group, member, self._config.new_member_join_timeout_ms
        )
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member_then_rebalance_or_complete_join(
        self,
        parked: Parked,
        request: JoinGroupInput,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
    ) -> None:
        assert request.group_instance_id is not None
        current_leader = group.leader_id
        new_member = group.replace_static_member(
            request.group_instance_id, old_member_id, new_member_id
        )
        # The old member id's session timer will expire without effect.
        self._reschedule_classic_group_member_heartbeat(group, new_member)
        _update_member(group, new_member, request, parked)
        state = group.state
        if state is GroupState.STABLE:
            # No rebalance unless the selected protocol would change.
            if (group.protocol_name or "") == group.select_protocol():
                is_leader = group.is_leader(new_member_id)
                if request.version >= 9:
                    response = group.generation_join_output(
                        new_member_id, with_members=is_leader, skip_assignment=is_leader
                    )
                else:
                    # Before v9 the previous leader id is returned, so that a
                    # replaced leader does not compute a new assignment.
                    response = dataclasses.replace(
                        group.generation_join_output(new_member_id, with_members=False),
                        leader=current_leader or "",
                    )
                group.complete_join(new_member, response)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group)
        elif state is GroupState.COMPLETING_REBALANCE:
            # The old member id may already be in the leader's assignment.
            self._prepare_rebalance(group)
        elif state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join_phase(group)
        else:
            raise GroupCoordinatorError(
                f"group {group.group_id!r} in state {state.value} while a static member rejoins"
            )

    # -- rebalance ---------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members parked in SyncGroup must rejoin.
            self._reset_and_propagate_assignment_with_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)

        is_initial_rebalance = group.state is GroupState.EMPTY
        if is_initial_rebalance:
            group_id = group.group_id
            delay_ms = self._config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._schedule(
                join_key(group_id),
                delay_ms,
                lambda: self._try_complete_initial_rebalance_else_schedule(
                    group_id, delay_ms, remaining_ms
                ),
            )
        group.transition(GroupEvent.PREPARE_REBALANCE, self._now)
        if not is_initial_rebalance:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_classic_group_join(group)
        else:
            group_id = group.group_id
            self._schedule(
                join_key(group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_classic_group_join_by_id(group_id),
            )

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.previous_state is GroupState.EMPTY:
            return  # the initial rebalance always waits for its delay
        if not group.has_all_members_joined():
            return
        self._complete_classic_group_join(group)

    def _try_complete_initial_rebalance_else_schedule(
        self, group_id: str, delay_ms: int, remaining_ms: int
    ) -> None:
        group = self._groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay_ms = min(self._config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._schedule(
                join_key(group_id),
                new_delay_ms,
                lambda: self._try_complete_initial_rebalance_else_schedule(
                    group_id, new_delay_ms, new_remaining_ms
                ),
            )
        else:
            self._complete_classic_group_join(group)

    def _complete_classic_group_join_by_id(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        if group is not None:
            self._complete_classic_group_join(group)

    def _complete_classic_group_join(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        self._timers.cancel(join_key(group_id))

        for failed in group.not_yet_rejoined_members():
            if not failed.is_static:
                self._remove_with_session(group, failed.member_id)

        if group.state is GroupState.DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members remain): wait again until
            # session timeouts remove the unresponsive members.
            self._schedule(
                join_key(group_id),
                max(group.rebalance_timeout_ms(), 1),
                lambda: self._complete_classic_group_join_by_id(group_id),
            )
            return

        group.init_next_generation(self._now)
        if group.state is GroupState.EMPTY:
            return
        for member in list(group.members.values()):
            group.complete_join(
                member,
                group.generation_join_output(
                    member.member_id, with_members=group.is_leader(member.member_id)
                ),
            )
            self._reschedule_classic_group_member_heartbeat(group, member)
            member.is_new = False
            group.add_pending_sync_member(member.member_id)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        generation_id = group.generation_id
        self._schedule(
            sync_key(group_id),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group_id, generation_id),
        )

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.clear_pending_sync_members()
        self._timers.cancel(sync_key(group.group_id))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self._groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.has_received_sync_from_all_members():
            return
        for member_id in group.pending_sync_members:
            self._remove_with_session(group, member_id)
        self._prepare_rebalance(group)

    # -- sessions ----------------------------------------------------------

    def _reschedule_classic_group_member_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, timeout_ms: int | None = None
    ) -> None:
        group_id = group.group_id
        member_id = member.member_id
        self._schedule(
            heartbeat_key(group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_classic_group_member_heartbeat(group_id, member_id),
        )

    def _expire_classic_group_member_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return
        if group.is_pending_member(member_id):
            self._remove_pending_member_and_update_classic_group(group, member_id)
        elif group.has_member(member_id):
            member = group.member(member_id)
            if not member.has_satisfied_heartbeat():
                self._remove_member_and_update_classic_group(group, member)

    def _remove_member_and_update_classic_group(
        self, group: ClassicGroup, member: ClassicGroupMember
    ) -> None:
        # A new member may time out while parked in JoinGroup: answer it so the
        # client retries if it is still there.
        group.complete_join(member, JoinGroupOutput(ErrorCode.unknown_member_id, ""))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_classic_group_join(group)

    def _remove_pending_member_and_update_classic_group(
        self, group: ClassicGroup, member_id: str
    ) -> None:
        group.remove(member_id)
        if group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_classic_group_join(group)

    # -- SyncGroup ---------------------------------------------------------

    def _classic_group_sync(self, token: object, request: SyncGroupInput) -> SyncGroupOutput | None:
        if not request.group_id:
            return SyncGroupOutput(ErrorCode.invalid_group_id)
        if request.version >= 5 and (
            request.protocol_type is None or request.protocol_name is None
        ):
            # KafkaApis: from v5 the protocol type and name are mandatory.
            return SyncGroupOutput(ErrorCode.inconsistent_group_protocol)
        group = self._groups.get(request.group_id)
        if group is None or group.state is GroupState.EMPTY:
            return SyncGroupOutput(ErrorCode.unknown_member_id)

        error = self._validate_sync_group(group, request)
        if error is not None:
            return SyncGroupOutput(error)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncGroupOutput(ErrorCode.rebalance_in_progress)
        member = group.member(request.member_id)
        if group.state is GroupState.COMPLETING_REBALANCE:
            member.park_sync(Parked(token))
            self._remove_pending_sync_member(group, request.member_id)
            # Kafka stores the leader's assignment first; the write cannot fail
            # here, so it is propagated at once.
            if (
                group.is_leader(request.member_id)
                and group.state is GroupState.COMPLETING_REBALANCE
                and request.generation_id == group.generation_id
            ):
                assignment = {member_id: bytes(data) for member_id, data in request.assignments}
                self._set_and_propagate_assignment(group, assignment)
                group.transition(GroupEvent.STORE_ASSIGNMENT, self._now)
            return None
        if group.state is GroupState.STABLE:
            self._remove_pending_sync_member(group, request.member_id)
            return SyncGroupOutput(
                ErrorCode.none,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            )
        raise GroupCoordinatorError(f"SyncGroup reached group {group.group_id!r} while Dead")

    @staticmethod
    def _validate_sync_group(group: ClassicGroup, request: SyncGroupInput) -> ErrorCode | None:
        error = group.validate_member_generation(
            request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return error
        if _is_protocol_inconsistent(
            request.protocol_type, group.protocol_type
        ) or _is_protocol_inconsistent(request.protocol_name, group.protocol_name):
            return ErrorCode.inconsistent_group_protocol
        return None

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        if (
            group.state
            in (
                GroupState.DEAD,
                GroupState.EMPTY,
                GroupState.PREPARING_REBALANCE,
            )
            or group.has_received_sync_from_all_members()
        ):
            self._timers.cancel(sync_key(group.group_id))

    def _reset_and_propagate_assignment_with_error(
        self, group: ClassicGroup, error: ErrorCode
    ) -> None:
        self._set_and_propagate_assignment(group, {}, error)

    def _set_and_propagate_assignment(
        self,
        group: ClassicGroup,
        assignment: Mapping[str, bytes],
        error: ErrorCode = ErrorCode.none,
    ) -> None:
        """Give every member its assignment (empty if absent) and answer parked SyncGroups."""
        if group.state is not GroupState.COMPLETING_REBALANCE:
            raise GroupCoordinatorError(
                f"group {group.group_id!r} must be CompletingRebalance, not {group.state.value}"
            )
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in list(group.members.values()):
            response = SyncGroupOutput(
                error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if group.complete_sync(member, response):
                # The session may have expired unnoticed while it was parked.
                self._reschedule_classic_group_member_heartbeat(group, member)

    # -- Heartbeat ---------------------------------------------------------

    def _classic_group_heartbeat(self, token: object, request: HeartbeatInput) -> HeartbeatOutput:
        """Always answered at once.

        Stable and CompletingRebalance answer NONE, PreparingRebalance answers
        REBALANCE_IN_PROGRESS; all three restart the member's session. Checked
        first, in order: INVALID_GROUP_ID (empty id), UNKNOWN_MEMBER_ID (unknown
        group), COORDINATOR_NOT_AVAILABLE (Dead), FENCED_INSTANCE_ID /
        UNKNOWN_MEMBER_ID (member), ILLEGAL_GENERATION. An Empty group has no
        members, so it answers UNKNOWN_MEMBER_ID.
        """
        return HeartbeatOutput(self._heartbeat_error(request))

    def _heartbeat_error(self, request: HeartbeatInput) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(request.group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.validate_member_generation(
            request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return error
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._reschedule_classic_group_member_heartbeat(group, group.member(request.member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup --------------------------------------------------------

    def _classic_group_leave(self, token: object, request: LeaveGroupInput) -> LeaveGroupOutput:
        if not request.group_id:
            return LeaveGroupOutput(ErrorCode.invalid_group_id)
        group = self._groups.get(request.group_id)
        if group is None:
            return LeaveGroupOutput(
                ErrorCode.none,
                tuple(
                    LeaveGroupMemberOutput(
                        m.member_id, m.group_instance_id, ErrorCode.unknown_member_id
                    )
                    for m in request.members
                ),
            )
        if group.state is GroupState.DEAD:
            return LeaveGroupOutput(ErrorCode.coordinator_not_available)

        results: list[LeaveGroupMemberOutput] = []
        for identity in request.members:
            member_id = identity.member_id
            instance_id = identity.group_instance_id
            error: ErrorCode | None
            if member_id == "":
                # Administrative removal of a static member by instance id.
                static_member_id = (
                    group.static_member_id(instance_id) if instance_id is not None else None
                )
                if static_member_id is not None:
                    self._remove_current_member_from_classic_group(group, static_member_id)
                    error = None
                else:
                    error = ErrorCode.unknown_member_id
            elif group.is_pending_member(member_id):
                self._remove_with_session(group, member_id)
                error = None
            else:
                error = group.validate_member(member_id, instance_id)
                if error is None:
                    self._remove_current_member_from_classic_group(group, member_id)
            results.append(
                LeaveGroupMemberOutput(
                    member_id, instance_id, ErrorCode.none if error is None else error
                )
            )

        if any(result.error_code is ErrorCode.none for result in results):
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.state is GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group)
        return LeaveGroupOutput(ErrorCode.none, tuple(results))

    def _remove_current_member_from_classic_group(
        self, group: ClassicGroup, member_id: str
    ) -> None:
        group.complete_join(
            group.member(member_id), JoinGroupOutput(ErrorCode.unknown_member_id, "")
        )
        self._remove_with_session(group, member_id)

    def _remove_with_session(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member (or pending member) and disarm its session timer."""
        group.remove(member_id)
        self._timers.cancel(heartbeat_key(group.group_id, member_id))

    # -- offsets -----------------------------------------------------------

    def _commit_offset(self, token: object, request: OffsetCommitInput) -> OffsetCommitOutput:
        if request.group_id is None:
            return rejected_commit(request, ErrorCode.invalid_group_id)
        if (consumer := self._consumer.groups.get(request.group_id)) is not None:
            error = self._consumer.offset_commit_error(
                consumer,
                request.member_id,
                request.generation_id,
                request.version,
                [(t.name, p.partition_index) for t in request.topics for p in t.partitions],
            )
            if error is not None:
                return rejected_commit(request, error)
            return self._offsets.commit(request.group_id, request, self._now)
        group = self._groups.get(request.group_id)
        if group is None:
            if request.generation_id >= 0:
                return rejected_commit(
                    request,
                    ErrorCode.group_id_not_found
                    if request.version >= 9
                    else ErrorCode.illegal_generation,
                )
            # A "simple" group is created to hold the offsets.
            group = self._create_group(request.group_id)
        error = validate_offset_commit(group, request)
        if error is not None:
            return rejected_commit(request, error)
        # Offset commits keep the session alive in Stable and PreparingRebalance.
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._reschedule_classic_group_member_heartbeat(group, group.member(request.member_id))
        return self._offsets.commit(request.group_id, request, self._now)

    def topic_deleted(self, name: str) -> None:
        """Forget every group's committed offsets of topic ``name``, deleted (as Kafka does)."""
        self._offsets.forget_topic(name)

    def _fetch_offsets(self, token: object, request: OffsetFetchInput) -> OffsetFetchOutput:
        # require_stable has no effect: there are no transactional offsets.
        return OffsetFetchOutput(tuple(self._fetch_group_offsets(g) for g in request.groups))

    def _fetch_group_offsets(self, request: OffsetFetchGroup) -> OffsetFetchGroupOutput:
        group_id = request.group_id
        if group_id is None:
            return OffsetFetchGroupOutput(group_id, ErrorCode.invalid_group_id)
        group = self._groups.get(group_id)
        known = group is not None and group.state is not GroupState.DEAD
        if (consumer := self._consumer.groups.get(group_id)) is not None:
            known = True
            error = self._consumer.offset_fetch_error(
                consumer, request.member_id, request.member_epoch
            )
            if error is not None:
                return OffsetFetchGroupOutput(group_id, error)
        return OffsetFetchGroupOutput(
            group_id,
            ErrorCode.none,
            self._offsets.fetch(group_id if known else None, request.topics),
        )


_Handler = Callable[[GroupCoordinator, object, Any], Response | None]

_HANDLERS: Final[Mapping[type, _Handler]] = {
    JoinGroupInput: GroupCoordinator._classic_group_join,
    SyncGroupInput: GroupCoordinator._classic_group_sync,
    HeartbeatInput: GroupCoordinator._classic_group_heartbeat,
    LeaveGroupInput: GroupCoordinator._classic_group_leave,
    OffsetCommitInput: GroupCoordinator._commit_offset,
    OffsetFetchInput: GroupCoordinator._fetch_offsets,
    DescribeGroupsInput: lambda c, _, r: describe_groups(c._groups, r),
    ListGroupsInput: lambda c, _, r: list_groups(
        c._groups.values(), c._consumer.groups.values(), r
    ),
    DeleteGroupsInput: lambda c, _, r: delete_groups(
        c._groups, c._consumer, c._offsets, c._timers, c._now, r
    ),
    OffsetDeleteInput: lambda c, _, r: delete_offsets(c._groups.get(r.group_id), c._offsets, r),
    ConsumerGroupHeartbeatInput: lambda c, _, r: c._consumer.heartbeat(r),
    ConsumerGroupDescribeInput: lambda c, _, r: c._consumer.describe(r),
}
"""The handler of each request type: the response when answered at once, or
None when the request is parked (or was answered through its parked token)."""
