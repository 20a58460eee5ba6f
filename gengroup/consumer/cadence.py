"""When a member heartbeats: the period, early beats, and the shared grid.

Theory of operation:

A crashed member sends nothing more; the coordinator expires it a session
timeout after its last heartbeat, and the other members learn of that only at
their next heartbeat. How long after the expiry that is depends on where the
others' beats fall relative to the crashed member's: anywhere up to a whole
interval. Both protocols make it fall just after the expiry.

The period (:func:`beat_period`) is the session timeout plus
:data:`EXPIRY_MARGIN`, divided into as many beats as the interval fits into
the session: a whole number of periods after any member's beat, another beat
of the same phase lands the margin after that member's expiry. Members must
therefore beat in phase, under both protocols: a settled member beats on a
grid of the period laid over a clock the members share (:func:`until_grid`,
:func:`shared_time`: the wall clock, synchronised across hosts by NTP to well
within the margin, or a test's virtual clock), shifted by a fraction of the
period that its group id decides, so that groups do not all beat at once. A
member whose clock is off by more than the margin is no worse off than one
of an arbitrary phase.

Nothing else gives every member the same instant reliably. Under the
consumer protocol (KIP-848) each member would beat from its own answers,
and their phases would drift apart. Under the classic protocol the
coordinator answers a generation's SyncGroups when the leader's arrives,
but a member whose SyncGroup came after the leader's, or that read the
answer late (a busy process), would count its beats from a later instant
for the whole generation, and at the next rebalance the others would wait
that long for it in JoinGroup. A classic generation's first regular beat is
the first grid point at least half a period after SyncGroup's answer (the
members pick the same one unless their answers came apart across it).

Early beats (:data:`FIRST_EARLY_BEAT`, doubling) shorten reconciliation while
a cooperative (classic, counted from SyncGroup's answer) or KIP-848 rebalance
is under way; they are off the grid, and the member returns to it once they
stop.

A member that leaves is in phase with the others too, so it knows when they
next beat: closing with a handover (``ConsumerGroup.aclose``) keeps working
until :func:`handover_lead` before that beat, then ends its generation,
commits and leaves, and the others learn of the leave at that beat.
"""

from __future__ import annotations

import math
import time
import zlib

import sniffio
import trio
import trio.testing

__all__ = [
    "EXPIRY_MARGIN",
    "FIRST_EARLY_BEAT",
    "HANDOVER_MARGIN",
    "beat_period",
    "handover_lead",
    "shared_time",
    "until_grid",
]

#: Seconds after a cooperative generation formed at which it heartbeats first;
#: then at twice that, four times, ... while below the beat period. The
#: members that revoked partitions rejoin within milliseconds, or after their
#: revoked tasks' teardown and commit, which take longer: hence the doubling.
#: A member of the consumer protocol (KIP-848) beats early too after an answer
#: that changed its epoch or assignment (see ``consumer_protocol.py``).
FIRST_EARLY_BEAT = 0.05

#: How long after a crashed member's session expires the other members beat
#: (see :func:`beat_period`), in seconds.
EXPIRY_MARGIN = 0.05

#: How long before the group's next heartbeat a leaving member's LeaveGroup
#: (or leaving ConsumerGroupHeartbeat) is meant to reach the coordinator, in
#: seconds, beyond the time its teardown takes (see :func:`handover_lead`).
HANDOVER_MARGIN = 0.05


def handover_lead(teardown: float) -> float:
    """How long before the group's next heartbeat a leaving member ends its generation.

    The teardown (tasks returning, the final commit) and the LeaveGroup must be
    done before the others' beat reaches the coordinator: the margin plus
    twice the member's teardown as measured (at least 25 ms of it: 100 ms
    before anything was measured). Too short, and the others learn of the
    leave a whole period later; too long costs only the excess.

    Args:
        teardown: Seconds the longest of the member's latest generation ends
            or partition revocations took (0 if none yet).
    """
    return HANDOVER_MARGIN + 2 * max(teardown, 0.025)


def beat_period(interval: float, session_timeout: float) -> float:
    """The time between two regular heartbeats.

    ``session_timeout`` plus :data:`EXPIRY_MARGIN`, divided into as many
    beats as ``interval`` fits into the session (rounded up): at most
    ``interval``, or the margin's share more when the session is a whole
    number of intervals (1.005 s for 10 s and 1 s).

    Members that beat in phase (see the module's docstring) beat last
    together with a member that crashes, and the coordinator expires it
    ``session_timeout`` after that beat. With beats ``interval`` apart and a
    session of a whole number of intervals (10 s and 1 s; 45 s and 3 s), one
    of the others' beats arrived at the very instant of the expiry: those
    just before it learnt of the rebalance a whole interval later, and the
    others waited that long for them in JoinGroup; with 10 s and 3 s, every
    one learnt of it 2 s after it. With this period every member's beat lands
    the margin after the expiry, and they rejoin together.
    """
    beats = max(1, math.ceil(session_timeout / interval - 1e-9))
    return (session_timeout + EXPIRY_MARGIN) / beats


def shared_time() -> float:
    """Seconds on a clock every member of a group reads alike.

    The wall clock; under trio's ``MockClock`` (tests in virtual time, where
    the members and the embedded broker share that clock) the virtual time.
    """
    if sniffio.current_async_library() == "trio":
        clock = trio.lowlevel.current_clock()
        if isinstance(clock, trio.testing.MockClock):
            return clock.current_time()
    return time.time()


def until_grid(period: float, least: float, key: str = "", now: float | None = None) -> float:
    """Seconds from ``now`` to the next point of the grid at least ``least`` away.

    The grid is the multiples of ``period`` on the shared clock, shifted by
    a fraction of ``period`` that ``key`` (the group id) decides: every
    member of a group beats at the same instants, and groups of the same
    period do not all beat at once.

    Args:
        period: The grid's spacing, in seconds (:func:`beat_period`).
        least: The shortest wait returned: a beat just before a grid point
            skips it, so beats are never closer than this. With 0 the
            result is still above 0: a point at ``now`` is a period away.
        key: What the shift is derived from (CRC-32 of the text).
        now: The time on the shared clock; :func:`shared_time` if None.
    """
    at = shared_time() if now is None else now
    shift = zlib.crc32(key.encode()) / 2**32 * period
    delay = period - (at - shift) % period
    while delay < least:
        delay += period
    return delay
