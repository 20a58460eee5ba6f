"""The classic protocol's heartbeats of one generation: while it runs, and while it ends.

Theory of operation:

A classic member keeps its session with Heartbeat, and learns from the
answers that the group rebalances. :class:`Heartbeats` beats twice over in
a generation's life, both times on the grid the group's members share
(:mod:`~gengroup.consumer.cadence`):

* :meth:`Heartbeats.while_running`, one of the generation's tasks, beats
  from SyncGroup's answer until the generation ends. It tells the member
  machine of every answer and failure, ends the generation on an answer
  that asks for it (a rebalance, a fencing, a moved coordinator whose
  session ran out), raises a fatal one, and beats early while a cooperative
  rebalance is under way. It keeps asking the coordinator it found until a
  beat fails.
* :meth:`Heartbeats.while_ending`, beside the generation's task group, goes
  on beating once the generation ended for a rejoin or a failure, until its
  tasks returned: a teardown longer than ``session_timeout`` must not get
  the member evicted while its tasks still run. It never tells the member
  machine, and raises none of the failures below: it stops at a fencing
  answer or after a session without an accepted beat, and tries again after
  a failed beat (an error of another kind, such as a failed
  authentication, still comes out).

Both send one beat the same way (:meth:`Heartbeats._beat`): the coordinator
is looked up if it is not known, the lookup and the Heartbeat together get
``min(request_timeout, session_timeout)``, and a beat fails when it gets no
answer in that time, when its connection breaks or its answer cannot be
read, or when the coordinator answers that it is not the coordinator (or
not available), and, while ending, when the lookup is refused: the
coordinator is forgotten then, if it is still the one asked, and the next
beat looks it up again. A failure is logged once, until a beat succeeds
again (the generation's ``heartbeat`` line: "failed", then "works again").
The next try is at the first grid point at least half a period after the
failure (while ending, after the failed beat was sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import anyio
from kio.schema.errors import ErrorCode

from .._errors import (
    BrokerError,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOut,
    error_for_code,
)
from ..membership.member import Member, Outcome, outcome_for
from .cadence import FIRST_EARLY_BEAT, beat_period, shared_time, until_grid
from .forming import Formed, GroupClient

__all__ = ["Beat", "Heartbeats"]


@dataclass(frozen=True, slots=True)
class Beat:
    """What one heartbeat came to.

    Attributes:
        node: the coordinator asked (None: no coordinator was found).
        code: the coordinator's answer (0: accepted; also 0 when there was none).
        failure: why the beat failed (no answer in time, a broken connection,
            an answer saying the coordinator moved), or None.
    """

    node: int | None
    code: int = 0
    failure: BaseException | None = None


class Heartbeats:
    """The classic protocol's heartbeats of one generation.

    Args:
        formed: the generation (and when SyncGroup answered).
        member: the member machine, told of the running generation's beats.
        client: the group's requests.
        log_retry: logs that ``what`` fails (once until it recovers), and
            what happens next.
        log_recovered: logs that ``what`` works again, if it was failing.
    """

    def __init__(
        self,
        formed: Formed,
        member: Member,
        client: GroupClient,
        log_retry: Callable[[str, BaseException, str], None],
        log_recovered: Callable[[str], None],
    ) -> None:
        self.formed = formed
        self.gen = formed.generation
        self.member = member
        self.client = client
        self.config = client.config
        self.log_retry = log_retry
        self.log_recovered = log_recovered
        self.period = beat_period(self.config.heartbeat_interval, self.config.session_timeout)
        #: One beat, a lookup of the coordinator included, waits at most this long.
        self.limit = min(self.config.request_timeout, self.config.session_timeout)

    async def _beat(self, node: int | None, *, ending: bool = False) -> Beat:
        """Send one Heartbeat to ``node`` (looked up first if None).

        A failed beat forgets the coordinator if it is still the one asked;
        a successful one says that heartbeats work again. Logging a failure
        is the caller's.

        Args:
            node: the coordinator to ask, if known.
            ending: a teardown's beat: a refused lookup (``BrokerError``) is a
                failure rather than raised, and a timeout names no node.
        """
        coordinator = self.client.coordinator
        code = 0
        failure: BaseException | None = None
        try:
            with anyio.fail_after(self.limit):
                if node is None:
                    node = await coordinator.find()
                code = await self.client.heartbeat(node, self.gen.identity)
        except TimeoutError:
            if ending:
                failure = RequestTimedOut(f"the coordinator did not answer in {self.limit:g} s")
            else:
                failure = RequestTimedOut(
                    f"coordinator node {node if node is not None else '(looking it up)'} "
                    f"did not answer the heartbeat within {self.limit:g} s"
                )
        except (KafkaConnectionError, ProtocolError) as exc:
            failure = exc
        except BrokerError as exc:
            if not ending:
                raise
            failure = exc
        else:
            if code and outcome_for(code) is Outcome.FIND_COORDINATOR:
                failure = error_for_code(code, f"Heartbeat answered by node {node}")
        if failure is None:
            self.log_recovered("heartbeat")
        elif node is not None and coordinator.node == node:
            coordinator.forget()
        return Beat(node, code, failure)

    async def while_running(self) -> None:
        """Beat until the generation ends; end it on an answer that asks for it.

        Raises:
            BrokerError: a fatal answer (the generation ended FATAL), or a
                refused lookup of the coordinator.
        """
        gen = self.gen
        member = self.member
        coordinator = self.client.coordinator
        started = anyio.current_time()
        node = coordinator.node
        if node is None:
            await anyio.sleep(self.config.heartbeat_interval)
            gen.end(Outcome.FIND_COORDINATOR, "no coordinator")
            return
        found: int | None = node
        # Settled, beats fall on the grid of the beat period that every
        # member of the group shares (cadence.py): a beat's round trip does
        # not push the later ones back, and neither a member that started
        # its generation later (a slow OffsetFetch) nor one that read
        # SyncGroup's answer later (a busy process, a late SyncGroup) beats
        # apart from the others. Members that beat together learn of the
        # next rebalance within milliseconds of each other, so none waits
        # long in JoinGroup for the others; and a crashed member's expiry is
        # heard just after it. (Counting from each member's reading of
        # SyncGroup's answer left a member that read it late that far behind
        # for the whole generation.)
        synced_at = self.formed.synced_at
        anchor = started if synced_at is None else synced_at
        group_id = self.config.group_id
        period = self.period
        early = self._early_beats()

        def next_due(now: float, regular: float) -> float:
            """The next early beat after ``now`` if one is left, else ``regular``."""
            for at in early:
                if anchor + at > now:  # those already past are skipped, not sent in a burst
                    return anchor + at
            return regular

        # The first regular beat is the first grid point at least half a
        # period after SyncGroup's answer, which the members share, not after
        # this loop's start (a slow OffsetFetch starts it later): members
        # whose loops started apart still pick the same point.
        now = anyio.current_time()
        due = next_due(
            now,
            anchor + until_grid(period, period / 2, group_id, now=shared_time() - (now - anchor)),
        )
        if due <= now:  # the generation took longer than that to start: the next point
            due = now + until_grid(period, 0.0, group_id)
        while True:
            gen._next_beat = due
            await anyio.sleep_until(due)
            if gen.lease_expired():
                return
            sent_at = anyio.current_time()
            due = next_due(sent_at, sent_at + until_grid(period, period / 2, group_id))
            gen._next_beat = due  # while this beat is in flight, the next is the one due
            # After a failed beat the coordinator is looked up again (a commit
            # may have found it moved already): the broker that was coordinator
            # may be gone or shutting down (NOT_COORDINATOR), and the new one
            # loads the group with its members and generation, which go on, as
            # the Java consumer's do; the local lease bounds the wait.
            beat = await self._beat(found)
            if beat.failure is not None:
                found = None
                outcome = member.on_heartbeat_failure(now=anyio.current_time(), started=started)
                if outcome is not None:
                    gen.end(
                        outcome, f"no successful heartbeat for a session timeout ({beat.failure})"
                    )
                    return
                self.log_retry("heartbeat", beat.failure, "looking the coordinator up again")
                # The next try at the first grid point at least half a period
                # after this failure (so that a handover meanwhile times its
                # leave to the others' beat).
                due = anyio.current_time() + until_grid(period, period / 2, group_id)
                continue
            found = beat.node
            code = beat.code
            outcome = member.on_heartbeat(error_code=code, now=anyio.current_time())
            if code == 0:
                gen.renew_lease(sent_at)
            if outcome is None or outcome is Outcome.RETRY:
                continue
            if outcome is Outcome.FATAL:
                error = error_for_code(code, self._fatal_said(code, "Heartbeat"))
                gen.end(outcome, f"heartbeat answered {error}")
                raise error
            gen.end(outcome, f"heartbeat answered {error_for_code(code).name}")
            return

    async def while_ending(self) -> None:
        """Go on beating while the ended generation's tasks return.

        The coordinator expires a member whose beats stop for
        ``session_timeout``. A teardown that long (a task flushing on its
        way out) would get the member evicted, its final commit refused and,
        in a rebalance, its partitions given to another member while the task
        still runs. So the beats go on, on the grid, until every task
        returned (the run cancels this then; a teardown within a period sends
        none). Answered NONE or REBALANCE_IN_PROGRESS they keep the session,
        and the coordinator waits up to ``rebalance_timeout`` for the
        member's JoinGroup, the watchdog's deadline too: the Java consumer's
        heartbeat thread goes on during its revocation callback alike. A
        coordinator that moved or is unknown (a commit meanwhile may have
        forgotten it) is looked up again, and a failed beat is tried again at
        the next grid point, logged once as the running generation's are. A
        fencing answer (the membership is lost: the rejoin finds out) stops
        them, as do an end that lost the membership already and a session
        without an accepted beat (the member was most likely evicted).
        """
        gen = self.gen
        await gen.wait_ending()
        if gen.end_outcome not in (Outcome.REJOIN, Outcome.FATAL):
            return
        group_id = self.config.group_id
        period = self.period
        # When the coordinator last accepted a beat: NONE, or
        # REBALANCE_IN_PROGRESS, which restarts the session too.
        accepted = gen._lease_from
        due = gen._next_beat
        now = anyio.current_time()
        if due is None or due <= now:
            due = now + until_grid(period, 0.0, group_id)
        while True:
            await anyio.sleep_until(due)
            if anyio.current_time() >= accepted + self.config.session_timeout:
                return
            sent_at = anyio.current_time()
            due = sent_at + until_grid(period, period / 2, group_id)
            beat = await self._beat(self.client.coordinator.node, ending=True)
            now = anyio.current_time()
            if due <= now:  # a lookup that took longer than a period: not two beats at once
                due = now + until_grid(period, period / 2, group_id)
            if beat.failure is not None:
                self.log_retry("heartbeat", beat.failure, "trying again as the tasks return")
                continue
            if beat.code == 0:
                gen.renew_lease(sent_at)
            if beat.code in (0, ErrorCode.rebalance_in_progress):
                accepted = sent_at
            elif outcome_for(beat.code) is not Outcome.RETRY:
                return

    def _early_beats(self) -> Iterator[float]:
        """When this generation beats early, in seconds after SyncGroup answered
        (or after the heartbeat loop's start, if that is not known).

        Only a generation of a cooperative rebalance on the classic protocol
        does (:data:`FIRST_EARLY_BEAT`, doubling while below the period).
        Such a rebalance comes in two phases: members that gave partitions up
        rejoin the moment phase one formed, but every other member, among
        them the newcomer that waits for those partitions, learns of phase
        two only at its next heartbeat. Early beats start phase two as soon
        as the others rejoined rather than up to a whole interval later.
        The beats after them are on the grid.
        """
        if self.formed.classic and self.gen.rebalance_protocol == "cooperative":
            at = FIRST_EARLY_BEAT
            while at < self.period:
                yield at
                at *= 2

    def _fatal_said(self, code: int, request: str) -> str:
        """What a fatal answer to ``request`` of this generation means, for its error."""
        gen, cfg = self.gen, self.config
        said = f"{request} of {gen.group_id} generation {gen.label}"
        if code == ErrorCode.fenced_instance_id:
            said += (
                f": another member with group_instance_id={cfg.group_instance_id!r} joined "
                "the group and replaced this one (two processes share that id?)"
            )
        return said
