"""The consumer group protocol (KIP-848) behind ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Theory of operation:

:class:`ConsumerGroupService` is the part of the coordinator that serves
consumer groups. :class:`~.service.GroupCoordinator` owns it, routes the two
KIP-848 requests to it and asks it about consumer groups when an offset or
admin request names one; it shares the coordinator's clock (``now``), its
timers and its offset store, so it stays sans-IO and fed ``now_ms`` like the
classic protocol. Its methods mirror Kafka's ``GroupMetadataManager``
``consumerGroup*`` methods.

One heartbeat (:meth:`ConsumerGroupService.heartbeat`):

1. validates the request as Kafka does (INVALID_REQUEST,
   UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION);
2. epoch -1 / -2: the member leaves (a dynamic member, or a static member
   with -1, is fenced: removed and the group epoch bumped; a static member
   with -2 keeps its partitions at epoch -2 until it rejoins or its session
   expires);
3. gets the group (epoch 0 creates it; an empty classic group of that id is
   replaced) and the member: epoch 0 joins (a static member replaces its
   instance's previous member only if that one left with -2, else
   UNRELEASED_INSTANCE_ID; a known dynamic member rejoining with epoch 0 keeps
   its state, as Kafka 4.3 answers it); any other epoch must be the member's current one,
   or its previous one with owned partitions within its assignment, else
   FENCED_MEMBER_EPOCH; an unknown member is UNKNOWN_MEMBER_ID;
4. updates the member's subscription; a changed subscription, a new member or
   a change in the subscribed topics' partition counts bumps the group epoch;
5. recomputes the target assignment when the group epoch is ahead of it and
   the last computation is at least ``consumer_assignment_interval_ms`` old
   (Kafka 4.3's assignment batching, KIP-1263; the first one is immediate);
6. reconciles the member towards its target (:func:`.consumer_group.reconcile`),
   arming a rebalance timeout while it has partitions to revoke;
7. re-arms the member's session timeout and answers with the member's epoch
   and, when it changed or the request was a full one, its assignment.

Session and rebalance timeouts fence the member (remove it, bump the group
epoch); the others then get a new target on their next heartbeat.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Final

from kio.schema.errors import ErrorCode

from .assignors import ASSIGNORS, MemberSpec
from .config import CoordinatorConfig
from .consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    is_subset,
    reconcile,
)
from .consumer_messages import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupDescribeInput,
    ConsumerGroupDescribeOutput,
    ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatOutput,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    TopicInfo,
)
from .group import ClassicGroup, GroupState
from .messages import copy_fields
from .timers import Timers

_SESSION: Final = "consumer-session"
_REBALANCE: Final = "consumer-rebalance"


class _Refused(Exception):
    """A heartbeat answered with an error."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def kafka_uuid() -> str:
    """A member id as Kafka's ``Uuid.randomUuid().toString()`` prints one."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _subscribed_names(member: ConsumerGroupMember, topics: Mapping[str, TopicInfo]) -> set[str]:
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex is not None:
        pattern = re.compile(member.subscribed_topic_regex)
        names.update(
            name for name in topics if not name.startswith("__") and pattern.fullmatch(name)
        )
    return names


class ConsumerGroupService:
    """Consumer groups (KIP-848), served beside the classic groups.

    Args:
        config: The coordinator's settings.
        timers: The coordinator's timers.
        now: Reads the coordinator's current time (ms).
        classic_groups: The coordinator's classic groups by id: an empty one
            is removed from it when a consumer group of the same id replaces
            it (its offsets stay).
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        timers: Timers,
        now: Callable[[], int],
        classic_groups: MutableMapping[str, ClassicGroup],
    ) -> None:
        self._config = config
        self._timers = timers
        self._now = now
        self._classic = classic_groups
        self.groups: MutableMapping[str, ConsumerGroup] = {}

    # -- ConsumerGroupHeartbeat ----------------------------------------------

    def heartbeat(self, request: ConsumerGroupHeartbeatInput) -> ConsumerGroupHeartbeatOutput:
        """Handle a ConsumerGroupHeartbeat (always answered at once)."""
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request)
            return self._heartbeat(request)
        except _Refused as refused:
            return ConsumerGroupHeartbeatOutput(refused.code, refused.message, member_epoch=0)

    def _validate(self, request: ConsumerGroupHeartbeatInput) -> None:
        def invalid(message: str) -> _Refused:
            return _Refused(ErrorCode.invalid_request, message)

        if request.group_id == "":
            raise invalid("GroupId can't be empty.")
        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        if request.version >= 1 and request.member_id == "":
            raise invalid("MemberId can't be empty.")
        epoch = request.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if request.member_id == "":
                raise invalid("MemberId can't be empty.")
        elif epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or len(request.owned) > 0:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.member_id == "":
                raise invalid("MemberId can't be empty.")
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        if request.subscribed_topic_regex is not None:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as exc:
                raise _Refused(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid "
                    f"regular expression: {exc}.",
                ) from None
        assignors = self._config.consumer_assignors
        if request.server_assignor is not None and request.server_assignor not in assignors:
            raise _Refused(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(assignors)}.",
            )

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        """Kafka's ``getOrMaybeCreateConsumerGroup``."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self._classic.get(group_id)
        if classic is not None:
            if create and classic.state is GroupState.EMPTY and not classic.members:
                del self._classic[group_id]
            else:
                raise _Refused(
                    ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                )
        elif not create:
            raise _Refused(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        group = ConsumerGroup(group_id)
        self.groups[group_id] = group
        return group

    def _heartbeat(self, request: ConsumerGroupHeartbeatInput) -> ConsumerGroupHeartbeatOutput:
        joining = request.member_epoch == 0
        existing = self.groups.get(request.group_id)
        group = self._group(request.group_id, joining)
        member_id = request.member_id or kafka_uuid()
        if len(group.members) >= self._config.consumer_max_group_size and (
            member_id not in group.members
        ):
            if existing is None:
                del self.groups[request.group_id]
            raise _Refused(
                ErrorCode.group_max_size_reached,
                "The consumer group has reached its maximum capacity of "
                f"{self._config.consumer_max_group_size} members.",
            )
        try:
            member = self._member(group, member_id, request)
        except _Refused:
            if existing is None and not group.members:
                del self.groups[request.group_id]
            raise
        return self._update(group, member, request)

    def _member(
        self, group: ConsumerGroup, member_id: str, request: ConsumerGroupHeartbeatInput
    ) -> ConsumerGroupMember:
        joining = request.member_epoch == 0
        instance_id = request.instance_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise _Refused(
                        ErrorCode.unknown_member_id,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                member = ConsumerGroupMember(member_id)
            elif not joining:
                self._check_epoch(member, request)
            # A known member rejoining with epoch 0 keeps its state (Kafka 4.3).
            return member
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _Refused(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {instance_id} cannot join the "
                    f"group because the instance id is owned by {existing.member_id} member.",
                )
            # The returning instance takes over its predecessor's partitions and target.
            replacement = ConsumerGroupMember(
                **{
                    **existing.__dict__,
                    "member_id": member_id,
                    "member_epoch": 0,
                    "previous_member_epoch": 0,
                }
            )
            target = group.target.get(existing.member_id)
            self._cancel_timers(group.group_id, existing.member_id)
            group.remove(existing.member_id)
            group.put(replacement)
            if target is not None:
                group.target[member_id] = target
            return replacement
        if existing is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _Refused(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, request)
        return existing

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, request: ConsumerGroupHeartbeatInput) -> None:
        received, known = request.member_epoch, member.member_epoch
        if received > known:
            relation = "greater"
        elif received < known and (
            received != member.previous_member_epoch
            or not is_subset(request.owned, member.assigned)
        ):
            relation = "smaller"
        else:
            return
        raise _Refused(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a {relation} member epoch ({received}) than the one "
            f"known by the group coordinator ({known}). The member must abandon all its "
            "partitions and rejoin.",
        )

    def _update(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        request: ConsumerGroupHeartbeatInput,
    ) -> ConsumerGroupHeartbeatOutput:
        updated = ConsumerGroupMember(**member.__dict__)
        if request.instance_id is not None:
            updated.instance_id = request.instance_id
        if request.rack_id is not None:
            updated.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.server_assignor is not None:
            updated.server_assignor = request.server_assignor
        if request.subscribed_topic_names is not None:
            updated.subscribed_topic_names = tuple(request.subscribed_topic_names)
        if request.subscribed_topic_regex is not None:
            updated.subscribed_topic_regex = request.subscribed_topic_regex
        updated.client_id = request.client_id
        updated.client_host = request.client_host
        bump = (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        )
        others = [m for m in group.members.values() if m.member_id != updated.member_id]
        subscribed = self._partition_topics([*others, updated], request.topics)
        ids = {name: request.topics[name].topic_id for name in subscribed}
        # A topic deleted and created again with as many partitions changes only
        # its id: Kafka bumps the group epoch for it too (the subscription's
        # metadata holds the ids), so the new topic gets assigned.
        recreated = any(group.topic_ids.get(name, tid) != tid for name, tid in ids.items())
        group.topic_ids.update(ids)
        if subscribed != group.partition_topics or recreated:
            bump = True
            group.partition_topics = subscribed
        if bump:
            group.group_epoch += 1
        group.put(updated)
        interval = self._config.consumer_assignment_interval_ms
        if group.group_epoch > group.assignment_epoch and (
            group.assigned_at_ms is None or self._now() - group.assigned_at_ms >= interval
        ):
            self._update_target(group, request.topics)
            group.assigned_at_ms = self._now()
        target = group.target.get(updated.member_id, {})
        reconciled = updated
        if not updated.is_reconciled_to(group.assignment_epoch):
            reconciled = reconcile(
                updated,
                group.assignment_epoch,
                target,
                group.partition_owner,
                request.owned,
            )
            if reconciled != updated:
                group.put(reconciled)
                self._arm_rebalance_timeout(group, reconciled)
        self._arm_session_timeout(group.group_id, reconciled.member_id)
        full = request.member_epoch == 0 or (
            request.rebalance_timeout_ms != -1
            and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None
            )
            and request.owned is not None
        )
        return ConsumerGroupHeartbeatOutput(
            ErrorCode.none,
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self._config.consumer_heartbeat_interval_ms,
            assignment=(
                dict(reconciled.assigned)
                if full or reconciled.assigned != member.assigned
                else None
            ),
        )

    @staticmethod
    def _partition_topics(
        members: list[ConsumerGroupMember], topics: Mapping[str, TopicInfo]
    ) -> dict[str, int]:
        names: set[str] = set()
        for m in members:
            names |= _subscribed_names(m, topics)
        return {name: topics[name].partitions for name in sorted(names) if name in topics}

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members asked for, else the default (Kafka's rule)."""
        counts: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return self._config.consumer_assignors[0]
        return max(counts, key=lambda name: counts[name])

    def _update_target(self, group: ConsumerGroup, topics: Mapping[str, TopicInfo]) -> None:
        ids = {name: topics[name].topic_id for name in group.partition_topics}
        specs = [
            MemberSpec(
                member_id=m.member_id,
                instance_id=m.instance_id,
                subscribed=frozenset(
                    ids[name] for name in _subscribed_names(m, topics) if name in ids
                ),
                assignment=group.target.get(m.member_id, {}),
            )
            for m in group.members.values()
        ]
        counts = {ids[name]: n for name, n in group.partition_topics.items()}
        order = [ids[name] for name in sorted(group.partition_topics)]
        assign = ASSIGNORS[self.preferred_assignor(group)]
        target = assign(specs, counts, order)
        group.target = {m.member_id: target.get(m.member_id, {}) for m in specs}
        group.assignment_epoch = group.group_epoch

    # -- leaving and fencing ---------------------------------------------------

    def _leave(self, request: ConsumerGroupHeartbeatInput) -> ConsumerGroupHeartbeatOutput:
        group = self.groups.get(request.group_id)
        if group is None:
            if request.group_id in self._classic:
                raise _Refused(
                    ErrorCode.group_id_not_found,
                    f"Group {request.group_id} is not a consumer group.",
                )
            raise _Refused(
                ErrorCode.group_id_not_found, f"Consumer group {request.group_id} not found."
            )
        left = ConsumerGroupHeartbeatOutput(
            ErrorCode.none, member_id=request.member_id, member_epoch=request.member_epoch
        )
        instance_id = request.instance_id
        if instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise _Refused(
                    ErrorCode.unknown_member_id,
                    f"Member {request.member_id} is not a member of group {group.group_id}.",
                )
            self.fence(group, member.member_id)
            return left
        static = group.static_member(instance_id)
        if static is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if static.member_id != request.member_id:
            raise _Refused(
                ErrorCode.fenced_instance_id,
                f"Static member {request.member_id} with instance id {instance_id} was fenced "
                f"by member {static.member_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            away = ConsumerGroupMember(**static.__dict__)
            away.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            away.pending_revocation = {}
            group.put(away)
            return ConsumerGroupHeartbeatOutput(
                ErrorCode.none,
                member_id=static.member_id,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            )
        self.fence(group, static.member_id)
        return left

    def fence(self, group: ConsumerGroup, member_id: str) -> None:
        """Remove a member and bump the group epoch (Kafka's ``consumerGroupFenceMember``)."""
        group.remove(member_id)
        # Topics only the leaving member subscribed to leave the subscription metadata.
        names: set[str] = set()
        for m in group.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex is not None:
                pattern = re.compile(m.subscribed_topic_regex)
                names.update(n for n in group.partition_topics if pattern.fullmatch(n))
        group.partition_topics = {
            n: count for n, count in group.partition_topics.items() if n in names
        }
        group.group_epoch += 1
        self._cancel_timers(group.group_id, member_id)

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self._timers.cancel((_SESSION, group_id, member_id))
        self._timers.cancel((_REBALANCE, group_id, member_id))

    def _arm_session_timeout(self, group_id: str, member_id: str) -> None:
        def expire() -> None:
            group = self.groups.get(group_id)
            if group is not None and member_id in group.members:
                self.fence(group, member_id)

        self._timers.schedule(
            (_SESSION, group_id, member_id),
            self._now() + self._config.consumer_session_timeout_ms,
            expire,
        )

    def _arm_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        key = (_REBALANCE, group.group_id, member.member_id)
        if member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._timers.cancel(key)
            return
        group_id, member_id, epoch = group.group_id, member.member_id, member.member_epoch

        def expire() -> None:
            current = self.groups.get(group_id)
            if current is None:
                return
            stuck = current.members.get(member_id)
            if stuck is not None and stuck.member_epoch == epoch:
                self.fence(current, member_id)

        self._timers.schedule(key, self._now() + max(member.rebalance_timeout_ms, 0), expire)

    # -- consumer groups seen by other requests -----------------------------------

    def describe(self, request: ConsumerGroupDescribeInput) -> ConsumerGroupDescribeOutput:
        """Handle a ConsumerGroupDescribe."""
        names = {info.topic_id: name for name, info in request.topics.items()}

        def named(
            assignment: Mapping[uuid.UUID, frozenset[int]],
        ) -> tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]:
            return tuple(
                (topic, names.get(topic, ""), tuple(sorted(parts)))
                for topic, parts in sorted(assignment.items(), key=lambda e: names.get(e[0], ""))
            )

        out = []
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            if group is None:
                message = (
                    f"Group {group_id} is not a consumer group."
                    if group_id in self._classic
                    else f"Group {group_id} not found."
                )
                out.append(DescribedConsumerGroup(group_id, ErrorCode.group_id_not_found, message))
                continue
            out.append(
                DescribedConsumerGroup(
                    group_id,
                    ErrorCode.none,
                    group_state=group.state.value,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    assignor_name=self.preferred_assignor(group),
                    members=tuple(
                        copy_fields(
                            DescribedConsumerMember,
                            m,
                            assignment=named(m.held()),
                            target_assignment=named(group.target.get(m.member_id, {})),
                        )
                        for m in group.members.values()
                    ),
                )
            )
        return ConsumerGroupDescribeOutput(tuple(out))

    def offset_commit_error(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        version: int,
        partitions: Sequence[tuple[str, int]] = (),
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` (non-transactional).

        An epoch older than the member's is accepted when the member was given
        every committed partition at that epoch or earlier (KIP-1251, Kafka 4.3).

        Args:
            group: The consumer group.
            member_id: The committing member.
            member_epoch: The epoch the commit carries.
            version: The OffsetCommit version.
            partitions: The committed partitions, ``(topic name, index)``.
        """
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if version < 9:
            return ErrorCode.unsupported_version
        if member_epoch == member.member_epoch:
            return None
        if member_epoch < member.member_epoch and partitions:
            since = member.assignment_epochs
            ids = group.topic_ids
            if all(
                name in ids and since.get((ids[name], p), member_epoch + 1) <= member_epoch
                for name, p in partitions
            ):
                return None
        return ErrorCode.stale_member_epoch

    def offset_fetch_error(
        self, group: ConsumerGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``."""
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def yield_to_classic(self, group_id: str) -> bool | None:
        """Make way for a classic group: an empty consumer group of that id is dropped.

        Returns:
            None if there is no consumer group ``group_id``, True if it was
            empty and dropped (its offsets stay), False if it has members.
        """
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return False
        del self.groups[group_id]
        return True

    def delete(self, group_id: str) -> ErrorCode | None:
        """Delete an empty consumer group; None if ``group_id`` is not one."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none
