"""Kafka's ``cooperative-sticky`` strategy, equal to Java's ``CooperativeStickyAssignor``.

Theory of operation:

The cooperative sticky assignment starts from the sticky one
(:func:`~gengroup.membership.sticky.sticky_assign`): as balanced as the
subscriptions allow, moving as few partitions as possible. What differs is
where a member's previous assignment comes from and what happens to a
partition that moves:

* Members do not revoke everything before rejoining; each reports the
  partitions it still owns in the subscription's ``owned_partitions`` field
  (version 1+) and the generation it owned them in (version 2+). Only a
  subscription without that generation falls back to the user data, which
  holds nothing but the generation, an int32 (Java's
  ``COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0``); user data that cannot be
  read counts as generation -1, absent user data as no generation.
* A partition that the sticky assignment gives to a member while another
  member still owns it is *transferring*: it is left out of this round's
  assignment altogether. Its owner sees it gone, revokes it and rejoins; in
  the next round nobody owns it and it is assigned. So no partition is ever
  assigned to one member while another still owns it (KIP-429).

Which partitions transfer is what Java computes: on the identical-subscription
path, the partitions taken from an owner above its quota (and those claimed
by two members of the same generation); on the general path, every partition
assigned to a member that did not own it while some member reported owning
it and was not assigned it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Final

from ..protocol.consumer_protocol import TopicPartitions
from .balancers import GroupAssignment, GroupMember
from .sticky import _result, sticky_assign

__all__ = ["CooperativeStickyBalancer"]

_I32: Final = struct.Struct(">i")
_DEFAULT_GENERATION: Final = -1


def _member_data(member: GroupMember) -> tuple[list[tuple[str, int]], int | None]:
    """Java's ``CooperativeStickyAssignor.memberData``: owned partitions and generation."""
    owned = [(topic, p) for topic, parts in member.owned_partitions for p in parts]
    if member.generation_id >= 0:
        return owned, member.generation_id
    if member.user_data is None:
        return owned, None
    if len(member.user_data) < _I32.size:
        return owned, _DEFAULT_GENERATION
    generation: int = _I32.unpack_from(member.user_data)[0]
    return owned, generation


class CooperativeStickyBalancer:
    """Kafka's ``cooperative-sticky`` strategy, equal to Java's ``CooperativeStickyAssignor``.

    Sticky (:class:`~gengroup.StickyBalancer`'s assignment) and cooperative:
    members keep the partitions they are assigned again across generations,
    and a partition moves in two rebalances, first revoked by its owner, then
    assigned to its new one. A group whose chosen balancer is this one runs
    the cooperative rebalance protocol: a retained partition's span-scoped
    tasks (``gen.start_soon(..., partition=tp)``) keep running across
    generations (see the incremental rebalancing page). Racks are ignored.

    Attributes:
        name: ``"cooperative-sticky"``.
        rebalance_protocol: ``"cooperative"``.
    """

    name: Final = "cooperative-sticky"
    rebalance_protocol: Final = "cooperative"

    def user_data(self, topics: Sequence[str]) -> bytes | None:
        """The user data before any assignment: generation -1."""
        return _I32.pack(_DEFAULT_GENERATION)

    def owned_user_data(self, owned: TopicPartitions, generation: int) -> bytes | None:
        """The user data of a member last assigned in ``generation``: that generation, an int32.

        Args:
            owned: the member's partitions (carried in ``owned_partitions``, not here).
            generation: the generation of its last assignment, negative if none.

        Returns:
            The 4-byte user data Java's assignor sends.
        """
        return _I32.pack(generation if generation >= 0 else _DEFAULT_GENERATION)

    def assign(
        self, members: Sequence[GroupMember], partitions: Mapping[str, int]
    ) -> GroupAssignment:
        """Assign partitions as Java's ``CooperativeStickyAssignor`` does.

        As :meth:`Balancer.assign <gengroup.membership.balancers.Balancer.assign>`
        (``members`` in JoinGroup order), without the partitions another member
        still owns: they are assigned in the next round.

        Raises:
            ValueError: two members share a member id.
        """
        raw, transfers = sticky_assign(members, partitions, _member_data)
        moving: dict[tuple[str, int], str] = (
            _transferring(members, raw)
            if transfers is None
            else {tp: member_id for tp, member_id in transfers.items()}
        )
        adjusted = {
            member_id: [tp for tp in parts if moving.get(tp) != member_id]
            for member_id, parts in raw.items()
        }
        return _result(adjusted)


def _transferring(
    members: Sequence[GroupMember], raw: Mapping[str, Sequence[tuple[str, int]]]
) -> dict[tuple[str, int], str]:
    """Java's ``computePartitionsTransferringOwnership``: added to one, revoked from another."""
    added: dict[tuple[str, int], str] = {}
    revoked: set[tuple[str, int]] = set()
    for member in members:
        owned = {(t, p) for t, parts in member.owned_partitions for p in parts}
        assigned = {(t, p) for t, p in raw.get(member.member_id, [])}
        for tp in assigned - owned:
            added[tp] = member.member_id
        revoked |= owned - assigned
    return {tp: m for tp, m in added.items() if tp in revoked}
