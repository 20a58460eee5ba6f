"""The group member's join/sync/heartbeat/leave logic as a sans-IO state machine.

Theory of operation:

The :class:`Member` decides; the consumer's run loop does the I/O. Each step
of the classic protocol is a pair of calls: the run loop asks the machine for
the next request's parameters (``join_params``, ``sync_params``,
``heartbeat_params``, ``leave_params``), performs the I/O, and feeds the
broker's answer back (``on_join``, ``on_sync``, ``on_heartbeat``, ...). Each
``on_*`` returns a small decision object saying what happens next; nothing
here sleeps, reads a clock or touches a socket: ``now`` (seconds, from the
event loop) is passed in where time matters.

The phases and the events that move between them are a table,
:data:`TRANSITIONS`. A move the table does not allow raises
:class:`IllegalTransition` naming the phase and the event, and poisons the
machine to ``ERROR`` (like h11): a bug must not be papered over.

Error codes map to outcomes through the client's one error table,
:mod:`gengroup._error_table` (:data:`ERROR_OUTCOMES` and :func:`outcome_for`
are its member column):

* ``REJOIN`` -- the group is rebalancing: rejoin with the same member id.
* ``RESET_MEMBER`` -- the member id or generation is unknown: rejoin with an
  empty member id.
* ``FIND_COORDINATOR`` -- the coordinator moved or is unavailable.
* ``RETRY`` -- transient: back off, then repeat the same step.
* ``FATAL`` -- nothing a member can do (FENCED_INSTANCE_ID, authorization,
  bad configuration): the error reaches the user.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Final

from kio.schema.errors import ErrorCode

from .._error_table import ERROR_OUTCOMES, Outcome, outcome_for
from .._errors import BrokerError, ProtocolError, error_for_code
from .._types import TopicPartition
from ..protocol import consumer_protocol
from .balancers import Balancer, GroupMember, balancer_user_data, rebalance_protocol

__all__ = [
    "ERROR_OUTCOMES",
    "IllegalTransition",
    "JoinParams",
    "Joined",
    "Member",
    "MemberConfig",
    "Outcome",
    "Phase",
    "Retry",
    "Synced",
    "TRANSITIONS",
    "UnreadableMember",
    "outcome_for",
]


class Phase(enum.Enum):
    """Where the member is in the classic group protocol."""

    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    LEFT = "left"
    ERROR = "error"


#: (phase, event) -> next phase. Anything absent is an illegal transition.
TRANSITIONS: Final[dict[tuple[Phase, str], Phase]] = {
    (Phase.UNJOINED, "join_sent"): Phase.JOINING,
    (Phase.JOINING, "joined"): Phase.SYNCING,
    (Phase.JOINING, "join_failed"): Phase.UNJOINED,
    (Phase.SYNCING, "synced"): Phase.STABLE,
    (Phase.SYNCING, "sync_failed"): Phase.UNJOINED,
    (Phase.STABLE, "generation_ended"): Phase.UNJOINED,
    (Phase.UNJOINED, "generation_ended"): Phase.UNJOINED,
    (Phase.UNJOINED, "left"): Phase.LEFT,
    (Phase.JOINING, "left"): Phase.LEFT,
    (Phase.SYNCING, "left"): Phase.LEFT,
    (Phase.STABLE, "left"): Phase.LEFT,
    (Phase.LEFT, "left"): Phase.LEFT,
    (Phase.JOINING, "io_failed"): Phase.UNJOINED,
    (Phase.SYNCING, "io_failed"): Phase.UNJOINED,
    (Phase.UNJOINED, "abandoned"): Phase.UNJOINED,
    (Phase.JOINING, "abandoned"): Phase.UNJOINED,
    (Phase.SYNCING, "abandoned"): Phase.UNJOINED,
    (Phase.STABLE, "abandoned"): Phase.UNJOINED,
}


class IllegalTransition(RuntimeError):
    """The member machine was driven through a move its table does not allow."""


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """What the member machine needs to know (durations in seconds)."""

    group_id: str
    topics: tuple[str, ...]
    balancers: tuple[Balancer, ...]
    session_timeout: float
    rebalance_timeout: float
    heartbeat_interval: float
    group_instance_id: str | None = None
    rack: str | None = None
    subscription_version: int | None = None
    #: Subscribing by pattern: ``topics`` is empty, the member's matches are its subscription.
    topic_pattern: re.Pattern[str] | None = None


@dataclass(frozen=True, slots=True)
class JoinParams:
    """Parameters of the next JoinGroup request."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout: float
    rebalance_timeout: float
    protocols: tuple[tuple[str, bytes], ...]
    reason: str | None


@dataclass(frozen=True, slots=True)
class Retry:
    """A step failed: do ``outcome`` and then start again from joining."""

    outcome: Outcome
    error: BrokerError


@dataclass(frozen=True, slots=True)
class UnreadableMember:
    """A member whose subscription the leader could not decode.

    The leader leaves it out of the balancer's input and sends it an empty
    assignment, so one peer's malformed metadata never stops the group.

    Attributes:
        member_id: the member's id.
        group_instance_id: its ``group.instance.id``, or ``None``.
        error: why its metadata could not be read.
    """

    member_id: str
    group_instance_id: str | None
    error: ProtocolError


@dataclass(frozen=True, slots=True)
class Joined:
    """JoinGroup succeeded.

    Attributes:
        generation_id: the new generation.
        member_id: this member's id.
        leader_id: the leader's member id.
        protocol: the protocol (balancer) the coordinator chose.
        members: every member whose subscription could be read (leader only).
        unreadable: the members whose subscription could not be read (leader
            only); they are assigned nothing.
    """

    generation_id: int
    member_id: str
    leader_id: str
    protocol: str
    members: tuple[GroupMember, ...]
    unreadable: tuple[UnreadableMember, ...] = ()

    @property
    def is_leader(self) -> bool:
        """Whether this member leads the generation (and so runs the balancer)."""
        return self.leader_id == self.member_id


@dataclass(frozen=True, slots=True)
class Synced:
    """SyncGroup succeeded: the member's assignment for the generation."""

    generation_id: int
    assignment: dict[str, tuple[int, ...]]
    user_data: bytes | None = None

    def partitions(self) -> list[TopicPartition]:
        """The assigned partitions, sorted."""
        return sorted(TopicPartition(t, p) for t, parts in self.assignment.items() for p in parts)


@dataclass(slots=True)
class Member:
    """The sans-IO state of one group member across generations."""

    config: MemberConfig
    member_id: str = ""
    generation_id: int = -1
    phase: Phase = Phase.UNJOINED
    joined: Joined | None = None
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    owned_generation: int = -1
    last_heartbeat_ok: float | None = None
    rejoin_reason: str | None = None
    #: Under a pattern subscription: the topics it matched at the last check.
    matched: frozenset[str] = frozenset()

    def _move(self, event: str) -> None:
        nxt = TRANSITIONS.get((self.phase, event))
        if nxt is None:
            old = self.phase
            self.phase = Phase.ERROR
            raise IllegalTransition(f"event {event!r} is not allowed in phase {old.name}")
        self.phase = nxt

    # ------------------------------------------------------------------ join

    def _join_failure(self, error_code: int) -> str:
        """What a failed JoinGroup's error says: the group, and what was sent when it matters."""
        what = f"JoinGroup {self.config.group_id}"
        if error_code == ErrorCode.invalid_session_timeout:
            return (
                f"{what}: session_timeout={self.config.session_timeout} s is outside the "
                "broker's group.min.session.timeout.ms..group.max.session.timeout.ms "
                "(Kafka's defaults: 6 s..1800 s)"
            )
        if error_code == ErrorCode.inconsistent_group_protocol:
            offered = ", ".join(b.name for b in self.config.balancers)
            return (
                f"{what}: this member offered the consumer protocol with [{offered}]; the "
                "group's members use another protocol type or share none of these "
                "assignors (e.g. cooperative-sticky only)"
            )
        return what

    def subscription(self) -> tuple[str, ...]:
        """The topics this member subscribes to: its names, or what its pattern matched."""
        if self.config.topic_pattern is not None:
            return tuple(sorted(self.matched))
        return tuple(sorted(self.config.topics))

    def match(self, topics: Collection[str]) -> bool:
        """The topics the pattern matches now (pattern subscriptions); True if they changed.

        The next JoinGroup subscribes to them; a running generation whose
        subscription changed should end so that the member rejoins.
        """
        new = frozenset(topics)
        changed = new != self.matched
        self.matched = new
        return changed

    def protocols(self) -> tuple[tuple[str, bytes], ...]:
        """The (name, metadata) list sent in JoinGroup, in preference order."""
        owned = tuple(sorted((t, tuple(sorted(p))) for t, p in self.owned.items()))
        topics = self.subscription()
        version = self.config.subscription_version
        if version is None:
            version = consumer_protocol.LATEST_VERSION
        out = []
        for balancer in self.config.balancers:
            sub = consumer_protocol.Subscription(
                topics=topics,
                user_data=balancer_user_data(
                    balancer, self.config.topics or topics, owned, self.owned_generation
                ),
                owned_partitions=owned,
                generation_id=self.generation_id,
                rack=self.config.rack,
            )
            out.append((balancer.name, consumer_protocol.encode_subscription(sub, version)))
        return tuple(out)

    def join_params(self) -> JoinParams:
        """Parameters of the next JoinGroup (moves UNJOINED -> JOINING)."""
        self._move("join_sent")
        reason, self.rejoin_reason = self.rejoin_reason, None
        return JoinParams(
            group_id=self.config.group_id,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            session_timeout=self.config.session_timeout,
            rebalance_timeout=self.config.rebalance_timeout,
            protocols=self.protocols(),
            reason=reason,
        )

    def on_join(
        self,
        *,
        error_code: int,
        member_id: str,
        generation_id: int,
        protocol: str | None,
        leader: str,
        members: Sequence[tuple[str, str | None, bytes]],
    ) -> Joined | Retry:
        """Feed a JoinGroup response.

        Args:
            error_code: the response's error code.
            member_id: the member id the coordinator gave us.
            generation_id: the new generation.
            protocol: the chosen protocol (balancer) name.
            leader: the leader's member id.
            members: (member_id, group_instance_id, metadata) -- leader only.
        """
        if error_code:
            self._move("join_failed")
            outcome = outcome_for(error_code)
            if error_code == ErrorCode.member_id_required:
                self.member_id = member_id
            elif outcome is Outcome.RESET_MEMBER:
                self.reset()
            return Retry(outcome, error_for_code(error_code, self._join_failure(error_code)))
        self._move("joined")
        self.member_id = member_id
        self.generation_id = generation_id
        decoded = []
        unreadable = []
        for mid, instance_id, metadata in members:
            try:
                sub = consumer_protocol.decode_subscription(metadata)
            except ProtocolError as exc:
                unreadable.append(UnreadableMember(mid, instance_id, exc))
                continue
            decoded.append(GroupMember.from_subscription(mid, instance_id, sub))
        self.joined = Joined(
            generation_id=generation_id,
            member_id=member_id,
            leader_id=leader,
            protocol=protocol or "",
            members=tuple(decoded),
            unreadable=tuple(unreadable),
        )
        return self.joined

    def balancer(self, name: str) -> Balancer:
        """The balancer the coordinator chose."""
        for b in self.config.balancers:
            if b.name == name:
                return b
        raise error_for_code(ErrorCode.inconsistent_group_protocol, f"no balancer named {name!r}")

    def rebalance_protocol(self, name: str) -> str:
        """``"cooperative"`` if the balancer named ``name`` is cooperative, else ``"eager"``."""
        for b in self.config.balancers:
            if b.name == name:
                return rebalance_protocol(b)
        return "eager"

    def retain_owned(self, partitions: Collection[TopicPartition]) -> None:
        """Own only ``partitions`` of what was assigned (a cooperative member gave the rest up).

        The next JoinGroup reports them as owned, so the group may assign the
        others to any member.
        """
        keep = set(partitions)
        self.owned = {
            t: kept
            for t, parts in self.owned.items()
            if (kept := tuple(p for p in parts if TopicPartition(t, p) in keep))
        }

    def assign(self, partitions: dict[str, int]) -> dict[str, bytes]:
        """Run the chosen balancer (leader only) and encode each member's assignment.

        Args:
            partitions: topic -> partition count, for every topic any member subscribes to.

        Returns:
            member_id -> encoded ConsumerProtocolAssignment (every member
            included; a member whose subscription could not be read gets an
            empty assignment).
        """
        assert self.joined is not None and self.joined.is_leader
        plan = self.balancer(self.joined.protocol).assign(self.joined.members, partitions)
        out: dict[str, bytes] = {}
        member_ids = [m.member_id for m in self.joined.members]
        member_ids += [m.member_id for m in self.joined.unreadable]
        for member_id in member_ids:
            per_topic = plan.get(member_id, {})
            out[member_id] = consumer_protocol.encode_assignment(
                consumer_protocol.Assignment(
                    partitions=tuple(
                        (t, tuple(sorted(ps))) for t, ps in sorted(per_topic.items()) if ps
                    )
                )
            )
        return out

    def subscribed_topics(self) -> set[str]:
        """The union of every member's subscription (leader) or our own (followers)."""
        topics = set(self.subscription())
        if self.joined is not None:
            for m in self.joined.members:
                topics.update(m.topics)
        return topics

    # ------------------------------------------------------------------ sync

    def on_sync(self, *, error_code: int, assignment: bytes | None) -> Synced | Retry:
        """Feed a SyncGroup response."""
        if error_code:
            self._move("sync_failed")
            outcome = outcome_for(error_code)
            if outcome is Outcome.RESET_MEMBER:
                self.reset()
            return Retry(outcome, error_for_code(error_code, f"SyncGroup {self.config.group_id}"))
        self._move("synced")
        decoded = consumer_protocol.decode_assignment(assignment or b"")
        mine = {t: tuple(ps) for t, ps in decoded.partitions}
        self.owned = mine
        self.owned_generation = self.generation_id
        self.last_heartbeat_ok = None
        return Synced(self.generation_id, mine, decoded.user_data)

    def on_io_failure(self) -> None:
        """The JoinGroup or SyncGroup in flight got no answer: start again from joining.

        The member id is kept: if the coordinator did process the request, it
        knows us by it; if it did not, it will say UNKNOWN_MEMBER_ID.
        """
        self._move("io_failed")

    # ------------------------------------------------------------------ heartbeat

    def on_heartbeat(self, *, error_code: int, now: float) -> Outcome | None:
        """Feed a Heartbeat response; None means "keep going".

        A REBALANCE_IN_PROGRESS answer still proves liveness (as in the Java client).
        """
        if error_code == 0:
            self.last_heartbeat_ok = now
            return None
        outcome = outcome_for(error_code)
        if outcome is Outcome.REJOIN:
            self.last_heartbeat_ok = now
        return outcome

    def on_heartbeat_failure(self, *, now: float, started: float) -> Outcome | None:
        """A heartbeat got no answer (connection failure or timeout).

        Returns:
            FIND_COORDINATOR once a whole session timeout passed without a
            successful heartbeat (the coordinator has surely evicted us or moved),
            else None: retry after a backoff.
        """
        since = self.last_heartbeat_ok if self.last_heartbeat_ok is not None else started
        if now >= since + self.config.session_timeout:
            return Outcome.FIND_COORDINATOR
        return None

    # ------------------------------------------------------------------ ending

    def generation_ended(self, outcome: Outcome | None = None, reason: str | None = None) -> None:
        """The current generation is over (all its tasks returned)."""
        self._move("generation_ended")
        self.rejoin_reason = reason
        if outcome is Outcome.RESET_MEMBER:
            self.reset()

    def abandon(self, outcome: Outcome, reason: str) -> None:
        """Give up the join, sync or offset fetch in progress after an error.

        Unlike :meth:`generation_ended`, this is allowed from any phase but
        ``LEFT``: the error may have come before the member synced.
        """
        self._move("abandoned")
        self.rejoin_reason = reason
        if outcome is Outcome.RESET_MEMBER:
            self.reset()

    def reset(self) -> None:
        """Forget the member id and generation (rejoin as a new member)."""
        self.member_id = ""
        self.generation_id = -1
        self.owned = {}
        self.owned_generation = -1

    def leave_params(self) -> tuple[str, str | None] | None:
        """(member_id, group_instance_id) for LeaveGroup, or None if none is due.

        Static members do not send LeaveGroup on close (their session timeout
        keeps their partitions while they restart), nor does a member that
        never got a member id.
        """
        self._move("left")
        if self.config.group_instance_id is not None or not self.member_id:
            return None
        return self.member_id, None
