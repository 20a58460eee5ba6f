"""The classic group model: states, the transition table, groups and members.

:class:`ClassicGroup` and :class:`ClassicGroupMember` mirror Kafka's
``classic/ClassicGroup`` and ``ClassicGroupMember``; :data:`TRANSITIONS` is
``ClassicGroupState``'s table of valid moves. The coordinator that drives them
(:mod:`.service`) owns and mutates the groups; the package documentation
describes the group life cycle.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from kio.schema.errors import ErrorCode

from ... import _java
from .messages import JoinGroupMember, JoinGroupOutput, Response, SyncGroupOutput

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
# Group model
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Parked:
    """A parked request: the caller's token, answered later."""

    token: object


Emit: TypeAlias = Callable[[object, Response], None]


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
    _awaiting_join: Parked | None = field(default=None, init=False, repr=False)
    _awaiting_sync: Parked | None = field(default=None, init=False, repr=False)

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

    def park_sync(self, parked: Parked) -> None:
        """Park the member's SyncGroup (replacing any previous one)."""
        self._awaiting_sync = parked

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

    def __init__(self, group_id: str, now_ms: int, emit: Emit) -> None:
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

    def add(self, member: ClassicGroupMember, parked: Parked | None) -> None:
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
        parked: Parked | None,
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
        # Parked requests (init=False fields) are not carried over.
        new_member = dataclasses.replace(removed, member_id=new_member_id, is_new=False)
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

    def validate_member_generation(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode | None:
        """Validate a request made in a generation, with Kafka's precedence.

        COORDINATOR_NOT_AVAILABLE for a Dead group, then :meth:`validate_member`,
        then ILLEGAL_GENERATION for another generation.

        Returns:
            The error, or None when the member is valid in this generation.
        """
        if self._state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self.validate_member(member_id, group_instance_id)
        if error is None and generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        return error

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

    def generation_join_output(
        self, member_id: str, *, with_members: bool, skip_assignment: bool = False
    ) -> JoinGroupOutput:
        """A successful JoinGroup response describing the current generation.

        Args:
            member_id: The member answered.
            with_members: Whether to include the member list (for the leader).
            skip_assignment: KIP-814's flag for a replaced static leader.
        """
        return JoinGroupOutput(
            ErrorCode.none,
            member_id=member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id or "",
            skip_assignment=skip_assignment,
            members=self.current_members() if with_members else (),
        )

    # -- parked requests ---------------------------------------------------

    def complete_join(self, member: ClassicGroupMember, response: JoinGroupOutput) -> bool:
        """Answer the member's parked JoinGroup, if any."""
        parked, member._awaiting_join = member._awaiting_join, None
        return self._answer(parked, response)

    def complete_sync(self, member: ClassicGroupMember, response: SyncGroupOutput) -> bool:
        """Answer the member's parked SyncGroup, if any."""
        parked, member._awaiting_sync = member._awaiting_sync, None
        return self._answer(parked, response)

    def _answer(self, parked: Parked | None, response: Response) -> bool:
        if parked is None:
            return False
        self._emit(parked.token, response)
        return True
