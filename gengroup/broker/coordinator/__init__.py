"""The embedded broker's group coordinator (classic and KIP-848), as a sans-IO state machine.

Theory of operation
===================

This module reproduces Apache Kafka's *classic* group coordinator (the
JoinGroup / SyncGroup / Heartbeat / LeaveGroup protocol, plus the offset and
admin requests that consult group state). It was written against the
``group-coordinator`` module of Apache Kafka (``GroupMetadataManager``'s
``classicGroup*`` methods, ``classic/ClassicGroup``, ``ClassicGroupMember``,
``ClassicGroupState``, ``OffsetMetadataManager`` and ``GroupCoordinatorService``)
and keeps its structure: the private methods of :mod:`.service` carry the names
of the Java methods they mirror, so the two can be read side by side. Error precedence,
response field values and generation numbering follow Kafka; the few
deliberate differences are listed under "Divergences from Apache Kafka".

Where things are
----------------

* :mod:`.messages`: the request/response model (the ``*Input`` and ``*Output``
  dataclasses, :data:`Request`, :data:`Response`, :class:`Reply`).
* :mod:`.group`: the group model: :class:`GroupState`, :class:`GroupEvent`,
  the transition table :data:`TRANSITIONS`, :class:`ClassicGroup` and
  :class:`ClassicGroupMember`, and the coordinator's exceptions.
* :mod:`.offsets`: the rules of OffsetCommit and OffsetFetch, and the offsets.
* :mod:`.admin`: what DescribeGroups and ListGroups show of the groups, and
  DeleteGroups.
* :mod:`.consumer_service`, :mod:`.consumer_group`, :mod:`.assignors`,
  :mod:`.consumer_messages`: consumer groups (KIP-848): ConsumerGroupHeartbeat
  and ConsumerGroupDescribe, member epochs, reconciliation, the ``uniform``
  and ``range`` assignors. Their theory of operation is in
  :mod:`.consumer_service` and :mod:`.consumer_group`.
* :mod:`.timers`: the keyed deadlines on a heap.
* :mod:`.config`: :class:`CoordinatorConfig`.
* :mod:`.service`: :class:`GroupCoordinator`, its single entry point
  :meth:`GroupCoordinator.handle` and the classic group protocol.

No I/O and no clock
-------------------

The coordinator never reads a clock and never touches a socket; no module of
this package imports an event loop, ``socket`` or ``time``. Its entry points
(:meth:`GroupCoordinator.handle` for every request, dispatched on the request's
type, and :meth:`GroupCoordinator.advance` for timers) take ``now_ms``
(integer milliseconds on any monotonic time base, e.g. ``trio.current_time() *
1000`` rounded); ``handle`` also takes a *token*, an opaque object the caller
uses to recognise the request later. Each returns a list of
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

    replies = coordinator.handle(now, token, request)   # any request
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
  coordinator; filter them out before submitting the :class:`OffsetCommitInput`.
* OffsetFetch before v8 addresses one group: wrap it as a one-group batch.
* ConsumerGroupHeartbeat and ConsumerGroupDescribe name topics by id: pass a
  snapshot of the cluster's topics (:class:`TopicInfo` by name) with each
  request. Do not serve them when the consumer protocol is disabled.

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
* **No share or streams groups, no conversion.** Consumer groups (KIP-848)
  are served beside classic groups, but the online upgrade/downgrade between
  them is not: a classic JoinGroup to a consumer group with members is answered
  INCONSISTENT_GROUP_PROTOCOL, a ConsumerGroupHeartbeat to a classic group
  with members GROUP_ID_NOT_FOUND (an empty group of either kind is
  replaced, as in Kafka).
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

from .config import (
    CoordinatorConfig as CoordinatorConfig,
    default_member_id as default_member_id,
)
from .consumer_group import (
    ConsumerGroup as ConsumerGroup,
    ConsumerGroupMember as ConsumerGroupMember,
    ConsumerGroupState as ConsumerGroupState,
    MemberState as MemberState,
)
from .consumer_messages import (
    ConsumerGroupDescribeInput as ConsumerGroupDescribeInput,
    ConsumerGroupDescribeOutput as ConsumerGroupDescribeOutput,
    ConsumerGroupHeartbeatInput as ConsumerGroupHeartbeatInput,
    ConsumerGroupHeartbeatOutput as ConsumerGroupHeartbeatOutput,
    DescribedConsumerGroup as DescribedConsumerGroup,
    DescribedConsumerMember as DescribedConsumerMember,
    TopicInfo as TopicInfo,
)
from .group import (
    TRANSITIONS as TRANSITIONS,
    ClassicGroup as ClassicGroup,
    ClassicGroupMember as ClassicGroupMember,
    CoordinatorPoisonedError as CoordinatorPoisonedError,
    GroupCoordinatorError as GroupCoordinatorError,
    GroupEvent as GroupEvent,
    GroupState as GroupState,
    IllegalTransitionError as IllegalTransitionError,
)
from .messages import (
    DeletableGroupResult as DeletableGroupResult,
    DeleteGroupsInput as DeleteGroupsInput,
    DeleteGroupsOutput as DeleteGroupsOutput,
    DescribedGroup as DescribedGroup,
    DescribedGroupMember as DescribedGroupMember,
    DescribeGroupsInput as DescribeGroupsInput,
    DescribeGroupsOutput as DescribeGroupsOutput,
    HeartbeatInput as HeartbeatInput,
    HeartbeatOutput as HeartbeatOutput,
    JoinGroupInput as JoinGroupInput,
    JoinGroupMember as JoinGroupMember,
    JoinGroupOutput as JoinGroupOutput,
    LeaveGroupInput as LeaveGroupInput,
    LeaveGroupMemberOutput as LeaveGroupMemberOutput,
    LeaveGroupOutput as LeaveGroupOutput,
    ListedGroup as ListedGroup,
    ListGroupsInput as ListGroupsInput,
    ListGroupsOutput as ListGroupsOutput,
    MemberIdentity as MemberIdentity,
    OffsetCommitInput as OffsetCommitInput,
    OffsetCommitOutput as OffsetCommitOutput,
    OffsetCommitPartition as OffsetCommitPartition,
    OffsetCommitPartitionOutput as OffsetCommitPartitionOutput,
    OffsetCommitTopic as OffsetCommitTopic,
    OffsetCommitTopicOutput as OffsetCommitTopicOutput,
    OffsetDeleteInput as OffsetDeleteInput,
    OffsetDeleteOutput as OffsetDeleteOutput,
    OffsetFetchGroup as OffsetFetchGroup,
    OffsetFetchGroupOutput as OffsetFetchGroupOutput,
    OffsetFetchInput as OffsetFetchInput,
    OffsetFetchOutput as OffsetFetchOutput,
    OffsetFetchPartitionOutput as OffsetFetchPartitionOutput,
    OffsetFetchTopic as OffsetFetchTopic,
    OffsetFetchTopicOutput as OffsetFetchTopicOutput,
    Reply as Reply,
    Request as Request,
    Response as Response,
    SyncGroupInput as SyncGroupInput,
    SyncGroupOutput as SyncGroupOutput,
)
from .service import (
    GroupCoordinator as GroupCoordinator,
)

__all__ = [
    "TRANSITIONS",
    "ConsumerGroup",
    "ConsumerGroupDescribeInput",
    "ConsumerGroupDescribeOutput",
    "ConsumerGroupHeartbeatInput",
    "ConsumerGroupHeartbeatOutput",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
    "MemberState",
    "TopicInfo",
    "ClassicGroup",
    "ClassicGroupMember",
    "CoordinatorConfig",
    "CoordinatorPoisonedError",
    "DeletableGroupResult",
    "DeleteGroupsInput",
    "DeleteGroupsOutput",
    "OffsetDeleteInput",
    "OffsetDeleteOutput",
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
    "Request",
    "Response",
    "SyncGroupInput",
    "SyncGroupOutput",
    "default_member_id",
]
