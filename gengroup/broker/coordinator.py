"""The embedded broker's classic group coordinator, as a sans-IO state machine.

Theory of operation
===================

This module reproduces Apache Kafka's *classic* group coordinator (the
JoinGroup / SyncGroup / Heartbeat / LeaveGroup protocol, plus the offset and
admin requests that consult group state). It was written against the
``group-coordinator`` module of Apache Kafka (``GroupMetadataManager``'s
``classicGroup*`` methods, ``classic/ClassicGroup``, ``ClassicGroupMember``,
``ClassicGroupState``, ``OffsetMetadataManager`` and ``GroupCoordinatorService``)
and keeps its structure: the private methods below carry the names of the Java
methods they mirror, so the two can be read side by side. Error precedence,
response field values and generation numbering follow Kafka; the few
deliberate differences are listed under "Divergences from Apache Kafka".

No I/O and no clock
-------------------

The coordinator never reads a clock and never touches a socket. Every entry
point takes ``now_ms`` (integer milliseconds on any monotonic time base, e.g.
``trio.current_time() * 1000`` rounded) and a *token*, an opaque object the
caller uses to recognise the request later. It returns a list of
:class:`Reply` objects, each pairing a token with the response to send. A
request may be answered at once (its own token is in the returned list), or
*parked* (JoinGroup waiting for the rebalance, SyncGroup waiting for the
leader's assignment); a parked request is answered by a later call, possibly
one made for another member's request or by :meth:`GroupCoordinator.advance`.
One call can therefore answer many tokens: completing a join answers every
parked JoinGroup of the group.

Timers replace Kafka's ``CoordinatorTimer``: keyed deadlines for the delayed
join (``join-<group>``), the pending-sync expiry (``sync-<group>``) and each
member's session expiry (``heartbeat-<group>-<member>``). Scheduling a key that
already exists replaces it, as in Kafka. :meth:`GroupCoordinator.next_deadline`
is the earliest deadline; the driver sleeps until then (``trio.sleep_until``)
and calls :meth:`GroupCoordinator.advance`. Every entry point first fires the
timers that are due at ``now_ms``, so a late driver cannot make a request
observe an expired member as alive. A timer fires "on time": while it runs, the
coordinator's clock reads the timer's deadline, not the later ``now_ms`` of the
call that fired it, so the outcome does not depend on how late the driver woke
up. Time never goes backwards: a ``now_ms`` smaller than one already seen is
raised to it. A timer scheduled with a zero delay becomes due at the current
time; it fires on the next call (the driver sees ``next_deadline() <= now``),
which is how Kafka's timer thread runs it "immediately after" the request.

A driver therefore looks like::

    replies = coordinator.join_group(now, token, request)   # any request
    send(replies)
    ...
    # in a timer task:
    await trio.sleep_until(coordinator.next_deadline() / 1000)
    send(coordinator.advance(now))

Group life cycle
----------------

``Empty`` -> ``PreparingRebalance`` when a member joins. The first rebalance of
an empty group waits ``initial_rebalance_delay_ms`` and is extended while new
members keep arriving (Kafka's ``InitialDelayedJoin``: when the delay expires,
if a member was added meanwhile and ``remaining`` is not 0, wait again
``min(delay, remaining)`` with ``remaining = max(remaining - delay, 0)``, where
the first ``remaining`` is ``max(rebalance_timeout - delay, 0)``); it never
completes early. Other rebalances wait up to the largest member rebalance
timeout and complete as soon as every member (and no pending KIP-394 member) is
parked in JoinGroup. Completing the join removes the dynamic members that did
not rejoin, elects a new leader among the joined members if needed, increments
the generation, selects the protocol by vote and answers every parked JoinGroup
(only the leader receives the member list). The group is then
``CompletingRebalance`` (or ``Empty`` if nobody is left; the generation still
increments), and a pending-sync timer of the rebalance timeout starts. The
leader's SyncGroup stores the assignment, answers all parked SyncGroups and
moves the group to ``Stable``; members that have not sent SyncGroup when the
pending-sync timer fires are removed and a new rebalance starts. ``Dead`` is
reached only when a group is deleted.

The transition table (:data:`TRANSITIONS`) lists, for each state, the events
that may occur in it. An event that is not allowed raises
:class:`IllegalTransitionError` naming the group, the state and the event, and
poisons the coordinator: the failure is a bug in this module, the groups may be
half-updated, so every later call raises :class:`CoordinatorPoisonedError`.
Any other unexpected exception raised while handling a call poisons it too.

What the server must do around it
---------------------------------

The coordinator works on version-independent dataclasses. The server that
drives it translates requests and responses and applies the checks Kafka makes
outside the group coordinator (``KafkaApis`` and the request classes):

* JoinGroup v0 has no rebalance timeout: pass ``rebalance_timeout_ms =
  session_timeout_ms``. Set ``require_known_member_id = version >= 4`` and
  ``version``. Before v7 an absent protocol name is sent as ``""``.
* LeaveGroup v0-v2 carry a single member id: pass it as a one-element batch,
  and report the member's error at the top level of the v0-v2 response.
* OffsetCommit: topics or partitions the broker does not host are answered
  ``UNKNOWN_TOPIC_OR_PARTITION`` by ``KafkaApis`` and never reach the
  coordinator; filter them out before calling :meth:`offset_commit`.
* OffsetFetch before v8 addresses one group: wrap it as a one-group batch.

Divergences from Apache Kafka
-----------------------------

* **Member and group order.** Kafka keeps members in a ``java.util.HashMap``
  keyed by member id, so "the first member" (the new leader when the leader
  leaves or did not rejoin) and the order of the member list sent to the leader
  and shown by DescribeGroups depend on the hash of random member ids. Here
  members are kept in insertion order (join order), which is deterministic and
  just as arbitrary from a client's point of view: when a leader is replaced,
  the earliest-joined eligible member becomes leader. Likewise ListGroups lists
  groups in creation order rather than hash order.
* **Protocol vote ties.** Kafka counts votes in a ``HashMap`` and keeps the first
  protocol with the highest count in that map's iteration order. The vote here
  reproduces that order (Java's ``String.hashCode`` and ``HashMap`` bucket
  layout), so ties between protocols in different buckets resolve as in Kafka;
  protocols sharing a bucket keep first-vote order.
* **Duplicate protocol names** in one JoinGroup count once towards the group's
  supported-protocol tally. Kafka counts each occurrence, which can make a
  protocol look supported by every member when it is not and then fail the
  vote with an internal error.
* **Storage never fails.** Kafka completes SyncGroup, static-member replacement
  and offset commits after a write to ``__consumer_offsets``; here the write is
  instantaneous and cannot fail, so the append-failure branches (which answer
  COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR and revert) do not exist.
* **No offset expiry and no group expiry.** Kafka's periodic clean-up
  (``offsets.retention.minutes``, ``offsets.retention.check.interval.ms``)
  deletes old offsets and empty groups without offsets. Here offsets and empty
  groups stay until DeleteGroups. Offsets fetched with "all topics" come back in
  first-commit order.
* **No transactions.** There are no transactional offset commits, so
  ``require_stable`` in OffsetFetch is accepted and has no effect
  (UNSTABLE_OFFSET_COMMIT is never returned).
* **Dead is transient.** A deleted group passes through ``Dead`` and is dropped
  at once, so no request ever finds a ``Dead`` group (Kafka also drops deleted
  groups; its remaining ``Dead`` cases come from coordinator fail-over, which
  does not exist here). The ``Dead`` branches are kept for fidelity:
  COORDINATOR_NOT_AVAILABLE for JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
  OffsetCommit, GROUP_ID_NOT_FOUND for DeleteGroups.
* **Classic groups only.** KIP-848 consumer groups, share groups and streams
  groups, and the online upgrade/downgrade between them, are not implemented;
  ListGroups' type filter matches only ``"classic"``.
* **Zero rebalance timeout.** When a join cannot complete because no member
  rejoined, Kafka re-arms the join timer with the group's rebalance timeout; a
  timeout of 0 would make it spin. Here that re-arm waits at least 1 ms.
* **Clean-up of superseded parked requests.** As in Kafka, a second JoinGroup
  (or SyncGroup) from a member that already has one parked replaces it and the
  first one is never answered; the same goes for a parked SyncGroup of a member
  that leaves. The server should drop such tokens when their connection closes.
* **Unexpected failures poison the coordinator** (see above) instead of being
  answered UNKNOWN_SERVER_ERROR with the state rolled back by Kafka's timeline
  data structures. The one client-reachable ``IllegalStateException`` of Kafka's
  classic JoinGroup (a pending KIP-394 member rejoining with a group instance
  id) is answered UNKNOWN_SERVER_ERROR without any state change, as in Kafka.
"""

from __future__ import annotations

import enum
import heapq
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from kio.schema.errors import ErrorCode

from .. import _java

__all__ = [
    "TRANSITIONS",
    "ClassicGroup",
    "ClassicGroupMember",
    "CoordinatorConfig",
    "CoordinatorPoisonedError",
    "DeletableGroupResult",
    "DeleteGroupsInput",
    "DeleteGroupsOutput",
    "DescribeGroupsInput",
    "DescribeGroupsOutput",
    "DescribedGroup",
    "DescribedGroupMember",
    "GroupCoordinator",
    "GroupCoordinatorError",
    "GroupEvent",
    "GroupState",
    "HeartbeatInput",
    "HeartbeatOutput",
    "IllegalTransitionError",
    "JoinGroupInput",
    "JoinGroupMember",
    "JoinGroupOutput",
    "LeaveGroupInput",
    "LeaveGroupMemberOutput",
    "LeaveGroupOutput",
    "ListGroupsInput",
    "ListGroupsOutput",
    "ListedGroup",
    "MemberIdentity",
    "OffsetCommitInput",
    "OffsetCommitOutput",
    "OffsetCommitPartition",
    "OffsetCommitPartitionOutput",
    "OffsetCommitTopic",
    "OffsetCommitTopicOutput",
    "OffsetFetchGroup",
    "OffsetFetchGroupOutput",
    "OffsetFetchInput",
    "OffsetFetchOutput",
    "OffsetFetchPartitionOutput",
    "OffsetFetchTopic",
    "OffsetFetchTopicOutput",
    "Reply",
    "Response",
    "SyncGroupInput",
    "SyncGroupOutput",
    "default_member_id",
]

JAVA_INT_MAX: Final = 2**31 - 1
"""``Integer.MAX_VALUE``, Kafka's default ``group.max.size``."""

NO_OFFSET: Final = -1
"""Committed offset reported for a partition without a committed offset."""

NO_LEADER_EPOCH: Final = -1
"""Leader epoch reported when none was committed."""

CLASSIC_GROUP_TYPE: Final = "classic"
"""The group type reported by ListGroups v5+."""


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class GroupCoordinatorError(Exception):
    """Base class of the coordinator's own exceptions (all of them are bugs)."""


class IllegalTransitionError(GroupCoordinatorError):
    """An event occurred in a group state that does not allow it.

    Attributes:
        group_id: The group concerned.
        state: The state the group was in.
        event: The event that is not allowed in that state.
    """

    def __init__(self, group_id: str, state: GroupState, event: GroupEvent) -> None:
        super().__init__(
            f"group {group_id!r}: event {event.value!r} is not allowed in state {state.value!r}"
        )
        self.group_id = group_id
        self.state = state
        self.event = event


class CoordinatorPoisonedError(GroupCoordinatorError):
    """The coordinator failed earlier and refuses to process anything else.

    The original failure is chained as ``__cause__``.
    """


# ---------------------------------------------------------------------------
# States and the transition table
# ---------------------------------------------------------------------------


class GroupState(enum.Enum):
    """The state of a classic group; values are Kafka's state names."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(enum.Enum):
    """What moves a group from one state to another."""

    PREPARE_REBALANCE = "prepare_rebalance"
    """A rebalance starts (Kafka's ``prepareRebalance``)."""
    COMPLETE_JOIN = "complete_join"
    """The join phase ends with members left (``initNextGeneration``)."""
    COMPLETE_JOIN_EMPTY = "complete_join_empty"
    """The join phase ends with no member left (``initNextGeneration``)."""
    STORE_ASSIGNMENT = "store_assignment"
    """The leader's SyncGroup assignment is stored and propagated."""
    DELETE = "delete"
    """The group is deleted (DeleteGroups)."""


_S = GroupState
_E = GroupEvent

TRANSITIONS: Final[Mapping[tuple[GroupState, GroupEvent], GroupState]] = {
    (_S.EMPTY, _E.PREPARE_REBALANCE): _S.PREPARING_REBALANCE,
    (_S.STABLE, _E.PREPARE_REBALANCE): _S.PREPARING_REBALANCE,
    (_S.COMPLETING_REBALANCE, _E.PREPARE_REBALANCE): _S.PREPARING_REBALANCE,
    (_S.PREPARING_REBALANCE, _E.COMPLETE_JOIN): _S.COMPLETING_REBALANCE,
    (_S.PREPARING_REBALANCE, _E.COMPLETE_JOIN_EMPTY): _S.EMPTY,
    (_S.COMPLETING_REBALANCE, _E.STORE_ASSIGNMENT): _S.STABLE,
    (_S.EMPTY, _E.DELETE): _S.DEAD,
    (_S.PREPARING_REBALANCE, _E.DELETE): _S.DEAD,
    (_S.COMPLETING_REBALANCE, _E.DELETE): _S.DEAD,
    (_S.STABLE, _E.DELETE): _S.DEAD,
    (_S.DEAD, _E.DELETE): _S.DEAD,
}
"""``(state, event) -> next state``; Kafka's ``ClassicGroupState`` valid moves."""


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def default_member_id(prefix: str) -> str:
    """Kafka's member id: ``prefix-<uuid4>``.

    Args:
        prefix: The group instance id for a static member, else the client id.

    Returns:
        A new member id.
    """
    return f"{prefix}-{uuid.uuid4()}"


@dataclass(frozen=True)
class CoordinatorConfig:
    """Broker settings that shape the classic group protocol.

    Attributes:
        initial_rebalance_delay_ms: ``group.initial.rebalance.delay.ms``.
        min_session_timeout_ms: ``group.min.session.timeout.ms``.
        max_session_timeout_ms: ``group.max.session.timeout.ms``.
        max_group_size: ``group.max.size``.
        new_member_join_timeout_ms: How long a new member may stay parked in
            its first JoinGroup (Kafka's internal
            ``classicGroupNewMemberJoinTimeoutMs``, 5 minutes).
        offset_metadata_max_bytes: ``offset.metadata.max.bytes``; longer commit
            metadata is refused with OFFSET_METADATA_TOO_LARGE. Measured, as in
            Java, in UTF-16 code units.
        member_id_generator: Makes a member id from a prefix (the group
            instance id of a static member, else the client id). Inject a
            deterministic one in tests.
    """

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_group_size: int = JAVA_INT_MAX
    new_member_join_timeout_ms: int = 300000
    offset_metadata_max_bytes: int = 4096
    member_id_generator: Callable[[str], str] = default_member_id


# ---------------------------------------------------------------------------
# Inputs and outputs
# ---------------------------------------------------------------------------


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
class SyncGroupInput:
    """A SyncGroup request.

    Attributes:
        group_id: The group.
        generation_id: The generation the member joined.
        member_id: The member's id.
        group_instance_id: Its group instance id, or None.
        protocol_type: The protocol type (v5+; None before).
        protocol_name: The protocol name (v5+; None before).
        assignments: ``(member_id, assignment)`` pairs; only the leader's are
            used.
        version: The request's API version (v5+ requires protocol type and
            name).
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
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
class HeartbeatInput:
    """A Heartbeat request.

    Attributes:
        group_id: The group.
        generation_id: The member's generation.
        member_id: The member's id.
        group_instance_id: Its group instance id, or None.
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


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
    """

    group_id: str | None
    topics: Sequence[OffsetFetchTopic] | None = None


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
class OffsetFetchOutput:
    """An OffsetFetch response.

    Attributes:
        groups: One entry per requested group, in request order.
    """

    groups: tuple[OffsetFetchGroupOutput, ...]


@dataclass(frozen=True)
class DescribeGroupsInput:
    """A DescribeGroups request.

    Attributes:
        group_ids: The groups (None stands for a null group id).
    """

    group_ids: Sequence[str | None]


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
class DescribeGroupsOutput:
    """A DescribeGroups response.

    Attributes:
        groups: One entry per requested group, in request order.
    """

    groups: tuple[DescribedGroup, ...]


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
        group_type: Always ``"classic"``.
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
class DeleteGroupsInput:
    """A DeleteGroups request.

    Attributes:
        group_ids: The groups (None stands for a null group id).
    """

    group_ids: Sequence[str | None]


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


# ---------------------------------------------------------------------------
# Group model
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parked:
    """A parked request: the caller's token, answered later."""

    token: object


_Emit: TypeAlias = Callable[[object, Response], None]


@dataclass(eq=False)
class ClassicGroupMember:
    """A member of a classic group (Kafka's ``ClassicGroupMember``).

    Attributes:
        member_id: The member id.
        group_instance_id: The group instance id of a static member, or None.
        client_id: The client id it joined with.
        client_host: The client host it joined with.
        rebalance_timeout_ms: Its rebalance timeout.
        session_timeout_ms: Its session timeout.
        protocol_type: The protocol type it joined with.
        protocols: Its ``(name, metadata)`` protocols, in preference order.
        assignment: Its assignment from the last SyncGroup.
        is_new: True until its first join completes; a new member's session
            can expire even while it is parked in JoinGroup.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    is_new: bool = False
    _awaiting_join: _Parked | None = field(default=None, init=False, repr=False)
    _awaiting_sync: _Parked | None = field(default=None, init=False, repr=False)

    @property
    def is_static(self) -> bool:
        """Whether the member has a group instance id."""
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        """Whether a JoinGroup of this member is parked."""
        return self._awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        """Whether a SyncGroup of this member is parked."""
        return self._awaiting_sync is not None

    def protocol_names(self) -> frozenset[str]:
        """The names of the member's protocols."""
        return frozenset(name for name, _ in self.protocols)

    def metadata(self, protocol_name: str | None) -> bytes:
        """The member's metadata for ``protocol_name``.

        Raises:
            GroupCoordinatorError: If the member does not support it (a bug).
        """
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise GroupCoordinatorError(
            f"member {self.member_id!r} does not support protocol {protocol_name!r}"
        )

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` equal the member's, in the same order."""
        return tuple((name, bytes(metadata)) for name, metadata in protocols) == self.protocols

    def vote(self, candidates: frozenset[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise GroupCoordinatorError(
            f"member {self.member_id!r} supports none of the candidate protocols"
        )

    def has_satisfied_heartbeat(self) -> bool:
        """Whether an expiring session timer should spare the member.

        A member parked in JoinGroup or SyncGroup is alive, unless it is new.
        """
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


class ClassicGroup:
    """One classic group's metadata (Kafka's ``ClassicGroup``).

    The coordinator owns and mutates groups; read them through
    :meth:`GroupCoordinator.group` for inspection only.
    """

    def __init__(self, group_id: str, now_ms: int, emit: _Emit) -> None:
        self.group_id: Final = group_id
        self._state = GroupState.EMPTY
        self._previous_state = GroupState.DEAD
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.new_member_added = False
        self._emit = emit
        self._members: dict[str, ClassicGroupMember] = {}
        self._static_members: dict[str, str] = {}
        self._pending_join: dict[str, None] = {}
        self._pending_sync: dict[str, None] = {}
        self._supported_protocols: dict[str, int] = {}

    # -- state -------------------------------------------------------------

    @property
    def state(self) -> GroupState:
        """The current state."""
        return self._state

    @property
    def previous_state(self) -> GroupState:
        """The state before the current one (``Dead`` initially, as in Kafka)."""
        return self._previous_state

    def transition(self, event: GroupEvent, now_ms: int) -> None:
        """Apply ``event`` according to :data:`TRANSITIONS`.

        Raises:
            IllegalTransitionError: If the event is not allowed in this state.
        """
        target = TRANSITIONS.get((self._state, event))
        if target is None:
            raise IllegalTransitionError(self.group_id, self._state, event)
        self._previous_state = self._state
        self._state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        """Whether a rebalance can start (Stable, CompletingRebalance, Empty)."""
        return (self._state, GroupEvent.PREPARE_REBALANCE) in TRANSITIONS

    # -- members -----------------------------------------------------------

    @property
    def members(self) -> Mapping[str, ClassicGroupMember]:
        """The members by id, in join order."""
        return self._members

    @property
    def pending_members(self) -> tuple[str, ...]:
        """Ids handed out with MEMBER_ID_REQUIRED that have not rejoined yet."""
        return tuple(self._pending_join)

    @property
    def pending_sync_members(self) -> tuple[str, ...]:
        """Members of the current generation that have not sent SyncGroup yet."""
        return tuple(self._pending_sync)

    def member(self, member_id: str) -> ClassicGroupMember:
        """The member with id ``member_id`` (it must exist)."""
        return self._members[member_id]

    def has_member(self, member_id: str) -> bool:
        """Whether ``member_id`` is a member."""
        return member_id in self._members

    def is_leader(self, member_id: str) -> bool:
        """Whether ``member_id`` is the leader."""
        return self.leader_id is not None and self.leader_id == member_id

    def static_member_id(self, group_instance_id: str) -> str | None:
        """The member id currently mapped to ``group_instance_id``."""
        return self._static_members.get(group_instance_id)

    def is_pending_member(self, member_id: str) -> bool:
        """Whether ``member_id`` was handed out with MEMBER_ID_REQUIRED."""
        return member_id in self._pending_join

    def num_awaiting_join(self) -> int:
        """The number of members with a parked JoinGroup."""
        return sum(1 for member in self._members.values() if member.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        """Every member is parked in JoinGroup and no pending member remains."""
        return len(self._members) == self.num_awaiting_join() and not self._pending_join

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    def add(self, member: ClassicGroupMember, parked: _Parked | None) -> None:
        """Add a member, parked in JoinGroup when ``parked`` is given."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self._static_members:
                raise GroupCoordinatorError(
                    f"static member {member.group_instance_id!r} is already in the group"
                )
            self._static_members[member.group_instance_id] = member.member_id
        if not self._members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise GroupCoordinatorError("the group and member's protocol type must be the same")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise GroupCoordinatorError("none of the member's protocols can be supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self._members[member.member_id] = member
        self._increment_supported_protocols(member)
        member._awaiting_join = parked
        self._pending_join.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        """Remove a member (or a pending member); elect a new leader if needed.

        Parked requests of the member are not answered here.
        """
        removed = self._members.pop(member_id, None)
        if removed is not None:
            self._decrement_supported_protocols(removed)
            if removed.group_instance_id is not None:
                self._static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self._members), None)
        self._pending_join.pop(member_id, None)
        self._pending_sync.pop(member_id, None)

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        parked: _Parked | None,
    ) -> None:
        """Update a rejoining member; a parked JoinGroup replaces any previous one."""
        self._decrement_supported_protocols(member)
        member.protocols = protocols
        self._increment_supported_protocols(member)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member._awaiting_join = parked

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicGroupMember:
        """Give a static member a new member id, fencing the old one.

        Parked requests of the old member id are answered FENCED_INSTANCE_ID.
        The new member keeps the old one's metadata and assignment.
        """
        removed = self._members.pop(old_member_id, None)
        if removed is None:
            raise GroupCoordinatorError(f"cannot replace non-existing member {old_member_id!r}")
        self.complete_join(
            removed,
            JoinGroupOutput(ErrorCode.fenced_instance_id, member_id=old_member_id, leader=""),
        )
        self.complete_sync(removed, SyncGroupOutput(ErrorCode.fenced_instance_id))
        new_member = ClassicGroupMember(
            member_id=new_member_id,
            group_instance_id=removed.group_instance_id,
            client_id=removed.client_id,
            client_host=removed.client_host,
            rebalance_timeout_ms=removed.rebalance_timeout_ms,
            session_timeout_ms=removed.session_timeout_ms,
            protocol_type=removed.protocol_type,
            protocols=removed.protocols,
            assignment=removed.assignment,
        )
        self._members[new_member_id] = new_member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self._static_members[group_instance_id] = new_member_id
        return new_member

    def add_pending_member(self, member_id: str) -> None:
        """Remember an id handed out with MEMBER_ID_REQUIRED."""
        if member_id in self._members:
            raise GroupCoordinatorError(f"pending member {member_id!r} is already a member")
        self._pending_join[member_id] = None

    def add_pending_sync_member(self, member_id: str) -> None:
        """Expect a SyncGroup from ``member_id``."""
        self._pending_sync[member_id] = None

    def remove_pending_sync_member(self, member_id: str) -> None:
        """A SyncGroup from ``member_id`` arrived."""
        self._pending_sync.pop(member_id, None)

    def has_received_sync_from_all_members(self) -> bool:
        """Whether no SyncGroup is still expected."""
        return not self._pending_sync

    def clear_pending_sync_members(self) -> None:
        """Forget the expected SyncGroups."""
        self._pending_sync.clear()

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        """Members without a parked JoinGroup."""
        return [m for m in self._members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined.

        Returns:
            False if there is no leader, or if the leader did not rejoin and no
            other member did either.
        """
        if self.leader_id is None:
            return False
        if self._members[self.leader_id].is_awaiting_join:
            return True
        for member in self._members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``validateMember``: FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID.

        Returns:
            The error, or None when the member is valid.
        """
        if group_instance_id is not None:
            existing = self._static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self._members:
            return ErrorCode.unknown_member_id
        return None

    # -- protocols ---------------------------------------------------------

    def _increment_supported_protocols(self, member: ClassicGroupMember) -> None:
        for name in dict.fromkeys(name for name, _ in member.protocols):
            self._supported_protocols[name] = self._supported_protocols.get(name, 0) + 1

    def _decrement_supported_protocols(self, member: ClassicGroupMember) -> None:
        for name in dict.fromkeys(name for name, _ in member.protocols):
            self._supported_protocols[name] = self._supported_protocols.get(name, 0) - 1

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Whether a member with these protocols may join.

        An Empty group accepts any non-empty protocol type and protocol list;
        otherwise the type must match and one protocol must be supported by
        every current member.
        """
        names = set(protocol_names)
        if self._state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols.get(name, 0) == len(self._members) for name in names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first-choice votes."""
        if not self._members:
            raise GroupCoordinatorError("cannot select a protocol for an empty group")
        size = len(self._members)
        candidates = frozenset(
            name for name, count in self._supported_protocols.items() if count == size
        )
        votes: dict[str, int] = {}
        for member in self._members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best: str | None = None
        for name in _java.hashmap_order(list(votes)):
            if best is None or votes[name] > votes[best]:
                best = name
        assert best is not None
        return best

    def init_next_generation(self, now_ms: int) -> None:
        """Start the next generation (the generation increments even if empty)."""
        self.generation_id += 1
        if self._members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupEvent.COMPLETE_JOIN, now_ms)
        else:
            self.protocol_name = None
            self.transition(GroupEvent.COMPLETE_JOIN_EMPTY, now_ms)
        self.clear_pending_sync_members()

    def current_members(self) -> tuple[JoinGroupMember, ...]:
        """The member list sent to the leader."""
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self._members.values()
        )

    # -- parked requests ---------------------------------------------------

    def complete_join(self, member: ClassicGroupMember, response: JoinGroupOutput) -> bool:
        """Answer the member's parked JoinGroup, if any."""
        parked = member._awaiting_join
        if parked is None:
            return False
        member._awaiting_join = None
        self._emit(parked.token, response)
        return True

    def complete_sync(self, member: ClassicGroupMember, response: SyncGroupOutput) -> bool:
        """Answer the member's parked SyncGroup, if any."""
        parked = member._awaiting_sync
        if parked is None:
            return False
        member._awaiting_sync = None
        self._emit(parked.token, response)
        return True


# ---------------------------------------------------------------------------
# Timers
# ---------------------------------------------------------------------------


class _Timers:
    """Keyed one-shot timers; scheduling an existing key replaces it."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def schedule(self, key: Hashable, deadline_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        self._entries[key] = (deadline_ms, self._seq, action)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 2 * len(self._entries) + 64:
            self._heap = [(d, s, k) for k, (d, s, _) in self._entries.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def _discard_stale(self) -> None:
        while self._heap:
            _, seq, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        self._discard_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> tuple[int, Callable[[], None]] | None:
        self._discard_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        deadline, _, key = heapq.heappop(self._heap)
        _, _, action = self._entries.pop(key)
        return deadline, action

    def deadline_of(self, key: Hashable) -> int | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[0]


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def _heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


@dataclass(frozen=True)
class _StoredOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


def _is_protocol_inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


# ---------------------------------------------------------------------------
# The coordinator
# ---------------------------------------------------------------------------


class GroupCoordinator:
    """Kafka's classic group coordinator as a sans-IO state machine.

    Every request method takes the current time, a token identifying the
    request and the request itself, and returns the replies to send now: the
    request's own reply when it is answered at once, and replies to requests
    parked earlier that this call completed. Due timers fire first.

    Args:
        config: Broker settings; Kafka's defaults when omitted.
    """

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self._config = config if config is not None else CoordinatorConfig()
        self._groups: dict[str, ClassicGroup] = {}
        self._offsets: dict[str, dict[str, dict[int, _StoredOffset]]] = {}
        self._timers = _Timers()
        self._now = -(2**63)
        self._out: list[Reply] = []
        self._poisoned: BaseException | None = None

    # -- inspection --------------------------------------------------------

    @property
    def config(self) -> CoordinatorConfig:
        """The configuration."""
        return self._config

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        """The groups by id (read-only use)."""
        return self._groups

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
        return self._timers.deadline_of(_join_key(group_id))

    def sync_deadline(self, group_id: str) -> int | None:
        """The deadline of the group's pending-sync timer, or None."""
        return self._timers.deadline_of(_sync_key(group_id))

    def session_deadline(self, group_id: str, member_id: str) -> int | None:
        """The deadline of a member's (or pending member's) session timer, or None."""
        return self._timers.deadline_of(_heartbeat_key(group_id, member_id))

    # -- entry points ------------------------------------------------------

    def advance(self, now_ms: int) -> list[Reply]:
        """Fire every timer due at ``now_ms``.

        Args:
            now_ms: The current time.

        Returns:
            Replies to parked requests completed by the timers.
        """
        return self._call(now_ms, lambda: None)

    def join_group(self, now_ms: int, token: object, request: JoinGroupInput) -> list[Reply]:
        """Handle a JoinGroup request; it is usually parked.

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._classic_group_join(token, request))

    def sync_group(self, now_ms: int, token: object, request: SyncGroupInput) -> list[Reply]:
        """Handle a SyncGroup request; followers are parked until the leader syncs.

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._classic_group_sync(token, request))

    def heartbeat(self, now_ms: int, token: object, request: HeartbeatInput) -> list[Reply]:
        """Handle a Heartbeat request (always answered at once).

        Stable and CompletingRebalance answer NONE, PreparingRebalance answers
        REBALANCE_IN_PROGRESS; all three restart the member's session. Checked
        first, in order: INVALID_GROUP_ID (empty id), UNKNOWN_MEMBER_ID (unknown
        group), COORDINATOR_NOT_AVAILABLE (Dead), FENCED_INSTANCE_ID /
        UNKNOWN_MEMBER_ID (member), ILLEGAL_GENERATION. An Empty group has no
        members, so it answers UNKNOWN_MEMBER_ID.

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._classic_group_heartbeat(token, request))

    def leave_group(self, now_ms: int, token: object, request: LeaveGroupInput) -> list[Reply]:
        """Handle a LeaveGroup request (always answered at once).

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now, which may complete a parked join.
        """
        return self._call(now_ms, lambda: self._classic_group_leave(token, request))

    def offset_commit(self, now_ms: int, token: object, request: OffsetCommitInput) -> list[Reply]:
        """Handle an OffsetCommit request (always answered at once).

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._commit_offset(token, request))

    def offset_fetch(self, now_ms: int, token: object, request: OffsetFetchInput) -> list[Reply]:
        """Handle an OffsetFetch request (always answered at once).

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._fetch_offsets(token, request))

    def describe_groups(
        self, now_ms: int, token: object, request: DescribeGroupsInput
    ) -> list[Reply]:
        """Handle a DescribeGroups request (always answered at once).

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._describe_groups(token, request))

    def list_groups(self, now_ms: int, token: object, request: ListGroupsInput) -> list[Reply]:
        """Handle a ListGroups request (always answered at once).

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._list_groups(token, request))

    def delete_groups(self, now_ms: int, token: object, request: DeleteGroupsInput) -> list[Reply]:
        """Handle a DeleteGroups request (always answered at once).

        Args:
            now_ms: The current time.
            token: Identifies the request in the replies.
            request: The request.

        Returns:
            The replies to send now.
        """
        return self._call(now_ms, lambda: self._delete_groups(token, request))

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

    def _classic_group_join(self, token: object, request: JoinGroupInput) -> None:
        # GroupCoordinatorService.joinGroup
        if not request.group_id:
            self._emit(token, JoinGroupOutput(ErrorCode.invalid_group_id, request.member_id))
            return
        if not (
            self._config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._config.max_session_timeout_ms
        ):
            self._emit(token, JoinGroupOutput(ErrorCode.invalid_session_timeout, request.member_id))
            return

        # GroupMetadataManager.classicGroupJoinToClassicGroup
        is_unknown_member = request.member_id == ""
        group = self._groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                self._emit(token, JoinGroupOutput(ErrorCode.unknown_member_id, request.member_id))
                return
            group = self._create_group(request.group_id)

        parked = _Parked(token)
        if not self._accept_joining_member(group, request.member_id):
            group.remove(request.member_id)
            self._emit(token, JoinGroupOutput(ErrorCode.group_max_size_reached, ""))
        elif is_unknown_member:
            self._classic_group_join_new_member(parked, request, group)
        else:
            self._classic_group_join_existing_member(parked, request, group)

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
        self, parked: _Parked, request: JoinGroupInput, group: ClassicGroup
    ) -> None:
        if group.state is GroupState.DEAD:
            self._emit(parked.token, JoinGroupOutput(ErrorCode.coordinator_not_available, ""))
        elif not group.supports_protocols(
            request.protocol_type, (name for name, _ in request.protocols)
        ):
            self._emit(parked.token, JoinGroupOutput(ErrorCode.inconsistent_group_protocol, ""))
        else:
            prefix = (
                request.group_instance_id
                if request.group_instance_id is not None
                else request.client_id
            )
            new_member_id = self._config.member_id_generator(prefix)
            if request.group_instance_id is not None:
                self._classic_group_join_new_static_member(parked, request, group, new_member_id)
            else:
                self._classic_group_join_new_dynamic_member(parked, request, group, new_member_id)

    def _classic_group_join_new_static_member(
        self, parked: _Parked, request: JoinGroupInput, group: ClassicGroup, new_member_id: str
    ) -> None:
        assert request.group_instance_id is not None
        existing_member_id = group.static_member_id(request.group_instance_id)
        if existing_member_id is not None:
            self._update_static_member_then_rebalance_or_complete_join(
                parked, request, group, existing_member_id, new_member_id
            )
        else:
            self._add_member_then_rebalance_or_complete_join(parked, request, group, new_member_id)

    def _classic_group_join_new_dynamic_member(
        self, parked: _Parked, request: JoinGroupInput, group: ClassicGroup, new_member_id: str
    ) -> None:
        if request.require_known_member_id:
            # KIP-394: hand out an id and wait for the member to rejoin with it.
            group.add_pending_member(new_member_id)
            group_id = group.group_id
            self._schedule(
                _heartbeat_key(group_id, new_member_id),
                request.session_timeout_ms,
                lambda: self._expire_classic_group_member_heartbeat(group_id, new_member_id),
            )
            self._emit(parked.token, JoinGroupOutput(ErrorCode.member_id_required, new_member_id))
        else:
            self._add_member_then_rebalance_or_complete_join(parked, request, group, new_member_id)

    def _classic_group_join_existing_member(
        self, parked: _Parked, request: JoinGroupInput, group: ClassicGroup
    ) -> None:
        member_id = request.member_id
        if group.state is GroupState.DEAD:
            self._emit(
                parked.token, JoinGroupOutput(ErrorCode.coordinator_not_available, member_id)
            )
            return
        if not group.supports_protocols(
            request.protocol_type, (name for name, _ in request.protocols)
        ):
            self._emit(
                parked.token, JoinGroupOutput(ErrorCode.inconsistent_group_protocol, member_id)
            )
            return
        if group.is_pending_member(member_id):
            if request.group_instance_id is not None:
                # Kafka throws IllegalStateException here: UNKNOWN_SERVER_ERROR.
                self._emit(parked.token, JoinGroupOutput(ErrorCode.unknown_server_error, ""))
                return
            self._add_member_then_rebalance_or_complete_join(parked, request, group, member_id)
            return

        error = group.validate_member(member_id, request.group_instance_id)
        if error is not None:
            self._emit(parked.token, JoinGroupOutput(error, member_id))
            return

        member = group.member(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_then_rebalance_or_complete_join(parked, request, group, member)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # Same metadata (it may have missed the JoinGroup response):
                # return the current generation.
                self._emit(
                    parked.token,
                    self._current_generation_join_output(
                        group, member_id, with_members=group.is_leader(member_id)
                    ),
                )
            else:
                self._update_member_then_rebalance_or_complete_join(parked, request, group, member)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # The leader rejoining forces a rebalance (e.g. topic metadata
                # changed); so do changed protocols.
                self._update_member_then_rebalance_or_complete_join(parked, request, group, member)
            else:
                self._emit(
                    parked.token,
                    self._current_generation_join_output(group, member_id, with_members=False),
                )
        else:
            self._emit(parked.token, JoinGroupOutput(ErrorCode.unknown_member_id, member_id))

    @staticmethod
    def _current_generation_join_output(
        group: ClassicGroup, member_id: str, *, with_members: bool
    ) -> JoinGroupOutput:
        return JoinGroupOutput(
            ErrorCode.none,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=False,
            members=group.current_members() if with_members else (),
        )

    def _update_member_then_rebalance_or_complete_join(
        self,
        parked: _Parked,
        request: JoinGroupInput,
        group: ClassicGroup,
        member: ClassicGroupMember,
    ) -> None:
        group.update_member(
            member,
            tuple((name, bytes(metadata)) for name, metadata in request.protocols),
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            parked,
        )
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _add_member_then_rebalance_or_complete_join(
        self, parked: _Parked, request: JoinGroupInput, group: ClassicGroup, member_id: str
    ) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple((name, bytes(metadata)) for name, metadata in request.protocols),
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
        parked: _Parked,
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
        group.update_member(
            new_member,
            tuple((name, bytes(metadata)) for name, metadata in request.protocols),
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            parked,
        )
        state = group.state
        if state is GroupState.STABLE:
            # No rebalance unless the selected protocol would change.
            if (group.protocol_name or "") == group.select_protocol():
                if request.version >= 9:
                    is_leader = group.is_leader(new_member_id)
                    response = JoinGroupOutput(
                        ErrorCode.none,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=is_leader,
                        members=group.current_members() if is_leader else (),
                    )
                else:
                    # Before v9 the previous leader id is returned, so that a
                    # replaced leader does not compute a new assignment.
                    response = JoinGroupOutput(
                        ErrorCode.none,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader or "",
                        skip_assignment=False,
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
                _join_key(group_id),
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
                _join_key(group_id),
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
                _join_key(group_id),
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
        self._timers.cancel(_join_key(group_id))

        for failed in group.not_yet_rejoined_members():
            if not failed.is_static:
                group.remove(failed.member_id)
                self._timers.cancel(_heartbeat_key(group_id, failed.member_id))

        if group.state is GroupState.DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members remain): wait again until
            # session timeouts remove the unresponsive members.
            self._schedule(
                _join_key(group_id),
                max(group.rebalance_timeout_ms(), 1),
                lambda: self._complete_classic_group_join_by_id(group_id),
            )
            return

        group.init_next_generation(self._now)
        if group.state is GroupState.EMPTY:
            return
        for member in list(group.members.values()):
            is_leader = group.is_leader(member.member_id)
            group.complete_join(
                member,
                JoinGroupOutput(
                    ErrorCode.none,
                    member_id=member.member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader_id or "",
                    skip_assignment=False,
                    members=group.current_members() if is_leader else (),
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
            _sync_key(group_id),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group_id, generation_id),
        )

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.clear_pending_sync_members()
        self._timers.cancel(_sync_key(group.group_id))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self._groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.has_received_sync_from_all_members():
            return
        for member_id in group.pending_sync_members:
            group.remove(member_id)
            self._timers.cancel(_heartbeat_key(group_id, member_id))
        self._prepare_rebalance(group)

    # -- sessions ----------------------------------------------------------

    def _reschedule_classic_group_member_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, timeout_ms: int | None = None
    ) -> None:
        group_id = group.group_id
        member_id = member.member_id
        self._schedule(
            _heartbeat_key(group_id, member_id),
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

    def _classic_group_sync(self, token: object, request: SyncGroupInput) -> None:
        if not request.group_id:
            self._emit(token, SyncGroupOutput(ErrorCode.invalid_group_id))
            return
        if request.version >= 5 and (
            request.protocol_type is None or request.protocol_name is None
        ):
            # KafkaApis: from v5 the protocol type and name are mandatory.
            self._emit(token, SyncGroupOutput(ErrorCode.inconsistent_group_protocol))
            return
        group = self._groups.get(request.group_id)
        if group is None or group.state is GroupState.EMPTY:
            self._emit(token, SyncGroupOutput(ErrorCode.unknown_member_id))
            return

        error = self._validate_sync_group(group, request)
        if error is not None:
            self._emit(token, SyncGroupOutput(error))
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._emit(token, SyncGroupOutput(ErrorCode.rebalance_in_progress))
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member = group.member(request.member_id)
            member._awaiting_sync = _Parked(token)
            self._remove_pending_sync_member(group, request.member_id)
            if group.is_leader(request.member_id):
                assignment: dict[str, bytes] = {}
                for assigned_member_id, data in request.assignments:
                    assignment[assigned_member_id] = bytes(data)
                for member_id in group.members:
                    assignment.setdefault(member_id, b"")
                # Kafka stores the assignment first; the write cannot fail here.
                if (
                    group.state is GroupState.COMPLETING_REBALANCE
                    and request.generation_id == group.generation_id
                ):
                    self._set_and_propagate_assignment(group, assignment)
                    group.transition(GroupEvent.STORE_ASSIGNMENT, self._now)
        elif group.state is GroupState.STABLE:
            self._remove_pending_sync_member(group, request.member_id)
            member = group.member(request.member_id)
            self._emit(
                token,
                SyncGroupOutput(
                    ErrorCode.none,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
        else:
            raise GroupCoordinatorError(f"SyncGroup reached group {group.group_id!r} while Dead")

    @staticmethod
    def _validate_sync_group(group: ClassicGroup, request: SyncGroupInput) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.illegal_generation
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
            self._timers.cancel(_sync_key(group.group_id))

    def _reset_and_propagate_assignment_with_error(
        self, group: ClassicGroup, error: ErrorCode
    ) -> None:
        if group.state is not GroupState.COMPLETING_REBALANCE:
            raise GroupCoordinatorError(
                f"group {group.group_id!r} must be CompletingRebalance, not {group.state.value}"
            )
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(
        self, group: ClassicGroup, assignment: Mapping[str, bytes]
    ) -> None:
        if group.state is not GroupState.COMPLETING_REBALANCE:
            raise GroupCoordinatorError(
                f"group {group.group_id!r} must be CompletingRebalance, not {group.state.value}"
            )
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)

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

    def _classic_group_heartbeat(self, token: object, request: HeartbeatInput) -> None:
        self._emit(token, HeartbeatOutput(self._heartbeat_error(request)))

    def _heartbeat_error(self, request: HeartbeatInput) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(request.group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not None:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._reschedule_classic_group_member_heartbeat(group, group.member(request.member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup --------------------------------------------------------

    def _classic_group_leave(self, token: object, request: LeaveGroupInput) -> None:
        if not request.group_id:
            self._emit(token, LeaveGroupOutput(ErrorCode.invalid_group_id))
            return
        group = self._groups.get(request.group_id)
        if group is None:
            self._emit(
                token,
                LeaveGroupOutput(
                    ErrorCode.none,
                    tuple(
                        LeaveGroupMemberOutput(
                            m.member_id, m.group_instance_id, ErrorCode.unknown_member_id
                        )
                        for m in request.members
                    ),
                ),
            )
            return
        if group.state is GroupState.DEAD:
            self._emit(token, LeaveGroupOutput(ErrorCode.coordinator_not_available))
            return

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
                group.remove(member_id)
                self._timers.cancel(_heartbeat_key(group.group_id, member_id))
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
        self._emit(token, LeaveGroupOutput(ErrorCode.none, tuple(results)))

    def _remove_current_member_from_classic_group(
        self, group: ClassicGroup, member_id: str
    ) -> None:
        member = group.member(member_id)
        self._timers.cancel(_heartbeat_key(group.group_id, member_id))
        group.complete_join(member, JoinGroupOutput(ErrorCode.unknown_member_id, ""))
        group.remove(member_id)

    # -- offsets -----------------------------------------------------------

    def _commit_offset(self, token: object, request: OffsetCommitInput) -> None:
        error = self._validate_offset_commit(request)
        if error is not None:
            self._emit(token, self._offset_commit_error(request, error))
            return
        assert request.group_id is not None
        group = self._groups[request.group_id]
        # Offset commits keep the session alive in Stable and PreparingRebalance.
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._reschedule_classic_group_member_heartbeat(group, group.member(request.member_id))

        group_offsets = self._offsets.setdefault(request.group_id, {})
        topics: list[OffsetCommitTopicOutput] = []
        for topic in request.topics:
            partitions: list[OffsetCommitPartitionOutput] = []
            for partition in topic.partitions:
                metadata = partition.committed_metadata
                if (
                    metadata is not None
                    and _java.string_length(metadata) > self._config.offset_metadata_max_bytes
                ):
                    code = ErrorCode.offset_metadata_too_large
                else:
                    group_offsets.setdefault(topic.name, {})[partition.partition_index] = (
                        _StoredOffset(
                            offset=partition.committed_offset,
                            leader_epoch=partition.committed_leader_epoch,
                            metadata=metadata if metadata is not None else "",
                            commit_timestamp_ms=self._now,
                        )
                    )
                    code = ErrorCode.none
                partitions.append(OffsetCommitPartitionOutput(partition.partition_index, code))
            topics.append(OffsetCommitTopicOutput(topic.name, tuple(partitions)))
        self._emit(token, OffsetCommitOutput(tuple(topics)))

    def _validate_offset_commit(self, request: OffsetCommitInput) -> ErrorCode | None:
        if request.group_id is None:
            return ErrorCode.invalid_group_id
        group = self._groups.get(request.group_id)
        if group is None:
            if request.generation_id < 0:
                # A "simple" group is created to hold the offsets.
                group = self._create_group(request.group_id)
            elif request.version >= 9:
                return ErrorCode.group_id_not_found
            else:
                return ErrorCode.illegal_generation

        # ClassicGroup.validateOffsetCommit (non-transactional)
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if request.generation_id < 0 and group.state is GroupState.EMPTY:
            return None
        if (
            request.generation_id >= 0
            or request.member_id != ""
            or request.group_instance_id is not None
        ):
            error = group.validate_member(request.member_id, request.group_instance_id)
            if error is not None:
                return error
            if request.generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return None

    @staticmethod
    def _offset_commit_error(request: OffsetCommitInput, error: ErrorCode) -> OffsetCommitOutput:
        return OffsetCommitOutput(
            tuple(
                OffsetCommitTopicOutput(
                    topic.name,
                    tuple(
                        OffsetCommitPartitionOutput(partition.partition_index, error)
                        for partition in topic.partitions
                    ),
                )
                for topic in request.topics
            )
        )

    def _fetch_offsets(self, token: object, request: OffsetFetchInput) -> None:
        # require_stable has no effect: there are no transactional offsets.
        self._emit(
            token, OffsetFetchOutput(tuple(self._fetch_group_offsets(g) for g in request.groups))
        )

    def _fetch_group_offsets(self, request: OffsetFetchGroup) -> OffsetFetchGroupOutput:
        group_id = request.group_id
        if group_id is None:
            return OffsetFetchGroupOutput(group_id, ErrorCode.invalid_group_id)
        group = self._groups.get(group_id)
        known = group is not None and group.state is not GroupState.DEAD
        stored = self._offsets.get(group_id, {}) if known else {}

        if request.topics is None:
            return OffsetFetchGroupOutput(
                group_id,
                ErrorCode.none,
                tuple(
                    OffsetFetchTopicOutput(
                        topic,
                        tuple(
                            OffsetFetchPartitionOutput(index, o.offset, o.leader_epoch, o.metadata)
                            for index, o in partitions.items()
                        ),
                    )
                    for topic, partitions in stored.items()
                ),
            )

        topics: list[OffsetFetchTopicOutput] = []
        for topic in request.topics:
            topic_offsets = stored.get(topic.name, {})
            partitions: list[OffsetFetchPartitionOutput] = []
            for index in topic.partition_indexes:
                offset = topic_offsets.get(index)
                if offset is None:
                    partitions.append(OffsetFetchPartitionOutput(index, NO_OFFSET))
                else:
                    partitions.append(
                        OffsetFetchPartitionOutput(
                            index, offset.offset, offset.leader_epoch, offset.metadata
                        )
                    )
            topics.append(OffsetFetchTopicOutput(topic.name, tuple(partitions)))
        return OffsetFetchGroupOutput(group_id, ErrorCode.none, tuple(topics))

    # -- admin -------------------------------------------------------------

    def _describe_groups(self, token: object, request: DescribeGroupsInput) -> None:
        described: list[DescribedGroup] = []
        for group_id in request.group_ids:
            if group_id is None:
                described.append(DescribedGroup(None, ErrorCode.invalid_group_id))
                continue
            group = self._groups.get(group_id)
            if group is None:
                described.append(
                    DescribedGroup(group_id, ErrorCode.none, group_state=GroupState.DEAD.value)
                )
                continue
            stable = group.state is GroupState.STABLE
            described.append(
                DescribedGroup(
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
            )
        self._emit(token, DescribeGroupsOutput(tuple(described)))

    def _list_groups(self, token: object, request: ListGroupsInput) -> None:
        states = {s.strip().lower() for s in request.states_filter}
        types = {t.strip().lower() for t in request.types_filter}
        listed = tuple(
            ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if (not states or group.state.value.lower() in states)
            and (not types or CLASSIC_GROUP_TYPE in types)
        )
        self._emit(token, ListGroupsOutput(ErrorCode.none, listed))

    def _delete_groups(self, token: object, request: DeleteGroupsInput) -> None:
        results: list[DeletableGroupResult] = []
        for group_id in dict.fromkeys(request.group_ids):
            results.append(DeletableGroupResult(group_id, self._delete_group(group_id)))
        self._emit(token, DeleteGroupsOutput(tuple(results)))

    def _delete_group(self, group_id: str | None) -> ErrorCode:
        if group_id is None:
            return ErrorCode.invalid_group_id
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        self._offsets.pop(group_id, None)
        group.transition(GroupEvent.DELETE, self._now)
        del self._groups[group_id]
        self._timers.cancel(_join_key(group_id))
        self._timers.cancel(_sync_key(group_id))
        return ErrorCode.none
