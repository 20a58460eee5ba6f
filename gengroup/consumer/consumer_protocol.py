"""The consumer group protocol (KIP-848): a member driven by ConsumerGroupHeartbeat.

Theory of operation:

Under ``group_protocol="consumer"`` the coordinator assigns: there is no
JoinGroup, SyncGroup or leader. :class:`ConsumerProtocolMember` keeps one
heartbeat loop running beside the generations, for the member's whole life
(:meth:`ConsumerProtocolMember.run` wraps the group's run loop). It joins
with member epoch 0 and the subscribed topic names, then heartbeats every
interval the coordinator returns, reporting the partitions it owns. An
answer may carry a new assignment (by topic id; the names come from the
subscribed topics' metadata). After an answer that changed the epoch or the
assignment it beats early for two intervals (``FIRST_EARLY_BEAT``, doubling
up to a quarter interval): partitions other members still own come with a
later answer, once they acknowledged their revocation.

Reconciling is incremental, like the classic protocol's cooperative
rebalancing (``docs/incremental-rebalancing.md``). When a heartbeat answer
changes the assignment, the running generation ends with ``REJOIN``: its
generation-scoped tasks are cancelled and joined and its marks committed,
but the partitions' ownership spans (``start_soon(..., partition=tp)``,
hosted by the run loop's :class:`~gengroup.consumer.ownership.Ownership`)
run on. The next :meth:`~ConsumerProtocolMember.form_generation` forms a
generation for the new assignment, whose id is the member epoch, with
``added``, ``retained`` and ``revoked`` against what the member owned. Before
it is handed out, the generation runner revokes the spans of ``revoked``
(cancels their tasks, waits for them under the teardown watchdog, commits
their marks with the current epoch) and only then calls
:attr:`Formed.acknowledge <gengroup.consumer.forming.Formed.acknowledge>`:
the heartbeat stops reporting those partitions, which acknowledges the
revocation. Revoking comes before acquiring: the coordinator hands a
revoked partition to another member only once this member stopped reporting
it. Retained partitions' spans are adopted by the new generation and their
workers never restart. Partitions the coordinator adds later in the same
epoch (released late by another member) make a further generation with the
same id; generations are told apart by their sequence
(:attr:`GenerationIdentity.sequence <gengroup._types.GenerationIdentity.sequence>`).

Commits carry the member's newest epoch (OffsetCommit v9 reads the
generation id field as the member epoch); a commit answered
STALE_MEMBER_EPOCH because the epoch moved meanwhile is sent again with the
newer one. A fenced member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, or no
successful heartbeat for ``session_timeout``) has lost its partitions: its
generation ends without committing (the commit is refused locally, nothing
is sent) and once it ended the member rejoins with epoch 0, keeping its
member id. A generation that ends for another reason (a task returned,
``gen.cancel()``, a refused commit) is followed by one with the same
assignment. Closing leaves with epoch -1, or -2 for a static member
(``group_instance_id``), whose partitions the coordinator then keeps for the
session timeout.

The coordinator fences a member that has not acknowledged a revocation
within its ``rebalance_timeout``. Forming the revoking generation needs an
OffsetFetch the coordinator may refuse (loading) for longer; so at the first
failed attempt the revoked spans are released at once, and acknowledged once
their tasks returned and their marks were committed, or taken over by the
generation if it forms first (:mod:`~gengroup.consumer.early_revocation`).

A fenced member revokes every span without committing (the generation's
end does it, or, if the member was fenced between generations, the next
:meth:`~ConsumerProtocolMember.form_generation`) and rejoins only after
that, so a partition never has tasks in two members at once.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

import anyio
import anyio.abc
from kio.schema.errors import ErrorCode

from .._errors import (
    BrokerError,
    FencedMemberEpoch,
    GroupProtocolUnsupported,
    KafkaConnectionError,
    ProtocolError,
    UnsupportedVersion,
    error_for_code,
    exhausted_unreachable,
)
from .._types import GenerationIdentity, TopicPartition, show_partitions
from ..io.coordinator import REFUSALS
from ..io.retry import Backoff
from ..membership import requests
from ..membership.member import Outcome, outcome_for
from ..protocol.versions import ApiKey
from .cadence import FIRST_EARLY_BEAT, beat_period, until_grid
from .commits import TopicIds
from .early_revocation import EarlyRevocation
from .forming import Formed, GroupClient, generation_identity
from .generation import CommitCodes, Generation, OffsetMetadata, Offsets, RebalanceTimings
from .ownership import Ownership, kept_partitions, known_topic_ids

__all__ = ["ConsumerProtocolMember"]

log = logging.getLogger("gengroup")

_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
#: Commit attempts when the member epoch moves while a commit is in flight.
_STALE_RETRIES = 3
#: How long before the coordinator's revocation deadline the member stops
#: trying to commit what it revokes, at most: the acknowledging heartbeat's
#: time (a tenth of ``rebalance_timeout`` if that is shorter).
REVOKE_MARGIN = 1.0


def new_member_id() -> str:
    """A member id as the Java client makes one (KIP-848 v1: the member's own)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _as_sets(
    assigned: dict[uuid.UUID, tuple[int, ...]] | None,
) -> dict[uuid.UUID, frozenset[int]] | None:
    """An assignment as the coordinator meant it: the order of partitions aside."""
    return None if assigned is None else {t: frozenset(p) for t, p in assigned.items()}


class _EpochCommitter:
    """Commits a generation's offsets under the member's newest epoch.

    Implements :class:`~gengroup.consumer.generation.Committer`. A generation
    of an earlier incarnation (the member was fenced since it formed) commits
    nothing: the refusal is raised locally.
    """

    def __init__(self, member: ConsumerProtocolMember, incarnation: int) -> None:
        self._member = member
        self._incarnation = incarnation

    async def commit_offsets(
        self,
        identity: GenerationIdentity,
        offsets: Offsets,
        metadata: OffsetMetadata | None = None,
        topic_ids: TopicIds | None = None,
    ) -> CommitCodes:
        member = self._member
        results: CommitCodes = {}
        for _ in range(_STALE_RETRIES):
            epoch = member.epoch
            if member.incarnation != self._incarnation or epoch <= 0:
                raise FencedMemberEpoch(
                    ErrorCode.fenced_member_epoch,
                    f"OffsetCommit of {identity.group_id} generation {identity.label}: "
                    f"member {identity.member_id} was fenced since; nothing was sent",
                )
            results = await member.client.commit_offsets(
                replace(identity, generation_id=epoch), offsets, metadata, topic_ids
            )
            stale = bool(results) and all(
                code == ErrorCode.stale_member_epoch for code in results.values()
            )
            if not stale or member.epoch == epoch:
                break
        return results


class ConsumerProtocolMember:
    """A group member under the consumer group protocol (KIP-848).

    Args:
        client: the group's requests (its cluster, coordinator and settings).
        ownership: the run loop's ownership registry (spans across
            generations); None forms generations without spans, every
            partition ``added`` in each (eager).

    Attributes:
        member_id: the member's id, made by the member and kept for its life.
        epoch: the member epoch (0 while joining).
        incarnation: how many times the member was fenced; commits of a
            generation formed before the newest fencing are refused locally.
    """

    def __init__(self, client: GroupClient, ownership: Ownership | None = None) -> None:
        self.client = client
        self.ownership = ownership
        self.config = client.config
        self.member_id = new_member_id()
        self.epoch = 0
        self.incarnation = 0
        #: The newest assignment, topic id -> partitions (None: none since (re)joining).
        self._assigned: dict[uuid.UUID, tuple[int, ...]] | None = None
        #: The newest assignment by name, as far as topic ids could be resolved.
        self._target: frozenset[TopicPartition] | None = None
        self._unresolved: set[uuid.UUID] = set()
        #: The topic ids of the newest assignment's topics, by name.
        self._target_ids: dict[str, uuid.UUID] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        #: What the heartbeat reports as owned: the newest generation's partitions.
        self._owned: frozenset[TopicPartition] = frozenset()
        #: When an answer first asked for partitions still reported as owned
        #: (the coordinator fences the member ``rebalance_timeout`` after it).
        self._revoke_asked_at: float | None = None
        self._current: Generation | None = None
        self._current_incarnation = -1
        #: Revocations begun before the generation revoking them formed, and
        #: the task group beside the run loop they run in (early_revocation.py).
        self._early: list[EarlyRevocation] = []
        self._tg: anyio.abc.TaskGroup | None = None
        #: When the newest answered heartbeat was sent; set at each answer (or fencing).
        self._beat_sent_at = 0.0
        self._heard = anyio.Event()
        self._changed = anyio.Event()
        #: Set once the spans of the newest fenced incarnation were revoked.
        self._dropped = anyio.Event()
        self._wake = anyio.Event()
        self._fatal: BaseException | None = None
        self._joined = False
        self._interval = self.config.heartbeat_interval
        self._last_ok: float | None = None
        self._failing = False

    def __repr__(self) -> str:
        return f"<ConsumerProtocolMember {self.member_id} epoch={self.epoch}>"

    # ------------------------------------------------------------------ the member's life

    async def run(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run ``body`` (the group's run loop) with the heartbeat beside it, then leave.

        ``body``'s exception comes out as itself, after leaving.
        """
        error: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(
                    self._heartbeat_loop, name=f"gengroup-heartbeat-{self.config.group_id}"
                )
                try:
                    await body()
                except Exception as exc:
                    error = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            # Also when the group is cancelled from outside: leave, shielded and bounded.
            with anyio.CancelScope(shield=True):
                await self._leave()
        if error is not None:
            raise error

    async def form_generation(
        self, closing: Callable[[], bool], *, previous_teardown: float = 0.0, sequence: int = 0
    ) -> Formed | None:
        """The next generation: the newest assignment, once the previous generation ended.

        The partitions it revokes are reported as owned until the runner
        revoked their spans (:attr:`Formed.acknowledge`). None if
        ``closing()`` turned true first. ``sequence`` is the member's count
        of generations, this one included.

        Raises:
            BrokerError: a fatal answer (UNRELEASED_INSTANCE_ID, authorization, ...).
            GroupProtocolUnsupported: the broker does not speak the consumer protocol.
        """
        cfg = self.config
        timings = RebalanceTimings(previous_teardown=previous_teardown)
        previous = self._current
        if (
            previous is not None
            and previous.end_outcome is Outcome.RESET_MEMBER
            and self._current_incarnation == self.incarnation
        ):
            # A commit was refused with a fencing answer: the partitions are lost.
            self._fence(f"generation {previous.label} ended: {previous.end_reason}")
        last_ok = self._last_ok
        # Compared as the generation's lease is (not ``now - last_ok``: rounding
        # made the two disagree at the deadline, and forming spun meanwhile).
        if (
            self.epoch > 0
            and last_ok is not None
            and anyio.current_time() >= last_ok + cfg.session_timeout
        ):
            silent = anyio.current_time() - last_ok
            self._fence(f"no successful heartbeat for {silent:.1f} s")
        backoff = Backoff(cfg.join_backoff, cap=min(cfg.join_backoff * 32, 30.0))
        t0 = anyio.current_time()
        own = self.ownership
        while not closing():
            if self._fatal is not None:
                raise self._fatal
            if self._current_incarnation != self.incarnation:
                # Fenced since the spans formed: they are lost, revoke them
                # (nothing is committed) before the heartbeat rejoins.
                if own is not None and (own.spans or own.owned):
                    await own.drop_all("the member was fenced")
                self._dropped.set()
            target = self._target
            if target is None:
                changed = self._changed
                await changed.wait()
                continue
            incarnation, epoch = self.incarnation, self.epoch
            owned = frozenset(own.owned) if own is not None else frozenset()
            early = frozenset().union(*(e.partitions for e in self._early))
            unacknowledged = frozenset().union(
                *(e.partitions for e in self._early if not e.acknowledged)
            )
            # Partitions being revoked stay reported until their spans are revoked.
            self._owned = target | owned | unacknowledged
            self._wake.set()
            timings.join = anyio.current_time() - t0
            t1 = anyio.current_time()
            node: int | None = None
            fetch_sent = t1
            try:
                node = await self.client.find_coordinator(timings)
                fetch_sent = anyio.current_time()
                positions, committed = await self.client.start_positions(node, sorted(target))
            except (KafkaConnectionError, BrokerError, TimeoutError) as exc:
                if exhausted_unreachable(exc) is not None or (
                    isinstance(exc, BrokerError) and outcome_for(exc.code) is Outcome.FATAL
                ):
                    raise
                if not (
                    isinstance(exc, BrokerError)
                    and node is not None
                    and self.client.refused(exc, "OffsetFetch", node, fetch_sent)
                ):
                    log.info(
                        "group %s: fetching start offsets failed (%s); again", cfg.group_id, exc
                    )
                self.client.forget_coordinator()
                if own is not None and (revoking := owned - target - early):
                    self._revoke_early(own, revoking, incarnation, exc)
                await backoff.sleep()
                continue
            timings.offset_fetch = anyio.current_time() - t1
            self.client.coordinator.accepted()
            early_wait = any(e.awaiting > self._beat_sent_at for e in self._early)
            while early_wait and incarnation == self.incarnation and self._fatal is None:
                await self._heard.wait()  # an early revocation waits for a heartbeat's answer
                early_wait = any(e.awaiting > self._beat_sent_at for e in self._early)
            if incarnation != self.incarnation or target != self._target or self._fatal:
                continue  # fenced, reassigned or failed meanwhile
            if own is not None:
                # The previous generation's prefetcher went on handing out the
                # spans' batches until now; from here their positions are final.
                own.stop_prefetcher()
                ids = (self._target_ids, known_topic_ids(self.client.cluster))
                for tp in target & kept_partitions(owned, own, *ids):
                    span = own.spans.get(tp)
                    if span is not None and not span.closed:
                        positions[tp] = span.position  # its worker goes on from there
            formed = self._formed(epoch, incarnation, positions, committed, timings, sequence)
            if own is not None:
                gen = formed.generation
                gen.rebalance_protocol = "cooperative"
                kept = kept_partitions(owned, own, *ids)
                gen.added = target - kept
                gen.retained = target & kept
                gen.revoked = (owned | early) - target
                gen._spans = own.spans
                gen._span_host = own
                gen.know_spans()
                said: frozenset[TopicPartition] = frozenset()  # acknowledged already
                for revocation in self._early:
                    if revocation.acknowledged:  # (perhaps while OffsetFetch was answered)
                        said |= revocation.partitions
                    else:
                        revocation.hand_to(gen)  # gen commits their marks, then acknowledges
                self._early = []
                formed.acknowledge = partial(self._acknowledge, gen, incarnation, said)
            formed.revoke_deadline = self.revoke_deadline
            return formed
        return None

    def _acknowledge(
        self, gen: Generation, incarnation: int, said: frozenset[TopicPartition] = frozenset()
    ) -> None:
        """``gen``'s revoked partitions were released: stop reporting them
        (``said``: those acknowledged before ``gen`` formed)."""
        if incarnation != self.incarnation:
            return  # fenced meanwhile: it owns nothing
        self._owned = frozenset(gen.assignments)
        if not self._owned - (self._target or frozenset()):
            self._revoke_asked_at = None
        if gen.revoked - said:
            log.info(
                "group %s member %s: revoked [%s] at epoch %d; acknowledging",
                self.config.group_id,
                self.member_id,
                show_partitions(gen.revoked - said),
                self.epoch,
            )
            self._wake.set()

    def _revoke_early(
        self,
        own: Ownership,
        partitions: frozenset[TopicPartition],
        incarnation: int,
        why: BaseException,
    ) -> None:
        """Forming the generation that revokes ``partitions`` failed (``why``): release
        them now, acknowledging once their tasks returned (early_revocation.py)."""
        held_by = self._current
        fenced = incarnation != self.incarnation or self._current_incarnation != incarnation
        if self._tg is None or held_by is None or fenced:
            return  # (a fenced member drops every span)
        revocation = EarlyRevocation.release(
            own, partitions, held_by, incarnation, self.epoch, why, self.revoke_deadline
        )
        self._early.append(revocation)
        self._tg.start_soon(
            revocation.run,
            own,
            self.config,
            self._acknowledge_early,
            name=f"gengroup-revoke-{self.config.group_id}",
        )

    async def _acknowledge_early(self, revocation: EarlyRevocation) -> int | None:
        """``revocation``'s tasks returned and its marks were committed (or dropped):
        stop reporting its partitions. The member epoch, or None if fenced since.

        Past the coordinator's ``rebalance_timeout`` it may have fenced the
        member already, which the member hears at its next heartbeat: only
        the answer to one sent from now on tells (nothing is said if fenced).
        """
        now = anyio.current_time()
        asked = self._revoke_asked_at
        if asked is not None and now >= asked + self.config.rebalance_timeout:
            revocation.awaiting = now
            self._wake.set()
            while self._beat_sent_at < now and revocation.incarnation == self.incarnation:
                if self._fatal is not None:
                    return None  # the group stops: nothing acknowledged nor said
                await self._heard.wait()
        if revocation.incarnation != self.incarnation or revocation not in self._early:
            return None
        revocation.acknowledged = True
        target = self._target or frozenset()
        self._owned -= revocation.partitions - target
        if not self._owned - target:
            self._revoke_asked_at = None
        self._wake.set()
        return self.epoch

    def revoke_deadline(self) -> float | None:
        """When a commit of partitions being revoked must give up (``anyio.current_time()``
        terms), so that the acknowledging heartbeat comes before the coordinator's
        ``rebalance_timeout`` runs out; None if nothing is being revoked."""
        if self._revoke_asked_at is None:
            return None
        timeout = self.config.rebalance_timeout
        return self._revoke_asked_at + timeout - min(REVOKE_MARGIN, timeout / 10)

    def _formed(
        self,
        epoch: int,
        incarnation: int,
        positions: dict[TopicPartition, int],
        committed: dict[TopicPartition, tuple[int, str]],
        timings: RebalanceTimings,
        sequence: int,
    ) -> Formed:
        cfg = self.config
        identity = generation_identity(cfg, epoch, self.member_id, sequence)
        t_ready = anyio.current_time()

        def first_batch() -> None:
            timings.first_record = anyio.current_time() - t_ready

        prefetcher = self.client.prefetcher(positions, first_batch)
        gen = Generation(
            identity=identity,
            is_leader=False,
            protocol=f"consumer/{cfg.group_remote_assignor or 'broker-default'}",
            assignments=dict(positions),
            timings=timings,
            _committer=_EpochCommitter(self, incarnation),
            _prefetcher=prefetcher,
            _committed={tp: off for tp, (off, _) in committed.items()},
            _committed_metadata={tp: note for tp, (_, note) in committed.items() if note},
            _session_timeout=cfg.session_timeout,
            _request_timeout=cfg.request_timeout,
            _retry_backoff=self.client.cluster.retry_backoff,
            _classic=False,
        )
        gen.know_topics(self.client.cluster)
        prefetcher.on_reset = gen.offset_reset
        prefetcher.on_damage = gen.records_damaged
        prefetcher.on_gap = gen.gaps_found
        prefetcher.on_recreated = gen.topic_recreated
        # A range without records at a committed start offset is passed (consumer/recordless.py).
        prefetcher.start_from({tp: off for tp, (off, _) in committed.items()})
        gen.renew_lease(self._last_ok if self._last_ok is not None else t_ready)
        self._current, self._current_incarnation = gen, incarnation
        log.info(
            "group %s generation %s formed (consumer protocol): member %s, %d partition(s) "
            "[%s]; previous teardown %.3f s, waited %.3f s, offsets %.3f s",
            cfg.group_id,
            identity.label,
            self.member_id,
            len(positions),
            show_partitions(frozenset(positions)),
            timings.previous_teardown,
            timings.join,
            timings.offset_fetch,
        )
        return Formed(gen, prefetcher, {}, classic=False)

    # ------------------------------------------------------------------ heartbeats

    def _beat(self, epoch: int) -> requests.ConsumerHeartbeat:
        cfg = self.config
        owned: dict[uuid.UUID, list[int]] = {}
        if epoch > 0:
            for tp in self._owned:
                tid = self._topic_ids.get(tp.topic)
                if tid is not None:
                    owned.setdefault(tid, []).append(tp.partition)
        return requests.ConsumerHeartbeat(
            group_id=cfg.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=cfg.group_instance_id,
            rack=cfg.rack,
            rebalance_timeout=cfg.rebalance_timeout,
            topics=cfg.topics,
            assignor=cfg.group_remote_assignor,
            owned={tid: tuple(parts) for tid, parts in owned.items()},
            regex=cfg.subscription_regex,
        )

    async def _send(self, node: int, beat: requests.ConsumerHeartbeat) -> Any:
        cfg = self.config
        try:
            return await self.client.cluster.call(
                node,
                _HEARTBEAT,
                partial(requests.consumer_heartbeat_request, beat=beat),
                timeout=min(cfg.request_timeout, cfg.session_timeout),
                channel="group",
            )
        except UnsupportedVersion as exc:
            raise self._unsupported(str(exc)) from None

    def _unsupported(self, detail: str) -> GroupProtocolUnsupported:
        if detail.startswith(requests.PATTERN_NEEDS_V1):
            # The broker speaks the protocol (v0: Kafka 3.7-3.9 with early
            # access), only not subscriptions by pattern.
            return GroupProtocolUnsupported(
                f"group {self.config.group_id}: group_protocol='consumer' with a topic "
                f"pattern needs a broker whose consumer group protocol takes regular "
                f"expressions (ConsumerGroupHeartbeat v1: Apache Kafka 4.0 or later); this "
                f"one speaks only v0. Subscribe to a list of topics, or use "
                f"group_protocol='classic' with it."
            )
        return GroupProtocolUnsupported(
            f"group {self.config.group_id}: group_protocol='consumer' needs a broker that "
            f"speaks the consumer group protocol (KIP-848, ConsumerGroupHeartbeat: Apache "
            f"Kafka 4.0 or later with 'consumer' in group.coordinator.rebalance.protocols); "
            f"this one does not ({detail}). Use group_protocol='classic' with it."
        )

    def _period(self) -> float:
        return beat_period(self._interval, self.config.session_timeout)

    def next_grid_beat(self) -> float:
        """When settled members next beat on the grid, in ``anyio.current_time()`` terms."""
        return anyio.current_time() + until_grid(self._period(), 0.0, self.config.group_id)

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if a heartbeat is asked for at once."""
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        self._wake = anyio.Event()

    async def _heartbeat_loop(self) -> None:
        cfg = self.config
        backoff = Backoff(cfg.join_backoff, cap=min(cfg.join_backoff * 32, 30.0))
        started = anyio.current_time()
        early: float | None = None  # the next early beat's delay, while reconciling
        early_until = 0.0
        while self._fatal is None:
            if self.epoch == 0:
                # Joining: a fenced member rejoins once its generation ended
                # and its spans were revoked.
                gen = self._current
                if gen is not None:
                    await gen.wait_ended()
                own = self.ownership
                if own is not None and own.spans and self.incarnation > 0:
                    await self._dropped.wait()
            sent_at = anyio.current_time()
            epoch = self.epoch
            try:
                node = await self.client.coordinator.find()
                beat_sent = anyio.current_time()
                resp = await self._send(node, self._beat(epoch))
            except GroupProtocolUnsupported as exc:
                self._fail(exc)
                return
            except (KafkaConnectionError, ProtocolError, BrokerError, TimeoutError) as exc:
                if isinstance(exc, BrokerError) and outcome_for(exc.code) is Outcome.FATAL:
                    self._fail(exc)
                    return
                unreachable = exhausted_unreachable(exc)
                if unreachable is not None:
                    self._fail(unreachable)
                    return
                self._heartbeat_failed(exc, started)
                await backoff.sleep()
                continue
            code = int(resp.error_code)
            if code:
                await self._heartbeat_refused(code, resp.error_message, backoff, node, beat_sent)
                continue
            backoff.reset()
            self.client.coordinator.accepted()
            if self._failing:
                self._failing = False
                log.info("group %s member %s: heartbeat works again", cfg.group_id, self.member_id)
            if epoch != self.epoch:
                continue  # fenced while it was in flight: rejoin
            assigned = _as_sets(self._assigned)
            await self._on_heartbeat(resp, sent_at)
            self._beat_sent_at = sent_at
            self._heard.set()
            self._heard = anyio.Event()
            # A reconciliation under way beats early: after a new epoch or
            # assignment, the partitions other members still own come with a
            # later answer, once they noticed (at their next heartbeat, within
            # an interval) and acknowledged their revocation; waiting a whole
            # interval more for that answer left them unconsumed meanwhile.
            # So for two intervals the member beats at 50, 100, 200 ms, then
            # every quarter interval. (The answer to a full request carries
            # the assignment even when unchanged: only a change counts.)
            now = anyio.current_time()
            if self.epoch != epoch or _as_sets(self._assigned) != assigned:
                early, early_until = FIRST_EARLY_BEAT, now + 2 * self._interval
            elif early is not None:
                early = min(2 * early, self._interval / 4)
            if early is not None and now >= early_until:
                early = None
            if early is None:
                # Settled: on the grid the group's members share, so that a
                # crashed member's expiry is heard just after it (cadence.py).
                period = self._period()
                await self._pause(until_grid(period, period / 2, cfg.group_id))
            else:
                await self._pause(early)

    def _heartbeat_failed(self, exc: BaseException, started: float) -> None:
        cfg = self.config
        if not self._failing:
            self._failing = True
            log.info(
                "group %s member %s: heartbeat failed (%s); retrying",
                cfg.group_id,
                self.member_id,
                exc,
            )
        self.client.forget_coordinator()
        since = self._last_ok if self._last_ok is not None else started
        if self.epoch > 0 and anyio.current_time() >= since + cfg.session_timeout:
            self._fence(f"no successful heartbeat for a session timeout ({exc})")

    async def _heartbeat_refused(
        self, code: int, message: str | None, backoff: Backoff, node: int, sent_at: float
    ) -> None:
        cfg = self.config
        said = f"ConsumerGroupHeartbeat of {cfg.group_id} member {self.member_id}"
        if message:
            said += f": {message}"
        if code == ErrorCode.unsupported_version:
            said = "it answered UNSUPPORTED_VERSION" + (f": {message}" if message else "")
            self._fail(self._unsupported(said))
            return
        outcome = outcome_for(code)
        if outcome is Outcome.RESET_MEMBER:
            joining = self.epoch == 0
            self._fence(f"heartbeat answered {error_for_code(code).name}")
            if joining:  # refused while joining: not at once again
                await backoff.sleep()
            return
        if outcome is Outcome.FATAL:
            self._fail(error_for_code(code, self._explain(code, said)))
            return
        if code in REFUSALS:
            unavailable = self.client.coordinator.refused(
                error_for_code(code, message), "ConsumerGroupHeartbeat", node, sent_at
            )
            if unavailable.exhausted:
                self._fail(unavailable)
                return
        elif not self._failing:
            self._failing = True
            log.info(
                "group %s: heartbeat refused (%s); retrying", cfg.group_id, error_for_code(code)
            )
        await backoff.sleep()

    def _explain(self, code: int, said: str) -> str:
        cfg = self.config
        if code == ErrorCode.unreleased_instance_id:
            return (
                f"{said}; another member with group_instance_id={cfg.group_instance_id!r} is "
                "still in the group: it must leave (or its session time out) first"
            )
        if code == ErrorCode.unsupported_assignor:
            return (
                f"{said}; group_remote_assignor={cfg.group_remote_assignor!r} is not one of the "
                "broker's group.consumer.assignors (Kafka's: uniform, range)"
            )
        if code == ErrorCode.group_id_not_found:
            return (
                f"{said}; the group exists under the classic protocol and cannot be converted "
                "now (its members must leave first, or see group.consumer.migration.policy)"
            )
        return said

    async def _on_heartbeat(self, resp: Any, sent_at: float) -> None:
        """A successful answer: the epoch, the interval, maybe a new assignment."""
        self._last_ok = sent_at
        if resp.member_id:
            self.member_id = str(resp.member_id)
        epoch = int(resp.member_epoch)
        if epoch != self.epoch:
            log.debug("group %s member %s: epoch %d", self.config.group_id, self.member_id, epoch)
        self.epoch = epoch
        self._joined = self._joined or epoch > 0
        interval = resp.heartbeat_interval.total_seconds()
        if interval > 0:
            self._interval = interval
        gen = self._current
        if gen is not None and self._current_incarnation == self.incarnation:
            gen.renew_lease(sent_at)
        if resp.assignment is not None:
            self._assigned = {
                t.topic_id: tuple(int(p) for p in t.partitions)
                for t in resp.assignment.topic_partitions
                if t.topic_id is not None
            }
            await self._reconcile()
        elif self._unresolved:
            await self._reconcile()

    async def _reconcile(self) -> None:
        """Resolve the assignment's topic ids; end the generation if it changed."""
        cfg = self.config
        answered_at = anyio.current_time()
        assigned = self._assigned or {}
        names = self._names()
        if any(tid not in names for tid in assigned):
            try:
                # Subscribed by pattern: the broker chose the topics, so every topic's.
                await self.client.cluster.refresh_metadata(cfg.topics or None)
            except (KafkaConnectionError, ProtocolError, BrokerError) as exc:
                log.info("group %s: metadata for the assignment failed: %s", cfg.group_id, exc)
            names = self._names()
        unresolved = {tid for tid in assigned if tid not in names}
        if unresolved and unresolved != self._unresolved:
            log.info(
                "group %s member %s: assigned topic id(s) %s not in the metadata yet",
                cfg.group_id,
                self.member_id,
                ", ".join(sorted(map(str, unresolved))),
            )
        self._unresolved = unresolved
        target = frozenset(
            TopicPartition(names[tid], p)
            for tid, parts in assigned.items()
            if tid in names
            for p in parts
        )
        ids = {names[tid]: tid for tid in assigned if tid in names}
        # A topic deleted and created again keeps its name: only its id tells.
        recreated = sorted(n for n, tid in ids.items() if self._target_ids.get(n, tid) != tid)
        self._target_ids = ids
        if target == self._target and not recreated:
            return
        old = self._target
        self._target = target
        if self._revoke_asked_at is None and self._owned - target:
            self._revoke_asked_at = answered_at
        self._changed.set()
        self._changed = anyio.Event()
        gen = self._current
        if gen is not None and not gen.ending:
            kept = frozenset(gen.assignments)
            await self._look_up_dropped(kept, target)
            if kept != target:
                gen.end(
                    Outcome.REJOIN,
                    f"assignment changed at member epoch {self.epoch}: revoked "
                    f"[{show_partitions(kept - target)}], added "
                    f"[{show_partitions(target - kept)}]",
                )
            elif recreated:
                gen.end(Outcome.REJOIN, f"topic(s) re-created: {', '.join(recreated)}")
        log.info(
            "group %s member %s: assignment at epoch %d: [%s] (was [%s])%s",
            cfg.group_id,
            self.member_id,
            self.epoch,
            show_partitions(target),
            show_partitions(old or frozenset()),
            f"; topic(s) created again: {', '.join(recreated)}" if recreated else "",
        )

    async def _look_up_dropped(
        self, kept: frozenset[TopicPartition], target: frozenset[TopicPartition]
    ) -> None:
        """Refresh the metadata of the topics the assignment no longer has a
        partition of, before the generation holding them ends: the coordinator
        takes a deleted (or deleted and created again) topic away, and the
        final commit checks its marks against the topic ids in the metadata,
        which nothing else refreshed (the old topic's partitions may still be
        fetched by name, from the new one)."""
        dropped = {tp.topic for tp in kept} - {tp.topic for tp in target}
        if not dropped:
            return
        try:
            await self.client.cluster.refresh_metadata(sorted(dropped))
        except (KafkaConnectionError, ProtocolError, BrokerError) as exc:
            log.debug("group %s: metadata of %s: %s", self.config.group_id, dropped, exc)

    def _names(self) -> dict[uuid.UUID, str]:
        for name, info in self.client.cluster.topics.items():
            if info.topic_id is not None:
                self._topic_ids[name] = info.topic_id
        return {tid: name for name, tid in self._topic_ids.items()}

    def _fence(self, reason: str) -> None:
        """The member lost its partitions: end its generation uncommitted, rejoin with epoch 0."""
        log.info(
            "group %s member %s fenced at epoch %d: %s; rejoining with epoch 0",
            self.config.group_id,
            self.member_id,
            self.epoch,
            reason,
        )
        self.incarnation += 1
        self._heard.set()
        self._heard = anyio.Event()
        self.epoch = 0
        self._assigned = None
        self._target = None
        self._unresolved = set()
        self._target_ids = {}
        self._owned = frozenset()
        self._revoke_asked_at = None
        for revocation in self._early:
            revocation.lost = True
            revocation.scope.cancel()  # nothing acknowledged nor said: the spans are lost
        self._early = []
        self._dropped = anyio.Event()
        gen = self._current
        if gen is not None:
            gen.end(Outcome.RESET_MEMBER, f"fenced: {reason}")
        if self.ownership is not None:
            # Between generations the spans' batches flow on: no longer.
            self.ownership.stop_prefetcher()
        self._changed.set()  # a forming generation drops the spans
        self._changed = anyio.Event()
        self._wake.set()

    def _fail(self, error: BaseException) -> None:
        """A fatal error: the generation ends, and forming the next one raises it."""
        self._fatal = error
        log.error("group %s member %s: %s", self.config.group_id, self.member_id, error)
        gen = self._current
        if gen is not None:
            gen.end(Outcome.FATAL, str(error))
        self._changed.set()
        self._heard.set()  # (a wait for a heartbeat's answer ends too)

    async def _leave(self) -> None:
        """Leave the group (epoch -1; -2 for a static member), bounded, never raising."""
        cfg = self.config
        node = self.client.coordinator.node
        if not self._joined or node is None or self._fatal is not None:
            return
        epoch = -2 if cfg.group_instance_id is not None else -1
        self.epoch = epoch
        with anyio.move_on_after(cfg.request_timeout):
            try:
                resp = await self._send(node, self._beat(epoch))
                if resp.error_code:
                    log.info(
                        "group %s member %s: leaving answered %s",
                        cfg.group_id,
                        self.member_id,
                        error_for_code(int(resp.error_code)),
                    )
            except (KafkaConnectionError, ProtocolError, BrokerError, UnsupportedVersion) as exc:
                log.info("group %s: leaving failed: %s", cfg.group_id, exc)
